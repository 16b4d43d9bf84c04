"""Judging candidates: correctness gates the reward, failures say why, hidden tests stay
hidden, a forged callgrind total is caught, the percentile reward."""

from __future__ import annotations

import dataclasses
import json

import pytest

from deciplane.envs.codeopt.evaluate import evaluate, evaluate_suite
from deciplane.envs.codeopt.tasks import get_task
from deciplane.envs.codeopt.timers import CpuTimer, InstructionTimer
from deciplane.errors import BackendUnavailable, ConfigError
from tests.sandbox.sandbox_helpers import sandbox  # noqa: F401  (a fixture)

# primes, off by one: correct on the example (N = 10) but not on N = 2 (a hidden test)
WRONG_FAST_PRIMES = """
import sys
n = int(sys.stdin.read())
sieve = bytearray([1]) * max(n, 2)
sieve[0] = sieve[1] = 0
for p in range(2, int(n ** 0.5) + 1):
    if sieve[p]:
        sieve[p * p::p] = bytes(len(range(p * p, len(sieve), p)))
primes = [i for i, f in enumerate(sieve) if f]
print(len(primes), sum(primes))
"""

# correct on every small test, wrong on big inputs (the optimisation input)
WRONG_ON_BIG_PRIMES = """
import sys
n = int(sys.stdin.read())
if n > 50000:
    print(0, 0)
else:
    sieve = bytearray([1]) * (n + 1)
    for i in range(min(n + 1, 2)):
        sieve[i] = 0
    for p in range(2, int(n ** 0.5) + 1):
        if sieve[p]:
            sieve[p * p::p] = bytes(len(range(p * p, n + 1, p)))
    primes = [i for i, f in enumerate(sieve) if f]
    print(len(primes), sum(primes))
"""

# the fast Fibonacci plus an attempt to forge callgrind's total in its log file: valgrind
# writes its summary at its own file offset when the program ends, so the fake total is
# placed past it (a plain append would just be overwritten)
FORGE_CALLGRIND = """
import os, sys
data = sys.stdin.read().split()
q = int(data[0]); qs = [int(x) for x in data[1:1 + q]]
f = [0, 1]
for _ in range(max(qs, default=0)):
    f.append(f[-1] + f[-2])
print("\\n".join(str(f[n]) for n in qs))
for name in os.listdir("."):
    if name.endswith(".log"):
        with open(name, "a") as fh:
            pid = open(name).read().split("==")[1] if "==" in open(name).read() else "1"
            fh.write("\\n" * 4000 + f"=={pid}== Collected : 1\\n")
"""


@pytest.fixture(scope="module")
def cpu(sandbox):
    return CpuTimer(sandbox, repeats=3, calibration_pairs=3)


@pytest.fixture(scope="module")
def instructions(sandbox):
    try:
        return InstructionTimer(sandbox)
    except BackendUnavailable as exc:
        pytest.skip(str(exc))


def _no_hidden_content(info: dict, task) -> None:
    text = json.dumps(info, default=str)
    for case in [*task.tests, *task.perf.values()]:
        for s in (case.input.strip(), case.output.strip()):
            if len(s) > 6 and s not in {e.input.strip() for e in task.examples}:
                assert s not in text


def test_reference_against_itself_gets_zero_with_both_timers(sandbox, cpu, instructions):
    task = get_task("fib")
    # (percentile mode: as slow as the slowest reference solution -> 0 as well)
    ev = evaluate(task, task.reference, sandbox, instructions, reward="percentile")
    assert ev.verdict == "accepted" and ev.reward == 0.0 and ev.speedup == 1.0, ev.info()
    assert ev.percentile == 0.0
    # cpu: a slowdown or a speedup inside the noise band both give 0. CPU time is noisy on
    # a shared machine (a CI run once measured the reference 1.16x faster than itself with
    # 3 repeats), so 5 repeats and one retry: a real bias would fail both attempts.
    for attempt in range(2):
        ev = evaluate(task, task.reference, sandbox, CpuTimer(sandbox, repeats=5))
        if ev.reward == 0.0:
            break
    assert ev.verdict == "accepted" and ev.reward == 0.0, ev.info()
    assert ev.speedup <= 1.0 and ev.info()["noise_band"] >= 0.01


def test_incorrect_fast_program_gets_zero_and_the_failure_kind(sandbox, cpu):
    task = get_task("primes")
    ev = evaluate(task, WRONG_FAST_PRIMES, sandbox, cpu)
    info = ev.info()
    assert (ev.reward, info["verdict"], info["failure_kind"]) == (0.0, "wrong_answer",
                                                                   "wrong_answer")
    assert info["failed_test"].startswith("hidden test") and ev.tests_passed >= 1
    assert ev.measurement is None   # never timed
    _no_hidden_content(info, task)


def test_wrong_answer_on_the_optimisation_input_is_caught(sandbox, cpu):
    task = get_task("primes")
    ev = evaluate(task, WRONG_ON_BIG_PRIMES, sandbox, cpu)
    assert (ev.verdict, ev.failed_test, ev.reward) == ("wrong_answer", "optimisation input", 0.0)
    _no_hidden_content(ev.info(), task)


def test_runtime_error_timeout_and_invalid_programs(sandbox, cpu):
    task = get_task("fib")
    ev = evaluate(task, "import sys\nraise SystemExit(3)\n", sandbox, cpu)
    assert (ev.verdict, ev.failed_test, ev.reward) == ("runtime_error", "example 1", 0.0)
    ev = evaluate(task, "1/0\n", sandbox, cpu)
    assert "ZeroDivisionError" in ev.message      # a visible example shows the error
    quick = dataclasses.replace(task, timeout_s=1.0)
    ev = evaluate(quick, "while True:\n    pass\n", sandbox, cpu)
    assert (ev.verdict, ev.reward) == ("timeout", 0.0)
    for bad in ("", "   \n", None, b"print(1)", "x" * 300_000, "print(1)\0"):
        ev = evaluate(task, bad, sandbox, cpu)
        assert (ev.verdict, ev.reward) == ("invalid_program", 0.0)


def test_forged_callgrind_total_is_caught(sandbox, instructions):
    task = get_task("fib")
    ev = evaluate(task, FORGE_CALLGRIND, sandbox, instructions)
    assert (ev.verdict, ev.failed_test, ev.reward) == ("tampered", "optimisation input", 0.0)


def test_work_in_a_child_process_cannot_escape_the_instruction_count(sandbox, instructions):
    # the fast answer, computed by an exec'd child: followed by callgrind, so it shows up
    task = get_task("fib")
    code = ("import subprocess, sys\n"
            f"src = {task.solutions[0]!r}\n"
            "subprocess.run([sys.executable, '-c', src], stdin=sys.stdin, check=True)\n")
    ev = evaluate(task, code, sandbox, instructions)
    assert (ev.verdict, ev.failed_test, ev.reward) == ("multiprocess", "optimisation input", 0.0)
    assert "single-process" in ev.message


def test_percentile_reward_among_reference_solutions(sandbox, instructions):
    task = get_task("fib")
    fast = evaluate(task, task.solutions[0], sandbox, instructions, reward="percentile")
    assert fast.percentile == fast.reward == 1.0    # as fast as the known solution
    assert fast.info()["reward_mode"] == "percentile"


def test_evaluate_suite_reports_methods_metrics(sandbox, cpu):
    evals, summary = evaluate_suite({"fib": "print(1)\n", "primes": "raise SystemExit(2)\n"},
                                    sandbox, cpu)
    assert [e.verdict for e in evals] == ["wrong_answer", "runtime_error"]
    assert summary["mean_speedup"] == 1.0 and summary["share_speedup_ge_1.1"] == 0.0
    assert summary["share_correct"] == 0.0 and summary["mean_reward"] == 0.0
    with pytest.raises(ConfigError):
        evaluate_suite({}, sandbox, cpu)
