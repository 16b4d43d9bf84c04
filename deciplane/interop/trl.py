"""Any deciplane environment as a TRL ``GRPOTrainer(environment_factory=...)`` environment.

TRL (1.16) builds one environment per rollout from a no-argument factory, pools and reuses
the instances (``reset(**row)`` before every rollout), offers the model the instance's
public methods as tools, runs the tool calls the model writes, and scores a finished
rollout with ``get_reward()``. :func:`environment_factory` returns such a class for any
registered deciplane id:

* a **menu env** (TextWorld, TextWorld-Express, ALFWorld, ...) has one tool,
  ``choose(action)``: a line of the menu the last observation listed, or its letter;
* a **text env** (Math, CodeGen, ...) has one tool, ``act(command)``: the answer, the
  program, the command;
* ``reset(**row)`` resets the env with the row's ``seed`` (and ``options``) and returns the
  first observation with its legal actions, which TRL appends to the row's prompt;
* ``get_reward()`` is the episode's return (the sum of the env's rewards).

A group of GRPO rollouts must play one game: give the trainer a dataset with a ``seed``
column (:func:`seed_dataset`; TRL repeats each row ``num_generations`` times). Held-out
fields never reach the model: a tool returns only the observation text and the menu.

TRL parses tool calls only for chat templates it knows (Qwen, Llama 3.1/3.2, ...). The
built-in models' templates render no tools: :func:`prepare_tokenizer` gives
``deciplane/tiny`` and ChatML models such as SmolLM2 a tool-calling template (tools listed
in the system turn; calls as ``<tool_call>{json}</tool_call>`` for ChatML, as
``<action>NAME key: value</action>`` for the tiny model; generation markers for
assistant-only losses) and the ``response_template`` transformers parses the calls with.
Neither model was trained to call tools in it: teach the format first, on the assistant
turns of :func:`expert_conversations` (TRL's ``SFTTrainer`` takes them as ``messages``;
the test uses a plain next-token loop).
"""

from __future__ import annotations

from typing import Any

from deciplane.interop.common import menu_choice, menu_prompt

INSTRUCTION = {
    "menu": ("You are playing a text game. Each turn, call the tool `choose` with one of "
             "the legal actions, as written or by its letter, until the game ends."),
    "text": "Solve the task. Call the tool `act` with your answer.",
}

_OVER = "The episode is over: do not call a tool again."


class DeciplaneToolEnv:
    """One deciplane env behind TRL's environment contract (subclassed per env id by
    :func:`environment_factory`: the class attributes below are set there).

    ``episodes`` keeps a record per finished rollout (``seed``, ``calls``, ``invalid``,
    ``return``, ``done``), appended when TRL asks for the reward."""

    env_id: str = ""
    env_kwargs: dict[str, Any] = {}
    max_turns: int | None = None
    labels: str = "letters"
    _ASK = "Call `choose` with one action, as written or by its label."

    def __init__(self) -> None:
        from deciplane.envs import make

        self.env = make(self.env_id, **self.env_kwargs)
        self.episodes: list[dict[str, Any]] = []
        self._start(None)

    def _start(self, seed: int | None) -> None:
        self.seed, self.menu, self.done, self._info = seed, None, True, {}
        self.turns = self.calls = self.invalid = 0
        self.episode_return = 0.0

    def reset(self, **row: Any) -> str:
        """Start the row's game (its ``seed`` and ``options`` when it has them)."""
        seed = row.get("seed")
        seed = None if seed is None else int(seed)
        obs, info = self.env.reset(seed=seed, options=row.get("options"))
        self._start(seed)
        self.done, self._info = False, info
        self.menu = info.get("menu")
        return "\n\n" + self._show(obs)

    def _show(self, obs: str) -> str:
        return menu_prompt(obs, self.menu, self.labels, ask=self._ASK)

    def _step(self, action: Any) -> str:
        self.calls += 1
        if self.done:
            return _OVER
        obs, reward, term, trunc, info = self.env.step(action)
        self.turns += 1
        self.invalid += int(bool(info.get("invalid_action")))
        self.episode_return += float(reward)
        self.menu, self._info = info.get("menu"), info
        self.done = bool(term or trunc) or (self.max_turns is not None
                                            and self.turns >= self.max_turns)
        if self.done:
            return f"{obs}\n\n{_OVER}"
        return self._show(obs)

    def get_reward(self) -> float:
        """The episode's return so far (TRL calls this once the rollout is finished)."""
        self.episodes.append({"seed": self.seed, "calls": self.calls, "invalid": self.invalid,
                              "return": self.episode_return, "done": self.done})
        return float(self.episode_return)

    def _close(self) -> None:
        # not public: TRL offers every public method to the model as a tool
        self.env.close()


class _MenuTools(DeciplaneToolEnv):
    def choose(self, action: str) -> str:
        """Take one of the legal actions listed in the last observation.

        Args:
            action: The action exactly as listed, or its letter.

        Returns:
            What the game says next, with the new legal actions.
        """
        return self._step(menu_choice(action, self.menu or [], self.labels))


class _TextTools(DeciplaneToolEnv):
    def act(self, command: str) -> str:
        """Send the answer (or the command, or the program) to the environment.

        Args:
            command: The answer, command or program.

        Returns:
            What the environment says next.
        """
        return self._step(str(command))


def _is_menu_env(env_id: str, env_kwargs: dict[str, Any]) -> bool:
    import gymnasium as gym

    from deciplane.envs import make

    env = make(env_id, **env_kwargs)
    try:
        return isinstance(env.action_space, gym.spaces.Discrete)
    finally:
        env.close()


def environment_factory(env_id: str, *, max_turns: int | None = None,
                        labels: str = "letters", **env_kwargs: Any) -> type[DeciplaneToolEnv]:
    """A no-argument class for ``GRPOTrainer(environment_factory=...)`` playing
    ``env_id`` (built with ``env_kwargs``, as ``gym.make`` takes them).

    ``max_turns`` ends an episode after that many tool calls that reached the env (default:
    the env's own end; TRL's ``max_tool_calling_iterations`` also bounds a rollout);
    ``labels``: how the menu is listed (``letters`` or ``numbers``)."""
    if labels not in ("letters", "numbers"):
        raise ValueError(f"labels must be 'letters' or 'numbers', not {labels!r}")
    base = _MenuTools if _is_menu_env(env_id, env_kwargs) else _TextTools
    name = "Deciplane" + "".join(c for c in env_id.split("/")[-1].title() if c.isalnum())
    return type(name, (base,), {"env_id": env_id, "env_kwargs": dict(env_kwargs),
                                "max_turns": max_turns, "labels": labels,
                                "__module__": __name__})


def seed_dataset(n: int, first_seed: int = 0, instruction: str | None = None,
                 kind: str = "menu"):
    """A ``datasets.Dataset`` of ``n`` rows (``prompt``: one user turn with the
    instruction, ``seed``: ``first_seed``, ``first_seed + 1``, ...): each row one game,
    which the ``num_generations`` rollouts TRL makes of it all play."""
    from datasets import Dataset

    text = instruction if instruction is not None else INSTRUCTION[kind]
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": text}]] * n,
                              "seed": list(range(first_seed, first_seed + n))})


def expert_conversations(factory: type[DeciplaneToolEnv], seeds, instruction: str | None = None,
                         max_turns: int = 50) -> list[list[dict[str, Any]]]:
    """Whole episodes of the env's expert (``info["expert_command"]``; envs whose train
    split has one) as tool-calling conversations (``messages`` for TRL's ``SFTTrainer``):
    the user turn, then per step an assistant ``choose`` call and the tool's reply."""
    if not hasattr(factory, "choose"):
        raise TypeError(f"{factory.__name__} is not a menu env: expert conversations need "
                        "one (a choose tool and info['expert_command'])")
    env = factory()
    out = []
    try:
        for seed in seeds:
            first = env.reset(seed=seed)
            messages = [{"role": "user", "content": (instruction or INSTRUCTION["menu"]) + first}]
            for _ in range(max_turns):
                command = env._info.get("expert_command")
                if command is None or env.done:
                    break
                call = {"type": "function",
                        "function": {"name": "choose", "arguments": {"action": command}}}
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
                messages.append({"role": "tool", "name": "choose", "content": env.choose(command)})
            out.append(messages)
    finally:
        env._close()
    return out


# ------------------------------------------------------------- tool-calling templates --

_ARGS = "{{ f['arguments'] if f['arguments'] is string else f['arguments'] | tojson }}"

#: How a call is written, per template (Jinja, and its description for the system turn):
#: Qwen 2.5's JSON in <tool_call> tags for ChatML; for the tiny model its own single-token
#: <action> tags around the name and ``key: value`` lines (no JSON quoting for a 2-layer
#: model to learn).
CHATML_CALL = ("<tool_call>{\"name\": {{ f['name'] | tojson }}, \"arguments\": " + _ARGS +
               "}</tool_call>", '<tool_call>{"name": ..., "arguments": {...}}</tool_call>')
TINY_CALL = ("<action>{{ f['name'] }}"
             "{% if f['arguments'] is string %} {{ f['arguments'] }}{% else %}"
             "{% for k, v in f['arguments'].items() %}{{ ' ' if loop.first else '\\n' }}"
             "{{ k }}: {{ v }}{% endfor %}{% endif %}</action>",
             "<action>NAME ARGUMENT: VALUE</action>")


def _tool_template(eos: str, header: str, call: tuple[str, str]) -> str:
    """A prefix-preserving tool-calling chat template: ``header`` opens a turn (``{role}``
    in it), ``eos`` ends it, ``call`` is how a call is written (Jinja, and its description
    for the system turn); tool replies are user turns. Newlines are written as
    expressions: transformers renders with ``trim_blocks``."""
    nl = "{{ '\\n' }}"

    def opening(role: str) -> str:
        return header.replace("{role}", role).replace("\n", nl)
    return (
        "{% if tools %}" + opening("system") +
        "You can call these tools. To call one, write " + call[1] + "." +
        "{% for tool in tools %}" + nl + "{{ tool | tojson }}{% endfor %}" + eos + nl +
        "{% endif %}"
        "{% for message in messages %}"
        "{% if message['role'] == 'assistant' %}" + opening("assistant") +
        "{% generation %}{{ message['content'] or '' }}"
        "{% for call in message.get('tool_calls') or [] %}"
        "{% set f = call['function'] if 'function' in call else call %}" + call[0] +
        "{% endfor %}" + eos + "{% endgeneration %}" + nl +
        "{% elif message['role'] == 'tool' %}" + opening("user") +
        "<tool_response>{{ message['content'] }}</tool_response>" + eos + nl +
        "{% else %}" + opening("{{ message['role'] }}") + "{{ message['content'] }}" + eos + nl +
        "{% endif %}"
        "{% endfor %}"
        "{% if add_generation_prompt %}" + opening("assistant") + "{% endif %}"
    )


TINY_TOOL_TEMPLATE = _tool_template("<|endoftext|>", "<|{role}|>\n", TINY_CALL)
"""``deciplane/tiny``'s turns (``<|role|>\\n ... <|endoftext|>``) with tools."""

CHATML_TOOL_TEMPLATE = _tool_template("<|im_end|>", "<|im_start|>{role}\n", CHATML_CALL)
"""ChatML turns (SmolLM2, Qwen) with tools, in Qwen 2.5's ``<tool_call>`` tags."""


def _response_template(anchor: str, eos: str, tiny: bool) -> dict[str, Any]:
    """What transformers' ``parse_response`` reads a reply with (see the calls above)."""
    import re

    if tiny:
        call = {"open_pattern": r"<action>(?P<name>[A-Za-z_]\w*) ",
                "close_pattern": r"</action>\s*", "content": "kv-lines",
                "content_args": {"line_sep": "\n", "kv_sep": ":"},
                "transform": {"type": "function",
                              "function": {"name": "{name}", "arguments": "{content}"}}}
    else:
        call = {"open": "<tool_call>", "close_pattern": r"</tool_call>\s*", "content": "json",
                "transform": {"type": "function", "function": "{content}"}}
    return {
        "defaults": {"role": "assistant"},
        "start_anchor": anchor,
        "fields": {
            "tool_calls": {**call, "repeats": True},
            "content": {"close_pattern": re.escape(eos) + r"\s*", "content": "text"},
        },
    }


def prepare_tokenizer(tokenizer):
    """Give ``tokenizer`` a tool-calling chat template and the ``response_template``
    transformers parses tool calls with, for ``deciplane/tiny`` (its ``<|role|>`` turns)
    or a ChatML model (``<|im_start|>``: SmolLM2). Returns the tokenizer."""
    from deciplane.agents import tiny

    template = tokenizer.chat_template or ""
    if template in (tiny.CHAT_TEMPLATE, TINY_TOOL_TEMPLATE):
        tokenizer.chat_template = TINY_TOOL_TEMPLATE
        tokenizer.response_template = _response_template("<|assistant|>\n", "<|endoftext|>",
                                                         tiny=True)
    elif "<|im_start|>" in template:
        tokenizer.chat_template = CHATML_TOOL_TEMPLATE
        tokenizer.response_template = _response_template("<|im_start|>assistant\n",
                                                         "<|im_end|>", tiny=False)
    else:
        raise ValueError("prepare_tokenizer knows deciplane/tiny's and ChatML chat templates; "
                         "for another model use a template TRL knows (Qwen, Llama 3.1, ...)")
    return tokenizer


__all__ = ["CHATML_TOOL_TEMPLATE", "DeciplaneToolEnv", "INSTRUCTION", "TINY_TOOL_TEMPLATE",
           "environment_factory", "expert_conversations", "prepare_tokenizer",
           "seed_dataset"]
