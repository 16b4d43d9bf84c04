"""Held-out scorer: gold isolation, scoring semantics, diagnostics, process lifetime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from deciplane.envs import load_benchmark
from deciplane.benchmarks import load_labeled
from deciplane.errors import InvalidAnswer, ScorerError
from deciplane.types import UnlabeledTask

PY = sys.executable

# Runs in a fresh interpreter that never loads gold itself: it receives only sha256
# hashes of the gold answers (computed by yet another process) and searches everything
# a cheating adapter could walk.
ISOLATION_CHECK = textwrap.dedent(r'''
    import gc, hashlib, json, os, sys
    from deciplane.envs import load_benchmark
    gold_hashes = set(json.loads(sys.stdin.read()))
    h = lambda s: hashlib.sha256(s.encode("utf-8", "surrogatepass")).hexdigest()

    def reachable_strings():
        seen = set()
        for o in gc.get_objects():
            items = [o]
            if isinstance(o, dict):
                items += list(o.keys()) + list(o.values())
            elif isinstance(o, (list, tuple, set, frozenset)):
                items += list(o)
            items += gc.get_referents(o)
            for x in items:
                if isinstance(x, str) and id(x) not in seen:
                    seen.add(id(x))
                    yield x

    def leaks():
        found = [s for s in reachable_strings() if h(s) in gold_hashes]
        found += [v for v in os.environ.values() if h(v) in gold_hashes]
        for t in tasks:
            fields = [t.id, t.prompt, *t.meta.keys(), *t.meta.values()]
            assert all(isinstance(v, str) for v in t.meta.values()), t.meta
            found += [f for f in fields if h(f) in gold_hashes]
        return found

    # Numeric strings such as "10" or "2000" live in every Python process (ipaddress and
    # platform tables...). Baseline: what the search finds after the same code paths ran
    # on another benchmark; loading mmath-en must add nothing to it.
    tasks, warm = load_benchmark("arith", "test", limit=2)
    warm.score({tasks[0].id: "1/2"})
    warm.close()
    tasks = []
    baseline = set(leaks())
    tasks, scorer = load_benchmark("mmath-en", "test")
    assert scorer.pid != os.getpid()
    report = scorer.score({t.id: "1/2" for t in tasks})
    found = set(leaks())
    new = found - baseline
    non_numeric = [s for s in found if not s.lstrip("-").isdigit()]
    # positive control: the same search finds gold once it is loaded in-process
    from deciplane.benchmarks import load_labeled
    items, _ = load_labeled("mmath-en", "test")
    after = leaks()
    print(json.dumps({"n_tasks": len(tasks), "leaks": sorted(new), "non_numeric": non_numeric,
                      "baseline": sorted(baseline), "control_found": len({h(s) for s in after}),
                      "n_gold": len(gold_hashes)}))
''')

GOLD_HASHES = textwrap.dedent(r'''
    import hashlib, json
    from deciplane.benchmarks import load_labeled
    items, _ = load_labeled("mmath-en", "test")
    # single characters ("3") are interned by CPython everywhere; every longer gold counts
    print(json.dumps(sorted({hashlib.sha256(i.gold.encode()).hexdigest()
                             for i in items if len(i.gold) >= 2})))
''')


def test_no_gold_in_caller_memory_env_or_tasks():
    hashes = subprocess.run([PY, "-c", GOLD_HASHES], capture_output=True, text=True,
                            check=True).stdout
    assert len(json.loads(hashes)) > 150  # distinct golds of 2+ characters
    res = subprocess.run([PY, "-c", ISOLATION_CHECK], input=hashes, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["n_tasks"] == 374
    assert out["leaks"] == [] and out["non_numeric"] == [], out
    assert len(out["baseline"]) < 30, out["baseline"]  # only common small numbers
    assert out["control_found"] >= 0.9 * out["n_gold"]  # the search does see loaded gold


@pytest.fixture(scope="module")
def arith():
    tasks, scorer = load_benchmark("arith", "test", limit=12)
    items, fp = load_labeled("arith", "test", limit=12)  # test-only: reference answers
    yield tasks, scorer, {it.id: it.gold for it in items}, fp
    scorer.close()


def test_tasks_carry_no_gold(arith):
    tasks, scorer, gold, fp = arith
    assert all(type(t) is UnlabeledTask for t in tasks)
    assert all(set(vars(t)) == {"id", "prompt", "meta"} for t in tasks)
    assert all(set(t.meta) == {"level", "benchmark", "split"} for t in tasks)
    assert scorer.pid != os.getpid()
    assert scorer.split_fingerprint == fp and len(scorer) == 12
    assert not hasattr(scorer, "gold") and "gold" not in vars(scorer)


def test_score_counts_missing_as_wrong_and_lists_them(arith):
    tasks, scorer, gold, _ = arith
    ids = [t.id for t in tasks]
    answers = {ids[0]: gold[ids[0]], ids[1]: f"The answer is {gold[ids[1]]}.",
               ids[2]: str(int(gold[ids[2]]) + 1), ids[3]: None, ids[4]: ""}
    r = scorer.score(answers)
    assert (r.count, r.n_correct) == (12, 2) and r.accuracy == pytest.approx(2 / 12)
    assert r.correct[ids[0]] and r.correct[ids[1]] and not r.correct[ids[2]]
    assert r.missing == [ids[3]] + ids[5:]         # None and absent ids; "" is answered
    assert r.split_fingerprint == arith[3] and r.benchmark == "arith"
    perfect = scorer.score(dict(gold))
    assert perfect.accuracy == 1.0 and perfect.missing == []


def test_unknown_ids_and_bad_answers_are_errors(arith):
    tasks, scorer, *_ = arith
    with pytest.raises(ScorerError, match="not in arith/test"):
        scorer.score({"arith/train/00000": "1"})
    with pytest.raises(InvalidAnswer):
        scorer.score({tasks[0].id: 12})
    with pytest.raises(InvalidAnswer):
        scorer.score({tasks[0].id: "1\udcff"})
    assert scorer.score({}).accuracy == 0.0  # the scorer still serves after errors


def test_diagnostics_are_computed_in_the_scorer(arith):
    tasks, scorer, gold, _ = arith
    a, b, c = (t.id for t in tasks[:3])
    lab = scorer.label_accuracy({a: gold[a], b: "-1", c: None})
    assert (lab.n_labelled, lab.n_correct, lab.accuracy) == (2, 1, 0.5)
    assert lab.coverage == pytest.approx(2 / 3) and lab.correct == {a: True, b: False}
    rew = scorer.reward_accuracy({a: [(gold[a], 1.0), ("-1", 1.0), ("-1", 0.0)],
                                  b: [(gold[b], 0.0), (None, 0.0)]})
    assert (rew.true_positive, rew.false_positive, rew.true_negative,
            rew.false_negative) == (1, 1, 2, 1)
    assert rew.n_samples == 5 and rew.accuracy == pytest.approx(3 / 5)
    smp = scorer.sample_accuracy({a: [gold[a], "-1", "-2", gold[a]], b: ["-1"]})
    assert smp.per_task == {a: 0.5, b: 0.0}
    assert smp.mean == pytest.approx(0.25) and smp.pass_any == 0.5


def test_same_split_same_tasks_and_fingerprint(arith):
    tasks, scorer, *_ = arith
    with load_benchmark("arith", "test", limit=12)[1] as again:
        assert again.tasks() == tasks and again.split_fingerprint == scorer.split_fingerprint
        assert again.pid != scorer.pid
    assert again.closed
    with pytest.raises(ScorerError, match="closed"):
        again.score({})


def test_scorer_dies_with_its_parent():
    code = ("import os, sys\nfrom deciplane.envs import load_benchmark\n"
            "tasks, s = load_benchmark('arith', 'valid', limit=3)\n"
            "print(s.pid, flush=True)\nos._exit(0)\n")
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True,
                         timeout=120).stdout
    pid = int(out.split()[-1])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    pytest.fail(f"scorer process {pid} outlived its parent")


def test_scorer_cannot_be_pickled(arith):
    import pickle

    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(arith[1])


def test_dead_scorer_process_gives_a_clear_error():
    import signal

    tasks, scorer = load_benchmark("arith", "valid", limit=2)
    os.kill(scorer.pid, signal.SIGKILL)
    with pytest.raises(ScorerError, match="died"):
        scorer.score({tasks[0].id: "1"})
    assert scorer.closed
