"""The free-text agent: the baseline the menu agent is compared against.

``style="react"`` (default) follows verl-agent's prompt: reason inside
``<think>...</think>``, then give the command inside ``<action>...</action>``.
``style="action"`` generates only the command. Either way the command is mapped to the
menu by exact match, then by a normalised match (case, whitespace, punctuation);
anything else is an invalid action (``index=None``, ``invalid=True``).
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Literal, Sequence

import torch

from deciplane.agents.policy import Policy
from deciplane.agents.prompts import ACTION_SYSTEM_PROMPT, REACT_SYSTEM_PROMPT, text_user_text
from deciplane.errors import ConfigError
from deciplane.types import Menu

Style = Literal["react", "action"]
STYLES = ("react", "action")
DEFAULT_MAX_NEW_TOKENS = {"react": 256, "action": 24}
_ACTION_RE = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
_PUNCT = str.maketrans({c: " " for c in string.punctuation})


@dataclass
class TextDecision:
    """One free-text decision: what was generated, the command read from it, and its menu index.

    ``response_logprobs`` are the old per-token log-probs (detached); the action's
    log-prob is their sum (:attr:`log_prob`).
    """

    prompt_ids: torch.Tensor          # (T,) int64
    response_ids: torch.Tensor        # (R,) int64
    response_logprobs: torch.Tensor   # (R,) float32
    text: str                         # decoded response
    command: str | None               # the command extracted from the text (None: no command found)
    index: int | None                 # menu index, None if the command is not on the menu
    invalid: bool
    menu: Menu | None = None

    @property
    def log_prob(self) -> float:
        """Sum of the generated tokens' log-probs."""
        return float(self.response_logprobs.sum())

    @property
    def action(self) -> str | None:
        return None if self.index is None or self.menu is None else self.menu[self.index]


def normalise(command: str) -> str:
    """Lower-case, punctuation to spaces, whitespace collapsed: ``" Go  North! "`` -> ``"go north"``."""
    return " ".join(command.lower().translate(_PUNCT).split())


def extract_command(text: str, style: Style) -> str | None:
    """The command in a response: the last ``<action>...</action>`` (react), or the first
    non-empty line (action). None when there is none."""
    if style == "react":
        found = _ACTION_RE.findall(text)
        return found[-1].strip() if found else None
    for line in text.splitlines():
        line = line.strip()
        if line:
            line = re.sub(r"^(?:action|command)\s*:\s*", "", line, flags=re.IGNORECASE)
            return _ACTION_RE.sub(lambda m: m.group(1), line).strip() or None
    return None


def match_command(command: str | None, menu: Sequence[str]) -> int | None:
    """Menu index of ``command``: exact match first, then normalised match; else None."""
    if command is None:
        return None
    actions = list(menu)
    if command in actions:
        return actions.index(command)
    stripped = command.strip()
    if stripped in actions:
        return actions.index(stripped)
    norm = normalise(command)
    if not norm:
        return None
    for i, a in enumerate(actions):
        if normalise(a) == norm:
            return i
    return None


class TextAgent:
    """Generates a free-text command per environment and maps it onto the menu.

    Arguments:
        policy: the :class:`~deciplane.agents.Policy`.
        style: ``"react"`` (think, then act) or ``"action"`` (the command only).
        max_new_tokens: generation budget (default 256 for react, 24 for action).
        temperature, greedy, top_p: sampling settings.
        history: how many previous ``(observation, action)`` turns the prompt shows.
        system_prompt: overrides the style's default instructions.
    """

    def __init__(self, policy: Policy, style: Style = "react", *, max_new_tokens: int | None = None,
                 temperature: float = 1.0, greedy: bool = False, top_p: float = 1.0, history: int = 2,
                 system_prompt: str | None = None):
        if style not in STYLES:
            raise ConfigError(f"style must be one of {STYLES}, got {style!r}")
        if history < 0:
            raise ConfigError(f"history must be >= 0 turns, got {history}")
        self.policy = policy
        self.style: Style = style
        self.max_new_tokens = int(max_new_tokens or DEFAULT_MAX_NEW_TOKENS[style])
        self.temperature = float(temperature)
        self.greedy = bool(greedy)
        self.top_p = float(top_p)
        self.history = int(history)
        self.system_prompt = system_prompt or (REACT_SYSTEM_PROMPT if style == "react" else ACTION_SYSTEM_PROMPT)
        self.stop = ("</action>",) if style == "react" else ("\n",)

    def prompt(self, observation: str, menu: Menu, history: Sequence[tuple[str, str]] | None = None) -> str:
        """The chat-templated prompt for one environment."""
        text = text_user_text(observation, list(menu), self.style, history, self.history)
        return self.policy.format_prompt(text, self.system_prompt)

    def act(self, observations: Sequence[str], menus: Sequence[Menu],
            histories: Sequence[Sequence[tuple[str, str]]] | None = None, seed: int | None = None) -> list[TextDecision]:
        """Generate for all environments in one batched ``generate`` call."""
        if len(observations) != len(menus):
            raise ConfigError(f"got {len(observations)} observations but {len(menus)} menus; pass one each")
        if not observations:
            return []
        menus = [m if isinstance(m, Menu) else Menu(tuple(m)) for m in menus]
        hists = histories or [None] * len(observations)
        prompts = [self.prompt(o, m, h) for o, m, h in zip(observations, menus, hists)]
        gens = self.policy.generate(prompts, max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                                    do_sample=not self.greedy, top_p=self.top_p, seed=seed, stop=self.stop)
        out = []
        for g, menu in zip(gens, menus):
            command = extract_command(g.text, self.style)
            index = match_command(command, menu)
            out.append(TextDecision(prompt_ids=g.prompt_ids, response_ids=g.response_ids,
                                    response_logprobs=g.response_logprobs, text=g.text, command=command,
                                    index=index, invalid=index is None, menu=menu))
        return out
