"""``deciplane/CodeOpt-v0``: make a program faster without breaking it."""

from __future__ import annotations

import string
from typing import Any

import gymnasium as gym
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from deciplane.envs.codeopt.evaluate import REWARD_MODES, Evaluation, evaluate
from deciplane.envs.codeopt.tasks import SPLITS, CodeOptTask, get_task, list_tasks
from deciplane.envs.codeopt.timers import TIMERS, Timer, make_timer
from deciplane.envs.spaces import ObservationText
from deciplane.errors import ConfigError, InvalidAction

MAX_PROGRAM_CHARS = 100_000
_FEEDBACK_CHARS = 2_000
_PRINTABLE = frozenset(string.printable)


class CodeOptEnv(gym.Env[str, str]):
    """Rewrite a slow but correct program so that it runs faster.

    Description
        One episode = one task of the CodeOpt suite (``deciplane codeopt list``): real
        programs from the ``pyperformance`` benchmarks (nbody, spectral_norm, fannkuch,
        richards, float, nqueens, pidigits, hexiom) turned into stdin/stdout tasks, and
        classic slow-vs-fast algorithm tasks written for deciplane (naive Fibonacci,
        quadratic de-duplication, bubble sort, trial-division primes, O(n^2) LIS, range
        sums, string prepending, pair counting). Candidates run untrusted in
        :class:`deciplane.envs.Sandbox`. The reward follows docs/methods.md §6 (the environment
        of "Reinforcement Learning for Code Optimization"; PIE and Mercury metrics).

    Observation
        ``spaces.Text`` (an :class:`~deciplane.envs.spaces.ObservationText`, so it
        also works through ``AsyncVectorEnv``'s shared memory): the task statement, the
        I/O format, the visible examples and the slow reference program. Hidden tests,
        the optimisation input and the known faster solutions are never shown. With ``max_attempts > 1`` the observation after
        a step adds feedback on the last attempt (verdict, speedup; nothing about hidden
        test contents).

    Action
        ``spaces.Text``: the full source of a Python 3 program (any ``str``). Judged
        ``invalid_program`` without running (reward 0.0, ``info["action_rejected"]`` says
        why): an empty program, one over 100,000 characters, a control character other
        than the whitespace of ``string.printable`` (a NUL...), a lone surrogate.
        A non-``str`` action raises :class:`deciplane.errors.InvalidAction`.

    Reward
        0.0 unless the program passes every correctness test (visible examples first,
        then hidden tests). A correct program is timed against the reference on a large
        hidden optimisation input, and gets ``clip(log2(speedup), 0, cap)``
        (``reward="log_speedup"``) or Mercury's percentile among the reference solutions
        in [0, 1] (``reward="percentile"``). Timers: ``"cpu"`` (median CPU time of
        interleaved repeats; speedups inside the noise band measured at start-up count as
        1.0) or ``"instructions"`` (callgrind instruction counts, exact). ``info``
        explains the outcome: ``verdict`` / ``failure_kind`` (``wrong_answer``,
        ``runtime_error``, ``timeout``, ``memory``, ``output_limit``, ``killed``,
        ``sandbox_error``, ``tampered``, ``multiprocess`` (instructions timer: the program
        started processes), ``invalid_program``), ``failed_test``,
        ``speedup``, ``raw_speedup``, ``noise_band``, ``ref_cost`` / ``cand_cost`` (and
        per-run lists), ``unit``, ``timer``, ``backend``.

    Episode end
        ``terminated=True`` after ``max_attempts`` steps (default 1); ``truncated`` is
        always False. ``step`` before ``reset`` or after the end raises
        ``gymnasium.error.ResetNeeded``.

    Arguments
        ``task_id`` (str | None: always this task; default: drawn from ``split`` with the
        environment's RNG, or ``reset(options={"task_id": ...})``), ``split``
        (``"train"`` | ``"test"`` | ``"all"``), ``timer`` (``"cpu"`` | ``"instructions"``),
        ``reward`` (``"log_speedup"`` | ``"percentile"``), ``cap`` (float, default 4.0:
        a 16x speedup earns the maximum), ``backend`` (sandbox backend, default
        ``"auto"``), ``repeats`` (timed runs per measurement; default 5 for cpu, 1 for
        instructions), ``max_attempts`` (int, default 1), ``timer_kwargs`` (dict, extra
        arguments of the timer class), ``render_mode`` (None | ``"ansi"``), ``sandbox``
        (an existing :class:`deciplane.envs.Sandbox` to share; overrides ``backend``),
        ``warm`` (bool, default True: the correctness cases run in a warm jail, a fresh
        process per case without a sandbox launch — same verdicts; the timed runs stay
        cold; ``False`` or ``DECIPLANE_SANDBOX_WARM=0`` runs them cold too).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, task_id: str | None = None, split: str = "train", timer: str = "cpu",
                 reward: str = "log_speedup", cap: float = 4.0, backend: str = "auto",
                 repeats: int | None = None, max_attempts: int = 1,
                 timer_kwargs: dict[str, Any] | None = None,
                 render_mode: str | None = None, sandbox: Any = None,
                 warm: bool = True) -> None:
        if render_mode not in (None, "ansi"):
            raise ConfigError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
        if timer not in TIMERS:
            raise ConfigError(f"timer must be one of {sorted(TIMERS)}, got {timer!r}")
        if reward not in REWARD_MODES:
            raise ConfigError(f"reward must be one of {REWARD_MODES}, got {reward!r}")
        if cap <= 0:
            raise ConfigError(f"cap must be > 0 (the largest reward, log2 of a speedup), "
                              f"got {cap}")
        if max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {max_attempts}")
        self.tasks: list[CodeOptTask] = ([get_task(task_id)] if task_id is not None
                                         else list_tasks(split))
        if not self.tasks:
            raise ConfigError(f"split {split!r} has no CodeOpt tasks; use 'train', 'test' "
                              "or 'all'")
        self.task_id, self.split, self.timer_name = task_id, split, timer
        self.reward_mode, self.cap, self.max_attempts = reward, float(cap), int(max_attempts)
        self.render_mode = render_mode
        self.warm = bool(warm)
        if sandbox is None:
            from deciplane.sandbox import Sandbox

            sandbox = Sandbox(backend)
        self.sandbox = sandbox
        kwargs = dict(timer_kwargs or {})
        if repeats is not None:
            kwargs["repeats"] = repeats
        self.timer: Timer = make_timer(timer, sandbox, **kwargs)

        # every task, not only this split's: reset(options={"task_id": ...}) may pick any
        texts = [t.observation() for t in list_tasks("all")]
        chars = set(string.printable)
        for text in texts:
            chars.update(text)
        self.observation_space = ObservationText(
            max_length=max(len(x) for x in texts) + _FEEDBACK_CHARS * self.max_attempts,
            min_length=1, charset=frozenset(chars))
        self.action_space = spaces.Text(max_length=MAX_PROGRAM_CHARS, min_length=1,
                                        charset=frozenset(string.printable))
        self._task: CodeOptTask | None = None
        self._attempts = 0
        self._feedback: list[str] = []
        self._last: Evaluation | None = None

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if options and options.get("task_id") is not None:
            task = get_task(str(options["task_id"]))
        else:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self._task, self._attempts, self._feedback, self._last = task, 0, [], None
        return task.observation(), self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._task is None:
            raise ResetNeeded("call reset() before step(); the episode has ended")
        if not isinstance(action, str):
            raise InvalidAction(f"the action must be the program source as str, got "
                                f"{type(action).__name__}; decode bytes first")
        ev = evaluate(self._task, action, self.sandbox, self.timer, reward=self.reward_mode,
                      cap=self.cap, max_program_chars=MAX_PROGRAM_CHARS, warm=self.warm)
        self._attempts += 1
        self._last = ev
        self._feedback.append(_feedback_line(self._attempts, ev))
        info = {**self._info(), **ev.info()}
        if ev.verdict == "invalid_program":
            info["action_rejected"] = ev.message
        obs = self._observation()
        terminated = self._attempts >= self.max_attempts
        if terminated:
            self._task = None
        return obs, float(ev.reward), terminated, False, info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        if self._last is None:
            return self._task.observation() if self._task else ""
        return self._last.summary()

    # ------------------------------------------------------------------ helpers
    def _observation(self) -> str:
        assert self._last is not None
        task = get_task(self._last.task_id)
        if self.max_attempts == 1:
            return task.observation()
        return task.observation() + "\n## Feedback\n" + "\n".join(self._feedback) + "\n"

    def _info(self) -> dict[str, Any]:
        task = self._task or (get_task(self._last.task_id) if self._last else None)
        assert task is not None
        return {"task_id": task.id, "origin": task.origin, "split": task.split,
                "timer": self.timer_name, "backend": self.sandbox.backend,
                "attempt": self._attempts, "max_attempts": self.max_attempts}


def _feedback_line(attempt: int, ev: Evaluation) -> str:
    text = f"attempt {attempt}: {ev.summary()}"
    text = "".join(c if c in _PRINTABLE else "?" for c in text)
    return text[:_FEEDBACK_CHARS - 32]   # + newline; the header fits in the slack


__all__ = ["CodeOptEnv"]
