"""Token-level policy losses of the PPO/GRPO family (docs/methods.md §4).

Every per-token tensor is ``(B, T)`` with a ``mask (B, T)`` that is true on response
tokens only: prompt and padding never enter a mean or a length.

* ratios: :func:`token_ratio` (PPO/GRPO) or :func:`gspo_token_ratio` (GSPO: the sequence
  ratio ``exp(mean_t log ratio)``, applied to every token so it is clipped per sequence);
* :func:`clipped_surrogate` — ``-min(r A, clip(r, 1-eps_low, 1+eps_high) A)``; symmetric
  clipping is ``eps_low == eps_high``, DAPO clip-higher is ``eps_high > eps_low``;
* :func:`aggregate` — ``token_mean`` (DAPO: mean over all valid tokens of the batch),
  ``seq_mean`` (mean per response, then over responses; GRPO/GSPO), ``seq_sum_const``
  (Dr. GRPO: sum per response / a constant max length, then mean over responses);
* :func:`kl_k3` (and ``k1``, ``k2``) — per-token KL estimators to the frozen **reference**;
  the **old** policy (sampling, ratios) is a different role: ``old_logp`` vs ``ref_logp``.

:func:`policy_loss` composes them from a :class:`PolicyLossConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

import torch

from deciplane.errors import ConfigError, ObjectiveInputError
from deciplane.options import check_options, option

from .common import (as_bool_mask, check_choice, check_dim, check_same_shape,
                     masked_mean, masked_sum, per_sample)

Aggregation = Literal["token_mean", "seq_mean", "seq_sum_const"]
RatioLevel = Literal["token", "sequence"]
KLEstimator = Literal["k1", "k2", "k3"]


# ---------------------------------------------------------------------------------------
# ratios
# ---------------------------------------------------------------------------------------


def token_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor
                ) -> torch.Tensor:
    """Per-token importance ratio ``exp(logp - old_logp)`` (B, T); 1 on masked-out tokens."""
    m = as_bool_mask(mask)
    log_r = torch.where(m, logp - old_logp.detach(), torch.zeros_like(logp))   # (B, T)
    return log_r.exp()


def gspo_sequence_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor
                        ) -> torch.Tensor:
    """GSPO sequence ratio ``s_i = exp(mean_{t valid} (logp - old_logp))``: (B,)."""
    log_r = logp - old_logp.detach()                                            # (B, T)
    return masked_mean(log_r, mask, dim=1).exp()                                # (B,)


def gspo_token_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor
                     ) -> torch.Tensor:
    """GSPO-token ratio ``sg[s_i] * exp(logp_t - sg[logp_t])``: (B, T).

    Its value is the sequence ratio ``s_i`` on every token of response ``i`` (so clipping
    acts per sequence); with ``seq_mean`` aggregation its gradient equals GSPO's
    ``s_i * (1/|y_i|) sum_t grad logp_t``.
    """
    m = as_bool_mask(mask)
    log_s = masked_mean(logp - old_logp.detach(), m, dim=1)                     # (B,)
    log_r = log_s.detach()[:, None] + logp - logp.detach()                      # (B, T)
    return torch.where(m, log_r, torch.zeros_like(logp)).exp()                  # (B, T)


RATIOS: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "token": token_ratio,
    "sequence": gspo_token_ratio,
}
"""Typed option -> ratio function ``(logp, old_logp, mask) -> (B, T)``."""


# ---------------------------------------------------------------------------------------
# surrogate
# ---------------------------------------------------------------------------------------


def clipped_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float,
                      eps_high: float) -> torch.Tensor:
    """PPO clipped surrogate loss per element: ``-min(r A, clip(r, 1-eps_low, 1+eps_high) A)``."""
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    return -torch.minimum(ratio * advantages, clipped * advantages)


def clip_fraction(ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                  eps_low: float, eps_high: float) -> torch.Tensor:
    """Share of valid tokens where the clipped branch is active (gradient zeroed)."""
    active = ((ratio > 1 + eps_high) & (advantages > 0)) | ((ratio < 1 - eps_low) &
                                                              (advantages < 0))
    return masked_mean(active.float(), mask)


# ---------------------------------------------------------------------------------------
# aggregation
# ---------------------------------------------------------------------------------------


def token_mean(token_loss: torch.Tensor, mask: torch.Tensor, max_len: int | None = None
               ) -> torch.Tensor:
    """DAPO: mean over all valid tokens of the batch (long responses weigh more)."""
    return masked_mean(token_loss, mask)


def seq_mean(token_loss: torch.Tensor, mask: torch.Tensor, max_len: int | None = None
             ) -> torch.Tensor:
    """Mean over each response's valid tokens, then over responses with >= 1 valid token."""
    m = as_bool_mask(mask)
    per_seq = masked_mean(token_loss, m, dim=1)                                 # (B,)
    has = m.any(dim=1)                                                          # (B,)
    return masked_mean(per_seq, has)


def seq_sum_const(token_loss: torch.Tensor, mask: torch.Tensor, max_len: int | None = None
                  ) -> torch.Tensor:
    """Dr. GRPO: each response's token sum divided by the constant ``max_len``, then the
    mean over responses (every row counts, so the normaliser never depends on lengths)."""
    if max_len is None or max_len <= 0:
        raise ConfigError("aggregation='seq_sum_const' needs max_len > 0 (the generation "
                          "limit, e.g. max_new_tokens); pass PolicyLossConfig(max_len=...)")
    per_seq = masked_sum(token_loss, mask, dim=1) / max_len                     # (B,)
    return per_seq.mean()


AGGREGATIONS: dict[str, Callable[..., torch.Tensor]] = {
    "token_mean": token_mean,
    "seq_mean": seq_mean,
    "seq_sum_const": seq_sum_const,
}
"""Typed option -> ``(token_loss (B, T), mask (B, T), max_len) -> scalar``."""


def aggregate(token_loss: torch.Tensor, mask: torch.Tensor, mode: Aggregation = "token_mean",
              max_len: int | None = None) -> torch.Tensor:
    """Reduce a per-token loss to a scalar with the chosen aggregation."""
    check_choice("aggregate", "mode", mode, Aggregation)
    check_same_shape(token_loss=token_loss, mask=mask)
    return AGGREGATIONS[mode](token_loss, mask, max_len)


def aggregation_weights(mode: Aggregation, lengths: Sequence[int]) -> list[int]:
    """The normaliser of an aggregation over a batch of responses of ``lengths`` tokens:
    each response's units in the batch mean — its tokens (``token_mean``), 1 for a
    response with at least one token (``seq_mean``), 1 for every response
    (``seq_sum_const``). A micro-batch's aggregated loss times its share of these units
    sums, over the micro-batches, to the aggregated loss of the whole batch."""
    check_choice("aggregation_weights", "mode", mode, Aggregation)
    if mode == "token_mean":
        return [int(n) for n in lengths]
    if mode == "seq_mean":
        return [int(int(n) > 0) for n in lengths]
    return [1 for _ in lengths]


def aggregation_share(aggregation: Aggregation, mask: torch.Tensor, total_tokens: int,
                      total_rows: int) -> float:
    """Weight of one micro-batch's aggregated loss in the full-batch loss (``mask (b, R)``
    of the micro-batch): token share for ``token_mean``, row share otherwise. Kept from
    0.1; the engine uses :func:`aggregation_weights`."""
    if aggregation == "token_mean":
        return int(mask.sum()) / max(total_tokens, 1)
    rows = int(mask.any(dim=1).sum()) if aggregation == "seq_mean" else mask.shape[0]
    return rows / max(total_rows, 1)


# ---------------------------------------------------------------------------------------
# KL to the reference
# ---------------------------------------------------------------------------------------


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 estimator of KL(pi || ref) per sampled token: ``logp - ref_logp``."""
    return logp - ref_logp.detach()


def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k2 estimator: ``0.5 * (logp - ref_logp)^2``."""
    return 0.5 * (logp - ref_logp.detach()) ** 2


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator (Schulman; GRPO): ``exp(ref - logp) - (ref - logp) - 1`` >= 0, per token."""
    d = ref_logp.detach() - logp                                                # (B, T)
    return d.exp() - d - 1.0


KL_ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "k1": kl_k1,
    "k2": kl_k2,
    "k3": kl_k3,
}


# ---------------------------------------------------------------------------------------
# composed loss
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyLossConfig:
    """Clipped policy-gradient loss with an optional KL penalty to a frozen reference."""

    eps_low: float = option(0.2, ge=0, le=1)
    """Lower clip: ratios below ``1 - eps_low`` are clipped (for A < 0)."""
    eps_high: float | None = option(None, ge=0)
    """Upper clip ``1 + eps_high``; ``None`` = symmetric (``eps_low``). DAPO clip-higher: 0.28."""
    ratio: RatioLevel = "token"
    """``token`` (PPO/GRPO) or ``sequence`` (GSPO: length-normalised sequence ratio; the
    published GSPO pairs it with ``aggregation='seq_mean'`` and much smaller clip ranges)."""
    aggregation: Aggregation = "token_mean"
    """``token_mean`` (DAPO) | ``seq_mean`` (GRPO/GSPO) | ``seq_sum_const`` (Dr. GRPO)."""
    max_len: int | None = None
    """Constant divisor of ``seq_sum_const`` (the generation limit)."""
    kl_beta: float = option(0.0, ge=0)
    """Coefficient of the KL penalty to the reference policy (0 = no reference needed)."""
    kl_estimator: KLEstimator = "k3"
    """Per-token KL estimator: ``k1`` | ``k2`` | ``k3``."""

    def __post_init__(self) -> None:
        check_options(self, "PolicyLossConfig.")
        if self.aggregation == "seq_sum_const" and (self.max_len is None or self.max_len <= 0):
            raise ConfigError("PolicyLossConfig.aggregation='seq_sum_const' needs max_len > 0 "
                              "(the generation limit); set max_len=...")

    @property
    def high(self) -> float:
        return self.eps_low if self.eps_high is None else self.eps_high


@dataclass
class LossOutput:
    """A scalar loss to backpropagate and detached metrics (namespaced names)."""

    loss: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


def policy_loss(cfg: PolicyLossConfig, logp: torch.Tensor, old_logp: torch.Tensor,
                advantages: torch.Tensor, mask: torch.Tensor,
                ref_logp: torch.Tensor | None = None) -> LossOutput:
    """Clipped policy loss (+ ``kl_beta`` * KL to the reference), aggregated per ``cfg``.

    Args:
        logp: ``(B, T)`` log-probs of the sampled tokens under the current policy.
        old_logp: ``(B, T)`` the same under the sampling (old) policy, from the rollout.
        advantages: ``(B,)`` per response or ``(B, T)`` per token.
        mask: ``(B, T)`` true on response tokens.
        ref_logp: ``(B, T)`` under the frozen reference; required when ``kl_beta > 0``.
    """
    check_dim("logp", logp, 2)
    check_same_shape(logp=logp, old_logp=old_logp, mask=mask, ref_logp=ref_logp)
    m = as_bool_mask(mask)
    # padding may hold garbage (even inf): zero it so no NaN can leak into a gradient
    zero = logp.new_zeros(())
    logp, old_logp = torch.where(m, logp, zero), torch.where(m, old_logp, zero)  # (B, T)
    if ref_logp is not None:
        ref_logp = torch.where(m, ref_logp, zero)                               # (B, T)
    adv = per_sample(advantages.detach().to(logp.device, logp.dtype), logp)                  # (B, T)
    adv = torch.where(m, adv, zero)                                             # (B, T)
    ratio = RATIOS[cfg.ratio](logp, old_logp, m)                                # (B, T)
    pg = clipped_surrogate(ratio, adv, cfg.eps_low, cfg.high)                   # (B, T)
    pg_loss = aggregate(pg, m, cfg.aggregation, cfg.max_len)
    metrics = {
        "loss/policy": float(pg_loss.detach()),
        "policy/clip_frac": float(clip_fraction(ratio.detach(), adv, m, cfg.eps_low,
                                                cfg.high)),
        "policy/ratio_mean": float(masked_mean(ratio.detach(), m)),
    }
    loss = pg_loss
    if cfg.kl_beta > 0:
        if ref_logp is None:
            raise ObjectiveInputError("kl_beta > 0 needs ref_logp (log-probs of the frozen "
                                      "reference policy); pass it or set kl_beta=0")
        kl = KL_ESTIMATORS[cfg.kl_estimator](logp, ref_logp)                    # (B, T)
        kl_loss = aggregate(kl, m, cfg.aggregation, cfg.max_len)
        loss = loss + cfg.kl_beta * kl_loss
        metrics["loss/kl"] = float(kl_loss.detach())
    metrics["loss/total"] = float(loss.detach())
    return LossOutput(loss, metrics)
