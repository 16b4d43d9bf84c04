"""TASCO and Probe-ERPO loss pieces (METHODS.md §5.3, §5.4; paper-inspired, ours)."""

from __future__ import annotations

import math

import pytest
import torch

from deciplane.errors import ConfigError, ObjectiveInputError
from deciplane.objectives import (ERPOLossConfig, TASCOLossConfig, consistency_kl, entropy_ceiling,
                                  erpo_advantages, erpo_loss, mean_entropy, probe_consensus,
                                  random_perturbation, rank_mask, sam_perturbation, tasco_loss)

T = torch.tensor


# ------------------------------------------------------------------------------- TASCO


def test_mean_entropy_hand_computed_over_answer_positions():
    logits = torch.zeros(1, 3, 4)                  # uniform over 4 tokens: entropy ln 4
    logits[0, 2] = T([50.0, 0.0, 0.0, 0.0])        # ~one-hot: entropy ~0
    mask = T([[1, 1, 0]]).bool()
    assert float(mean_entropy(logits, mask)) == pytest.approx(math.log(4), abs=1e-6)
    assert float(mean_entropy(logits, T([[0, 0, 1]]).bool())) == pytest.approx(0.0, abs=1e-6)


def test_consistency_kl_hand_computed():
    # p = [.25, .75], q = [.5, .5]: KL(p||q) = .25 ln .5 + .75 ln 1.5
    p = T([[[0.0, math.log(3.0)]]])
    q = torch.zeros(1, 1, 2)
    expect = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)
    assert float(consistency_kl(p, q, torch.ones(1, 1))) == pytest.approx(expect, abs=1e-6)
    assert float(consistency_kl(p, p, torch.ones(1, 1))) == pytest.approx(0.0, abs=1e-7)


def test_tasco_loss_is_entropy_plus_mu_mean_kl():
    p = T([[[0.0, math.log(3.0)]]], requires_grad=True)
    draws = [torch.zeros(1, 1, 2), p.detach().clone()]
    out = tasco_loss(p, draws, torch.ones(1, 1), mu=2.0)
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    kl = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)
    assert out.loss.item() == pytest.approx(h + 2.0 * (kl + 0.0) / 2, abs=1e-6)
    out.loss.backward()
    assert torch.isfinite(p.grad).all()
    with pytest.raises(ObjectiveInputError, match="n_draws"):
        tasco_loss(p, [], torch.ones(1, 1), mu=1.0)


def test_perturbations():
    # SAM: eps = rho * g / ||g|| with the global norm (||[3, 4]|| = 5)
    eps = sam_perturbation([T([3.0]), T([4.0]), None], rho=0.5)
    assert torch.allclose(eps[0], T([0.3])) and torch.allclose(eps[1], T([0.4]))
    assert float(eps[2]) == 0.0
    assert all(float(e.abs().sum()) == 0 for e in sam_perturbation([torch.zeros(3)], 0.5))
    # random: N(0, sigma^2), reproducible from a generator
    p = [torch.zeros(100, 100)]
    a = random_perturbation(p, 0.01, torch.Generator().manual_seed(3))[0]
    b = random_perturbation(p, 0.01, torch.Generator().manual_seed(3))[0]
    assert torch.equal(a, b) and float(a.std()) == pytest.approx(0.01, rel=0.05)
    with pytest.raises(ConfigError, match="'random', 'sam'"):
        TASCOLossConfig(perturbation="gaussian")


# ------------------------------------------------------------------------------- ERPO


def test_probe_consensus_hand_computed():
    sigs = [("1", "2"), ("1", "2"), ("1", "TIMEOUT"), ("0", "ERR:ValueError")]
    pcr = probe_consensus(sigs)
    assert torch.allclose(pcr, T([0.5, 0.5, 0.25, 0.25]))
    # property: sum_i PCR_i = sum over clusters of n_c^2 / K
    assert float(pcr.sum()) == pytest.approx((4 + 1 + 1) / 4)


def test_rank_mask_below_median_and_ties():
    assert rank_mask(T([0.5, 0.5, 0.25, 0.25])).tolist() == [False, False, True, True]
    assert rank_mask(T([0.6, 0.6, 0.6, 0.4, 0.4])).tolist() == [False] * 3 + [True] * 2
    assert not rank_mask(T([0.25] * 4)).any()     # full disagreement ranks nobody
    assert rank_mask(T([0.1, 0.2, 0.3, 0.4]), fraction=0.25).tolist() == [True, False,
                                                                           False, False]


def test_erpo_advantages_negative_only_by_default():
    pcr = T([0.5, 0.5, 0.25, 0.25])                # median .375
    assert erpo_advantages(pcr).tolist() == [0.0, 0.0, -1.0, -1.0]
    assert torch.allclose(erpo_advantages(pcr, form="margin"), T([0.0, 0.0, -0.125, -0.125]))
    assert erpo_advantages(pcr, reinforce_top=True).tolist() == [1.0, 1.0, -1.0, -1.0]
    assert float(erpo_advantages(pcr).max()) <= 0.0


def test_entropy_ceiling_hand_computed():
    ent = T([[1.0, 3.0, 100.0]], requires_grad=True)
    mask = T([[1, 1, 0]]).bool()
    # mean H over valid tokens = 2; 2 * relu(2 - 1.5) = 1
    c = entropy_ceiling(ent, mask, alpha=2.0, h_max=1.5)
    assert float(c.detach()) == pytest.approx(1.0)
    c.backward()
    assert ent.grad.tolist() == [[1.0, 1.0, 0.0]]
    assert float(entropy_ceiling(ent.detach(), mask, alpha=2.0, h_max=3.0)) == 0.0


def test_erpo_loss_pushes_down_low_consensus_only():
    logp = T([[-0.5, -0.5], [-1.0, -1.0]], requires_grad=True)
    ent = T([[0.5, 0.5], [0.5, 0.5]])
    out = erpo_loss(ERPOLossConfig(alpha=1.0, h_max=1.0), logp, None, T([0.0, -1.0]),
                    torch.ones(2, 2, dtype=torch.bool), ent)
    # on-policy ratio 1: token losses [0, 0, 1, 1] -> token mean .5; entropy below ceiling
    assert out.loss.item() == pytest.approx(0.5)
    out.loss.backward()
    assert logp.grad[0].abs().sum() == 0 and torch.all(logp.grad[1] > 0)
    with pytest.raises(ConfigError, match="'constant', 'margin'"):
        ERPOLossConfig(advantage="rank")
