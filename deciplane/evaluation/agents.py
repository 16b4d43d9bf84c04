"""Model-backed agents for the evaluator: ``deciplane evaluate --agent menu|text --model MODEL``.

The evaluator (:mod:`deciplane.evaluation.evaluate`) drives anything with
``act_batch(observations, infos) -> actions``. :class:`MenuEvalAgent` returns menu indices;
:class:`TextEvalAgent` returns command strings and plays the environment in
``action_mode="text"``, so the game itself answers (and counts) an invalid command.

Both keep a short per-episode history (what was seen and done), matched to the batch
rows through ``info["game_name"]`` / ``info["moves"]``, so that they work with any number
of lockstep environments. :data:`EVAL_AGENT_FACTORIES` maps agent names to factories
``factory(seed=..., model=..., **options)``; ``deciplane.evaluation.evaluate.AGENT_FACTORIES``
includes them, so ``make_agent("menu", model=...)`` and ``deciplane evaluate --agent menu``
both find them.
This module imports torch only when an agent is built.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

DEFAULT_MODEL = "deciplane/smollm2-135m-instruct"


class _Histories:
    """``(observation, action)`` turns of the episodes behind the rows of each batch."""

    def __init__(self) -> None:
        self._rows: list[dict[str, Any]] = []

    def lookup(self, infos: Sequence[dict[str, Any]]) -> list[list[tuple[str, str]]]:
        """The history of each row; a row at ``moves == 0`` (or unmatched) starts empty."""
        pool = list(self._rows)
        out = []
        for info in infos:
            moves = info.get("moves")
            found = None
            if moves:
                for rec in pool:
                    if rec["game"] == info.get("game_name") and rec["moves"] + 1 == moves:
                        found = rec
                        break
            if found is not None:
                pool.remove(found)
            out.append(list(found["turns"]) if found else [])
        return out

    def record(self, infos: Sequence[dict[str, Any]], histories: Sequence[list[tuple[str, str]]],
               observations: Sequence[str], actions: Sequence[str]) -> None:
        """Remember each row's history extended by this step's observation and action."""
        self._rows = [{"game": info.get("game_name"), "moves": info.get("moves") or 0,
                       "turns": (list(h) + [(o, a)])[-32:]}
                      for info, h, o, a in zip(infos, histories, observations, actions)]


def _menus(infos: Sequence[dict[str, Any]]):
    from deciplane.errors import ConfigError
    from deciplane.types import Menu

    menus = []
    for info in infos:
        if "menu" not in info:
            raise ConfigError("model agents choose from info['menu']; this environment has no menu "
                              "(use a menu environment such as deciplane/TextWorld-v0)")
        m = info["menu"]
        menus.append(m if isinstance(m, Menu) else Menu(tuple(m)))
    return menus


class _ModelEvalAgent:
    """A model agent behind ``act_batch``: one batched ``agent.act`` per call, with the
    episodes' histories and a seed that advances per call."""

    env_kwargs: dict[str, Any] = {}

    def __init__(self, agent, seed: int, name: str) -> None:
        self.agent = agent
        self.seed = seed
        self.name = name
        self._hist = _Histories()
        self._calls = 0

    def _decide(self, observations: list[str], infos: list[dict[str, Any]]
                ) -> tuple[list[Any], list[Any]]:
        """The agent's decisions and the histories they were made with."""
        menus = _menus(infos)
        hists = self._hist.lookup(infos)
        decisions = self.agent.act(observations, menus, hists, seed=self.seed + self._calls)
        self._calls += 1
        return decisions, hists


class MenuEvalAgent(_ModelEvalAgent):
    """:class:`~deciplane.agents.MenuAgent` behind ``act_batch``: returns menu indices."""

    def __init__(self, agent, seed: int = 0, name: str | None = None) -> None:
        super().__init__(agent, seed, name or f"menu[{agent.policy.name}]")

    def act_batch(self, observations: list[str], infos: list[dict[str, Any]]) -> list[int]:
        decisions, hists = self._decide(observations, infos)
        self._hist.record(infos, hists, observations, [d.action for d in decisions])
        return [d.index for d in decisions]


class TextEvalAgent(_ModelEvalAgent):
    """:class:`~deciplane.agents.TextAgent` behind ``act_batch``: returns commands.

    A command that matches the menu is sent in the menu's exact spelling; anything else is
    sent as generated (empty when none was found), and the environment counts it invalid.
    """

    env_kwargs: dict[str, Any] = {"action_mode": "text"}

    def __init__(self, agent, seed: int = 0, name: str | None = None) -> None:
        super().__init__(agent, seed, name or f"text-{agent.style}[{agent.policy.name}]")
        self.invalid = 0
        self.decisions = 0

    def act_batch(self, observations: list[str], infos: list[dict[str, Any]]) -> list[str]:
        decisions, hists = self._decide(observations, infos)
        commands = [d.action if d.index is not None else (d.command or "") for d in decisions]
        self.invalid += sum(d.invalid for d in decisions)
        self.decisions += len(decisions)
        self._hist.record(infos, hists, observations, [c or "(no action)" for c in commands])
        return commands


def _check_options(cls: type, options: dict[str, Any], name: str) -> None:
    """Unknown ``--agent-option`` keys raise ``ConfigError`` listing the accepted ones."""
    import inspect

    from deciplane.errors import ConfigError

    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "policy")]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ConfigError(f"agent {name!r} does not take {unknown}; accepted --agent-option keys: "
                          f"{', '.join(accepted + ['num_threads', 'device'])}")


def _policy(model: str | None, options: dict[str, Any]):
    from deciplane.agents.loading import load_policy

    return load_policy(model or DEFAULT_MODEL, num_threads=options.pop("num_threads", None),
                       device=options.pop("device", None))


def menu_factory(seed: int = 0, model: str | None = None, **options: Any) -> MenuEvalAgent:
    """``--agent menu``: options of :class:`~deciplane.agents.MenuAgent` (``greedy`` defaults
    to True for evaluation), plus ``num_threads`` and ``device``."""
    from deciplane.agents.menu import MenuAgent

    options = {k: v for k, v in options.items() if v is not None}
    policy = _policy(model, options)
    options.setdefault("greedy", True)
    _check_options(MenuAgent, options, "menu")
    return MenuEvalAgent(MenuAgent(policy, **options), seed=seed)


def text_factory(seed: int = 0, model: str | None = None, **options: Any) -> TextEvalAgent:
    """``--agent text``: options of :class:`~deciplane.agents.TextAgent` (``style`` react |
    action, ``max_new_tokens``, ``greedy`` defaults to True), plus ``num_threads``, ``device``."""
    from deciplane.agents.text import TextAgent

    options = {k: v for k, v in options.items() if v is not None}
    policy = _policy(model, options)
    options.setdefault("greedy", True)
    _check_options(TextAgent, options, "text")
    return TextEvalAgent(TextAgent(policy, **options), seed=seed)


EVAL_AGENT_FACTORIES: dict[str, Callable[..., Any]] = {"menu": menu_factory, "text": text_factory}
