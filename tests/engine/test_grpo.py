"""The single-turn rollout + GRPO core on the tiny model: counting, layout, accumulation,
skip-step, parameters moving."""

from __future__ import annotations

import pytest
import torch

from deciplane.agents import load_policy
from deciplane.errors import ConfigError
from deciplane.engine import (Budget, GRPOConfig, GRPOUpdate, forward_responses, pad_responses,
                              sample_groups)
from deciplane.engine.optim import accumulate
from deciplane.objectives import PolicyLossConfig, aggregation_share, aggregation_weights

PROMPTS = ["you see a red door and a key", "the chest is open"]



@pytest.fixture()
def policy():
    p = load_policy("deciplane/tiny")
    p.add_lora(r=4, alpha=8)
    return p


def _set_rewards(groups, pattern):
    for g in groups:
        for tr, r in zip(g, pattern):
            tr.turns[0].reward = float(r)


def test_sampling_counts_and_layout(policy):
    budget = Budget()
    prompts = [policy.format_prompt(p) for p in PROMPTS]
    groups = sample_groups(policy, prompts, group_size=3, max_new_tokens=5, temperature=1.0,
                           seed=0, budget=budget, group_ids=["a", "b"])
    assert [len(g) for g in groups] == [3, 3]
    assert [g[0].group_id for g in groups] == ["a", "b"]
    trajs = [t for g in groups for t in g]
    assert budget.samples == 6
    assert budget.generated_tokens == sum(int(t.turns[0].response_ids.numel()) for t in trajs)
    assert budget.prefill_tokens == sum(int(t.turns[0].prompt_ids.numel()) for t in trajs)
    # teacher-forced log-probs reproduce the sampler's (same weights, right-aligned layout)
    fwd = forward_responses(policy, [t.turns[0].prompt_ids for t in trajs],
                            [t.turns[0].response_ids for t in trajs], grad=False, budget=budget)
    old, mask = pad_responses([t.turns[0].response_logprobs for t in trajs], fwd.logp.shape[1])
    assert torch.equal(mask, fwd.mask)
    assert torch.allclose(fwd.logp[mask], old[mask], atol=1e-4)
    assert budget.forward_tokens == sum(int(t.turns[0].prompt_ids.numel() + t.turns[0].response_ids.numel())
                                        for t in trajs)
    assert budget.forward_passes == 1 and budget.backward_tokens == 0


def test_grpo_step_counts_add_up_and_moves_lora(policy):
    budget = Budget()
    prompts = [policy.format_prompt(p) for p in PROMPTS]
    groups = sample_groups(policy, prompts, group_size=4, max_new_tokens=6, seed=1, budget=budget)
    _set_rewards(groups, [1, 0, 0, 1])
    update = GRPOUpdate(policy, GRPOConfig(loss=PolicyLossConfig(kl_beta=0.01), micro_batch_size=3), budget=budget, lr=1e-2)
    before = [p.detach().clone() for p in update.optimizer.params]
    stats = update.step(groups)
    assert not stats.skipped
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.metrics.values())
    seq_tokens = sum(int(t.turns[0].prompt_ids.numel() + t.turns[0].response_ids.numel())
                     for g in groups for t in g)
    # one reference forward + one training forward per sequence, one backward per sequence
    assert budget.forward_tokens == 2 * seq_tokens
    assert budget.backward_tokens == seq_tokens == stats.n_tokens
    assert budget.forward_passes == 2 * 3 and budget.backward_passes == 3   # 8 seqs / micro 3
    assert budget.optimizer_steps == 1 and budget.skipped_steps == 0
    assert any(not torch.equal(b, p) for b, p in zip(before, update.optimizer.params))
    base = [p for n, p in policy.model.named_parameters() if "lora" not in n]
    assert all(not p.requires_grad for p in base)


def test_degenerate_batch_is_skipped_without_touching_weights(policy):
    budget = Budget()
    groups = sample_groups(policy, [policy.format_prompt(PROMPTS[0])], group_size=3,
                           max_new_tokens=4, seed=2, budget=budget)
    _set_rewards(groups, [1, 1, 1])
    update = GRPOUpdate(policy, GRPOConfig(loss=PolicyLossConfig(kl_beta=0.01)), budget=budget, lr=1e-2, weight_decay=0.1)
    before = [p.detach().clone() for p in update.optimizer.params]
    stats = update.step(groups)
    assert stats.skipped
    assert budget.skipped_steps == 1 and budget.optimizer_steps == 0
    assert budget.forward_tokens == 0 and budget.backward_tokens == 0
    assert all(torch.equal(b, p) for b, p in zip(before, update.optimizer.params))


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean"])
def test_micro_batches_accumulate_to_the_full_batch_gradient(policy, aggregation):
    groups = sample_groups(policy, [policy.format_prompt(p) for p in PROMPTS], group_size=3,
                           max_new_tokens=6, seed=3)
    _set_rewards(groups, [1, 0, 0])
    trajs = [t for g in groups for t in g]

    def grads(micro):
        update = GRPOUpdate(policy, GRPOConfig(micro_batch_size=micro,
                                                loss=PolicyLossConfig(aggregation=aggregation)),
                            lr=1e-3)
        adv, _ = update.advantages(trajs)
        update.optimizer.zero_grad()
        accumulate(update.optimizer, list(range(len(trajs))), micro,
                   update.micro_loss(trajs, adv, None, None), update.normaliser(trajs))
        out = [p.grad.detach().clone() for p in update.optimizer.params]
        update.optimizer.zero_grad()
        return out

    full, small = grads(len(trajs)), grads(1)
    assert any(g.abs().sum() > 0 for g in full)
    for a, b in zip(full, small):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_aggregation_weights_hand_case():
    # responses of 3, 0, 2 tokens: token_mean counts tokens, seq_mean non-empty rows,
    # seq_sum_const every row
    assert aggregation_weights("token_mean", [3, 0, 2]) == [3, 0, 2]
    assert aggregation_weights("seq_mean", [3, 0, 2]) == [1, 0, 1]
    assert aggregation_weights("seq_sum_const", [3, 0, 2]) == [1, 1, 1]


def test_aggregation_share_hand_case():
    mask = torch.tensor([[False, True, True], [True, True, True]])
    assert aggregation_share("token_mean", mask, total_tokens=10, total_rows=4) == pytest.approx(0.5)
    assert aggregation_share("seq_mean", mask, total_tokens=10, total_rows=4) == pytest.approx(0.5)
    assert aggregation_share("seq_sum_const", mask, total_tokens=10, total_rows=8) == pytest.approx(0.25)


def test_config_errors_name_the_allowed_values():
    with pytest.raises(ConfigError, match="token_mean"):
        GRPOConfig(loss=PolicyLossConfig(aggregation="mean"))
    with pytest.raises(ConfigError, match="must be a PolicyLossConfig"):
        GRPOConfig(loss={"kl_beta": 0.1})
    with pytest.raises(ConfigError, match="micro_batch_size"):
        GRPOConfig(micro_batch_size=0)
    with pytest.raises(ConfigError, match="grpo"):
        GRPOConfig(advantage="ppo")


def test_generation_progress_reports_each_chunk_inside_its_context_only(policy):
    from deciplane.engine import generate, generation_progress

    prompts = [policy.format_prompt(p) for p in PROMPTS + ["a lamp", "a box", "a rope"]]
    ticks: list[tuple[int, int]] = []
    with generation_progress(lambda done, total: ticks.append((done, total))):
        gens = generate(policy, prompts, max_new_tokens=2, seed=0, prompts_per_batch=2)
    assert ticks == [(2, 5), (4, 5), (5, 5)]
    assert sorted({g.prompt_index for g in gens}) == [0, 1, 2, 3, 4]
    generate(policy, prompts[:2], max_new_tokens=2, seed=0, prompts_per_batch=1)
    assert len(ticks) == 3  # outside the context nothing is reported
