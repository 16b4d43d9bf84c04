"""TTPO loss pieces (docs/methods.md §5.2): on-policy self-distillation on answers that agree
with the majority, grouped RL on confident errors for answers that disagree.

Voting, sampling and the teacher prompt live in the adapter; this module is pure tensor
math on ``(B, T)`` per-token quantities of ``B`` responses (``mask`` true on response
tokens):

* :func:`ttpo_token_weights` — ``w(t) = H + D - H*D``: ``H`` the student entropy clipped
  at its 98th percentile, ``D`` the teacher-student divergence, each min-max normalised
  per sample (tokens with low entropy and low divergence get weight ~0);
* :func:`opsd_loss` — ``L_OPSD = (1/T) sum_t w(t) KL(q_t || p_t)`` per sample;
* :func:`confident_error_scores` — ``s(t) = -log p_t(y_t) * (1 - H(t))``;
* :func:`median_mask` — ``m(t) = 1[s(t) >= median of s over the valid tokens of the
  micro-batch]``;
* :func:`negative_branch_loss` — ``L_N = -(A/T) sum_t m(t) log pi_theta(y_t)``;
* :func:`ttpo_loss` — ``L = (1/|B|)(sum_P L_OPSD + lambda sum_N L_N)``.

Our readings where the text leaves a choice (stated here, not hidden): the 98th
percentile and the min-max range are taken per sample over its valid tokens; ``H(t)``
inside ``s(t)`` is that same clipped, min-max normalised entropy (so ``1 - H`` lies in
[0, 1]); ``T`` is the sample's number of valid tokens; a sample whose values are all
equal normalises to 0; the median of ``s`` is taken over the valid tokens of the
micro-batch's disagree rows (the only rows ``L_N`` touches); only negative advantages
enter ``L_N`` (``A`` clamped to <= 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from deciplane.errors import ObjectiveInputError
from deciplane.options import check_options, option

from deciplane._moved import renamed_names

from .common import (as_bool_mask, check_dim, check_same_shape,
                     masked_mean, masked_minmax_normalize, masked_quantile, masked_sum)
from .policy_loss import LossOutput


def clip_at_quantile(x: torch.Tensor, mask: torch.Tensor, q: float = 0.98) -> torch.Tensor:
    """Clip each row of ``x`` (B, T) from above at the ``q``-quantile of its valid values."""
    m = as_bool_mask(mask)
    nan = torch.full_like(x, float("nan"), dtype=torch.float64)
    vals = torch.where(m, x.detach().to(torch.float64), nan)                    # (B, T)
    cap = torch.nanquantile(vals, q, dim=1, keepdim=True).to(x.dtype)           # (B, 1)
    return torch.where(torch.isnan(cap), x, torch.minimum(x, cap))              # (B, T)


def normalized_entropy(entropy: torch.Tensor, mask: torch.Tensor, q: float = 0.98
                       ) -> torch.Tensor:
    """Entropy clipped at its per-sample ``q``-quantile, then min-max normalised: (B, T)."""
    return masked_minmax_normalize(clip_at_quantile(entropy.detach(), mask, q), mask)


def ttpo_token_weights(entropy: torch.Tensor, divergence: torch.Tensor, mask: torch.Tensor,
                       entropy_clip_quantile: float = 0.98) -> torch.Tensor:
    """``w(t) = H + D - H*D`` in [0, 1] (detached): (B, T).

    ``entropy`` is the student's entropy per token, ``divergence`` the teacher-student
    divergence per token (e.g. ``KL(q_t || p_t)``); both are normalised per sample.
    """
    check_same_shape(entropy=entropy, divergence=divergence, mask=mask)
    h = normalized_entropy(entropy, mask, entropy_clip_quantile)                # (B, T)
    d = masked_minmax_normalize(divergence.detach(), mask)                      # (B, T)
    return h + d - h * d                                                        # (B, T)


def _valid_counts(mask: torch.Tensor) -> torch.Tensor:
    return as_bool_mask(mask).sum(1).clamp(min=1)                               # (B,)


def opsd_loss(kl: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """On-policy self-distillation per sample ``(1/T) sum_t w(t) KL(q_t || p_t)``: (B,).

    ``kl (B, T)`` carries the gradient (a function of the student), ``weights`` are
    treated as constants.
    """
    check_same_shape(kl=kl, weights=weights, mask=mask)
    return masked_sum(weights.detach() * kl, mask, dim=1) / _valid_counts(mask)


def confident_error_scores(logp: torch.Tensor, entropy_norm: torch.Tensor) -> torch.Tensor:
    """``s(t) = -log p_t(y_t) * (1 - H(t))`` with ``H`` normalised to [0, 1]: (B, T), detached."""
    check_same_shape(logp=logp, entropy_norm=entropy_norm)
    return -logp.detach() * (1.0 - entropy_norm.detach())


def median_mask(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``1[s(t) >= median]`` with the median over all valid tokens of the micro-batch
    (numpy's median: mean of the two middle values for an even count): (B, T) bool."""
    m = as_bool_mask(mask)
    med = masked_quantile(scores, m, 0.5)
    if torch.isnan(med):
        return torch.zeros_like(m)
    return (scores >= med) & m


def negative_branch_loss(logp: torch.Tensor, advantages: torch.Tensor,
                         token_mask: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``L_N = -(A/T) sum_t m(t) log pi_theta(y_t)`` per sample: (B,).

    ``advantages (B,)`` are clamped to ``<= 0`` (only errors are pushed down);
    ``token_mask`` is ``m(t)``; ``T`` is the sample's number of valid tokens.
    """
    check_same_shape(logp=logp, token_mask=token_mask, mask=mask)
    if advantages.shape != (logp.shape[0],):
        raise ObjectiveInputError(f"advantages must be (B,) with B={logp.shape[0]}, got "
                                  f"{list(advantages.shape)}")
    a = advantages.detach().to(logp.device, logp.dtype).clamp(max=0.0)                      # (B,)
    sel = as_bool_mask(token_mask) & as_bool_mask(mask)                         # (B, T)
    return -(a / _valid_counts(mask)) * masked_sum(logp, sel, dim=1)            # (B,)


def top_p_support(logp: torch.Tensor, top_p: float) -> torch.Tensor:
    """Bool mask ``(..., V)`` of the smallest set of tokens whose probability under
    ``logp`` (log-probs, last dim the vocabulary) reaches ``top_p`` (nucleus sampling's
    set; the most likely token is always in it). Example: probs ``[0.5, 0.3, 0.2]``,
    ``top_p=0.7`` -> ``[True, True, False]``."""
    probs = logp.detach().exp()
    sorted_p, order = probs.sort(-1, descending=True)
    before = sorted_p.cumsum(-1) - sorted_p            # mass of the tokens ranked above
    keep_sorted = before < top_p
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def restrict_teacher(teacher_logp: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """The teacher's log-probs renormalised over ``support`` (-inf outside it): ``(..., V)``.
    Example: teacher probs ``[0.6, 0.3, 0.1]``, support ``[False, True, True]`` ->
    ``[0, 0.75, 0.25]``."""
    masked = teacher_logp.masked_fill(~support, float("-inf"))
    return masked - torch.logsumexp(masked, dim=-1, keepdim=True)


def agree_branch_kl(student_logp: torch.Tensor, teacher_logp: torch.Tensor | None,
                    rows: Sequence[int], lengths: Sequence[int],
                    support_top_p: float | None = None) -> torch.Tensor:
    """Per-token ``KL(q_t || p_t)`` on the agree rows, 0 elsewhere: ``(B, R)``.

    ``student_logp (B, R, V)``: log-softmax of the student ``pi_theta(.|x, y_<t)`` (with
    grad), responses right-aligned; ``teacher_logp (P, Rp, V)``: the teacher
    ``pi(.|[x; "answer: a_hat"], y_<t)`` for ``rows`` (the agree rows of the micro-batch,
    in order), also right-aligned; ``lengths[j]`` = response length of row ``j``.

    ``support_top_p`` (ours; ``None`` = the paper's full-vocabulary KL): the teacher is
    first restricted to the student's own top-p set at each token
    (:func:`top_p_support`, :func:`restrict_teacher`), so the teacher can reweight what the
    student would say but not pull in tokens it would not — told the answer, the teacher
    wants to state it at the first token, which taught the student to answer with a
    bare number (docs/methods.md §5.2).
    """
    b, width, _ = student_logp.shape
    kl = student_logp.new_zeros((b, width))                                      # (B, R)
    if teacher_logp is None or not rows:
        return kl
    for k, j in enumerate(rows):
        r = int(lengths[j])
        q = teacher_logp[k, teacher_logp.shape[1] - r:].detach()                 # (r, V)
        p = student_logp[j, width - r:]                                          # (r, V)
        if support_top_p is not None:   # -inf outside the support -> a 0 term, not 0 * inf
            q = restrict_teacher(q, top_p_support(p, support_top_p)).clamp(min=torch.finfo(q.dtype).min)
        kl_j = (q.exp() * (q - p)).sum(-1)                                       # (r,)
        rows_idx = torch.full((r,), j, device=kl.device)
        kl = kl.index_put((rows_idx, torch.arange(width - r, width, device=kl.device)), kl_j)
    return kl


@dataclass(frozen=True)
class TTPOLossConfig:
    """TTPO loss settings (paper defaults). The adapter's options are
    :class:`deciplane.methods.ttpo.TTPOConfig`; this is the loss's (0.1 called it ``TTPOConfig``
    too — that name still imports from here, with a DeprecationWarning)."""

    lam: float = option(0.1, ge=0)
    """Weight ``lambda`` of the disagree-branch loss ``L_N``."""
    entropy_clip_quantile: float = option(0.98, ge=0, le=1)
    """Quantile at which the student entropy is clipped before normalisation."""

    def __post_init__(self) -> None:
        check_options(self, "TTPOLossConfig.")


def ttpo_loss(cfg: TTPOLossConfig, kl: torch.Tensor, entropy: torch.Tensor, logp: torch.Tensor,
              mask: torch.Tensor, agree: torch.Tensor, advantages: torch.Tensor
              ) -> LossOutput:
    """``L = (1/|B|)(sum_{i in P} L_OPSD_i + lambda sum_{i in N} L_N_i)``.

    Args:
        kl: ``(B, T)`` ``KL(q_t || p_t)`` teacher vs student per token (with gradient
            through the student); ignored on disagree rows.
        entropy: ``(B, T)`` student entropy per token (nats).
        logp: ``(B, T)`` student log-prob of the sampled tokens (with gradient).
        mask: ``(B, T)`` response tokens.
        agree: ``(B,)`` bool, True for the agree set P (answer == majority).
        advantages: ``(B,)`` grouped advantages; used on disagree rows (``A < 0``).
    """
    check_dim("logp", logp, 2)
    check_same_shape(kl=kl, entropy=entropy, logp=logp, mask=mask)
    m = as_bool_mask(mask)
    agree = agree.bool()
    if agree.shape != (logp.shape[0],):
        raise ObjectiveInputError(f"agree must be (B,) with B={logp.shape[0]}")
    zero = logp.new_zeros(())
    kl, logp = torch.where(m, kl, zero), torch.where(m, logp, zero)             # (B, T)
    w = ttpo_token_weights(entropy, kl.detach(), m, cfg.entropy_clip_quantile)  # (B, T)
    l_opsd = opsd_loss(kl, w, m)                                                # (B,)
    h = normalized_entropy(entropy, m, cfg.entropy_clip_quantile)               # (B, T)
    neg_rows = (~agree)[:, None] & m                                            # (B, T)
    s = confident_error_scores(logp, h)                                         # (B, T)
    mt = median_mask(s, neg_rows)                                               # (B, T)
    l_n = negative_branch_loss(logp, advantages, mt, m)                         # (B,)
    per = torch.where(agree, l_opsd, cfg.lam * l_n)                             # (B,)
    loss = per.sum() / max(per.shape[0], 1)
    metrics = {"loss/total": float(loss.detach()),
               "ttpo/opsd": float(l_opsd.detach()[agree].mean()) if agree.any() else 0.0,
               "ttpo/neg": float(l_n.detach()[~agree].mean()) if (~agree).any() else 0.0,
               "ttpo/weight_mean": float((w * m).sum() / m.sum().clamp(min=1)),
               "ttpo/masked_share": float(mt.sum() / neg_rows.sum().clamp(min=1))}
    metrics.update(branch_metrics(kl.detach(), w, entropy, m, agree, mt))
    return LossOutput(loss, metrics)


def branch_metrics(kl: torch.Tensor, weights: torch.Tensor, entropy: torch.Tensor,
                   mask: torch.Tensor, agree: torch.Tensor, neg_kept: torch.Tensor
                   ) -> dict[str, float]:
    """What each branch trains on, per micro-batch (means; 0 where a branch has no rows):

    * ``ttpo/agree_tokens``, ``ttpo/disagree_tokens``: valid tokens per row of each branch;
    * ``ttpo/agree_weight``: mean soft-OR weight ``w`` over the agree tokens (the share of
      them the weight keeps); ``ttpo/agree_kl``: mean ``KL(q_t || p_t)`` over them;
    * ``ttpo/agree_kl_first``: the KL at each agree row's first response token, and
      ``ttpo/agree_kl_first_share`` its share of the row's summed KL — where the teacher,
      told the answer, would rather state it at once than reason (the diagnosis of TTPO's
      collapse: docs/methods.md §5.2);
    * ``ttpo/disagree_kept``: tokens per disagree row the confident-error mask keeps;
    * ``ttpo/entropy``: mean student entropy (nats) over all valid tokens.
    """
    m = as_bool_mask(mask)
    agree = agree.bool()
    n_tok = m.sum(1).to(torch.float64)                                           # (B,)
    pos_tok = m & agree[:, None]                                                 # (B, T)
    first = torch.zeros_like(m)
    has = m.any(1)
    first[has, m[has].to(torch.int8).argmax(1)] = True                           # first valid token
    first &= agree[:, None]
    kl = kl.to(torch.float64)
    row_kl, first_kl = masked_sum(kl, pos_tok, dim=1), masked_sum(kl, first, dim=1)   # (B,)
    shares = [float(f / r) for f, r, a in zip(first_kl, row_kl, agree) if a and r > 0]
    n_pos, n_neg = int(agree.sum()), int((~agree).sum())
    return {"ttpo/agree_tokens": float(n_tok[agree].sum() / max(n_pos, 1)),
            "ttpo/disagree_tokens": float(n_tok[~agree].sum() / max(n_neg, 1)),
            "ttpo/agree_weight": float(masked_mean(weights.to(torch.float64), pos_tok)),
            "ttpo/agree_kl": float(masked_mean(kl, pos_tok)),
            "ttpo/agree_kl_first": float(masked_mean(kl, first)),
            "ttpo/agree_kl_first_share": sum(shares) / len(shares) if shares else 0.0,
            "ttpo/disagree_kept": float((neg_kept & m).sum() / max(n_neg, 1)),
            "ttpo/entropy": float(masked_mean(entropy.to(torch.float64), m))}


__getattr__ = renamed_names(__name__)
