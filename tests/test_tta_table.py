"""benchmarks/tta_table.py: which runs the one table shows, on committed summaries."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "tta"


def _load_tta_table(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))      # for its summarize_adapt import
    spec = importlib.util.spec_from_file_location("tta_table", ROOT / "benchmarks" / "tta_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_only_limits_what_runs_not_what_the_table_shows(tmp_path, monkeypatch):
    """``--only X`` with nothing left to run still rewrites the table with every run that
    exists (it once dropped the other adapters' sections)."""
    tta = _load_tta_table(monkeypatch)
    runs = tmp_path / "runs"
    names = ["products-1d-ttrl-s0", "easy-funcs-probe-erpo-s0"]
    for name in names:        # local runs with today's default configs
        summary = json.loads((RESULTS / f"{name}.summary.json").read_text())
        summary["config"] = tta.default_config(summary["method"])
        (runs / name).mkdir(parents=True)
        (runs / name / "summary.json").write_text(json.dumps(summary))
    monkeypatch.setattr(tta, "COMMITTED", tmp_path / "committed")   # no committed runs
    monkeypatch.setattr(tta, "TABLE", tmp_path / "table.md")

    def must_not_run(*args, **kwargs):
        raise AssertionError(f"seed 0 of the --only adapter exists; nothing should run: {args}")

    monkeypatch.setattr(tta, "run_one", must_not_run)
    assert tta.main(["--only", "probe-erpo", "--seeds", "0", "--runs", str(runs)]) == 0
    table = (tmp_path / "table.md").read_text()
    assert "## easy-funcs (seeds run: [0] of [0, 1, 2])" in table
    assert "## products-1d (seeds run: [0] of [0, 1, 2])" in table   # not an --only adapter
    assert "PROBE-ERPO" in table and "TTRL" in table


def test_a_local_run_with_other_options_is_not_shown(tmp_path, monkeypatch):
    tta = _load_tta_table(monkeypatch)
    runs = tmp_path / "runs"
    name = "products-1d-ttrl-s0"
    (runs / name).mkdir(parents=True)
    summary = json.loads((RESULTS / f"{name}.summary.json").read_text())
    summary["config"] = {**tta.default_config("ttrl"), "max_steps": 3}
    (runs / name / "summary.json").write_text(json.dumps(summary))
    monkeypatch.setattr(tta, "COMMITTED", tmp_path / "committed")
    assert tta.existing_run("ttrl", "products-1d", 0, runs, tta.code_digest()) is None
    summary["config"] = tta.default_config("ttrl")
    (runs / name / "summary.json").write_text(json.dumps(summary))
    assert tta.existing_run("ttrl", "products-1d", 0, runs, tta.code_digest())["seed"] == 0


def test_digests_of_code_that_behaves_the_same_follow_chains(tmp_path, monkeypatch):
    tta = _load_tta_table(monkeypatch)
    f = tmp_path / "same.json"
    f.write_text(json.dumps([{"digest": "c", "same_behaviour_as": "b"},
                             {"digest": "b", "same_behaviour_as": "a"},
                             {"digest": "x", "same_behaviour_as": "y"}]))
    monkeypatch.setattr(tta, "EQUIVALENT", f)
    assert tta.same_behaviour_digests("c") == {"a", "b", "c"}
    assert tta.same_behaviour_digests("b") == {"a", "b"}
    assert tta.same_behaviour_digests("a") == {"a"}

