"""Frozen-trunk GRPO: a step with a reference (KL), recomputed old log-probs and two epochs
gives the same metrics and parameters with the trunk states as without; a single-forward
step does not build them."""

from __future__ import annotations

import copy

import pytest
import torch

from deciplane.agents import load_policy
from deciplane.engine import Budget, GRPOConfig, GRPOUpdate, sample_groups
from deciplane.engine.trunk import TrunkStates
from deciplane.objectives import PolicyLossConfig

PROMPTS = ["you see a red door and a key", "the chest is open"]


def _policy():
    torch.manual_seed(0)
    p = load_policy("deciplane/tiny")
    p.add_lora(r=4, alpha=8, target_modules=["layers.1.self_attn.q_proj",
                                             "layers.1.self_attn.v_proj", "layers.1.mlp.down_proj"])
    g = torch.Generator().manual_seed(1)
    for name, prm in p.model.named_parameters():
        if "lora_B" in name:
            prm.data.copy_(torch.randn(prm.shape, generator=g) * 0.05)
    return p


def _step(policy, groups, trunk: bool, calls: list):
    cfg = GRPOConfig(loss=PolicyLossConfig(kl_beta=0.05), epochs=2, micro_batch_size=3, old_logprobs="recompute",
                     frozen_trunk=trunk)
    update = GRPOUpdate(policy, cfg, budget=Budget(), lr=1e-3)
    made = update._trunk

    def spy():
        t = made()
        calls.append(t)
        return t

    update._trunk = spy
    stats = update.step(groups)
    return stats, {n: p.detach().clone() for n, p in policy.model.named_parameters()
                   if p.requires_grad}


def test_trunk_states_give_the_same_grpo_step():
    torch.set_num_threads(1)
    policy = _policy()
    prompts = [policy.format_prompt(p) for p in PROMPTS]
    groups = sample_groups(policy, prompts, group_size=3, max_new_tokens=6, seed=3)
    for g in groups:
        for tr, r in zip(g, [1.0, 0.0, 0.5]):
            tr.turns[0].reward = r
    start = copy.deepcopy(policy.model.state_dict())
    calls: list = []
    full, p_full = _step(policy, groups, trunk=False, calls=calls)
    assert calls == [None]
    policy.model.load_state_dict(start)
    calls = []
    cached, p_cached = _step(policy, groups, trunk=True, calls=calls)
    assert isinstance(calls[0], TrunkStates) and calls[0].boundary == 1
    n_tokens = sum(int(t.turns[0].prompt_ids.numel() + t.turns[0].response_ids.numel())
                   for g in groups for t in g)
    assert calls[0].computed_tokens == n_tokens          # each sequence's trunk ran once
    assert not full.skipped and not cached.skipped
    assert any(not torch.equal(p_full[n], start[n]) for n in p_full), "nothing trained"
    for k, v in full.metrics.items():
        assert cached.metrics[k] == pytest.approx(v, rel=1e-4, abs=1e-6), k
    for n in p_full:
        torch.testing.assert_close(p_cached[n], p_full[n], rtol=1e-4, atol=1e-6)


def test_a_single_forward_step_builds_no_trunk_states():
    policy = _policy()
    prompts = [policy.format_prompt(p) for p in PROMPTS]
    groups = sample_groups(policy, prompts, group_size=2, max_new_tokens=4, seed=3)
    for g in groups:
        for tr, r in zip(g, [1.0, 0.0]):
            tr.turns[0].reward = r
    update = GRPOUpdate(policy, GRPOConfig(loss=PolicyLossConfig(kl_beta=0.0)), budget=Budget(), lr=1e-3)
    update._trunk = lambda: pytest.fail("one forward per sample: nothing to reuse")
    assert not update.step(groups).skipped


def test_the_samplers_states_equal_a_fresh_trunk_and_give_the_same_step():
    """``sample_groups(keep_layer=...)`` keeps the sampling forwards' boundary states; they
    equal a fresh trunk forward (but the last, never-read position), and a step from them
    (one forward per sample: only the top layers run) equals the full step."""
    from deciplane.agents.policy import left_pad, position_ids_from_mask
    from deciplane.engine.trunk import trunk_hidden

    torch.set_num_threads(1)
    policy = _policy()
    update0 = GRPOUpdate(policy, GRPOConfig(), budget=Budget(), lr=1e-3)
    assert update0.keep_layer == 1
    prompts = [policy.format_prompt(p) for p in PROMPTS]
    groups = sample_groups(policy, prompts, group_size=3, max_new_tokens=6, seed=5,
                           keep_layer=update0.keep_layer)
    for g in groups:
        for tr, r in zip(g, [1.0, 0.0, 0.5]):
            tr.turns[0].reward = r
    for g in groups:
        for tr in g:
            turn = tr.turns[0]
            seq = torch.cat([turn.prompt_ids, turn.response_ids])
            ids, mask = left_pad([seq], policy.tokenizer.pad_token_id)
            fresh = trunk_hidden(policy.model, ids, mask, position_ids_from_mask(mask), 1)[0]
            assert turn.boundary_layer == 1 and turn.boundary_hidden.shape == fresh.shape
            torch.testing.assert_close(turn.boundary_hidden[:-1], fresh[:-1], rtol=1e-5, atol=1e-5)
    start = copy.deepcopy(policy.model.state_dict())
    results = []
    for frozen in (False, True):
        policy.model.load_state_dict(start)
        update = GRPOUpdate(policy, GRPOConfig(micro_batch_size=4, frozen_trunk=frozen),
                            budget=Budget(), lr=1e-3)
        made = update._trunk
        calls = []
        update._trunk = lambda: calls.append(made()) or calls[-1]
        stats = update.step(groups)
        assert (calls[0].computed_tokens == 0) if frozen else (calls == [])   # never rerun
        results.append((stats.metrics, {n: p.detach().clone()
                                        for n, p in policy.model.named_parameters()
                                        if p.requires_grad}))
    (m_full, p_full), (m_kept, p_kept) = results
    for k, v in m_full.items():
        assert m_kept[k] == pytest.approx(v, rel=1e-4, abs=1e-6), k
    for n in p_full:
        torch.testing.assert_close(p_kept[n], p_full[n], rtol=1e-4, atol=1e-6)
