"""Built-in math benchmarks: split sizes, disjointness, determinism, arith generator."""

from __future__ import annotations

import random
import re

import pytest
from typer.testing import CliRunner

from deciplane.cli import app
from deciplane.envs import list_benchmarks, load_benchmark
from deciplane.benchmarks.arith import SPECS, generate_splits, make_problem
from deciplane.benchmarks import load_labeled
from deciplane.errors import UnknownBenchmark

EXPECTED = {"arith": {"train": 1000, "valid": 200, "test": 200},
            "arith-shift": {"train": 1000, "valid": 200, "test": 200},
            "mmath-en": {"test": 374, "math500": 311, "aime2024": 30, "aime2025": 15,
                         "cnmo": 18},
            "rg": {"test": 200, "valid": 100, "train": 500},   # nominal sizes of rg:<family>
            "products-1d": {"test": 100}}
CODE = {"easy-funcs": {"train": 250, "valid": 50, "test": 100}, "humaneval": {"test": 164}}


def test_list_benchmarks_sizes():
    assert list_benchmarks() == {**EXPECTED, **CODE}


@pytest.mark.parametrize("name", ["arith", "arith-shift"])
def test_arith_splits_disjoint_by_text_and_deterministic(name):
    splits = generate_splits(name)
    texts = {s: {p.text for p in ps} for s, ps in splits.items()}
    assert {s: len(t) for s, t in texts.items()} == EXPECTED[name]  # no duplicates inside
    assert not texts["train"] & texts["valid"]
    assert not texts["train"] & texts["test"]
    assert not texts["valid"] & texts["test"]
    assert generate_splits(name) == splits


def test_arith_and_shift_differ_in_templates_and_levels():
    a = {p.text for p in generate_splits("arith")["test"]}
    b = {p.text for p in generate_splits("arith-shift")["test"]}
    assert not a & b
    harder = {n: sum(p.level >= 2 for p in generate_splits(n)["test"]) / 200 for n in SPECS}
    assert harder["arith"] < harder["arith-shift"]


@pytest.mark.parametrize("level", [1, 2, 3, 4])
@pytest.mark.parametrize("templates", ["A", "B"])
def test_arith_answers_match_the_numbers_in_the_text(level, templates):
    rng = random.Random(0)
    for _ in range(200):
        p = make_problem(rng, level, templates)
        nums = [int(x) for x in re.findall(r"\d+", p.text)]
        a, b = nums[0], nums[1]
        # "Subtract 1 from 4." names b first; a > b always
        expected = {"+": a + b, "-": max(a, b) - min(a, b), "*": a * b}.get(p.op)
        if p.op == "+-":
            expected = a + b - nums[2]
        if p.op == "*+":
            expected = a * b + nums[2]
        assert p.answer == expected and p.answer >= 0, p
        assert (max(nums) >= 10) == (level == 4)


def test_mmath_splits():
    test, fp = load_labeled("mmath-en", "test")
    assert len({it.id for it in test}) == 374
    subsets = [load_labeled("mmath-en", s)[0] for s in ("math500", "aime2024", "aime2025", "cnmo")]
    assert sorted(it.id for sub in subsets for it in sub) == sorted(it.id for it in test)
    again, fp2 = load_labeled("mmath-en", "test")
    assert [it.id for it in again] == [it.id for it in test] and fp == fp2
    # the fixed seeded order mixes sources, so limit= gives a mixed sample
    assert len({it.meta["source"] for it in test[:40]}) >= 2
    assert load_labeled("mmath-en", "test", limit=10)[1] != fp


def test_load_benchmark_limit_and_errors():
    tasks, scorer = load_benchmark("arith-shift", "valid", limit=5)
    with scorer:
        assert [t.id for t in tasks] == [f"arith-shift/valid/{i:05d}" for i in range(5)]
    with pytest.raises(UnknownBenchmark, match="available: arith, arith-shift, easy-funcs, humaneval, mmath-en"):
        load_benchmark("gsm8k", "test")
    with pytest.raises(UnknownBenchmark, match="splits: train, valid, test"):
        load_benchmark("arith", "dev")
    with pytest.raises(ValueError, match="positive int"):
        load_benchmark("arith", "test", limit=0)


def test_cli_benchmarks():
    res = CliRunner().invoke(app, ["benchmarks"], env={"COLUMNS": "160"})
    assert res.exit_code == 0, res.output
    for name in EXPECTED:
        assert name in res.output
    assert "test 374" in res.output and "train 1000" in res.output
