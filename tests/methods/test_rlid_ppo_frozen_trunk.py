"""Frozen-trunk RLiDPPO: one full update (RLiD + CORD distillation, or GAE with the value
head) from the rollout's cached boundary states, or from a trunk recomputed without a
graph, gives the same loss metrics and parameters as the full forward; the cached states
are those of a fresh forward of each prompt."""

from __future__ import annotations

import copy

import pytest
import torch

from deciplane.agents.policy import left_pad, position_ids_from_mask
from deciplane.engine.trunk import trunk_hidden
from deciplane.trainers.config import load_config
from deciplane.trainers.run import build_algorithm, build_policy
from deciplane.trainers.trainer import Trainer

BASE = {"progress": False, "seed": 0, "algorithm": "rlid_ppo", "iterations": 1, "history": 0,
        "model": {"name": "deciplane/tiny", "finetune": "lora", "lora_rank": 4,
                  "lora_alpha": 8, "lora_last_layers": 1, "threads": 1,
                  # exactness of the cache is an fp32 property (auto would pick bf16 on a
                  # CPU with native bf16; tests/agents/test_precision.py covers that)
                  "trunk_dtype": "float32"},
        "env": {"games_per_iteration": 2, "group_size": 2, "max_episode_steps": 4},
        "optim": {"lr": 1e-3, "micro_batch_size": 3, "epochs": 2, "minibatches": 2},
        "eval": {"every": 0, "final_splits": [], "before": False}}
CASES = {
    "rlid+cord": {"distill": {"enabled": True, "teacher": "expert", "combine": "conflict"}},
    "gae": {"advantage": "gae", "value_lr": 5e-3},
    # the items readout: a head on the final output (LoRA and head learn together) ...
    "items+cord": {"readout": "items",
                   "distill": {"enabled": True, "teacher": "expert", "combine": "conflict"}},
    # ... and a head at the frozen boundary (its update is the head alone)
    "items@boundary": {"readout": "items", "readout_layer": 1,
                       "model": dict(BASE["model"], finetune="head")},
    # ... and the MLP head there (readout_head: mlp): still the head alone
    "items_mlp@boundary": {"readout": "items", "readout_layer": 1, "readout_head": "mlp",
                           "readout_mlp_hidden": 8,
                           "model": dict(BASE["model"], finetune="head")},
}


def _randomise_lora(policy):
    g = torch.Generator().manual_seed(1)
    for name, p in policy.model.named_parameters():
        if "lora_B" in name:           # B = 0 at init: make the adapters change the output
            p.data.copy_(torch.randn(p.shape, generator=g) * 0.05)


@pytest.mark.parametrize("case", sorted(CASES))
def test_frozen_trunk_update_equals_the_full_update(tmp_path, case):
    torch.set_num_threads(1)
    cfg = load_config(data=dict(BASE, **CASES[case]))
    policy = build_policy(cfg)
    _randomise_lora(policy)
    if policy.item_head is not None:    # K = 0 at init (uniform policy): make it score
        g = torch.Generator().manual_seed(2)
        with torch.no_grad():
            policy.item_head.key.weight.normal_(0, 0.5, generator=g)
            for p in policy.item_head.mlp_parameters():   # W2 = 0 too: make the MLPs act
                p.normal_(0, 0.5, generator=g)
    algo = build_algorithm(cfg, policy)
    try:
        torch.manual_seed(0)
        if case.endswith("@boundary"):   # the head reads frozen states: its update runs no layer
            assert algo.trunk_boundary is None and algo.agent.keep_readout
            assert algo.agent.early_exit
            batch = algo.rollout(0, seed=123)
            _check_head_only_update(algo, batch, policy)
            return
        assert algo.trunk_boundary == 1 and algo.agent.keep_boundary == 1
        batch = algo.rollout(0, seed=123)
        decs = batch.data.decisions
        assert decs and all(d.boundary_hidden is not None for d in decs)

        # the kept states (prefix KV cache, dedup, length buckets) = a fresh trunk forward
        for d in decs[:6]:
            ids, mask = left_pad([d.prompt_ids], policy.tokenizer.pad_token_id)
            fresh = trunk_hidden(policy.model, ids, mask, position_ids_from_mask(mask), 1)[0]
            torch.testing.assert_close(d.boundary_hidden, fresh, rtol=1e-5, atol=1e-5)

        start = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
        head = copy.deepcopy(algo.critic.head.state_dict()) if algo.critic else None
        update_logits = algo.agent.update_logits
        results = {}
        for mode in ("full", "cached", "recompute"):
            with torch.no_grad():
                for n, p in policy.model.named_parameters():
                    p.copy_(start[n])
                if head is not None:
                    algo.critic.head.load_state_dict(head)
            algo.agent.update_logits = None if mode == "full" else update_logits
            data = batch.data
            if mode == "recompute":     # no cached states: the trunk is rerun without a graph
                data = copy.copy(data)
                data.decisions = [copy.copy(d) for d in decs]
                for d in data.decisions:
                    d.boundary_hidden = None
            b = copy.copy(batch)
            b.data = data
            policy.model.zero_grad()
            algo.loss(b, list(range(min(4, len(decs))))).task.backward()   # a micro-batch
            grads = {n: p.grad.clone() for n, p in policy.model.named_parameters()
                     if p.requires_grad}
            metrics = Trainer(cfg, tmp_path / mode, algo)._update(b, seed=7)
            params = {n: p.detach().clone() for n, p in policy.model.named_parameters()
                      if p.requires_grad}
            results[mode] = (metrics, params, grads)
        full_m, full_p, full_g = results["full"]
        assert any(not torch.equal(full_p[n], start[n]) for n in full_p), "nothing trained"
        assert any(k.startswith("loss/") for k in full_m)
        for mode in ("cached", "recompute"):
            m, p, g = results[mode]
            for n in full_g:
                torch.testing.assert_close(g[n], full_g[n], rtol=1e-5, atol=1e-6)
            assert m.keys() == full_m.keys()
            for k in full_m:
                assert m[k] == pytest.approx(full_m[k], rel=1e-4, abs=1e-5), (mode, k)
            for n in full_p:   # 4 AdamW steps: float noise in near-zero gradients is
                # scaled up to ~lr by Adam's normalisation, hence atol relative to lr
                torch.testing.assert_close(p[n], full_p[n], rtol=1e-4, atol=1e-3 * 1e-3)
    finally:
        algo.close()


def _check_head_only_update(algo, batch, policy):
    """The kept readout states equal a fresh full forward's, the head-only loss equals the
    loss through a full forward, and only the head gets a gradient."""
    from deciplane.agents.policy import capture_hidden
    from deciplane.agents.readout import item_logits

    decs = batch.data.decisions
    assert decs and all(d.readout_hidden is not None for d in decs)
    for d in decs[:6]:
        with torch.no_grad(), capture_hidden(policy.model, 1) as cap:
            policy.model(input_ids=d.prompt_ids[None])
        torch.testing.assert_close(d.readout_hidden, cap[0][0], rtol=1e-5, atol=1e-5)
        with torch.no_grad():   # the head's logits from the kept states = the fresh forward's
            torch.testing.assert_close(item_logits(policy.item_head, d.readout_hidden,
                                                   d.item_spans),
                                       item_logits(policy.item_head, cap[0][0], d.item_spans),
                                       rtol=1e-5, atol=1e-5)
    micro = list(range(min(4, len(decs))))
    policy.model.zero_grad()
    cached = algo.loss(batch, micro).task
    cached.backward()
    head = policy.item_head
    head_grads = {n: p.grad.clone() for n, p in head.named_parameters()}
    assert all(g.abs().sum() > 0 for g in head_grads.values()), "a head parameter got no grad"
    assert all(p.grad is None for n, p in policy.model.named_parameters() if "lora" in n)
    fresh = copy.copy(batch)
    fresh.data = copy.copy(batch.data)
    fresh.data.decisions = [copy.copy(d) for d in decs]
    for d in fresh.data.decisions:
        d.readout_hidden = None
    policy.model.zero_grad()
    full = algo.loss(fresh, micro).task
    full.backward()
    torch.testing.assert_close(full, cached, rtol=1e-5, atol=1e-6)
    for n, p in head.named_parameters():
        torch.testing.assert_close(p.grad, head_grads[n], rtol=1e-5, atol=1e-6)


def test_frozen_trunk_is_off_for_full_fine_tuning_and_when_switched_off():
    cfg = load_config(data=dict(BASE, model=dict(BASE["model"], finetune="full",
                                                 lora_last_layers=None)))
    algo = build_algorithm(cfg, build_policy(cfg))
    try:
        assert algo.trunk_boundary is None and algo.agent.update_logits is None
    finally:
        algo.close()
    cfg = load_config(data=dict(BASE, frozen_trunk="full_forward"))
    algo = build_algorithm(cfg, build_policy(cfg))
    try:
        assert algo.trunk_boundary is None and algo.agent.keep_boundary is None
        assert not algo.agent.dedup
    finally:
        algo.close()
    cfg = load_config(data=dict(BASE, frozen_trunk="recompute"))
    algo = build_algorithm(cfg, build_policy(cfg))
    try:       # recompute: nothing kept between rollout and update
        assert algo.trunk_boundary == 1 and algo.agent.keep_boundary is None
        assert algo.agent.update_logits is not None
    finally:
        algo.close()
