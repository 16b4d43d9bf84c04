"""Probe-ERPO loss pieces (docs/methods.md §5.4) — **paper-inspired, parameters ours**.

Running candidates on probe inputs is the adapter's (and sandbox's) job; here:

* :func:`probe_consensus` — ``PCR_i`` = share of the ``K`` candidates (``i`` included)
  whose behaviour signature equals candidate ``i``'s;
* :func:`rank_mask` — the bottom fraction by PCR (default: strictly below the median)
  gets a negative advantage, the rest no gradient;
* :func:`erpo_advantages` — negative-only advantages (``-1`` or the margin
  ``PCR_i - threshold``); positive reinforcement of the top cluster is an option, off by
  default (maximising PCR directly is hackable by spurious consensus);
* :func:`entropy_ceiling` — ``alpha * relu(H - H_max)`` on the mean token entropy;
* :func:`erpo_loss` — policy gradient on those advantages (clipped ratio, token mean)
  plus the ceiling.

Every default value (fraction, advantage magnitude, ``alpha``, ``H_max``) is ours.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Hashable, Literal, Sequence

import torch

from deciplane.errors import ObjectiveInputError
from deciplane.options import check_options, option

from deciplane._moved import renamed_names

from .common import (as_bool_mask, check_choice, check_dim, check_same_shape,
                     masked_mean)
from .policy_loss import LossOutput, clipped_surrogate, token_mean

AdvantageForm = Literal["constant", "margin"]


def probe_consensus(signatures: Sequence[Hashable]) -> torch.Tensor:
    """``PCR_i = #{j : sig_j == sig_i} / K`` (candidate ``i`` counts itself): (K,) float."""
    k = len(signatures)
    if k == 0:
        raise ObjectiveInputError("probe_consensus needs at least one candidate signature")
    counts = Counter(signatures)
    return torch.tensor([counts[s] / k for s in signatures], dtype=torch.float32)


def rank_threshold(pcr: torch.Tensor, fraction: float = 0.5) -> torch.Tensor:
    """The ``fraction``-quantile of PCR (0.5 = median, numpy interpolation): scalar."""
    check_dim("pcr", pcr, 1)
    return torch.quantile(pcr.double(), fraction).to(pcr.dtype)


def rank_mask(pcr: torch.Tensor, fraction: float = 0.5) -> torch.Tensor:
    """Candidates with ``PCR < quantile(PCR, fraction)`` (strict, so ties are treated
    alike; all-equal PCR masks nobody): (K,) bool."""
    return pcr < rank_threshold(pcr, fraction)


def erpo_advantages(pcr: torch.Tensor, fraction: float = 0.5,
                    form: AdvantageForm = "constant", reinforce_top: bool = False
                    ) -> torch.Tensor:
    """Negative-only advantages per candidate: (K,).

    ``constant``: ``-1`` for the masked (bottom) candidates; ``margin``:
    ``PCR_i - threshold`` (< 0 for them). Everyone else gets 0, except, with
    ``reinforce_top=True``, the candidates of the largest cluster (``PCR == max`` and
    above the threshold), which get ``+1`` / ``PCR_i - threshold``.
    """
    check_choice("erpo_advantages", "form", form, AdvantageForm)
    thr = rank_threshold(pcr, fraction)
    value = torch.ones_like(pcr) if form == "constant" else (pcr - thr).abs()   # (K,)
    adv = torch.where(pcr < thr, -value, torch.zeros_like(pcr))                 # (K,)
    if reinforce_top:
        top = (pcr == pcr.max()) & (pcr > thr)                                  # (K,)
        adv = torch.where(top, value, adv)
    return adv


def entropy_ceiling(entropy: torch.Tensor, mask: torch.Tensor, alpha: float,
                    h_max: float) -> torch.Tensor:
    """``alpha * relu(mean_t H(t) - H_max)`` over the valid tokens of the batch: scalar."""
    check_same_shape(entropy=entropy, mask=mask)
    return alpha * torch.relu(masked_mean(entropy, mask) - h_max)


@dataclass(frozen=True)
class ERPOLossConfig:
    """Probe-ERPO loss settings — paper-inspired, every default is ours."""

    fraction: float = option(0.5, ge=0, le=1)
    """Candidates below this PCR quantile get a negative advantage (0.5 = below median)."""
    advantage: AdvantageForm = "constant"
    """``constant`` (-1) | ``margin`` (``PCR_i - threshold``)."""
    reinforce_top: bool = False
    """Also give the largest cluster a positive advantage (hackable; off by default)."""
    eps_low: float = option(0.2, ge=0, le=1)
    """PPO clip, lower (``1 - eps_low``)."""
    eps_high: float = option(0.2, ge=0)
    """PPO clip, upper (``1 + eps_high``)."""
    alpha: float = option(1.0, ge=0)
    """Weight of the entropy ceiling."""
    h_max: float = option(1.0, ge=0)
    """Entropy ceiling (nats, mean over tokens)."""

    def __post_init__(self) -> None:
        check_options(self, "ERPOLossConfig.")


def erpo_loss(cfg: ERPOLossConfig, logp: torch.Tensor, old_logp: torch.Tensor | None,
              advantages: torch.Tensor, mask: torch.Tensor, entropy: torch.Tensor
              ) -> LossOutput:
    """Clipped policy gradient on negative-only advantages (token mean) + entropy ceiling.

    Args:
        logp: ``(B, T)`` current log-probs of the candidates' tokens.
        old_logp: ``(B, T)`` sampling log-probs; ``None`` = on-policy (ratio 1).
        advantages: ``(B,)`` from :func:`erpo_advantages`.
        mask: ``(B, T)`` program tokens.
        entropy: ``(B, T)`` per-token entropy of the current policy (with gradient).
    """
    check_dim("logp", logp, 2)
    check_same_shape(logp=logp, old_logp=old_logp, mask=mask, entropy=entropy)
    if advantages.shape != (logp.shape[0],):
        raise ObjectiveInputError(f"advantages must be (B,) with B={logp.shape[0]}")
    m = as_bool_mask(mask)
    zero = logp.new_zeros(())
    logp = torch.where(m, logp, zero)                                           # (B, T)
    old = logp.detach() if old_logp is None else torch.where(m, old_logp, zero).detach()
    ratio = (logp - old).exp()                                                  # (B, T)
    a = advantages.detach().to(logp.device, logp.dtype)[:, None].expand_as(logp)             # (B, T)
    pg = token_mean(clipped_surrogate(ratio, a, cfg.eps_low, cfg.eps_high), m)
    ceil = entropy_ceiling(torch.where(m, entropy, zero), m, cfg.alpha, cfg.h_max)
    loss = pg + ceil
    return LossOutput(loss, {"loss/total": float(loss.detach()),
                             "loss/policy": float(pg.detach()),
                             "erpo/entropy_ceiling": float(ceil.detach()),
                             "erpo/entropy": float(masked_mean(entropy.detach(), m)),
                             "erpo/neg_share": float((advantages < 0).float().mean())})


__getattr__ = renamed_names(__name__)
