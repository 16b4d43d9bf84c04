"""``rg:<family>`` benchmarks: reasoning-gym generators behind the held-out scorer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from deciplane.envs import load_benchmark
from deciplane.benchmarks import data, list_benchmarks
from deciplane.errors import ScorerError, UnknownBenchmark


ROOT = Path(__file__).resolve().parents[2]
EASY = {"min_terms": 2, "max_terms": 2, "max_digits": 1}


def test_splits_are_disjoint_seeded_and_fingerprinted():
    from deciplane.benchmarks.rg import SPLIT_SIZES

    test, fp = data.load_labeled("rg:leg_counting", "test", max_animals=3)
    valid, _ = data.load_labeled("rg:leg_counting", "valid", max_animals=3)
    train, _ = data.load_labeled("rg:leg_counting", "train", max_animals=3)
    assert [len(test), len(valid), len(train)] == [SPLIT_SIZES[s] for s in ("test", "valid", "train")]
    qs = [{it.prompt for it in s} for s in (test, valid, train)]
    assert not (qs[0] & qs[1]) and not (qs[0] & qs[2]) and not (qs[1] & qs[2])
    again, fp2 = data.load_labeled("rg:leg_counting", "test", max_animals=3)
    assert [it.prompt for it in again] == [it.prompt for it in test] and fp2 == fp
    _, fp_other = data.load_labeled("rg:leg_counting", "test", max_animals=4)
    _, fp_limit = data.load_labeled("rg:leg_counting", "test", limit=10, max_animals=3)
    assert len({fp, fp_other, fp_limit}) == 3
    assert test[0].id == "rg:leg_counting/test/00000"
    # the public meta holds neither the gold nor reasoning-gym's metadata
    assert set(test[0].meta) == {"family", "benchmark", "split"}


def test_small_families_get_proportional_disjoint_splits():
    from deciplane.benchmarks.rg import split_sizes

    assert split_sizes(800) == split_sizes(5000) == {"test": 200, "valid": 100, "train": 500}
    assert split_sizes(200) == {"test": 50, "valid": 25, "train": 125}
    assert split_sizes(3) == {"test": 1, "valid": 1, "train": 1}
    assert split_sizes(0) == {"test": 0, "valid": 0, "train": 0}
    got = {s: data.load_labeled("rg:chain_sum", s, **EASY)[0] for s in ("test", "valid", "train")}
    assert {s: len(v) for s, v in got.items()} == {"test": 50, "valid": 25, "train": 125}
    qs = [{it.prompt for it in v} for v in got.values()]
    assert len(qs[0] | qs[1] | qs[2]) == 200


def test_the_calibrated_default_is_every_one_digit_product_in_one_test_split():
    items, fp = data.load_labeled("products-1d", "test")
    assert len(items) == len({it.prompt for it in items}) == 100
    assert items[0].id == "products-1d/test/00000" and data.split_names("products-1d") == ("test",)
    pairs = {tuple(sorted(it.entry["question"].split(":")[1].split(".")[0].strip().split(" * ")))
             for it in items}
    assert len({p for p in pairs}) == 55            # a*b and b*a for a, b in 0..9
    assert all(str(int(a) * int(b)) == it.gold for it in items
               for a, b in [it.entry["question"].split(":")[1].split(".")[0].strip().split(" * ")])
    with pytest.raises(UnknownBenchmark, match="no split 'train'"):
        load_benchmark("products-1d", "train")
    # the first questions are those of rg:products with the same options (same stream)
    same, _ = data.load_labeled("rg:products", "test", min_terms=2, max_terms=2, min_digits=1,
                                max_digits=1)
    assert [it.prompt for it in same] == [it.prompt for it in items[:len(same)]]


def test_scorer_agrees_with_score_answer_on_gold_and_perturbed_answers():
    from deciplane.benchmarks.rg import judge_rg, score_one

    for name, params in [("rg:chain_sum", EASY), ("rg:leg_counting", {"max_animals": 3}),
                         ("rg:basic_arithmetic", EASY), ("rg:word_sorting", {}),
                         ("rg:letter_counting", {"max_words": 5})]:
        items, _ = data.load_labeled(name, "test", limit=25, **params)
        assert all(judge_rg([(it.gold, it) for it in items]))          # every gold is right
        for it in items:
            assert it.dataset.score_answer(it.gold, it.entry) == 1.0
            for wrong in (it.gold + "1", "", f"the answer is {it.gold}", it.gold[::-1] + "x", None):
                ours = judge_rg([(wrong, it)])[0]
                theirs = it.dataset.score_answer(None if wrong is None else wrong.strip(), it.entry)
                assert ours == (theirs >= 1.0) and score_one(wrong, it) == theirs


def test_load_benchmark_scores_in_the_scorer_process_without_importing_reasoning_gym():
    code = ("import sys, json; from deciplane.envs import load_benchmark\n"
            "tasks, s = load_benchmark('rg:chain_sum', 'test', limit=6, min_terms=2, max_terms=2, max_digits=1)\n"
            "r = s.score({t.id: '0' for t in tasks})\n"
            "print(json.dumps([len(tasks), r.count, 'reasoning_gym' in sys.modules, s.split_fingerprint]))\n"
            "s.close()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=300, check=True)
    n, count, imported, fp = json.loads(out.stdout.strip().splitlines()[-1])
    assert (n, count, imported) == (6, 6, False)
    assert fp == data.load_labeled("rg:chain_sum", "test", limit=6, min_terms=2, max_terms=2,
                                   max_digits=1)[1]


def test_unknown_family_and_option_are_clear_errors():
    with pytest.raises(ScorerError, match="no family 'chain_summ'"):
        load_benchmark("rg:chain_summ", "test", limit=2)
    with pytest.raises(ScorerError, match="no option 'max_termz'.*max_terms"):
        load_benchmark("rg:chain_sum", "test", limit=2, max_termz=2)
    with pytest.raises(UnknownBenchmark, match="no split 'dev'"):
        load_benchmark("rg:chain_sum", "dev")
    with pytest.raises(UnknownBenchmark, match="unknown benchmark 'rg'"):
        load_benchmark("rg", "test")


def test_deciplane_benchmarks_lists_rg():
    sizes = list_benchmarks()
    assert sizes["rg"] == {"test": 200, "valid": 100, "train": 500}
    assert "rg:<family>" in data.descriptions()["rg"]
    members = data.BENCHMARKS["rg"].members()
    assert "rg:chain_sum" in members and len(members) > 100


def test_cheating_adapter_finds_no_rg_gold():
    sys.path.insert(0, str(ROOT / "tests" / "adapt"))
    from test_isolation import CheatingAdapter

    # options no other test uses, so no gold of this stream was ever built in this process
    tasks, scorer = load_benchmark("rg:word_sorting", "test", limit=40, min_words=5, max_words=7)
    with scorer:
        canary = {"planted": ", ".join(["zebra", "apple", "mango"][::-1]) + " (canary)"}
        cheat = CheatingAdapter()
        cheat.run(tasks)
        assert len(cheat.seen) > 10_000 and canary["planted"] in cheat.seen
        assert scorer.score({t.id: "" for t in tasks}).count == 40
    # gold is read only now, in another process, after the walk
    code = ("import json; from deciplane.benchmarks import load_labeled\n"
            "print(json.dumps([it.gold for it in load_labeled('rg:word_sorting', 'test', limit=40, "
            "min_words=5, max_words=7)[0]]))")
    gold = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                     cwd=ROOT, timeout=300, check=True).stdout.strip().splitlines()[-1])
    distinctive = [g for g in gold if len(g) >= 12]
    assert len(distinctive) >= 20
    assert not [g for g in distinctive if g in cheat.seen]
