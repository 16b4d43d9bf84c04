"""RLiD decision-plane objective (METHODS.md §1): hand-computed cases and properties."""

from __future__ import annotations

import math

import pytest
import torch

from deciplane.errors import ConfigError, ObjectiveInputError
from deciplane.objectives import (BIAS_TERMS, RLiDLossConfig,
                                  decision_entropy, decision_ppo_loss, group_ids_from_keys,
                                  length_balanced_weights, menu_log_softmax, menu_marginal_kl,
                                  rlid_loss, weighted_mean)

T = torch.tensor


def test_menu_log_softmax_uses_menu_labels_only():
    logits = T([[1.0, 2.0, 100.0]])          # slot 2 is not in this menu
    lp = menu_log_softmax(logits, T([[1, 1, 0]]).bool())
    p = lp.exp()
    assert torch.allclose(p[0, :2], torch.softmax(T([1.0, 2.0]), 0))
    assert float(p[0, 2]) == 0.0
    with pytest.raises(ObjectiveInputError, match="empty menu"):
        menu_log_softmax(logits, T([[0, 0, 0]]).bool())


def test_length_balanced_weights_methods_example():
    # a 2-step episode (.75 each) and a 1-step episode (1.5): equal total weight 1.5
    w = length_balanced_weights(T([0, 0, 1]))
    assert torch.allclose(w, T([0.75, 0.75, 1.5]))


def test_length_balanced_weights_equal_episode_totals():
    ids = T([3, 3, 3, 3, 7, 9, 9])
    w = length_balanced_weights(ids)
    totals = [float(w[ids == e].sum()) for e in (3, 7, 9)]
    assert totals == pytest.approx([7 / 3] * 3)   # Lbar = (4 + 1 + 2) / 3


def test_weighted_mean_is_plain_mean_not_divided_by_weight_sum():
    # (1/N) sum w_i loss_i: one decision of the 2-step episode seen in a micro-batch
    assert float(weighted_mean(T([2.0]), T([0.75]))) == pytest.approx(1.5)
    assert float(weighted_mean(T([1.0, 2.0, 4.0]), T([0.75, 0.75, 1.5]))) == pytest.approx(
        (0.75 + 1.5 + 6.0) / 3)


def test_decision_ppo_loss_hand_computed():
    lp = T([[0.5, 0.5], [0.5, 0.5]]).log()
    # ratio .5 / .25 = 2 -> clipped to 1.2 for A = +1; A = -1 -> max(2, 1.2) = 2
    out = decision_ppo_loss(lp, T([0, 1]), T([0.25, 0.25]).log(), T([1.0, -1.0]), 0.2)
    assert torch.allclose(out, T([-1.2, 2.0]))


def test_menu_kl_opposite_decisions_is_zero_while_entropies_are_zero():
    lp = T([[1.0, 0.0], [0.0, 1.0]]).log()     # contains -inf: must stay NaN-free
    mask = torch.ones(2, 2, dtype=torch.bool)
    kl = menu_marginal_kl(lp, mask, T([0, 0]))
    assert kl.item() == pytest.approx(0.0, abs=1e-6)
    assert torch.allclose(decision_entropy(lp, mask), torch.zeros(2))


def test_menu_kl_hand_computed_single_decision():
    # KL(U || [.8, .2]) = .5 ln(.5/.8) + .5 ln(.5/.2) = .5 ln(1.5625)
    kl = menu_marginal_kl(T([[0.8, 0.2]]).log(), torch.ones(1, 2, dtype=torch.bool), T([0]))
    assert kl.item() == pytest.approx(0.5 * math.log(1.5625), abs=1e-6)
    # a min_group_size of 2 leaves single decisions out
    assert float(menu_marginal_kl(T([[0.8, 0.2]]).log(), torch.ones(1, 2, dtype=torch.bool),
                                  T([0]), min_group_size=2)) == 0.0


def test_menu_kl_groups_by_menu_label_set():
    # menu (A, B): [1, 0] and [0, 1] -> KL 0; menu (A, B, C): one decision [.8, .2, 0+]
    probs = T([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.25, 0.25]])
    mask = T([[1, 1, 0], [1, 1, 0], [1, 1, 1]]).bool()
    ids = group_ids_from_keys([(" A", " B"), (" A", " B"), (" A", " B", " C")])
    # group 2: KL(U3 || [.5, .25, .25]) = (1/3)(ln(1/3/.5) + 2 ln(1/3/.25))
    g2 = (math.log((1 / 3) / 0.5) + 2 * math.log((1 / 3) / 0.25)) / 3
    assert float(menu_marginal_kl(probs.log(), mask, ids)) == pytest.approx(g2 / 2, abs=1e-6)
    with pytest.raises(ObjectiveInputError, match="same menu_mask"):
        menu_marginal_kl(probs.log(), mask, T([0, 0, 0]))


def test_menu_kl_gradient_debiases_marginal():
    # both decisions prefer label A: the KL gradient pushes A's logit down on average
    logits = T([[2.0, 0.0], [1.0, 0.0]], requires_grad=True)
    mask = torch.ones(2, 2, dtype=torch.bool)
    menu_marginal_kl(menu_log_softmax(logits, mask), mask, T([0, 0])).backward()
    assert float(logits.grad[:, 0].sum()) > 0 > float(logits.grad[:, 1].sum())


def test_rlid_loss_composition_and_bias_control_options():
    logits = T([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.5, 0.5, 0.0]], requires_grad=True)
    mask = T([[1, 1, 0], [1, 1, 0], [1, 1, 1]]).bool()
    lp = menu_log_softmax(logits, mask)
    args = dict(actions=T([0, 1, 2]), old_log_prob=lp.detach()[[0, 1, 2], [0, 1, 2]],
                advantages=T([1.0, -1.0, 0.5]), episode_ids=T([0, 0, 1]), menu_mask=mask,
                menu_ids=T([0, 0, 1]))
    # on-policy ratio 1: ppo_i = -A_i; weights [.75, .75, 1.5] -> (-.75 + .75 - .75) / 3
    none = rlid_loss(RLiDLossConfig(bias_control="none"), lp, **args)
    assert none.loss.item() == pytest.approx(-0.25)
    kl = menu_marginal_kl(lp, mask, args["menu_ids"])
    mk = rlid_loss(RLiDLossConfig(bias_control="menu_kl", beta_menu=0.5), lp, **args)
    assert mk.loss.item() == pytest.approx(-0.25 + 0.5 * kl.item())
    ent = decision_entropy(lp, mask).mean()
    en = rlid_loss(RLiDLossConfig(bias_control="entropy", entropy_coef=0.1), lp, **args)
    assert en.loss.item() == pytest.approx(-0.25 - 0.1 * ent.item())
    flat = rlid_loss(RLiDLossConfig(bias_control="none", length_balance=False), lp, **args)
    assert flat.loss.item() == pytest.approx((-1.0 + 1.0 - 0.5) / 3)
    mk.loss.backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0
    assert set(BIAS_TERMS) == {"none", "menu_kl", "entropy"}


def test_rlid_config_validation():
    with pytest.raises(ConfigError, match="'none', 'menu_kl', 'entropy'"):
        RLiDLossConfig(bias_control="both")
    with pytest.raises(ConfigError):
        RLiDLossConfig(beta_menu=-1.0)
