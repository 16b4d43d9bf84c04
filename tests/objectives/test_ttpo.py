"""TTPO loss pieces (METHODS.md §5.2): token weights, masks and losses by hand."""

from __future__ import annotations

import pytest
import torch

from deciplane.errors import ConfigError
from deciplane.objectives import (TTPOLossConfig, confident_error_scores, median_mask,
                                  negative_branch_loss, normalized_entropy, opsd_loss,
                                  ttpo_loss, ttpo_token_weights)
from deciplane.objectives.ttpo import branch_metrics

T = torch.tensor
FULL = torch.ones(1, 4, dtype=torch.bool)


def test_entropy_clipped_at_98th_percentile_then_minmax():
    # quantile .98 of [0, 1, 2, 3] (linear) = 2 + .94 * 1 = 2.94 -> [0, 1, 2, 2.94] / 2.94
    h = normalized_entropy(T([[0.0, 1.0, 2.0, 3.0]]), FULL)
    assert torch.allclose(h, T([[0.0, 1 / 2.94, 2 / 2.94, 1.0]]), atol=1e-6)
    # an outlier entropy no longer squashes the others
    h_out = normalized_entropy(T([[0.0] * 49 + [1.0] * 50 + [100.0]]), torch.ones(1, 100))
    assert float(h_out[0, 50]) > 0.9


def test_token_weights_hand_computed():
    # H = [0, .340136, .680272, 1]; D = minmax([0, 0, 1, .5]) = [0, 0, 1, .5]
    # w = H + D - H*D = [0, .340136, 1, 1]
    w = ttpo_token_weights(T([[0.0, 1.0, 2.0, 3.0]]), T([[0.0, 0.0, 1.0, 0.5]]), FULL)
    assert torch.allclose(w, T([[0.0, 1 / 2.94, 1.0, 1.0]]), atol=1e-6)
    assert float(w[0, 0]) == 0.0     # converged token: low entropy and low divergence


def test_token_weights_normalise_per_sample_and_ignore_padding():
    ent = T([[0.0, 1.0, 2.0, 3.0], [10.0, 20.0, 999.0, -5.0]])
    div = T([[0.0, 0.0, 1.0, 0.5], [5.0, 5.0, 999.0, 999.0]])
    mask = T([[1, 1, 1, 1], [1, 1, 0, 0]]).bool()
    w = ttpo_token_weights(ent, div, mask, entropy_clip_quantile=1.0)
    # row 1: H = [0, 1], D constant -> 0; padding weight 0
    assert torch.allclose(w[1], T([0.0, 1.0, 0.0, 0.0]))
    assert torch.allclose(w[0], T([0.0, 1 / 3, 1.0, 1.0]), atol=1e-6)


def test_opsd_loss_hand_computed():
    kl = T([[0.1, 0.2, 0.3, 0.4]])
    w = T([[0.0, 1 / 2.94, 1.0, 1.0]])
    # (0 + .2 / 2.94 + .3 + .4) / 4
    assert float(opsd_loss(kl, w, FULL)) == pytest.approx((0.2 / 2.94 + 0.7) / 4, abs=1e-6)
    # T counts valid tokens only
    m = T([[1, 1, 1, 0]]).bool()
    assert float(opsd_loss(kl, w, m)) == pytest.approx((0.2 / 2.94 + 0.3) / 3, abs=1e-6)


def test_confident_error_scores_and_median_mask():
    logp = T([[-1.0, -2.0, -0.5, -3.0]])
    h = T([[0.0, 0.5, 1.0, 0.25]])
    s = confident_error_scores(logp, h)
    assert torch.allclose(s, T([[1.0, 1.0, 0.0, 2.25]]))
    # median over the 4 valid tokens = (1 + 1) / 2 = 1 -> s >= 1
    assert median_mask(s, FULL).tolist() == [[True, True, False, True]]
    # the median is over the valid tokens of the whole micro-batch (both rows, no padding)
    s2 = T([[1.0, 2.0, 99.0], [3.0, 4.0, 99.0]])
    m2 = T([[1, 1, 0], [1, 1, 0]]).bool()
    assert median_mask(s2, m2).tolist() == [[False, False, False], [True, True, False]]


def test_negative_branch_loss_hand_computed_and_pushes_errors_down():
    logp = T([[-1.0, -2.0, -0.5, -3.0]], requires_grad=True)
    m = T([[True, True, False, True]])
    # -(A / T) sum m log p = -(-.5 / 4)(-1 - 2 - 3) = -.75
    loss = negative_branch_loss(logp, T([-0.5]), m, FULL)
    assert float(loss.detach()) == pytest.approx(-0.75)
    loss.sum().backward()
    # gradient descent lowers log p of the masked tokens only
    assert torch.allclose(logp.grad, T([[0.125, 0.125, 0.0, 0.125]]))
    # non-negative advantages are not pushed
    assert float(negative_branch_loss(logp.detach(), T([0.7]), m, FULL)) == 0.0


def test_ttpo_loss_hand_computed():
    cfg = TTPOLossConfig(lam=0.1, entropy_clip_quantile=1.0)
    # row 0 (agree): KL [.1, .2, .3, .4] -> D = [0, 1/3, 2/3, 1]; H = [0, 1/3, 2/3, 1]
    #   w = [0, 5/9, 8/9, 1]; L_OPSD = (5/9 * .2 + 8/9 * .3 + .4) / 4 = .194444
    # row 1 (disagree): H = [0, .5, 1, .25] -> s = [1, 1, 0, 2.25], m = [1, 1, 0, 1]
    #   L_N = -.75 (A = -.5); total = (.194444 + .1 * -.75) / 2
    kl = T([[0.1, 0.2, 0.3, 0.4], [9.0, 9.0, 9.0, 9.0]], requires_grad=True)
    ent = T([[0.0, 1.0, 2.0, 3.0], [0.0, 2.0, 4.0, 1.0]])
    logp = T([[-0.1, -0.1, -0.1, -0.1], [-1.0, -2.0, -0.5, -3.0]], requires_grad=True)
    mask = torch.ones(2, 4, dtype=torch.bool)
    out = ttpo_loss(cfg, kl, ent, logp, mask, T([True, False]), T([0.0, -0.5]))
    l_opsd = (5 / 9 * 0.2 + 8 / 9 * 0.3 + 0.4) / 4
    assert out.loss.item() == pytest.approx((l_opsd + 0.1 * -0.75) / 2, abs=1e-6)
    assert out.metrics["ttpo/opsd"] == pytest.approx(l_opsd, abs=1e-6)
    out.loss.backward()
    assert float(kl.grad[1].abs().sum()) == 0.0       # disagree rows get no distillation
    assert float(logp.grad[0].abs().sum()) == 0.0     # agree rows get no L_N
    assert float(kl.grad[0, 0]) == 0.0 and float(kl.grad[0, 3]) == pytest.approx(1 / 8)


def test_branch_metrics_hand_computed():
    # row 0 agree, left-padded: valid tokens 1..3 (KL .6, .2, .2; w .5, 1, 0)
    # row 1 agree, all valid (KL 1, 0, 0, 0; w 1, 0, 0, 0); row 2 disagree, 2 valid, 1 kept
    mask = T([[False, True, True, True], [True] * 4, [False, False, True, True]])
    kl = T([[9.0, 0.6, 0.2, 0.2], [1.0, 0.0, 0.0, 0.0], [9.0, 9.0, 9.0, 9.0]])
    w = T([[9.0, 0.5, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    ent = T([[9.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0], [9.0, 9.0, 3.0, 3.0]])
    kept = T([[False] * 4, [False] * 4, [False, False, True, False]])
    m = branch_metrics(kl, w, ent, mask, T([True, True, False]), kept)
    assert m["ttpo/agree_tokens"] == pytest.approx(3.5)           # (3 + 4) / 2 rows
    assert m["ttpo/disagree_tokens"] == pytest.approx(2.0)
    assert m["ttpo/agree_weight"] == pytest.approx(2.5 / 7)       # padding never counts
    assert m["ttpo/agree_kl"] == pytest.approx(2.0 / 7)
    assert m["ttpo/agree_kl_first"] == pytest.approx((0.6 + 1.0) / 2)
    assert m["ttpo/agree_kl_first_share"] == pytest.approx((0.6 + 1.0) / 2)
    assert m["ttpo/disagree_kept"] == pytest.approx(1.0)
    assert m["ttpo/entropy"] == pytest.approx((3 + 8 + 6) / 9)
    # no disagree rows: its means are 0, not NaN
    m = branch_metrics(kl[:2], w[:2], ent[:2], mask[:2], T([True, True]), kept[:2])
    assert m["ttpo/disagree_tokens"] == 0.0 and m["ttpo/disagree_kept"] == 0.0


def test_config_validation():
    with pytest.raises(ConfigError, match="entropy_clip_quantile"):
        TTPOLossConfig(entropy_clip_quantile=1.5)
