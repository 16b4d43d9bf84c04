"""PPO/GRPO/GSPO/DAPO/Dr.GRPO policy losses: hand-computed cases and properties."""

from __future__ import annotations

import math

import pytest
import torch

from deciplane.errors import ConfigError, ObjectiveInputError
from deciplane.objectives import (AGGREGATIONS, PolicyLossConfig, aggregate, clipped_surrogate,
                                  gspo_sequence_ratio, gspo_token_ratio, kl_k3, policy_loss,
                                  token_ratio)

T = torch.tensor
NAN = float("nan")


def test_clipped_surrogate_symmetric_hand_computed():
    r = T([0.5, 1.0, 1.5])
    # A = +1: -min(r, clip(r, .8, 1.2)) = [-.5, -1, -1.2]
    assert torch.allclose(clipped_surrogate(r, torch.ones(3), 0.2, 0.2), T([-0.5, -1.0, -1.2]))
    # A = -1: -min(-r, -clip(r)) = max(r, clip(r)) = [.8, 1, 1.5]
    assert torch.allclose(clipped_surrogate(r, -torch.ones(3), 0.2, 0.2), T([0.8, 1.0, 1.5]))


def test_clip_higher_is_asymmetric():
    # upper bound 1.28 instead of 1.2 for A > 0; the lower bound is unchanged for A < 0
    assert torch.allclose(clipped_surrogate(T([1.3]), T([1.0]), 0.2, 0.28), T([-1.28]))
    assert torch.allclose(clipped_surrogate(T([0.7]), T([-1.0]), 0.2, 0.28), T([0.8]))
    # a ratio of 1.25 with A > 0 gets no gradient with symmetric clipping, but does with
    # clip-higher (low-probability tokens can still be pushed up)
    grads = []
    for hi in (0.2, 0.28):
        r = T([1.25], requires_grad=True)
        clipped_surrogate(r, T([1.0]), 0.2, hi).sum().backward()
        grads.append(float(r.grad))
    assert grads == [0.0, -1.0]


def test_aggregations_hand_computed_and_ignore_padding():
    loss = T([[1.0, 2.0, 3.0], [4.0, NAN, NAN]])      # padding holds garbage
    mask = T([[1, 1, 1], [1, 0, 0]]).bool()
    assert float(aggregate(loss, mask, "token_mean")) == pytest.approx(10 / 4)   # DAPO
    assert float(aggregate(loss, mask, "seq_mean")) == pytest.approx((2 + 4) / 2)
    # Dr. GRPO: (6/4 + 4/4) / 2
    assert float(aggregate(loss, mask, "seq_sum_const", max_len=4)) == pytest.approx(1.25)
    with pytest.raises(ConfigError, match="max_len"):
        aggregate(loss, mask, "seq_sum_const")
    with pytest.raises(ConfigError, match="'token_mean', 'seq_mean', 'seq_sum_const'"):
        aggregate(loss, mask, "sum")
    assert set(AGGREGATIONS) == {"token_mean", "seq_mean", "seq_sum_const"}


def test_token_mean_weights_long_responses_seq_mean_does_not():
    # two responses with per-token loss 1 (length 3) and 0 (length 1)
    loss, mask = T([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]), T([[1, 1, 1], [1, 0, 0]]).bool()
    assert float(aggregate(loss, mask, "token_mean")) == pytest.approx(0.75)
    assert float(aggregate(loss, mask, "seq_mean")) == pytest.approx(0.5)


def test_k3_hand_computed_and_unbiased():
    # logp = log .5, ref = log .25: d = log .5 -> .5 + .693147 - 1
    assert float(kl_k3(T([math.log(0.5)]), T([math.log(0.25)]))) == pytest.approx(0.193147,
                                                                                   abs=1e-6)
    assert float(kl_k3(T([-1.3]), T([-1.3]))) == 0.0
    # E_{x ~ pi}[k3(x)] = KL(pi || ref) exactly, over a small categorical
    pi, ref = T([0.1, 0.6, 0.3]), T([0.3, 0.3, 0.4])
    expect = float((pi * kl_k3(pi.log(), ref.log())).sum())
    assert expect == pytest.approx(float((pi * (pi / ref).log()).sum()), abs=1e-6)
    assert torch.all(kl_k3(torch.randn(50), torch.randn(50)) >= 0)


def test_gspo_sequence_ratio_hand_computed_and_gradient_matches_gspo():
    logp = T([[-1.0, -2.0, 0.0]], requires_grad=True)
    old = T([[-1.2, -1.6, 5.0]])
    mask = T([[1, 1, 0]]).bool()
    # mean log ratio over valid tokens = (0.2 - 0.4) / 2 = -0.1
    s = gspo_sequence_ratio(logp, old, mask)
    assert float(s.detach()) == pytest.approx(math.exp(-0.1))
    tok = gspo_token_ratio(logp, old, mask)
    assert torch.allclose(tok[mask], s.detach().expand(2))
    # seq_mean of -(s_t A) has the gradient of -(s_i A): s_i * A / |y| on each valid token
    (-(tok * 2.0)).masked_fill(~mask, 0).sum(1).div(2).mean().backward()
    assert torch.allclose(logp.grad, T([[-math.exp(-0.1), -math.exp(-0.1), 0.0]]), atol=1e-6)


def test_gspo_clips_whole_sequence():
    logp = T([[0.5, 0.5, 0.5], [0.0, 0.0, 0.0]])
    old = torch.zeros(2, 3)
    mask = torch.ones(2, 3, dtype=torch.bool)
    out = policy_loss(PolicyLossConfig(ratio="sequence", aggregation="seq_mean"), logp, old,
                      T([1.0, 1.0]), mask)
    # row 0 ratio e^.5 > 1.2 on every token -> clipped; row 1 ratio 1
    assert out.metrics["policy/clip_frac"] == pytest.approx(0.5)
    assert out.loss.item() == pytest.approx((-1.2 - 1.0) / 2)


def test_policy_loss_hand_computed_with_kl_and_padding():
    logp = T([[math.log(0.5), math.log(0.5)], [math.log(0.25), NAN]], requires_grad=True)
    old = T([[math.log(0.25), math.log(0.5)], [math.log(0.25), NAN]])
    ref = T([[math.log(0.25), math.log(0.5)], [math.log(0.25), float("-inf")]])
    mask = T([[1, 1], [1, 0]]).bool()
    adv = T([1.0, -1.0])
    cfg = PolicyLossConfig(eps_low=0.2, kl_beta=0.1, aggregation="token_mean")
    out = policy_loss(cfg, logp, old, adv, mask, ref_logp=ref)
    # ratios: [2, 1], [1]; pg: [-1.2, -1], [1] -> token mean -1.2/3
    # k3: [.193147, 0], [0] -> token mean .064382
    assert out.metrics["loss/policy"] == pytest.approx(-1.2 / 3, abs=1e-6)
    assert out.metrics["loss/kl"] == pytest.approx(0.193147 / 3, abs=1e-6)
    assert out.loss.item() == pytest.approx(-1.2 / 3 + 0.1 * 0.193147 / 3, abs=1e-6)
    out.loss.backward()
    assert torch.isfinite(logp.grad).all() and float(logp.grad[1, 1]) == 0.0


def test_policy_loss_config_validation_and_missing_reference():
    with pytest.raises(ConfigError, match="'token', 'sequence'"):
        PolicyLossConfig(ratio="word")
    with pytest.raises(ConfigError, match="max_len"):
        PolicyLossConfig(aggregation="seq_sum_const")
    with pytest.raises(ConfigError, match="must be in \\[0, 1\\]"):
        PolicyLossConfig(eps_low=-0.1)
    z = torch.zeros(1, 2)
    with pytest.raises(ObjectiveInputError, match="ref_logp"):
        policy_loss(PolicyLossConfig(kl_beta=0.1), z, z, T([1.0]), torch.ones(1, 2))
    with pytest.raises(ObjectiveInputError, match="same shape"):
        policy_loss(PolicyLossConfig(), z, torch.zeros(1, 3), T([1.0]), torch.ones(1, 2))


def test_token_ratio_is_one_on_padding():
    r = token_ratio(T([[0.0, 3.0]]), T([[0.0, NAN]]), T([[1, 0]]).bool())
    assert r.tolist() == [[1.0, 1.0]]


def test_clipped_surrogate_is_pessimistic_bound_property():
    g = torch.Generator().manual_seed(4)
    r = torch.rand(200, generator=g) * 3
    a = torch.randn(200, generator=g)
    for lo, hi in ((0.2, 0.2), (0.2, 0.28), (0.1, 0.5)):
        loss = clipped_surrogate(r, a, lo, hi)
        assert torch.all(loss >= -r * a - 1e-6)                        # never optimistic
        inside = (r >= 1 - lo) & (r <= 1 + hi)
        assert torch.allclose(loss[inside], (-r * a)[inside])           # exact inside the box


def test_seq_sum_const_does_not_depend_on_padding_or_own_length():
    loss = T([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    mask = T([[1, 1, 0, 0], [1, 0, 0, 0]]).bool()
    wide = torch.cat([loss, torch.full((2, 3), NAN)], 1)
    wmask = torch.cat([mask, torch.zeros(2, 3, dtype=torch.bool)], 1)
    a = aggregate(loss, mask, "seq_sum_const", max_len=8)
    assert float(a) == pytest.approx((2 / 8 + 1 / 8) / 2)
    assert float(aggregate(wide, wmask, "seq_sum_const", max_len=8)) == pytest.approx(float(a))
    # a response's own length is not its normaliser (seq_mean would give 1 for both rows)
    assert float(aggregate(loss, mask, "seq_mean")) == pytest.approx(1.0)
