"""Checkpoints (atomic, keep-last-k, RNG + optimizer restore), metrics log truncation, report."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from deciplane.errors import CheckpointError
from deciplane.engine import checkpoint as ckpt
from deciplane.engine.logger import RunLogger, read_metrics
from deciplane.evaluation.report import ReportError, write_report


def _save(run_dir, model, optimizer, counters, extra=None, keep_last=2):
    """A trainer's checkpoint, as the Trainer writes it."""
    return ckpt.save_run_state(run_dir, ckpt.training_state(model, optimizer, counters, extra),
                               ckpt.counters_meta(counters), keep_last)


def _model():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1))
    m[0].weight.requires_grad_(False)  # frozen: not part of the checkpoint
    return m


def test_save_load_round_trip_with_rng_and_optimizer(tmp_path):
    m = _model()
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=0.1)
    m(torch.ones(2, 3)).sum().backward()
    opt.step()
    c = ckpt.Counters(iteration=3, env_steps=30, episodes=6, optimizer_steps=3)
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    _save(tmp_path, m, opt, c, extra={"before": {"test": {"x": 1}}})
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    state = {k: v.clone() for k, v in m.state_dict().items()}

    m2 = _model()
    opt2 = torch.optim.AdamW([p for p in m2.parameters() if p.requires_grad], lr=0.1)
    counters, extra = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path), m2, opt2)
    assert counters.iteration == 3 and counters.env_steps == 30
    assert extra["before"]["test"]["x"] == 1
    for k, v in m2.state_dict().items():
        if k != "0.weight":
            assert torch.equal(v, state[k]), k
    assert opt2.state_dict()["state"][0]["step"] == opt.state_dict()["state"][0]["step"]
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_keep_last_and_half_written_ignored(tmp_path):
    m = _model()
    for it in range(1, 5):
        _save(tmp_path, m, None, ckpt.Counters(iteration=it), keep_last=2)
    names = [p.name for p in ckpt.list_checkpoints(tmp_path)]
    assert names == ["iter_000003", "iter_000004"]
    # a crash mid-write leaves a temp folder (or a folder without meta.json): ignored
    (tmp_path / "checkpoints" / ".iter_000005.tmp123").mkdir()
    (tmp_path / "checkpoints" / "iter_000006").mkdir()
    assert ckpt.latest_checkpoint(tmp_path).name == "iter_000004"


def test_corrupt_or_mismatched_checkpoint_errors(tmp_path):
    m = _model()
    path = _save(tmp_path, m, None, ckpt.Counters(iteration=1))
    other = torch.nn.Linear(2, 2)
    with pytest.raises(CheckpointError, match="same model"):
        ckpt.load_checkpoint(path, other, None)
    (path / "state.pt").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="cannot be read"):
        ckpt.load_checkpoint(path, m, None)


def test_iteration_seed_is_stable_and_distinct():
    a = ckpt.iteration_seed(0, 5)
    assert a == ckpt.iteration_seed(0, 5) and a != ckpt.iteration_seed(0, 6)
    assert ckpt.iteration_seed(0, 5, "rollout") != ckpt.iteration_seed(0, 5, "minibatch")
    assert 0 <= a < 2**63


def test_logger_truncates_records_after_resume_point(tmp_path):
    log = RunLogger(tmp_path, total=5, progress=False, tensorboard=False)
    for it in range(1, 5):
        log.log(it, {"loss/total": float(it), "rollout/success": 0.5})
    log.close()
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"iteration": 5, "trunc')  # torn line of a killed process
    log = RunLogger(tmp_path, total=5, start=2, progress=False, tensorboard=False)
    log.log(3, {"loss/total": 30.0})
    log.close()
    recs = read_metrics(tmp_path)
    assert [r["iteration"] for r in recs] == [1, 2, 3]
    assert recs[-1]["loss/total"] == 30.0


def test_report_writes_pngs_and_markdown(tmp_path):
    with pytest.raises(ReportError, match="deciplane train"):
        write_report(tmp_path)
    log = RunLogger(tmp_path, total=3, progress=False, tensorboard=True)
    for it in range(1, 4):
        log.log(it, {"env_steps": 10 * it, "rollout/success": it / 3, "loss/policy": -0.1 * it,
                     "eval/valid/success_rate": 0.5, "cord/cosine": 0.1})
    log.close()
    summary = {"config": {"algorithm": "rlid_ppo", "model": {"name": "m", "finetune": "lora"}},
               "seed": 0, "status": "completed", "wall_time_s": 1.5, "env_steps": 30,
               "optimizer_steps": 3,
               "before": {"test": {"success_rate": 0.0, "episodes": 6,
                                   "success_ci95": [0.0, 0.39]}},
               "eval": {"test": {"success_rate": 1.0, "episodes": 6}},
               "split_fingerprints": {"test": "abc"}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    md, pngs = write_report(tmp_path)
    names = sorted(p.name for p in pngs)
    assert names == ["diagnostics.png", "learning_curve.png", "losses.png"]
    for p in pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 2000
    text = md.read_text()
    # one row per agent on the held-out episodes, with the interval (computed when absent)
    assert "| test | zero-shot | 6 | 0% (0%-39%) |" in text
    assert "| test | RL (final) | 6 | 100% (61%-100%) |" in text
    assert "## Last training iteration (3)" in text and "learning_curve.png" in text
    assert "eval/valid/success_rate" not in text.split("## Last training iteration")[1]
    assert any((tmp_path / "tb").iterdir())  # TensorBoard event file
