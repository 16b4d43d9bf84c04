"""humaneval and easy-funcs: hidden tests only in the scorer's process, judged in the
Sandbox; the harness is right (HumanEval canonical solutions pass, wrong ones fail); the
easy-funcs family is deterministic with disjoint splits; CodeGen-v0 follows Gymnasium."""

from __future__ import annotations

import os

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import deciplane.envs  # noqa: F401  (registers the ids)
from deciplane.envs import load_benchmark
from deciplane.benchmarks.data import load_labeled
from deciplane.envs.code import easy_funcs
from deciplane.envs.code.benchmarks import humaneval_rows, judge_outcomes

# A correct solution body per easy-funcs family, from the task key's constants.
SOLUTIONS = {
    "add_k": "return x + {0}", "times_k": "return x * {0}",
    "divisible_by_k": "return n % {0} == 0", "first_k_chars": "return s[:{0}]",
    "repeat_k": "return s * {0}", "count_above_k": "return sum(1 for x in xs if x > {0})",
    "list_sum": "return sum(xs)", "list_max": "return max(xs)", "last_element": "return xs[-1]",
    "upper": "return s.upper()", "reverse_string": "return s[::-1]",
    "count_char": "return s.count('{0}')", "sum_above_k": "return sum(x for x in xs if x > {0})",
    "squares_of_evens": "return [x * x for x in xs if x % 2 == 0]",
    "count_vowels": "return sum(c in 'aeiou' for c in s)",
    "reverse_words": "return ' '.join(s.split(' ')[::-1])", "affine": "return {0} * x + {1}",
    "clamp": "return min(max(x, {0}), {1})", "long_words": "return [w for w in words if len(w) > {0}]",
    "second_largest": "d = sorted(set(xs))\n    return d[-2] if len(d) > 1 else None",
    "first_index_above_k": "return next((i for i, x in enumerate(xs) if x > {0}), -1)",
    "running_sums": "import itertools\n    return list(itertools.accumulate(xs))",
    "palindrome": "return s.lower() == s.lower()[::-1]",
    "most_common_char": "return max(s, key=lambda c: (s.count(c), -s.index(c)))",
}


def _solution(task) -> str:
    consts = task.key.split("/")[1:]
    return "    " + SOLUTIONS[task.family].format(*consts) + "\n"


def test_every_family_has_a_checked_solution():
    assert {f.name for f in easy_funcs.FAMILIES} == set(SOLUTIONS)


def test_easy_funcs_deterministic_disjoint_and_levelled():
    a, b = easy_funcs.generate_splits(), easy_funcs.generate_splits()
    assert [t.prompt for t in a["test"]] == [t.prompt for t in b["test"]]
    assert [t.tests for t in a["train"]] == [t.tests for t in b["train"]]
    keys = {s: {t.key for t in ts} for s, ts in a.items()}
    assert not keys["test"] & keys["valid"] and not keys["test"] & keys["train"]
    assert not keys["valid"] & keys["train"]
    assert {s: len(v) for s, v in a.items()} == easy_funcs.SPLIT_SIZES
    assert {t.level for t in a["test"]} == {1, 2, 3}
    for t in a["test"][:20]:
        assert t.n_tests == easy_funcs.N_HIDDEN_TESTS and t.tests.count("assert") == t.n_tests
        assert t.prompt.startswith(f"def {t.entry_point}(") and ">>>" in t.prompt
        assert "check" not in t.prompt
    only1 = easy_funcs.generate(30, "test", easy_funcs.EasyFuncsSpec({1: 1.0}, examples=0))
    assert {t.level for t in only1} == {1} and all(">>>" not in t.prompt for t in only1)
    # the examples knob changes the statements only: same tasks, same hidden tests
    ex0 = easy_funcs.generate_splits(easy_funcs.EasyFuncsSpec(examples=0))["test"]
    assert [t.key for t in ex0] == [t.key for t in a["test"]]
    assert [t.tests for t in ex0] == [t.tests for t in a["test"]]


def test_easy_funcs_solutions_pass_and_wrong_fail_in_the_scorer():
    items, _ = load_labeled("easy-funcs", "test")
    by_id = {it.id: it for it in items}
    tasks_all = easy_funcs.generate_splits()["test"]
    per_family = {}
    for it, task in zip(items, tasks_all):
        per_family.setdefault(task.family, (it, task))
    tasks, scorer = load_benchmark("easy-funcs", "test")
    with scorer:
        right = {it.id: _solution(task) for it, task in per_family.values()}
        wrong = {it.id: "    return None\n" for it, _ in per_family.values()}
        rep_right = scorer.sample_accuracy({k: [v] for k, v in right.items()})
        rep_wrong = scorer.sample_accuracy({k: [v] for k, v in wrong.items()})
        # full function in a fenced block with tabs/newlines, as a model writes it
        tid, (it, task) = next((it.id, (it, task)) for it, task in per_family.values())
        fenced = ("Sure!\n```python\n" + it.prompt.split("\n")[0] + "\n"
                  + _solution(task).replace("    ", "\t") + "```\nDone.")
        assert scorer.score({tid: fenced}).correct[tid]
    assert rep_right.mean == 1.0, {k: v for k, v in rep_right.per_task.items() if v < 1}
    assert rep_wrong.mean == 0.0
    assert set(by_id) >= set(right)


LEAK_PROBE = r"""
import gc, json, os, sys
from deciplane.envs import load_benchmark
tasks, scorer = load_benchmark(sys.argv[1], "test", limit=20)
def strings(o):
    for r in gc.get_referents(o):
        if isinstance(r, str):
            yield r
        elif isinstance(r, dict):   # dicts holding only strings are not tracked by gc
            yield from (x for kv in r.items() for x in kv if isinstance(x, str))
def hits():
    gc.collect()
    # hidden test code is long; the short needle itself (and this source) must not count
    return sum(1 for o in gc.get_objects() for x in strings(o)
               if "assert candidate(" in x and len(x) > 60 and "gc.get_objects" not in x)
if len(sys.argv) > 2:               # self-check of the search: labelled items are found
    from deciplane.benchmarks.data import load_labeled
    items = load_labeled(sys.argv[1], "test", limit=20)
hits = hits()
print(json.dumps({"hits": hits, "n": len(tasks), "scorer_pid": scorer.pid, "pid": os.getpid(),
                  "meta_keys": sorted({k for t in tasks for k in t.meta})}))
scorer.close()
"""


@pytest.mark.parametrize("bench", ["easy-funcs", "humaneval"])
def test_hidden_tests_never_reach_the_caller(bench):
    """In a fresh process (other tests here load labelled items on purpose): after
    load_benchmark, no object of the caller holds a hidden assertion."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[3])
    res = subprocess.run([sys.executable, "-c", LEAK_PROBE, bench], capture_output=True,
                         text=True, timeout=240, cwd=root,
                         env={**os.environ, "PYTHONPATH": root})
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["n"] == 20 and out["scorer_pid"] != out["pid"]
    assert out["hits"] == 0
    control = subprocess.run([sys.executable, "-c", LEAK_PROBE, bench, "load-labeled"],
                             capture_output=True, text=True, timeout=240, cwd=root,
                             env={**os.environ, "PYTHONPATH": root})
    assert json.loads(control.stdout.strip().splitlines()[-1])["hits"] >= 15
    assert set(out["meta_keys"]) <= {"entry_point", "level", "family", "benchmark", "split"}


def test_humaneval_canonical_solutions_pass_and_wrong_fail():
    items, fp = load_labeled("humaneval", "test")
    assert len(items) == 164 and items[0].id == "HumanEval/0"
    rows, _ = humaneval_rows()
    canonical = {r["task_id"]: r["canonical_solution"] for r in rows}
    outcomes = judge_outcomes([(canonical[it.id], it) for it in items])
    failed = [(it.id, o.failure, o.detail) for it, o in zip(items, outcomes) if not o.passed]
    assert not failed, failed[:3]
    wrong = judge_outcomes([("    return None\n", it) for it in items[:12]]
                           + [("    pass\n", it) for it in items[12:16]])
    assert not any(o.passed for o in wrong)
    assert {o.failure for o in wrong} <= {"wrong_answer", "runtime_error"}


def test_codegen_env_reward_failure_kind_and_check_env():
    env = gym.make("deciplane/CodeGen-v0", benchmark="easy-funcs", split="train", limit=5)
    check_env(env.unwrapped, skip_render_check=True)
    raw = env.unwrapped
    items, _ = load_labeled("easy-funcs", "train", limit=5)
    task = easy_funcs.generate_splits()["train"][0]
    obs, info = env.reset(seed=0, options={"index": 0})
    assert obs == items[0].prompt and info["entry_point"] == task.entry_point
    _, r, term, trunc, info = env.step("```python\n" + obs.split("\n")[0] + "\n"
                                       + _solution(task) + "```")
    assert (r, term, trunc, info["failure"], info["passed"]) == (1.0, True, False, "passed", True)
    env.reset(options={"index": 0})
    _, r, *_, info = env.step("    while True:\n        pass\n")
    assert r == 0.0 and info["failure"] == "timeout"
    env.reset(options={"index": 0})
    _, r, *_, info = env.step("")
    assert r == 0.0 and info["failure"] == "no_code" and info["has_code"] is False
    env.reset(options={"index": 0})
    _, r, *_, info = env.step("def f():\n\x00    return 1\n")
    assert r == 0.0 and info["failure"] == "invalid_action" and "U+0000" in info["action_rejected"]
    from deciplane.errors import InvalidAction
    with pytest.raises(InvalidAction, match="text"):
        env.reset(options={"index": 0})
        env.step(7)
    assert len(raw) == 5
