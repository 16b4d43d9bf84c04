"""benchmarks/rl_benchmark.py: two tiny cells end to end (the table from finished runs, a
second call skips them, a started run is resumed), and the choice of the best cells."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rb():
    spec = importlib.util.spec_from_file_location("rl_benchmark",
                                                  ROOT / "benchmarks" / "rl_benchmark.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cells_are_every_advantage_times_every_capacity(rb):
    names = rb.cells(4)
    assert len(names) == 9 and rb.BASELINE_CELL in names
    assert names["gigpo-mlp"] == ["advantage=gigpo", "gamma=0.95", "gigpo_weight=1.0",
                                  "gigpo_norm=std", "readout_head=mlp", "readout_mlp_hidden=256"]
    assert "model.lora_last_layers=4" in names["gae-lora"]
    # each cell's options load on the demo's config (warm start untouched)
    from deciplane.trainers.config import load_config

    demo = load_config(rb.BASE_CONFIG)
    for cell in names:
        cfg = load_config(rb.BASE_CONFIG, rb.run_overrides(cell, 1, 4, None, False))
        assert cfg.bc == demo.bc and cfg.iterations == 12 and cfg.max_wall_time_s is None
        assert cfg.eval.final_splits == ["valid"] and cfg.eval.episodes == 40
        assert cfg.eval.cache_baselines and cfg.prompt_cache.mode == "blocks" and cfg.seed == 1


def _row(diff, better=False, rate=0.5):
    return {"final": {"rate": rate}, "env_steps": 10, "cpu_h": 0.1,
            "final_minus_bc": {"difference": diff, "a_better_95": better}}


def test_best_cells_rank_by_mean_final_minus_bc_over_the_first_seeds(rb):
    table = {"grpo-head": {0: _row(0.5), 1: _row(0.5)},          # the demo's: always added
             "gigpo-mlp": {0: _row(0.2), 1: _row(0.0)},          # mean +0.10
             "gae-head": {0: _row(0.3, True), 1: _row(0.1)},     # mean +0.20
             "grpo-lora": {0: _row(0.05), 1: _row(0.05)},        # mean +0.05
             "gigpo-head": {0: _row(0.9)}}                       # one seed: not ranked
    assert rb.best_cells(table) == ["gae-head", "gigpo-mlp", "grpo-head"]
    s = rb.cell_summary(table["gae-head"])
    assert s["diff_mean"] == pytest.approx(0.2) and s["seeds_positive"] == 2
    assert s["seeds_above_0_at_95"] == 1 and s["seeds"] == [0, 1]


@pytest.mark.slow
def test_two_tiny_cells_make_the_table_and_a_second_call_skips_them(rb, tmp_path):
    out = tmp_path / "bench"
    argv = ["--out", str(out), "--model", "deciplane/tiny", "--tiny", "--seeds", "1",
            "--cells", "grpo-head,gigpo-mlp"]
    assert rb.main(argv) == 0
    data = json.loads((out / "table.json").read_text())
    assert set(data["cells"]) == {"grpo-head", "gigpo-mlp"}
    for cell, data_cell in data["cells"].items():
        run = data_cell["runs"]["0"]
        summary = json.loads((out / cell / "seed0" / "summary.json").read_text())
        assert run["final"]["n"] == 2 and run["env_steps"] == summary["env_steps"] > 0
        lo, hi = run["final"]["ci95"]
        assert lo <= run["final"]["rate"] <= hi and run["cpu_h"] > 0
        # the paired difference is the one summary.json reports
        want = summary["comparisons"]["valid"]["final - warm_start_only"]
        assert run["final_minus_bc"]["difference"] == pytest.approx(want["difference"])
        assert run["final_minus_bc"]["ci95"] == pytest.approx(want["ci95"])
    cfg = yaml.safe_load((out / "gigpo-mlp" / "seed0" / "config.yaml").read_text())
    assert cfg["advantage"] == "gigpo" and cfg["gamma"] == 0.95
    assert cfg["readout_head"] == "mlp" and cfg["eval"]["final_splits"] == ["valid"]
    table = (out / "table.md").read_text()
    assert "--cells grpo-head,gigpo-mlp" in table
    assert "| grpo-head | 0 |" in table and "| gigpo-mlp | 1 |" in table   # run, cell rows

    calls: list[list[str]] = []

    def record(cmd):
        calls.append(cmd)
        return 0

    assert rb.main(argv, runner=record) == 0
    assert calls == []                                   # finished runs are skipped
    started = out / "gae-head" / "seed0"                 # a killed run: config.yaml only
    started.mkdir(parents=True)
    (started / "config.yaml").write_text("algorithm: rlid_ppo\n")
    rb.main([*argv[:-1], "gae-head"], runner=record)
    assert len(calls) == 1 and calls[0][-3:] == ["--run-dir", str(started), "--resume"]
    assert set(json.loads((out / "table.json").read_text())["cells"]) == {"grpo-head",
                                                                         "gigpo-mlp"}
