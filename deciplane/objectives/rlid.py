"""RLiD — reinforcement learning in the decision plane (docs/methods.md §1), paper-exact formulas.

A decision is a softmax over the label tokens of a menu: ``log_probs (N, K)`` with a
``menu_mask (N, K)`` true on the first ``K_i`` slots (the menu's labels). Each row is one
decision ``i`` of episode ``episode_ids[i]``, taken on menu ``menu_ids[i]`` (same id =
same label set).

* :func:`menu_log_softmax` — ``pi(k|s) = exp(z[l_k]) / sum_j exp(z[l_j])`` over the menu only;
* :func:`decision_ppo_loss` — ``-min(r A, clip(r) A)`` per decision, with the old log-prob
  stored at rollout time (never recomputed);
* :func:`length_balanced_weights` — ``w_i = Lbar / L_e``; :func:`weighted_mean` is the
  plain ``(1/N) sum_i w_i loss_i`` (**not** divided by ``sum_i w_i``);
* :func:`menu_marginal_kl` — ``KL(U_K || pbar)``, ``pbar`` = mean decision distribution of
  each menu group; removes label/position bias without making each decision random;
* :func:`decision_entropy` — the separate per-decision entropy bonus option.

:func:`rlid_loss` composes them from an :class:`RLiDLossConfig`; its ``bias_control`` option
selects exactly one of ``menu_kl`` | ``entropy`` | ``none``, so the two are never mixed
in the same update. (0.1 also listed ``calibration``, contextual calibration by a
content-free prompt, but no agent applied it and the trainer could not select it; it is
removed in 0.2 — see docs/methods.md.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from deciplane.errors import ObjectiveInputError
from deciplane.options import check_options, option

from deciplane._moved import renamed_names

from .common import (_check_ids, as_bool_mask, check_dim, check_same_shape, dense_ids, segment_sum)
from .policy_loss import LossOutput, clipped_surrogate

BiasControl = Literal["none", "menu_kl", "entropy"]

_NEG = -1e9  # finite "minus infinity": keeps gradients NaN-free on masked slots


def _check_menu(log_probs: torch.Tensor, menu_mask: torch.Tensor) -> torch.Tensor:
    check_dim("log_probs", log_probs, 2)
    check_same_shape(log_probs=log_probs, menu_mask=menu_mask)
    m = as_bool_mask(menu_mask)
    if not m.any(dim=1).all():
        raise ObjectiveInputError("a decision has an empty menu (menu_mask row all False); "
                                  "drop decisions taken on states without legal actions")
    return m


def _finite(log_probs: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Replace off-menu slots and -inf (probability 0) by a finite very negative value,
    so ``p * log p`` is 0 and no gradient is NaN."""
    return torch.where(m, log_probs.clamp(min=_NEG), torch.full_like(log_probs, _NEG))


def menu_log_softmax(label_logits: torch.Tensor, menu_mask: torch.Tensor) -> torch.Tensor:
    """Log-softmax over the menu's label tokens only: (N, K), (N, K) -> (N, K).

    Slots outside the menu get a very negative finite value (probability 0).
    """
    m = _check_menu(label_logits, menu_mask)
    z = torch.where(m, label_logits.float(), torch.full_like(label_logits.float(), _NEG))
    return torch.log_softmax(z, dim=-1)                                         # (N, K)


def decision_ppo_loss(log_probs: torch.Tensor, actions: torch.Tensor,
                      old_log_prob: torch.Tensor, advantages: torch.Tensor,
                      eps_low: float = 0.2, eps_high: float | None = None) -> torch.Tensor:
    """Per-decision PPO loss ``-min(r A, clip(r, 1-eps_low, 1+eps_high) A)``: (N,).

    ``log_probs (N, K)`` are the current menu log-probs, ``actions (N,)`` the chosen
    indices, ``old_log_prob (N,)`` the chosen action's log-prob stored at rollout time.
    """
    check_dim("log_probs", log_probs, 2)
    n = log_probs.shape[0]
    for name, t in (("actions", actions), ("old_log_prob", old_log_prob),
                    ("advantages", advantages)):
        if t.shape != (n,):
            raise ObjectiveInputError(f"{name} must be (N,) with N={n}, got {list(t.shape)}")
    act = actions.long().to(log_probs.device)                                   # (N,)
    new = log_probs.gather(1, act[:, None]).squeeze(1)                          # (N,)
    old = old_log_prob.detach().to(new.device, new.dtype)                       # (N,)
    adv = advantages.detach().to(new.device, new.dtype)                         # (N,)
    ratio = (new - old).exp()                                                   # (N,)
    high = eps_low if eps_high is None else eps_high
    return clipped_surrogate(ratio, adv, eps_low, high)                         # (N,)


def length_balanced_weights(episode_ids: torch.Tensor) -> torch.Tensor:
    """``w_i = Lbar / L_e``: (N,) -> (N,).

    ``L_e`` is the number of decisions of episode ``e`` in the batch and ``Lbar`` the mean
    of ``L_e`` over the batch's episodes, so every episode carries the same total weight
    ``Lbar``. Example: episodes of 2 and 1 decisions -> ``[.75, .75, 1.5]``.
    """
    ids, e = dense_ids(_check_ids(episode_ids, episode_ids.shape[0], "episode_ids"))
    ones = torch.ones(ids.shape[0], device=ids.device)                          # (N,)
    lengths = segment_sum(ones, ids, e)                                         # (E,)
    return lengths.mean() / lengths[ids]                                        # (N,)


def weighted_mean(losses: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Plain mean of weighted losses ``(1/N) sum_i w_i loss_i`` — not divided by sum(w)."""
    if losses.shape != weights.shape or losses.dim() != 1:
        raise ObjectiveInputError(f"losses {list(losses.shape)} and weights "
                                  f"{list(weights.shape)} must both be (N,)")
    return (weights.detach() * losses).sum() / max(losses.shape[0], 1)


def menu_marginal_kl(log_probs: torch.Tensor, menu_mask: torch.Tensor,
                     menu_ids: torch.Tensor, min_group_size: int = 1) -> torch.Tensor:
    """``KL(U_K || pbar)`` per menu group, averaged over groups: scalar.

    ``pbar = mean_i pi(.|s_i)`` over the decisions of a group (same label set), and
    ``KL(U_K || pbar) = sum_k (1/K) (log(1/K) - log pbar_k)``. Groups with fewer than
    ``min_group_size`` decisions are skipped (for a single decision the term is the
    KL to uniform of that decision). Returns 0 if no group qualifies.
    """
    m = _check_menu(log_probs, menu_mask)
    ids, g = dense_ids(_check_ids(menu_ids, log_probs.shape[0], "menu_ids")
                       .to(log_probs.device))
    rows = torch.arange(ids.shape[0], device=ids.device)                        # (N,)
    first = torch.zeros(g, dtype=torch.long, device=ids.device).scatter_reduce(
        0, ids, rows, "amin", include_self=False)                               # (G,)
    group_mask = m[first]                                                       # (G, K)
    if (m != group_mask[ids]).any():
        raise ObjectiveInputError("decisions with the same menu_id must have the same "
                                  "menu_mask; key menu_ids by the label tuple of the menu")
    log_probs = _finite(log_probs, m)                                           # (N, K)
    probs = torch.where(m, log_probs.exp(), torch.zeros_like(log_probs))        # (N, K)
    size = segment_sum(torch.ones_like(rows, dtype=probs.dtype), ids, g)        # (G,)
    pbar = segment_sum(probs, ids, g) / size[:, None]                           # (G, K)
    k = group_mask.sum(1).to(pbar.dtype)                                        # (G,)
    log_u = -k.log()                                                            # (G,)
    log_pbar = torch.where(group_mask, pbar.clamp_min(1e-30).log(),
                           torch.zeros_like(pbar))                              # (G, K)
    kl = ((log_u[:, None] - log_pbar) * group_mask).sum(1) / k                  # (G,)
    keep = size >= min_group_size                                               # (G,)
    if not keep.any():
        return log_probs.sum() * 0.0
    return kl[keep].mean()


def decision_entropy(log_probs: torch.Tensor, menu_mask: torch.Tensor) -> torch.Tensor:
    """Entropy of each decision's menu distribution (nats): (N, K) -> (N,)."""
    m = _check_menu(log_probs, menu_mask)
    log_probs = _finite(log_probs, m)                                           # (N, K)
    p = log_probs.exp()
    return -torch.where(m, p * log_probs, torch.zeros_like(p)).sum(1)           # (N,)


def _no_term(cfg: "RLiDLossConfig", log_probs: torch.Tensor, menu_mask: torch.Tensor,
             menu_ids: torch.Tensor, ent: torch.Tensor) -> tuple[torch.Tensor, dict]:
    return log_probs.new_zeros(()), {}


def _menu_kl_term(cfg: "RLiDLossConfig", log_probs: torch.Tensor, menu_mask: torch.Tensor,
                  menu_ids: torch.Tensor, ent: torch.Tensor) -> tuple[torch.Tensor, dict]:
    kl = menu_marginal_kl(log_probs, menu_mask, menu_ids, cfg.min_group_size)
    return cfg.beta_menu * kl, {"loss/menu_kl": float(kl.detach())}


def _entropy_term(cfg: "RLiDLossConfig", log_probs: torch.Tensor, menu_mask: torch.Tensor,
                  menu_ids: torch.Tensor, ent: torch.Tensor) -> tuple[torch.Tensor, dict]:
    return -cfg.entropy_coef * ent.mean(), {}


BIAS_TERMS = {
    "none": _no_term,
    "menu_kl": _menu_kl_term,
    "entropy": _entropy_term,
}
"""Typed ``bias_control`` option -> extra loss term ``(term, metrics)``."""


@dataclass(frozen=True)
class RLiDLossConfig:
    """PPO on menu decisions with length-balanced weights and one bias control."""

    eps_low: float = option(0.2, ge=0, le=1)
    """PPO clip (lower bound ``1 - eps_low``)."""
    eps_high: float | None = option(None, ge=0)
    """Upper clip ``1 + eps_high``; ``None`` = symmetric."""
    length_balance: bool = True
    """Weight decision ``i`` of episode ``e`` by ``Lbar / L_e`` (else all weights 1)."""
    bias_control: BiasControl = "menu_kl"
    """``menu_kl`` (marginal KL to uniform per menu) | ``entropy`` (per-decision bonus) |
    ``none``. Exactly one, never mixed."""
    beta_menu: float = option(0.01, ge=0)
    """Coefficient of ``KL(U || pbar)`` when ``bias_control='menu_kl'`` (ours)."""
    entropy_coef: float = option(0.01, ge=0)
    """Coefficient of the entropy bonus when ``bias_control='entropy'`` (ours)."""
    min_group_size: int = option(1, ge=1)
    """Menu groups with fewer decisions are left out of ``menu_kl``."""

    def __post_init__(self) -> None:
        check_options(self, "RLiDLossConfig.")


def rlid_loss(cfg: RLiDLossConfig, log_probs: torch.Tensor, actions: torch.Tensor,
              old_log_prob: torch.Tensor, advantages: torch.Tensor,
              episode_ids: torch.Tensor, menu_mask: torch.Tensor, menu_ids: torch.Tensor,
              weights: torch.Tensor | None = None) -> LossOutput:
    """RLiD loss on a batch of decisions.

    ``loss = (1/N) sum_i w_i ppo_i  [+ beta_menu * KL(U || pbar)  |  - entropy_coef * H]``.

    Pass ``weights`` (from :func:`length_balanced_weights` on the whole optimizer batch)
    when this call sees only a micro-batch; otherwise they are computed from
    ``episode_ids`` of the decisions given.
    """
    m = _check_menu(log_probs, menu_mask)
    per = decision_ppo_loss(log_probs, actions, old_log_prob, advantages, cfg.eps_low,
                            cfg.eps_high)                                       # (N,)
    if weights is None:
        weights = (length_balanced_weights(episode_ids) if cfg.length_balance
                   else torch.ones_like(per))                                   # (N,)
    pg = weighted_mean(per, weights.to(per.device, per.dtype))
    ent = decision_entropy(log_probs, m)                                        # (N,)
    metrics = {"loss/policy": float(pg.detach()),
               "policy/entropy": float(ent.detach().mean()) if ent.numel() else 0.0}
    term, extra = BIAS_TERMS[cfg.bias_control](cfg, log_probs, m, menu_ids, ent)
    loss = pg + term
    metrics.update(extra)
    metrics["loss/total"] = float(loss.detach())
    return LossOutput(loss, metrics)


__getattr__ = renamed_names(__name__)
