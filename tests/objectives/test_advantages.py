"""Advantage estimators: hand-computed cases and properties (METHODS.md §4)."""

from __future__ import annotations

import pytest
import torch

from deciplane.errors import ConfigError, ObjectiveInputError
from deciplane.objectives import (ADVANTAGE_ESTIMATORS, AdvantageConfig, compute_advantages,
                                  degenerate_groups, dr_grpo_advantages, gae,
                                  grpo_advantages, group_ids_from_keys, is_degenerate_batch,
                                  reinforce_pp_advantages, rloo_advantages)

T = torch.tensor


def test_grpo_hand_computed():
    # group 0: mean .5, unbiased std sqrt(4 * .25 / 3) = 0.57735 -> +-0.5 / 0.57735
    # group 1: all equal -> 0
    a = grpo_advantages(T([1.0, 0.0, 1.0, 0.0, 5.0, 5.0]), T([0, 0, 0, 0, 1, 1]))
    assert torch.allclose(a, T([0.866025, -0.866025, 0.866025, -0.866025, 0.0, 0.0]),
                          atol=1e-5)


def test_grpo_sums_to_zero_per_group_and_is_scale_invariant():
    g = torch.Generator().manual_seed(0)
    r = torch.rand(24, generator=g)
    ids = torch.arange(24) // 6
    a = grpo_advantages(r, ids)
    for k in range(4):
        assert abs(float(a[ids == k].sum())) < 1e-5
        assert torch.allclose(a[ids == k].std(), torch.tensor(1.0), atol=1e-4)
    assert torch.allclose(grpo_advantages(3 * r + 7, ids), a, atol=1e-4)


def test_dr_grpo_hand_computed_no_std():
    a = dr_grpo_advantages(T([1.0, 0.0, 0.0]), T([0, 0, 0]))
    assert torch.allclose(a, T([2 / 3, -1 / 3, -1 / 3]))
    # doubling rewards doubles advantages (no std division)
    assert torch.allclose(dr_grpo_advantages(T([2.0, 0.0, 0.0]), T([0, 0, 0])), 2 * a)


def test_rloo_hand_computed_and_equals_leave_one_out():
    # A_0 = 1 - mean(0, 0) = 1; A_1 = 0 - mean(1, 0) = -.5
    assert torch.allclose(rloo_advantages(T([1.0, 0.0, 0.0]), T([0, 0, 0])),
                          T([1.0, -0.5, -0.5]))
    g = torch.Generator().manual_seed(1)
    r = torch.rand(10, generator=g)
    ids = T([0, 0, 0, 1, 1, 2, 2, 2, 2, 2])
    a = rloo_advantages(r, ids)
    for i in range(10):
        others = [r[j] for j in range(10) if j != i and ids[j] == ids[i]]
        assert abs(float(a[i] - (r[i] - sum(others) / len(others)))) < 1e-6
        n = int((ids == ids[i]).sum())
        assert abs(float(a[i] - n / (n - 1) * dr_grpo_advantages(r, ids)[i])) < 1e-6


def test_rloo_group_of_one_is_config_error():
    with pytest.raises(ConfigError, match="at least 2 samples per group"):
        rloo_advantages(T([1.0, 0.0, 1.0]), T([0, 0, 1]))


def test_reinforce_pp_hand_computed():
    # centred [.5, -.5, 1, -1]; batch unbiased std sqrt(2.5 / 3) = 0.912871
    a = reinforce_pp_advantages(T([1.0, 0.0, 3.0, 1.0]), T([0, 0, 1, 1]))
    assert torch.allclose(a, T([0.547723, -0.547723, 1.095445, -1.095445]), atol=1e-5)


def test_degenerate_groups_zero_advantage_and_skip_flag():
    r, ids = T([1.0, 1.0, 0.0, 1.0]), T([0, 0, 1, 1])
    assert degenerate_groups(r, ids).tolist() == [True, True, False, False]
    assert not is_degenerate_batch(r, ids)
    r_all = T([1.0, 1.0, 0.0, 0.0])
    assert is_degenerate_batch(r_all, ids)
    assert is_degenerate_batch(torch.zeros(0), torch.zeros(0, dtype=torch.long))
    for name, fn in ADVANTAGE_ESTIMATORS.items():
        assert torch.equal(fn(r_all, ids), torch.zeros(4)), name
        assert torch.all(fn(r, ids)[:2] == 0), name


def test_config_selects_function_and_validates():
    r, ids = T([1.0, 0.0, 1.0, 1.0]), group_ids_from_keys(["a", "a", "b", "b"])
    assert ids.tolist() == [0, 0, 1, 1]
    for name, fn in ADVANTAGE_ESTIMATORS.items():
        assert torch.equal(compute_advantages(AdvantageConfig(name), r, ids), fn(r, ids))
    with pytest.raises(ConfigError, match="'grpo', 'dr_grpo', 'rloo', 'reinforce_pp'"):
        AdvantageConfig("ppo")
    with pytest.raises(ObjectiveInputError):
        grpo_advantages(T([1.0, 0.0]), T([0, 0, 0]))
    with pytest.raises(ObjectiveInputError, match="NaN"):
        grpo_advantages(T([1.0, float("nan")]), T([0, 0]))


def test_gae_hand_computed_terminated_and_truncated():
    # row 0 (terminated): gamma = lam = .5, r = [1, 0, 2], V = [.5, 1, .5]
    #   t2: delta = 2 - .5 = 1.5 -> A = 1.5
    #   t1: delta = 0 + .5*.5 - 1 = -.75 -> A = -.75 + .25*1.5 = -.375
    #   t0: delta = 1 + .5*1 - .5 = 1 -> A = 1 + .25*(-.375) = .90625
    # row 1 (2 steps then padding, truncated, bootstrap V = 1): r = [1, 1], V = [0, 0]
    #   t1: delta = 1 + .5*1 = 1.5; t0: delta = 1 -> A = 1 + .25*1.5 = 1.375
    rewards = T([[1.0, 0.0, 2.0], [1.0, 1.0, 9.0]])
    values = T([[0.5, 1.0, 0.5], [0.0, 0.0, 9.0]])
    mask = T([[1, 1, 1], [1, 1, 0]]).bool()
    adv, ret = gae(rewards, values, mask, gamma=0.5, lam=0.5, bootstrap=T([0.0, 1.0]))
    assert torch.allclose(adv, T([[0.90625, -0.375, 1.5], [1.375, 1.5, 0.0]]))
    assert torch.allclose(ret, T([[1.40625, 0.625, 2.0], [1.375, 1.5, 0.0]]))


def test_gae_limits():
    g = torch.Generator().manual_seed(2)
    r, v = torch.rand(3, 5, generator=g), torch.rand(3, 5, generator=g)
    mask = torch.ones(3, 5, dtype=torch.bool)
    # lam = 1, gamma = 1, V = 0: advantages are the rewards-to-go
    adv, _ = gae(r, torch.zeros_like(r), mask, gamma=1.0, lam=1.0)
    assert torch.allclose(adv, r.flip(1).cumsum(1).flip(1), atol=1e-6)
    # lam = 0: one-step TD errors
    adv0, _ = gae(r, v, mask, gamma=0.9, lam=0.0)
    nxt = torch.cat([v[:, 1:], torch.zeros(3, 1)], 1)
    assert torch.allclose(adv0, r + 0.9 * nxt - v, atol=1e-6)
    with pytest.raises(ObjectiveInputError, match="right-padded"):
        gae(r, v, T([[0, 1, 1, 1, 1]] * 3).bool())
