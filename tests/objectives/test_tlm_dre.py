"""TLM-DRE turn weighting (METHODS.md §2, paper-inspired): hand cases and properties."""

from __future__ import annotations

import math

import pytest
import torch

from deciplane.errors import ConfigError, MissingTurnIds
from deciplane.objectives import (TLMDRELossConfig, asymmetric_token_loss, tlm_dre_loss,
                                  token_turn_weights, turn_confidence, turn_mean_aggregate,
                                  turn_weights)

T = torch.tensor

# one trajectory: turn 0 = 2 tokens, an observation token (-1), turn 1 = 1 token
REF = T([[-0.1, -0.3, -9.0, -2.0]])
TURNS = T([[0, 0, -1, 1]])
# s = 2 * softmax([.2, 2.0]) = [.283702, 1.716298]; clamped to [.5, 2] -> [.5, 1.716298]
E1 = math.exp(0.2) / (math.exp(0.2) + math.exp(2.0))
S_HAND = [max(2 * E1, 0.5), 2 * (1 - E1)]


def test_turn_confidence_hand_computed():
    c, tm = turn_confidence(REF, TURNS)
    assert torch.allclose(c, T([[-0.2, -2.0]]))
    assert tm.tolist() == [[True, True]]


def test_low_confidence_turn_gets_larger_weight():
    c, tm = turn_confidence(REF, TURNS)
    s = turn_weights(c, tm, tau=1.0, s_min=0.5, s_max=2.0)
    assert torch.allclose(s, T([S_HAND]), atol=1e-6)
    assert s[0, 1] > s[0, 0]
    # without clamping the weights average to 1 over a trajectory's turns
    s_free = turn_weights(c, tm, tau=1.0, s_min=1e-9, s_max=1e9)
    assert float(s_free.mean()) == pytest.approx(1.0)
    assert token_turn_weights(s, TURNS).tolist()[0][2] == 0.0


def test_long_turn_does_not_dominate():
    # turn 0: nine tokens of loss 1; turn 1: one decisive token of loss 10
    loss = T([[1.0] * 9 + [10.0]])
    turns = T([[0] * 9 + [1]])
    assert float(turn_mean_aggregate(loss, turns)) == pytest.approx((1 + 10) / 2)
    assert float(loss.mean()) == pytest.approx(1.9)    # token mean would drown it
    # trajectories are averaged after turns: a 1-turn and a 2-turn trajectory count equally
    loss2 = T([[4.0, 4.0, 0.0], [1.0, 3.0, 9.0]])
    turns2 = T([[0, 0, -1], [0, 1, -1]])
    assert float(turn_mean_aggregate(loss2, turns2)) == pytest.approx((4 + 2) / 2)


def test_positive_and_negative_settings_act_separately():
    logp = T([[math.log(1.25), math.log(1.25)]])
    old = torch.zeros(1, 2)
    s = T([[0.5, 2.0]])
    mask = torch.ones(1, 2, dtype=torch.bool)
    base = dict(alpha_pos=1.0, alpha_neg=1.0, eps_high_pos=0.2, eps_high_neg=0.2)
    # A > 0, ratio 1.25 clipped at 1.2: loss = -s * 1.2
    pos = asymmetric_token_loss(logp, old, T([1.0]), s, mask, TLMDRELossConfig(**base))
    assert torch.allclose(pos, T([[-0.6, -2.4]]))
    # changing only the positive upper clip changes positive trajectories...
    pos_hi = asymmetric_token_loss(logp, old, T([1.0]), s, mask,
                                   TLMDRELossConfig(**{**base, "eps_high_pos": 0.28}))
    assert torch.allclose(pos_hi, T([[-0.625, -2.5]]))
    # ...and not negative ones (A < 0: loss = s * max(1.25, 1.2) = s * 1.25)
    for cfg in (TLMDRELossConfig(**base), TLMDRELossConfig(**{**base, "eps_high_pos": 0.28,
                                                      "alpha_pos": 0.0})):
        neg = asymmetric_token_loss(logp, old, T([-1.0]), s, mask, cfg)
        assert torch.allclose(neg, T([[0.625, 2.5]]))
    # alpha_neg = 0 switches the turn weighting off for negative trajectories only
    neg0 = asymmetric_token_loss(logp, old, T([-1.0]), s, mask,
                                 TLMDRELossConfig(**{**base, "alpha_neg": 0.0}))
    assert torch.allclose(neg0, T([[1.25, 1.25]]))
    assert torch.allclose(asymmetric_token_loss(logp, old, T([1.0]), s, mask,
                                                TLMDRELossConfig(**{**base, "alpha_neg": 0.0})),
                          pos)


def test_tlm_dre_loss_hand_computed():
    logp = T([[-0.5, -0.7, 0.0, -1.0]], requires_grad=True)
    out = tlm_dre_loss(TLMDRELossConfig(), logp, logp.detach(), REF, T([1.0]), TURNS)
    # ratio 1, A = 1: token loss -s_t; turn means [-s_0, -s_1]; turn mean of those
    assert out.loss.item() == pytest.approx(-(S_HAND[0] + S_HAND[1]) / 2, abs=1e-6)
    out.loss.backward()
    assert float(logp.grad[0, 2]) == 0.0      # the observation token gets no gradient
    assert torch.isfinite(logp.grad).all()


def test_missing_turn_ids_raise():
    z = torch.zeros(1, 3)
    with pytest.raises(MissingTurnIds, match="turn_ids"):
        tlm_dre_loss(TLMDRELossConfig(), z, z, z, T([1.0]), None)
    with pytest.raises(MissingTurnIds, match="all -1"):
        tlm_dre_loss(TLMDRELossConfig(), z, z, z, T([1.0]), T([[-1, -1, -1]]))
    with pytest.raises(MissingTurnIds):
        turn_confidence(z, None)


def test_config_validation():
    with pytest.raises(ConfigError, match="tau"):
        TLMDRELossConfig(tau=0.0)
    with pytest.raises(ConfigError, match="s_max"):
        TLMDRELossConfig(s_min=2.0, s_max=1.0)
