"""Bounded fuzz of every text action of every registered environment.

Each environment runs its cases in one subprocess (tests/envs/text_fuzz_cases.py), so an
engine that crashes the interpreter (TextWorld segfaulted on a NUL) fails the test
instead of killing the suite. Every case must end with a typed error (a
``DeciplaneError``; ``InvalidAction`` for a value of the wrong type) or a finite reward,
within the time limit; content that must be refused (NUL, control characters, lone
surrogates, huge strings) must come back flagged in ``info["action_rejected"]``.
Environments whose action space is not text are skipped; ids added later (plug-ins, new
families) are covered with the default construction kwargs unless listed below.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import deciplane.envs as envs
from tests.envs.text_fuzz_cases import KINDS

ROOT = Path(__file__).resolve().parents[2]

#: cheap construction kwargs per id (default: none) and cases per id (default: 40)
KWARGS: dict[str, dict] = {
    "deciplane/TextWorld-v0": {"action_mode": "text"},
    "deciplane/TextWorldExpress-v0": {"action_mode": "text"},
    "deciplane/Math-v0": {"benchmark": "arith", "split": "test", "limit": 5,
                          "verify_timeout_s": 5.0},
    "deciplane/CodeOpt-v0": {"task_id": "fib", "timer": "cpu", "repeats": 1},
    "deciplane/CodeGen-v0": {"benchmark": "easy-funcs", "split": "test", "limit": 3,
                             "timeout_s": 3.0},
    # the 12 small games the ALFWorld tests generate (2 per task type), so none is generated here
    "deciplane/ALFWorld-v0": {"action_mode": "text", "source": "generated", "split": "train",
                              "n_games": 12},
}
N_CASES: dict[str, int] = {"deciplane/CodeOpt-v0": 24,   # valid text runs in the sandbox
                           "deciplane/CodeGen-v0": 24}
DEFAULT_CASES = 40
CASE_LIMIT_S = 20.0      # one step; generous for a loaded 2-core machine
RUN_LIMIT_S = 240.0      # the whole subprocess, construction included


@pytest.mark.parametrize("env_id", envs.registered_ids())
def test_text_actions_never_crash_or_hang(env_id):
    n = N_CASES.get(env_id, DEFAULT_CASES)
    cmd = [sys.executable, "-m", "tests.envs.text_fuzz_cases", env_id,
           json.dumps(KWARGS.get(env_id, {})), str(n), "11"]
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    try:
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=environ,
                             timeout=RUN_LIMIT_S)
        stdout, stderr, rc = out.stdout, out.stderr, out.returncode
    except subprocess.TimeoutExpired as exc:  # a hang: report the case it hung on
        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        stdout, stderr, rc = text(exc.stdout), text(exc.stderr), f"timeout {RUN_LIMIT_S}s"
    lines = stdout.splitlines()
    if rc == 0 and lines and lines[0].startswith("skip "):
        pytest.skip(lines[0][5:])
    started = [ln for ln in lines if ln.startswith("start ")]
    results = [json.loads(ln) for ln in lines if ln.startswith("{")]
    if rc != 0 or not lines or lines[-1] != "done":
        last = started[-1] if started else "construction"
        pytest.fail(f"{env_id}: the runner died (rc={rc}, -11 = segfault) during "
                    f"{last!r}; stderr tail: {stderr[-800:]}")
    assert len(results) == n
    problems = []
    for r in results:
        want = KINDS[r["kind"]]
        if r["secs"] > CASE_LIMIT_S:
            problems.append(f"{r}: took {r['secs']}s")
        if r["outcome"] == "untyped":
            problems.append(f"{r}: untyped error")
        elif want == "error" or (want == "either" and r["outcome"] == "error"):
            if r["outcome"] != "error" or "InvalidAction" not in r["mro"]:
                problems.append(f"{r}: a value of the wrong type must raise InvalidAction")
        elif r["outcome"] == "error":
            problems.append(f"{r}: text must give a reward, not an error")
        else:
            if not (r["finite"] and r["obs_is_str"]):
                problems.append(f"{r}: reward not finite or observation not text")
            if want is True and not (r["rejected"] and r["invalid"] and r["reward"] <= 0):
                problems.append(f"{r}: bad content must be refused (info['action_rejected'])")
            if want is False and r["rejected"] and any(
                    w in r["rejected"] for w in ("control character", "surrogate")):
                problems.append(f"{r}: legal text was refused")
    assert not problems, "\n".join(problems)
    assert {r["kind"] for r in results} == set(KINDS)  # every class ran
