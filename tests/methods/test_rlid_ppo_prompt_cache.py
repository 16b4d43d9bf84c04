"""Whole tiny runs with the menu agent's prompt cache (``prompt_cache.mode: blocks``): the
rollouts, the log-probs the trainer stores, the updates and the held-out evaluations are
bitwise the same with a warm cache as with one that holds nothing."""

from __future__ import annotations

import json

import pytest
import torch

from deciplane.trainers.config import load_config
from deciplane.trainers.run import build_algorithm, build_policy
from deciplane.trainers.trainer import Trainer

BASE = {"progress": False, "seed": 0, "algorithm": "rlid_ppo", "iterations": 2, "history": 0,
        "model": {"name": "deciplane/tiny", "threads": 1, "trunk_dtype": "float32"},
        "env": {"games_per_iteration": 2, "group_size": 2, "max_episode_steps": 4},
        "optim": {"lr": 1e-2, "micro_batch_size": 3, "epochs": 2},
        "bc": {"episodes": 2, "epochs": 2},
        "eval": {"every": 1, "during_split": "valid", "final_splits": ["test"], "episodes": 2,
                 "cache_baselines": False}}
CASES = {   # the demo's shape (a head at a frozen layer) and LoRA above a kept boundary
    "head@layer": {"readout": "items", "readout_layer": 1,
                   "model": dict(BASE["model"], finetune="head"),
                   "eval": dict(BASE["eval"], zero_shot_labels=True)},
    "lora+boundary": {"model": dict(BASE["model"], finetune="lora", lora_rank=4,
                                    lora_alpha=8, lora_last_layers=1)},
}


def _run(tmp_path, case: str, max_gib: float):
    torch.set_num_threads(1)
    cfg = load_config(data=dict(BASE, **CASES[case],
                                prompt_cache={"mode": "blocks", "block_tokens": 16,
                                              "max_gib": max_gib}))
    algo = build_algorithm(cfg, build_policy(cfg))
    run = tmp_path / f"{case}-{max_gib}"
    try:
        summary = Trainer(cfg, run, algo).train()
        params = {n: p.detach().clone() for n, p in algo.policy.model.named_parameters()}
        stats = algo.block_cache.stats
    finally:
        algo.close()
    metrics = [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")}
               for line in (run / "metrics.jsonl").read_text().splitlines()]
    return metrics, summary, params, stats


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_run_with_a_warm_cache_equals_a_run_without(tmp_path, case):
    m0, s0, p0, st0 = _run(tmp_path, case, 0.0)
    m1, s1, p1, st1 = _run(tmp_path, case, 1.0)
    assert st0.tokens_reused == 0 and st1.tokens_reused > 0
    assert st1.tokens_computed < st0.tokens_computed
    assert m0 == m1
    assert s0["eval"] == s1["eval"] and s0["before"] == s1["before"]
    assert s0["optimizer_steps"] == s1["optimizer_steps"] > 0
    assert all(torch.equal(p0[n], p1[n]) for n in p0)
    cost = s1["decision_cost"]
    assert cost["prompt_cache"]["reuse_share"] > 0 and "rollouts" in cost["phases"]
    row = cost["phases"]["rollouts"]
    assert row["decisions"] > 0 and row["computed_tokens_per_decision"] <= \
        row["prompt_tokens_per_decision"]
