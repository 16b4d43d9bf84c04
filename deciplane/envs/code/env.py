"""``deciplane/CodeGen-v0``: write a Python function; reward = every hidden test passes."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from deciplane.benchmarks.data import LabeledItem, load_labeled
from deciplane.envs.code.harness import (DEFAULT_MEMORY_MB, DEFAULT_TEST_TIMEOUT_S,
                                         MAX_PROGRAM_CHARS, extract_program, run_hidden_tests)
from deciplane.envs.spaces import ObservationText, check_text_action
from deciplane.errors import InvalidAction, InvalidAnswer

MAX_RESPONSE_CHARS = 1_000_000  # longer is refused unread (an invalid action)


class CodeGenEnv(gym.Env[str, str]):
    """Write the function a statement describes, in one step; reward 1 if it passes every
    hidden test.

    Description
        One episode = one problem of a code benchmark (``easy-funcs``, ``humaneval``; see
        ``deciplane benchmarks``). This environment is for *training with rewards*: it
        holds the hidden tests of its split in-process (as ``deciplane/Math-v0`` holds
        gold). For held-out evaluation use ``deciplane.envs.load_benchmark`` and its
        scorer, which keeps the tests in another process. Candidate programs always run
        in the :class:`~deciplane.envs.Sandbox` (one run per step, in a warm jail by
        default), alone: the hidden
        tests run in a checker process outside it and call the program over a pipe with
        plain data (``deciplane.envs.code.harness``; the threat model is in
        docs/code.md).

    Observation
        ``spaces.Text``: the problem statement — the function's signature and docstring.

    Action
        ``spaces.Text``: a model response or program. The program is extracted from it
        (a fenced ```` ```python ```` block defining the entry point, a full function, or
        a body that completes the statement; ``deciplane.envs.code.harness.extract_program``).
        Text that cannot be a program — a NUL or another control character (tabs,
        newlines, carriage returns, vertical tabs and form feeds are fine), a lone
        surrogate, more than 1,000,000 characters — is refused unrun: reward 0.0,
        ``info["failure"] = "invalid_action"``, ``info["invalid_action"]`` True and
        ``info["action_rejected"]`` saying why. A non-``str`` action or bytes that are
        not UTF-8 raise ``deciplane.errors.InvalidAnswer`` (an ``InvalidAction``).

    Reward
        1.0 if the program passes every hidden test, else 0.0. ``info["failure"]`` says
        why: ``passed``, ``wrong_answer`` (an assertion failed), ``runtime_error``,
        ``syntax_error``, ``no_code``, ``timeout``, ``memory``, ``output_limit``,
        ``killed``, ``exited`` (the program's process ended before answering),
        ``forked`` (a call left a child process running), ``unencodable`` (a call
        returned a value that is not plain data), ``unsupported_input``,
        ``protocol_error``, ``sandbox_error`` or ``invalid_action``
        (``deciplane.envs.code.harness.FAILURE_KINDS``).

    Episode end
        ``terminated=True`` after the single step; ``truncated`` is always False.
        ``step`` before ``reset`` or after the end raises ``gymnasium.error.ResetNeeded``.

    Arguments
        ``benchmark`` (str, default ``"easy-funcs"``), ``split`` (str, default
        ``"train"``), ``limit`` (int | None), ``timeout_s`` (float, default 6.0: wall
        limit of one test run), ``memory_mb`` (int, default 512), ``backend`` (sandbox
        backend, default ``"auto"``), ``benchmark_params`` (dict: the loader's options,
        e.g. ``{"examples": 0}``), ``warm`` (bool, default True: each step's candidate
        runs in a warm jail and its checker is forked from a warm helper — the same
        judgement and containment for a fraction of the cost; bwrap/namespace only,
        ``False`` or ``DECIPLANE_SANDBOX_WARM=0`` runs every step cold; docs/code.md).
        ``reset(options={"index": i})`` picks problem ``i``;
        without it the problem is drawn with the environment's RNG. ``info`` carries
        ``task_id``, ``index``, ``entry_point``, ``meta``; after ``step`` also ``failure``,
        ``passed``, ``detail`` (what failed, in words that never echo the hidden
        tests: the kind, the call number, an exception's name), ``has_code`` and
        ``invalid_action`` (with ``action_rejected`` when True).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, benchmark: str = "easy-funcs", split: str = "train",
                 limit: int | None = None, timeout_s: float = DEFAULT_TEST_TIMEOUT_S,
                 memory_mb: int = DEFAULT_MEMORY_MB, backend: str = "auto",
                 benchmark_params: dict[str, Any] | None = None,
                 render_mode: str | None = None, warm: bool = True):
        from deciplane.sandbox import Sandbox

        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.benchmark, self.split = benchmark, split
        self.timeout_s, self.memory_mb = float(timeout_s), int(memory_mb)
        self.warm = bool(warm)
        self.render_mode = render_mode
        self._items: list[LabeledItem]
        self._items, self.split_fingerprint = load_labeled(benchmark, split, limit,
                                                           **(benchmark_params or {}))
        if not all("entry_point" in it.meta for it in self._items):
            raise ValueError(f"benchmark {benchmark!r} is not a code benchmark (its items "
                             "have no entry_point); use easy-funcs or humaneval")
        self.sandbox = Sandbox(backend)
        from gymnasium.spaces.text import alphanumeric

        chars = set(alphanumeric)
        for it in self._items:
            chars.update(it.prompt)
        longest = max(len(it.prompt) for it in self._items)
        self.observation_space = ObservationText(max_length=max(longest, 1),
                                                charset="".join(sorted(chars)))
        self.action_space = spaces.Text(max_length=MAX_PROGRAM_CHARS)
        self._current: LabeledItem | None = None
        self._index = -1
        self._last = ""

    def __len__(self) -> int:
        return len(self._items)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if options and "index" in options:
            index = int(options["index"])
            if not 0 <= index < len(self._items):
                raise IndexError(f"options['index'] must be in [0, {len(self._items)}), "
                                 f"got {index}")
        else:
            index = int(self.np_random.integers(len(self._items)))
        self._index, self._current = index, self._items[index]
        self._last = self._current.prompt
        return self._current.prompt, self._info()

    def _info(self) -> dict[str, Any]:
        assert self._current is not None
        meta = {k: v for k, v in self._current.meta.items()}
        return {"task_id": self._current.id, "index": self._index,
                "entry_point": meta["entry_point"], "meta": meta}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._current is None:
            raise ResetNeeded("call reset() before step(); CodeGen-v0 episodes are one step")
        try:
            checked = check_text_action(action, MAX_RESPONSE_CHARS, what="program (action)",
                                        program=True)
        except InvalidAction as exc:
            raise InvalidAnswer(str(exc)) from None
        item = self._current
        info = self._info()
        text = checked.text
        if not checked.ok:
            info.update(passed=False, failure="invalid_action", detail=checked.problem,
                        has_code=False, invalid_action=True, action_rejected=checked.problem)
            self._last = f"{item.prompt}\n> (refused: {checked.problem})"
            self._current = None
            return item.prompt, 0.0, True, False, info
        program = extract_program(text, item.prompt, info["entry_point"])
        outcome = run_hidden_tests(self.sandbox, program, item.gold, info["entry_point"],
                                   timeout_s=self.timeout_s, memory_mb=self.memory_mb,
                                   prompt=item.prompt, warm=self.warm)
        info.update(passed=outcome.passed, failure=outcome.failure, detail=outcome.detail,
                    has_code=program is not None, invalid_action=False)
        self._last = f"{item.prompt}\n> {text}\n{outcome.failure}"
        self._current = None
        return item.prompt, float(outcome.passed), True, False, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last
        return None


__all__ = ["CodeGenEnv"]
