"""Tiny-model runs of every algorithm: parameters change, metrics are finite, the CORD and
TLM-DRE paths run end to end, summary.json has the promised keys.

Real components throughout: deciplane/tiny, deciplane/TextWorld-v0 (embedded suite),
deciplane/Math-v0 and the held-out scorer; ``tests/CoinFlip-v0`` (a real Gymnasium env in
this folder) where an untrained model needs reward variance to get a gradient at all.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from deciplane.trainers.config import load_config
from deciplane.trainers.run import build_algorithm, build_policy, run_training
from deciplane.trainers.trainer import Trainer

from .coinflip_env import register as register_coinflip

COINFLIP = register_coinflip()


def _finite(records):
    for r in records:
        for k, v in r.items():
            if isinstance(v, float):
                assert math.isfinite(v), (k, v)


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _train(data, run_dir):
    cfg = load_config(data=data)
    policy = build_policy(cfg)
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()
              if p.requires_grad}
    algo = build_algorithm(cfg, policy)
    try:
        summary = Trainer(cfg, run_dir, algo).train()
    finally:
        algo.close()
    changed = [n for n, p in policy.model.named_parameters()
               if n in before and not torch.equal(before[n], p.detach())]
    return summary, changed


BASE = {"progress": False, "seed": 0,
        "model": {"name": "deciplane/tiny", "finetune": "full", "threads": 1},
        "eval": {"every": 0, "final_splits": ["test"]}, "optim": {"lr": 1e-3}}


def test_rlid_ppo_textworld_with_bc_cord_and_summary(tmp_path):
    """RLiD-PPO on the real embedded TextWorld suite, with a BC warm start and CORD
    distillation to the env expert: weights move, metrics finite, summary complete."""
    data = dict(BASE, algorithm="rlid_ppo", iterations=2, history=0,
                env={"games_per_iteration": 2, "group_size": 2, "max_episode_steps": 4},
                distill={"enabled": True, "combine": "conflict", "lam": 0.5},
                bc={"episodes": 2, "epochs": 1})
    summary, changed = _train(data, tmp_path)
    assert changed, "no parameter changed"
    recs = _records(tmp_path)
    _finite(recs)
    assert [r["iteration"] for r in recs] == [0, 1, 2]  # before-eval + 2 iterations
    assert {"cord/cosine", "loss/distill", "loss/policy", "rollout/success"} <= set(recs[-1])
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s == json.loads(json.dumps(summary))
    for key in ("config", "seed", "seeds", "split_fingerprints", "wall_time_s", "env_steps",
                "before", "eval", "optimizer_steps", "warm_start", "after_warm_start"):
        assert key in s, key
    assert 0.0 <= s["eval"]["test"]["success_rate"] <= 1.0
    assert s["eval"]["test"]["episodes"] == 6  # every game of the embedded test split
    assert s["split_fingerprints"]["test"] == s["eval"]["test"]["split_fingerprint"]
    assert s["warm_start"]["kind"].startswith("behaviour cloning")
    assert s["after_warm_start"]["test"]["episodes"] == 6
    assert s["env_steps"] > 0 and s["config"]["algorithm"] == "rlid_ppo"


@pytest.mark.parametrize("combine", ["conflict", "always", "sum"])
def test_cord_modes_take_different_steps(tmp_path, combine):
    data = dict(BASE, algorithm="rlid_ppo", iterations=1,
                env={"id": COINFLIP, "games_per_iteration": 3, "group_size": 4,
                     "max_episode_steps": 3},
                distill={"enabled": True, "combine": combine, "lam": 1.0},
                eval={"every": 0, "final_splits": ["test"], "episodes": 2, "before": False})
    summary, changed = _train(data, tmp_path)
    assert changed
    rec = _records(tmp_path)[-1]
    _finite([rec])
    assert "cord/cosine" in rec and "cord/projected" in rec
    if combine == "sum":
        assert rec["cord/projected"] == 0.0


@pytest.mark.parametrize("tlm", [False, True], ids=["token_ppo", "tlm_dre"])
def test_text_ppo_token_and_tlm_dre(tmp_path, tlm):
    data = dict(BASE, algorithm="text_ppo", iterations=1, max_new_tokens=4,
                env={"id": COINFLIP, "games_per_iteration": 3, "group_size": 4,
                     "max_episode_steps": 2},
                tlm_dre={"enabled": tlm},
                eval={"every": 0, "final_splits": ["test"], "episodes": 2, "before": False})
    summary, changed = _train(data, tmp_path)
    assert changed
    rec = _records(tmp_path)[-1]
    _finite([rec])
    assert ("tlm_dre/weight_max" in rec) is tlm
    assert rec["rollout/tokens_per_turn"] > 0


def test_math_grpo_skips_degenerate_batches_and_scores_held_out(tmp_path):
    """The untrained tiny model never answers arith right: every group is degenerate, so
    every step is skipped and the weights must not move (no weight decay either)."""
    data = dict(BASE, algorithm="math_grpo", iterations=1, prompts_per_step=2, group_size=2,
                max_new_tokens=4, eval_problems=4, eval_max_new_tokens=4,
                optim={"lr": 1e-3, "weight_decay": 0.1})
    summary, changed = _train(data, tmp_path)
    assert changed == []
    assert summary["skipped_steps"] == 1 and summary["optimizer_steps"] == 0
    assert summary["eval"]["test"]["accuracy"] == 0.0 and summary["eval"]["test"]["count"] == 4
    assert summary["env_steps"] == 4


def test_distillation_to_another_policy(tmp_path):
    """teacher=policy: KL(teacher || student) over the menu on the student's own states."""
    data = dict(BASE, algorithm="rlid_ppo", iterations=1,
                env={"id": COINFLIP, "games_per_iteration": 2, "group_size": 2,
                     "max_episode_steps": 2},
                distill={"enabled": True, "teacher": "policy", "teacher_model": "deciplane/tiny",
                         "combine": "conflict"},
                model={"name": "deciplane/tiny", "finetune": "lora", "threads": 1},
                optim={"lr": 1e-3, "epochs": 1},
                eval={"every": 0, "final_splits": [], "before": False})
    summary, changed = _train(data, tmp_path)
    rec = _records(tmp_path)[-1]
    _finite([rec])
    # LoRA starts as the identity (B = 0): student == teacher, so the KL starts at 0
    assert rec["loss/distill"] == pytest.approx(0.0, abs=1e-5)
    assert "cord/teacher_norm" in rec and summary["optimizer_steps"] == 1


def test_compute_dtype_bfloat16_trains_fp32_weights_under_autocast(tmp_path):
    """model.compute_dtype: bfloat16 — every decoder layer runs under autocast (full
    fine-tuning: nothing frozen), the free-text agent samples and updates through it; the
    fp32 weights still move and the metrics are finite."""
    data = dict(BASE, algorithm="text_ppo", iterations=1, max_new_tokens=4,
                env={"id": COINFLIP, "games_per_iteration": 3, "group_size": 4,
                     "max_episode_steps": 2},
                model={"name": "deciplane/tiny", "finetune": "full", "threads": 1,
                       "compute_dtype": "bfloat16"},
                optim={"lr": 1e-3, "epochs": 1},
                eval={"every": 0, "final_splits": [], "before": False})
    cfg = load_config(data=data)
    policy = build_policy(cfg)
    layers = policy.model.model.layers
    assert all(layer._deciplane_autocast == torch.bfloat16 for layer in layers)
    assert all(p.dtype == torch.float32 for p in policy.model.parameters())
    summary, changed = _train(data, tmp_path)
    assert changed, "no parameter changed"
    _finite(_records(tmp_path))
