"""Commands that fail before they start work leave nothing behind and say what happened."""

from __future__ import annotations

import time

from typer.testing import CliRunner

from deciplane.cli import app


def test_adapt_with_unknown_benchmark_leaves_no_run_dir(tmp_path):
    run_dir = tmp_path / "X"
    res = CliRunner().invoke(app, ["adapt", "ttrl", "--benchmark", "nope", "--model",
                                   "deciplane/tiny", "--run-dir", str(run_dir)])
    assert res.exit_code == 2, res.output
    assert "nope" in res.output and "arith" in res.output  # names it, lists the real ones
    assert not run_dir.exists()


def test_evaluate_rejects_a_bad_step_limit_before_loading_anything():
    t0 = time.perf_counter()
    res = CliRunner().invoke(app, ["evaluate", "-e", "max_episode_steps=abc"])
    elapsed = time.perf_counter() - t0
    assert res.exit_code == 2, res.output
    assert "max_episode_steps='abc'" in res.output and "whole number >= 1" in res.output
    assert elapsed < 5.0  # rejected before any game suite or model loads
    res = CliRunner().invoke(app, ["evaluate", "-e", "max_episode_steps=0"])
    assert res.exit_code == 2 and "max_episode_steps=0" in res.output
