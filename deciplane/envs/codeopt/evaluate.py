"""Judge one candidate program on one CodeOpt task: correctness first, then speed.

1. The candidate runs on the visible examples, then on the hidden tests (sandboxed,
   ``PYTHONHASHSEED=0``); the first failure ends the evaluation with reward 0 and its
   kind (``wrong_answer``, ``runtime_error``, ``timeout``, ``memory``, ``output_limit``,
   ``killed``, ``sandbox_error``).
2. A correct candidate is timed against the reference on the task's optimisation input
   for the chosen timer (its output there is checked too).
3. Reward: ``clip(log2(speedup), 0, cap)`` (``"log_speedup"``) or Mercury's percentile of
   the candidate among the reference solutions (``"percentile"``).

Nothing about a hidden test (input, expected output, the candidate's output or stderr on
it) is put in the result: only which test number failed and how.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass, field
from typing import Any, Literal

from deciplane.envs.codeopt import reward as R
from deciplane.envs.codeopt.tasks import CodeOptTask
from deciplane.envs.codeopt.timers import HASH_SEED_ENV, Measurement, Timer
from deciplane.envs.spaces import check_text_action
from deciplane.errors import ConfigError

RewardMode = Literal["log_speedup", "percentile"]
REWARD_MODES = ("log_speedup", "percentile")
VERDICTS = ("accepted", "wrong_answer", "runtime_error", "timeout", "memory", "output_limit",
            "killed", "sandbox_error", "tampered", "multiprocess", "invalid_program")
FLOAT_RTOL = 1e-6
FLOAT_ATOL = 1e-9


def _lines(text: str) -> list[str]:
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _float_token_equal(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    if math.isnan(x) or math.isnan(y):
        return False
    return math.isclose(x, y, rel_tol=FLOAT_RTOL, abs_tol=FLOAT_ATOL)


def outputs_match(expected: str, actual: str, compare: str = "exact") -> bool:
    """Whether ``actual`` stdout is acceptable. ``exact``: equal line by line, ignoring
    trailing whitespace on each line and trailing empty lines. ``float``: the same
    whitespace-separated tokens, numbers equal within relative 1e-6 (absolute 1e-9)."""
    if compare == "exact":
        return _lines(expected) == _lines(actual)
    if compare == "float":
        e, a = expected.split(), actual.split()
        return len(e) == len(a) and all(_float_token_equal(x, y) for x, y in zip(e, a))
    raise ConfigError(f"compare must be 'exact' or 'float', got {compare!r}")


@dataclass
class Evaluation:
    """The verdict on one candidate; :meth:`info` is what the environment reports."""

    task_id: str
    verdict: str
    reward: float
    timer: str
    backend: str
    tests_passed: int
    tests_total: int
    failed_test: str | None = None        # "example 2", "hidden test 3", "optimisation input"
    message: str = ""
    speedup: float | None = None
    measurement: Measurement | None = field(default=None, repr=False)
    percentile: float | None = None
    reward_mode: str = "log_speedup"
    cap: float = 4.0

    @property
    def correct(self) -> bool:
        return self.verdict == "accepted"

    def info(self) -> dict[str, Any]:
        """A flat, JSON-friendly explanation of the outcome (no hidden test content)."""
        out: dict[str, Any] = {
            "task_id": self.task_id, "verdict": self.verdict, "correct": self.correct,
            "reward": self.reward, "reward_mode": self.reward_mode, "cap": self.cap,
            "timer": self.timer, "backend": self.backend,
            "tests_passed": self.tests_passed, "tests_total": self.tests_total,
            "failed_test": self.failed_test, "failure_kind": None if self.correct else self.verdict,
            "message": self.message, "speedup": self.speedup, "percentile": self.percentile,
        }
        m = self.measurement
        if m is not None:
            out.update({
                "raw_speedup": m.raw_speedup, "noise_band": m.noise_band, "unit": m.unit,
                "ref_cost": m.ref_cost, "cand_cost": m.cand_cost,
                "ref_costs": list(m.ref_costs), "cand_costs": list(m.cand_costs),
                "baseline": m.baseline,
            })
        return out

    def summary(self) -> str:
        """One human line: verdict, speedup and reward."""
        if not self.correct:
            where = f" on {self.failed_test}" if self.failed_test else ""
            return f"{self.task_id}: {self.verdict}{where} -> reward 0 ({self.message})"
        m = self.measurement
        band = f", noise band ±{m.noise_band:.1%}" if m and m.noise_band else ""
        return (f"{self.task_id}: accepted, speedup {self.speedup:.3f}x "
                f"(raw {m.raw_speedup:.3f}x, {self.timer} timer{band}) -> reward "
                f"{self.reward:.4f}")


_PRINTABLE = frozenset(string.printable)


def _sanitize(text: str, limit: int = 400) -> str:
    """The tail of a visible run's output for messages: printable ASCII only (anything
    else becomes ``?``), so observations stay inside the environment's charset."""
    return "".join(c if c in _PRINTABLE else "?" for c in text[-limit:])


def check_correctness(task: CodeOptTask, code: str, sandbox: Any,
                      memory_mb: int = 512, max_procs: int = 32, warm: bool = False
                      ) -> tuple[str, int, str | None, str]:
    """Run the candidate on the examples, then the hidden tests. Returns
    ``(verdict, tests_passed, failed_test, message)``; verdict ``accepted`` if all pass.
    ``warm``: each case in a warm jail (``Sandbox.run(warm=True)``: a fresh process per
    case, no sandbox launch; only a local :class:`~deciplane.envs.Sandbox` offers it,
    others run as usual). The timed runs never go warm."""
    kw = {"warm": True} if warm and _is_local_sandbox(sandbox) else {}
    cases = [("example", i, c) for i, c in enumerate(task.examples, 1)]
    cases += [("hidden test", i, c) for i, c in enumerate(task.tests, 1)]
    for passed, (kind, i, case) in enumerate(cases):
        res = sandbox.run(code, stdin=case.input, timeout_s=task.timeout_s,
                          memory_mb=memory_mb, max_procs=max_procs, env=dict(HASH_SEED_ENV),
                          **kw)
        visible = kind == "example"
        if res.status != "ok":
            msg = f"{res.status} on {kind} {i}"
            if res.status == "sandbox_error":  # the sandbox's own failure, not the program's
                msg += f": {_sanitize(res.killed_reason or '')}"
            elif visible:
                msg += f": {_sanitize(res.killed_reason or res.stderr)}"
            return res.status, passed, f"{kind} {i}", msg
        if not outputs_match(case.output, res.stdout, task.compare):
            msg = f"wrong answer on {kind} {i}"
            if visible:
                msg += (f": expected {_sanitize(case.output, 200)!r}, got "
                        f"{_sanitize(res.stdout, 200)!r}")
            return "wrong_answer", passed, f"{kind} {i}", msg
    return "accepted", len(cases), None, f"passed all {len(cases)} tests"


def _is_local_sandbox(sandbox: Any) -> bool:
    from deciplane.sandbox import Sandbox
    return isinstance(sandbox, Sandbox)


def evaluate(task: CodeOptTask, code: Any, sandbox: Any, timer: Timer,
             reward: RewardMode = "log_speedup", cap: float = 4.0,
             max_program_chars: int = 200_000, warm: bool = False) -> Evaluation:
    """Correctness, then speed, then reward for one candidate program (see module doc).
    ``warm``: the correctness cases run in a warm jail (:func:`check_correctness`)."""
    if reward not in REWARD_MODES:
        raise ConfigError(f"reward must be one of {REWARD_MODES}, got {reward!r}")
    total = len(task.examples) + len(task.tests)
    base = dict(task_id=task.id, timer=timer.name, backend=sandbox.backend, tests_total=total,
                reward_mode=reward, cap=cap)
    if not isinstance(code, str) or not code.strip():
        return Evaluation(verdict="invalid_program", reward=0.0, tests_passed=0,
                          message="the action must be the non-empty source of a Python program",
                          **base)
    checked = check_text_action(code, max_program_chars, what="program", program=True)
    if not checked.ok:  # control characters, lone surrogates, too long: never run
        return Evaluation(verdict="invalid_program", reward=0.0, tests_passed=0,
                          message=f"program source refused: {checked.problem}", **base)
    verdict, passed, failed, msg = check_correctness(task, code, sandbox, warm=warm)
    if verdict != "accepted":
        return Evaluation(verdict=verdict, reward=0.0, tests_passed=passed, failed_test=failed,
                          message=msg, **base)
    perf = task.perf[timer.name]
    m = timer.measure(task.reference, code, perf.input,
                      check=lambda out: outputs_match(perf.output, out, task.compare))
    if m.failure:
        return Evaluation(verdict=m.failure, reward=0.0, tests_passed=passed,
                          failed_test="optimisation input", message=m.detail, measurement=m,
                          **base)
    percentile = None
    if reward == "percentile":
        ref_costs = [m.ref_cost] + [timer.cost(s, perf.input) for s in task.solutions]
        percentile = R.percentile_reward(m.ref_cost / m.speedup, ref_costs)
        value = percentile
    else:
        value = R.log_speedup_reward(m.speedup, cap)
    return Evaluation(verdict="accepted", reward=value, tests_passed=passed, speedup=m.speedup,
                      measurement=m, percentile=percentile,
                      message=f"passed all {total} tests; {timer.name} speedup "
                              f"{m.speedup:.3f}x", **base)


def evaluate_suite(candidates: dict[str, str], sandbox: Any, timer: Timer,
                   reward: RewardMode = "log_speedup", cap: float = 4.0
                   ) -> tuple[list[Evaluation], dict[str, float]]:
    """Judge one program per task (``{task_id: source}``) and report as docs/methods.md §6 does:
    mean speedup and share of tasks with speedup >= 1.1 (an incorrect program counts as
    speedup 1.0: the reference is kept), plus the share correct and the mean reward."""
    from deciplane.envs.codeopt.tasks import get_task

    if not candidates:
        raise ConfigError("evaluate_suite needs at least one {task_id: program} entry")
    evals = [evaluate(get_task(tid), code, sandbox, timer, reward=reward, cap=cap)
             for tid, code in sorted(candidates.items())]
    summary = R.summarize_speedups([e.speedup if e.correct and e.speedup else 1.0
                                    for e in evals])
    summary["share_correct"] = sum(e.correct for e in evals) / len(evals)
    summary["mean_reward"] = sum(e.reward for e in evals) / len(evals)
    return evals, summary
