"""Runs written before the issue-27 moves, and before issue 49's one run loop, still load,
evaluate and resume.

``tests/data/pre_move/`` and ``tests/data/pre_loop/`` (made by ``pre_move/make.py`` at the
commit in each folder's ``made_at.txt``): a tiny
quickstart training run SIGKILLed after iteration 1 of 2, and ``ttrl`` / ``tasco`` adapter
runs cut after step 1 of 3. Their checkpoints pickle the classes of that code under their
module paths of that time. Resumed with today's code they end where the uninterrupted runs
of that time ended (the training run: the behaviour snapshot's ``config:quickstart.yaml``
case, made with the same settings; the adapters: the saved ``adapt_<method>_full.json``).
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
from pathlib import Path

import pytest
import torch

DATA = Path(__file__).resolve().parent / "data"
FIXTURES = [DATA / "pre_move", DATA / "pre_loop"]
sys.path.insert(0, str(DATA.parents[1]))
from tools.behaviour_snapshot import machine_fingerprint, numbers  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _snapshot() -> dict:
    return json.loads((DATA / "behaviour_snapshot.json").read_text())


def _same_machine() -> bool:
    return _snapshot()["machine"] == machine_fingerprint()


@pytest.mark.parametrize("pre", FIXTURES, ids=lambda p: p.name)
def test_pre_move_training_checkpoint_loads_and_evaluates(tmp_path, pre):
    from deciplane.evaluation.run_eval import evaluate_run, resolve_checkpoint

    torch.set_num_threads(1)
    run = tmp_path / "run"
    shutil.copytree(pre / "train_run", run)
    assert resolve_checkpoint(run).name == "iter_000001"
    report = evaluate_run(run, split="test", episodes=2)
    assert report.episodes == 2 and 0.0 <= report.success_rate <= 1.0
    assert report.checkpoint.endswith("iter_000001")


@pytest.mark.parametrize("pre", FIXTURES, ids=lambda p: p.name)
def test_pre_move_training_run_resumes_to_the_uninterrupted_metrics(tmp_path, pre):
    from deciplane.trainers.run import run_training

    torch.set_num_threads(1)
    run = tmp_path / "run"
    shutil.copytree(pre / "train_run", run)
    summary = run_training(None, run, resume=True)
    assert summary["status"] == "completed"
    got = [numbers(json.loads(x)) for x in (run / "metrics.jsonl").read_text().splitlines()]
    want = _snapshot()["cases"]["config:quickstart.yaml"]["metrics"]
    assert [r["iteration"] for r in got] == [r["iteration"] for r in want]
    if not _same_machine():
        pytest.skip(f"floats recorded on {_snapshot()['machine']}, this is "
                    f"{machine_fingerprint()} ({platform.machine()})")
    assert got == want


@pytest.mark.parametrize("pre", FIXTURES, ids=lambda p: p.name)
@pytest.mark.parametrize("method", ["ttrl", "tasco"])
def test_pre_move_adapter_state_resumes_to_the_uninterrupted_result(tmp_path, method, pre):
    from deciplane.adapt.runner import run_adaptation

    run = tmp_path / method
    shutil.copytree(pre / f"adapt_{method}", run)
    phases: list[str] = []
    resumed = run_adaptation(method, run_dir=run, resume=True,
                             progress=lambda phase, *_: phases.append(phase))
    assert "baseline: greedy (cached)" in phases     # the baselines that run kept, read back
    full = json.loads((pre / f"adapt_{method}_full.json").read_text())
    assert resumed["resumed"] == 1
    assert json.loads(json.dumps(resumed["budget"]["samples"])) == full["budget"]["samples"]
    if not _same_machine():
        pytest.skip("floats recorded on another machine")
    for key in ("after", "curve", "diagnostics"):
        assert json.loads(json.dumps(resumed[key], default=str)) == full[key], key
