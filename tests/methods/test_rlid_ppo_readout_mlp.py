"""Whole tiny runs with the MLP item head (``readout_head: mlp``) at a frozen layer, the
demo's shape: it trains (the MLPs from RL on), its warm start is the bilinear head's, the
prompt cache stays valid across its updates, a stopped run resumes exactly, and
``deciplane evaluate`` rebuilds the trained head from the run directory."""

from __future__ import annotations

import json
import math

import pytest
import torch

from deciplane.trainers.config import load_config
from deciplane.trainers.run import build_algorithm, build_policy
from deciplane.trainers.trainer import Trainer

BASE = {"progress": False, "seed": 0, "algorithm": "rlid_ppo", "iterations": 2, "history": 0,
        "model": {"name": "deciplane/tiny", "threads": 1, "trunk_dtype": "float32",
                  "finetune": "head"},
        "readout": "items", "readout_layer": 1, "readout_head": "mlp", "readout_mlp_hidden": 16,
        "env": {"games_per_iteration": 2, "group_size": 2, "max_episode_steps": 4},
        "optim": {"lr": 1e-2, "micro_batch_size": 3, "epochs": 2},
        "bc": {"episodes": 2, "epochs": 2, "valid_fraction": 0.0},
        "prompt_cache": {"mode": "blocks", "block_tokens": 16},
        "eval": {"every": 1, "during_split": "valid", "final_splits": ["valid"], "episodes": 2,
                 "cache_baselines": False},
        "checkpoint": {"every": 1, "keep_last": 2}}


def _run(run_dir, resume=False, **changes):
    torch.set_num_threads(1)
    cfg = load_config(data={**BASE, **changes})
    policy = build_policy(cfg)
    head0 = {k: v.clone() for k, v in policy.item_head.state_dict().items()}
    algo = build_algorithm(cfg, policy)
    try:
        summary = Trainer(cfg, run_dir, algo, resume=resume).train()
    finally:
        algo.close()
    return summary, algo, head0


def _records(run_dir):
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in recs]


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("mlp") / "run"
    summary, algo, head0 = _run(run_dir)
    return run_dir, summary, algo, head0


def test_the_mlp_head_trains_and_its_metrics_are_finite(mlp_run):
    run_dir, summary, algo, head0 = mlp_run
    head = algo.policy.item_head
    assert head.kind == "mlp" and algo.agent.keep_readout and algo.trunk_boundary is None
    now = head.state_dict()
    changed = {k for k in now if not torch.equal(now[k], head0[k])}
    # the MLPs' output layers left zero (the identity) and the first layers moved too
    assert {"decision_mlp.down.weight", "entry_mlp.down.weight", "decision_mlp.up.weight",
            "entry_mlp.up.weight", "key.weight"} <= changed
    assert summary["optimizer_steps"] > 0
    recs = _records(run_dir)
    assert [r["iteration"] for r in recs if "loss/policy" in r] == [1, 2]
    for r in recs:
        for k, v in r.items():
            if isinstance(v, float):
                assert math.isfinite(v), (k, v)
    # the frozen trunk's blocks were reused across the head's updates
    cache = summary["decision_cost"]["prompt_cache"]
    assert cache["reuse_share"] > 0


def test_the_warm_start_is_the_bilinear_heads(mlp_run, tmp_path):
    """readout_mlp_warm_start false: BC trains the bilinear score alone with the MLPs as
    the identity, so BC-only is exactly the bilinear head's (the same seed)."""
    _, summary, _, _ = mlp_run
    bilinear, algo, _ = _run(tmp_path / "bilinear", iterations=1, readout_head="bilinear")
    assert summary["warm_start"]["decisions"] > 0
    assert summary["after_warm_start"] == bilinear["after_warm_start"]
    assert summary["warm_start"]["final_loss"] == bilinear["warm_start"]["final_loss"]


def test_a_stopped_mlp_run_resumes_exactly(mlp_run, tmp_path):
    """Stopped after 1 of 2 iterations and resumed: the uninterrupted run's metrics (but
    the held-out point of iteration 1, which the 1-iteration run played as its final
    evaluation), final evaluation and head."""
    run_dir, summary, algo, _ = mlp_run
    part = tmp_path / "part"
    _run(part, iterations=1)
    got, resumed, _ = _run(part, resume=True)
    strip = lambda recs: [{k: v for k, v in r.items() if not k.startswith("eval/")}  # noqa: E731
                          for r in recs]
    assert strip(_records(part)) == strip(_records(run_dir))
    assert got["eval"] == summary["eval"]
    want, got = algo.policy.item_head.state_dict(), resumed.policy.item_head.state_dict()
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_evaluate_rebuilds_the_trained_mlp_head_from_the_run(mlp_run):
    from deciplane.evaluation.run_eval import evaluate_run, load_trained_policy

    run_dir, summary, algo, _ = mlp_run
    trained = load_trained_policy(run_dir)
    head, want = trained.policy.item_head, algo.policy.item_head.state_dict()
    assert head.describe() == algo.policy.item_head.describe()
    assert all(torch.equal(head.state_dict()[k], want[k]) for k in want)
    report = evaluate_run(run_dir, split="valid", episodes=2, trained=trained)
    assert report.episodes == 2 and len(report.per_episode) == 2
