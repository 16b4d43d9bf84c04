"""GiGPO advantages (arXiv 2505.10978): hand-computed cases and properties."""

from __future__ import annotations

import math

import pytest
import torch

from deciplane.errors import ConfigError, ObjectiveInputError
from deciplane.objectives import (discounted_returns, dr_grpo_advantages, gigpo_advantages,
                                  grpo_advantages, step_group_advantages, step_group_share)

T = torch.tensor


def test_discounted_returns_hand_computed_and_zero_on_padding():
    r = T([[0.0, 0.0, 1.0], [0.5, 9.0, 9.0]])
    m = T([[True, True, True], [True, False, False]])
    assert torch.allclose(discounted_returns(r, m, 0.5), T([[0.25, 0.5, 1.0], [0.5, 0, 0]]))
    assert torch.allclose(discounted_returns(r, m, 1.0), T([[1.0, 1.0, 1.0], [0.5, 0, 0]]))


def test_discounted_returns_rejects_gamma_outside_unit_interval():
    with pytest.raises(ConfigError, match="gamma"):
        discounted_returns(T([[1.0]]), T([[True]]), 1.5)


def test_step_group_advantages_hand_computed_and_singletons_zero():
    ret, ids = T([1.0, 0.0, 0.5]), T([0, 0, 1])
    s = 1 / math.sqrt(2)   # unbiased std of [1, 0]
    assert torch.allclose(step_group_advantages(ret, ids), T([0.5 / s, -0.5 / s, 0.0]),
                          atol=1e-5)
    assert torch.allclose(step_group_advantages(ret, ids, norm="mean"), T([0.5, -0.5, 0.0]))


# Two episodes of one group; both start in state 0 (the start), then episode 0 goes to
# state 1 and wins (reward 1 at its 2nd step), episode 1 goes to state 2 and back to 0,
# then stops with nothing. gamma 0.5.
REWARDS = T([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
MASK = T([[True, True, False], [True, True, True]])
GROUPS = T([0, 0])
ANCHORS = T([[0, 1, -1], [0, 2, 0]])


def test_gigpo_hand_computed_with_a_recurring_state():
    a = gigpo_advantages(REWARDS, MASK, GROUPS, ANCHORS, gamma=0.5, weight=1.0, eps=0.0)
    # episode level: returns [1, 0] -> +-0.5 / 0.7071 = +-0.7071
    ep = 0.5 / (1 / math.sqrt(2))
    # step returns: ep0 [0.5, 1], ep1 [0, 0, 0]; state 0 is visited by (0,0), (1,0), (1,2):
    # returns [0.5, 0, 0], mean 1/6, unbiased std sqrt(((1/3)^2 + 2 (1/6)^2) / 2) = 0.288675
    std0 = math.sqrt(((1 / 3) ** 2 + 2 * (1 / 6) ** 2) / 2)
    s00, s10 = (0.5 - 1 / 6) / std0, (0 - 1 / 6) / std0
    want = T([[ep + s00, ep + 0.0, 0.0], [-ep + s10, -ep + 0.0, -ep + s10]])
    assert torch.allclose(a, want, atol=1e-5)


def test_gigpo_weight_scales_only_the_step_part():
    a1 = gigpo_advantages(REWARDS, MASK, GROUPS, ANCHORS, gamma=0.5, weight=1.0)
    a3 = gigpo_advantages(REWARDS, MASK, GROUPS, ANCHORS, gamma=0.5, weight=3.0)
    a0 = gigpo_advantages(REWARDS, MASK, GROUPS, ANCHORS, gamma=0.5, weight=0.0)
    assert torch.allclose(a3 - a0, 3 * (a1 - a0), atol=1e-5)
    assert not torch.allclose(a1, a0)


def test_gigpo_weight_zero_is_grpo_even_with_recurring_states():
    a = gigpo_advantages(REWARDS, MASK, GROUPS, ANCHORS, gamma=0.5, weight=0.0)
    ep = grpo_advantages(T([1.0, 0.0]), GROUPS)
    assert torch.allclose(a, ep[:, None] * MASK.float())


def test_gigpo_without_recurring_states_is_grpo_at_the_default_weight():
    anchors = T([[0, 1, -1], [2, 3, 4]])      # every state visited once
    a = gigpo_advantages(REWARDS, MASK, GROUPS, anchors)
    ep = grpo_advantages(T([1.0, 0.0]), GROUPS)
    assert torch.allclose(a, ep[:, None] * MASK.float())
    m = gigpo_advantages(REWARDS, MASK, GROUPS, anchors, norm="mean")
    assert torch.allclose(m, dr_grpo_advantages(T([1.0, 0.0]), GROUPS)[:, None] * MASK.float())


def test_gigpo_step_groups_never_cross_episode_groups():
    # the same anchor id in two different episode groups: two singletons, no step signal
    r = T([[1.0], [0.0]])
    m = T([[True], [True]])
    a = gigpo_advantages(r, m, T([0, 1]), T([[7], [7]]))
    assert torch.allclose(a, torch.zeros(2, 1))
    assert step_group_share(T([0, 1]), T([[7], [7]]), m) == 0.0


def test_gigpo_discount_changes_the_step_part():
    a_half = gigpo_advantages(REWARDS, MASK, GROUPS, ANCHORS, gamma=0.5, norm="mean")
    a_one = gigpo_advantages(REWARDS, MASK, GROUPS, ANCHORS, gamma=1.0, norm="mean")
    # mean norm, state 0: gamma .5 returns [.5, 0, 0]; gamma 1 returns [1, 0, 0]
    assert a_half[0, 0] - 0.5 == pytest.approx(0.5 - 1 / 6, abs=1e-6)
    assert a_one[0, 0] - 0.5 == pytest.approx(1 - 1 / 3, abs=1e-6)


def test_step_group_share_hand_computed():
    assert step_group_share(T([0, 0]), T([[0, 1], [0, 2]]), torch.ones(2, 2, dtype=torch.bool)) \
        == pytest.approx(0.5)
    assert step_group_share(GROUPS, ANCHORS, MASK) == pytest.approx(3 / 5)
    assert step_group_share(T([0]), T([[0]]), T([[False]])) == 0.0


def test_gigpo_rejects_bad_shapes_and_left_padding():
    with pytest.raises(ObjectiveInputError, match="must all be"):
        gigpo_advantages(REWARDS, MASK, GROUPS, ANCHORS[:, :2])
    with pytest.raises(ObjectiveInputError, match="right-padded"):
        gigpo_advantages(REWARDS, T([[False, True, True], [True, True, True]]), GROUPS, ANCHORS)
    with pytest.raises(ObjectiveInputError, match="anchor_ids"):
        gigpo_advantages(REWARDS, MASK, GROUPS, T([[0, -1, -1], [0, 2, 0]]))


def test_step_group_ids_hand_computed():
    from deciplane.objectives import step_group_ids

    ids = step_group_ids(T([0, 1]), T([[5, 6], [5, 5]]), torch.ones(2, 2, dtype=torch.bool))
    assert ids.tolist() == [0, 1, 2, 2]
