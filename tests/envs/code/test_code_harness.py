"""The code harness: candidates run only in the Sandbox; hostile candidates (fork, output
flood, sleep, memory, early exit) are contained and classified, for hidden tests and probes
— cold (a sandbox and a checker process per run) and warm (a kept warm jail and a checker
forked from a warm helper), with the same outcomes."""

from __future__ import annotations

import os
import time

import pytest

from deciplane.envs import Sandbox
from deciplane.envs.code.harness import (extract_program, is_probe, parse_probe_output,
                                         run_hidden_tests, run_probes)

STMT = 'def f(x: int) -> int:\n    """Return x doubled."""\n'
TESTS = "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(5) == 10\n"
PROBES = ["(1,)", "(2,)", "(-3,)"]

HOSTILE = {
    "correct": STMT + "    return x * 2\n",
    "wrong": STMT + "    return x + 1\n",
    "raises": STMT + "    return 1 // (x - 1)\n",
    "sleeps": STMT + "    import time\n    time.sleep(100)\n",
    "flood": STMT + "    import sys\n    while True:\n        sys.stdout.write('x' * 10000)\n",
    "fork": STMT + "    import os, time\n    if os.fork() == 0:\n        time.sleep(100)\n"
                   "        os._exit(0)\n    return x * 2\n",
    # the child forks a sleeper and exits at once: the sleeper is an orphan, not a child
    "double_fork": STMT + "    import os, time\n    pid = os.fork()\n    if pid == 0:\n"
                          "        if os.fork() == 0:\n            time.sleep(100)\n"
                          "        os._exit(0)\n    os.waitpid(pid, 0)\n    return x * 2\n",
    "fork_bomb": STMT + "    import os\n    for _ in range(200):\n        try:\n"
                        "            os.fork()\n        except OSError:\n            pass\n"
                        "    return x * 2\n",
    "early_exit": STMT + "    import os\n    os._exit(0)\n",
    "memory": STMT + "    a = bytearray(2 ** 31)\n    return x\n",
    "syntax": STMT + "    return (\n",
    "marker_in_caller": STMT + "    open('/tmp/deciplane-code-harness-marker', 'w').write('x')\n"
                              "    return x * 2\n",
}


class _Harness:
    """The harness's entry points with ``warm`` fixed."""

    def __init__(self, warm: bool) -> None:
        self.warm = warm

    def hidden(self, *a, **kw):
        return run_hidden_tests(*a, warm=self.warm, **kw)

    def probes(self, *a, **kw):
        return run_probes(*a, warm=self.warm, **kw)


@pytest.fixture(scope="module")
def sandbox():
    return Sandbox()


@pytest.fixture(params=[False, True], ids=["cold", "warm"])
def h(request):
    yield _Harness(request.param)
    from deciplane.sandbox import warm
    warm.close_program_jails()


def test_hidden_tests_classify_hostile_candidates(sandbox, h):
    marker = "/tmp/deciplane-code-harness-marker"
    if os.path.exists(marker):
        os.unlink(marker)
    t0 = time.monotonic()
    out = {k: h.hidden(sandbox, c, TESTS, "f", timeout_s=2.0, memory_mb=256)
           for k, c in HOSTILE.items()}
    elapsed = time.monotonic() - t0
    kinds = {k: o.failure for k, o in out.items()}
    assert kinds["correct"] == "passed" and out["correct"].passed
    assert kinds["marker_in_caller"] == "passed"
    assert not os.path.exists(marker), "the candidate ran in the caller's filesystem"
    assert kinds["wrong"] == "wrong_answer"
    assert kinds["raises"] == "runtime_error"
    assert kinds["sleeps"] == "timeout"
    assert kinds["flood"] == "output_limit"
    assert kinds["early_exit"] == "exited"          # exit 0 inside the call: named, not passed
    assert kinds["memory"] == "memory"
    assert kinds["syntax"] == "syntax_error"
    assert kinds["fork"] == "forked"
    assert kinds["double_fork"] == "forked"
    # contained; "passed" is fair when every child had ended before the call returned
    assert kinds["fork_bomb"] in ("timeout", "forked", "runtime_error", "killed", "passed")
    passed = {k for k, o in out.items() if o.passed} - {"fork_bomb"}
    assert passed == {"correct", "marker_in_caller"}
    assert elapsed < 40, f"hostile candidates stalled the run ({elapsed:.0f}s)"
    assert h.hidden(sandbox, None, TESTS, "f").failure == "no_code"


def test_probe_runs_isolate_each_call_and_classify(sandbox, h):
    t0 = time.monotonic()
    out = {k: h.probes(sandbox, c, "f", PROBES, probe_timeout_s=0.5)
           for k, c in HOSTILE.items()}
    assert time.monotonic() - t0 < 40
    assert out["correct"].signature == ("2", "4", "-6")
    assert out["raises"].signature == ("!ZeroDivisionError", "1", "-1")
    assert out["sleeps"].signature == ("!timeout",) * 3      # each call hit its own budget
    assert out["flood"].status == "output_limit"
    assert out["flood"].signature == ("!not_run:output_limit",) * 3
    assert out["early_exit"].signature == ("!not_run:ok",) * 3
    assert out["memory"].signature == ("!MemoryError",) * 3
    assert out["syntax"].signature == ("!define:SyntaxError",) * 3
    assert out["fork"].signature == ("!forked",) * 3
    assert out["double_fork"].signature == ("!forked",) * 3
    assert len(out["fork_bomb"].signature) == 3                 # contained, classified
    # a one-off hang only costs that probe
    partial = STMT + "    import time\n    if x == 2:\n        time.sleep(100)\n    return x\n"
    assert h.probes(sandbox, partial, "f", PROBES, probe_timeout_s=0.5).signature == \
        ("1", "!timeout", "-3")
    # arguments are fresh per call: a candidate mutating its input cannot leak state
    mut = 'def g(xs: list) -> int:\n    xs.append(1)\n    return len(xs)\n'
    assert h.probes(sandbox, mut, "g", ["([],)", "([],)"]).signature == ("1", "1")
    assert h.probes(sandbox, None, "f", PROBES).signature == ("!no_code",) * 3


def test_parse_probe_output_first_line_wins_and_missing_are_not_run():
    raw = b'[0, "1"]\n[0, "9"]\nnot json\n[2, "3"]\n'
    assert parse_probe_output(raw, 3, "timeout").outputs == ("1", "!not_run:timeout", "3")
    assert parse_probe_output(b'[-1, "!define:NameError"]\n', 2, "ok").outputs == \
        ("!define:NameError",) * 2


def test_extract_program_forms():
    stmt = 'from typing import List\n\n\ndef h(xs: List[int]) -> int:\n    """Sum."""\n'
    fenced = "Here:\n```python\ndef h(xs):\n    return sum(xs)\n```\nThis sums."
    prog = extract_program(fenced, stmt, "h")
    assert prog.startswith(stmt.rstrip()) and prog.rstrip().endswith("return sum(xs)")
    assert "This sums" not in prog
    body = "    return sum(xs)\n"
    assert extract_program(body, stmt, "h") == stmt.rstrip() + "\n    return sum(xs)\n"
    unindented = "return sum(xs)"
    assert extract_program(unindented, stmt, "h").endswith("\n    return sum(xs)\n")
    # a block that does not define the entry point loses to one that does
    two = "```python\nprint(1)\n```\n```python\ndef h(xs):\n    return 0\n```"
    assert "return 0" in extract_program(two, stmt, "h")
    assert extract_program("   \n", stmt, "h") is None
    # program text with tabs, newlines and long strings survives as is
    tabbed = "```python\ndef h(xs):\n\treturn len('" + "a" * 5000 + "')\n```"
    assert "\treturn len('" + "a" * 5000 in extract_program(tabbed, stmt, "h")


def test_is_probe():
    assert is_probe("(1, [2, 3], 'x')") and is_probe("()")
    assert not is_probe("1") and not is_probe("(__import__('os'),)") and not is_probe("(1,")
    assert not is_probe(None)


def test_a_candidate_that_breaks_its_warm_jail_is_judged_again_cold(sandbox):
    """``kill(-1)`` inside a call reaches the warm jail's supervisor (not the cold
    sandbox's): the warm run breaks, and the harness judges the candidate again cold,
    with new pipes and a new checker — the same outcome as cold."""
    from deciplane.sandbox import warm

    prog = STMT + ("    import os, signal\n    try:\n        os.kill(-1, signal.SIGKILL)\n"
                   "    except OSError:\n        pass\n    return x * 2\n")
    before = warm.STATS["broken"]
    got = run_hidden_tests(sandbox, prog, TESTS, "f", timeout_s=2.0, warm=True)
    want = run_hidden_tests(sandbox, prog, TESTS, "f", timeout_s=2.0)
    assert (got.passed, got.failure) == (want.passed, want.failure), (got, want)
    assert warm.STATS["broken"] == before + 1
    assert run_hidden_tests(sandbox, HOSTILE["correct"], TESTS, "f", warm=True).passed
    warm.close_program_jails()
