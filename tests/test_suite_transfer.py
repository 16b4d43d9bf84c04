"""benchmarks/suite_transfer.py: the runs it starts (the suite as shipped, one specialist
per game with the same budget) and its table, paired per game, from finished runs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def st():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("suite_transfer",
                                                  ROOT / "benchmarks" / "suite_transfer.py")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return mod


def test_each_specialist_keeps_the_suite_budget_and_one_game(st):
    from deciplane.trainers.config import load_config

    suite = load_config(data=st.run_config("suite", 0, tiny=False))
    coin = load_config(data=st.run_config("single-coin", 1, tiny=False))
    assert [e.name for e in suite.envs] == st.game_names() == ["twc", "coin", "mapreader"]
    assert [e.name for e in coin.envs] == ["coin"] and coin.seed == 1
    assert coin.envs[0] == suite.envs[1]                  # the same game, settings and split
    assert (coin.bc, coin.iterations, coin.env) == (suite.bc, suite.iterations, suite.env)
    assert coin.eval.final_splits == ["valid"] and coin.max_wall_time_s is None


def _summary(games):
    def res(wins):
        return {"episode_wins": wins, "episode_seeds": list(range(len(wins)))}
    return {"eval": {"valid": {"per_env": {g: res(w) for g, (w, _) in games.items()}}},
            "after_warm_start": {"valid": {"per_env": {g: res(b) for g, (_, b) in
                                                       games.items()}}}}


def test_the_table_pairs_the_suite_and_the_specialist_on_each_game(st, tmp_path):
    from deciplane.stats import paired_difference

    runs = {"suite": {"twc": ([1, 1, 0, 1], [1, 0, 0, 0]), "coin": ([0, 1, 1, 0], [0, 0, 0, 0])},
            "single-twc": {"twc": ([1, 0, 0, 0], [1, 0, 0, 0])},
            "single-coin": {"coin": ([1, 1, 1, 0], [0, 1, 0, 0])}}
    for run, games in runs.items():
        d = tmp_path / run / "seed0"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps(_summary(games)))
    rows = st.compare(tmp_path, ["twc", "coin", "mapreader"], seeds=1)
    assert [r["game"] for r in rows] == ["twc", "coin"]          # mapreader: no runs
    twc = rows[0]
    assert (twc["suite"]["won"], twc["single"]["won"], twc["suite"]["bc_won"]) == (3, 1, 1)
    assert twc["suite_minus_single"] == paired_difference(
        [True, True, False, True], [True, False, False, False]).to_dict()
    assert rows[1]["suite_minus_single"]["difference"] == pytest.approx(-0.25)
    text = st.write_table(tmp_path, rows, "python benchmarks/suite_transfer.py --out X")
    assert "| twc | 0 | 4 | 1 -> 3 | 1 -> 1 | +50%" in text
    assert json.loads((tmp_path / "table.json").read_text())["rows"] == json.loads(json.dumps(rows))
