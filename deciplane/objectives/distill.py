"""Distillation and behaviour-cloning losses on menu decisions and on response tokens.

* :func:`expert_distill_loss` — ``KL(onehot(expert) || pi) = -log pi(expert | s)``, summed
  over the decisions that have an expert action (the env expert as the teacher, and the
  menu agent's behaviour-cloning warm start);
* :func:`policy_distill_loss` — ``sum_i KL(pi_teacher(.|s_i) || pi(.|s_i))`` over the menu
  slots (another policy as the teacher);
* :func:`token_nll` — mean per-token negative log-likelihood of target responses (the
  free-text agent's behaviour-cloning warm start).

Sums, not means: the caller's normaliser (:class:`deciplane.engine.optim.Normaliser`)
says what they are averaged over.
"""

from __future__ import annotations

import torch


def expert_distill_loss(log_probs: torch.Tensor, expert: list[int | None]
                        ) -> tuple[torch.Tensor, int]:
    """``-sum log pi(expert_i | s_i)`` over the rows whose ``expert[i]`` is not ``None``.

    ``log_probs (N, K)``: menu log-probs (padded slots -inf-like). Returns ``(sum, count)``.
    """
    rows = [i for i, e in enumerate(expert) if e is not None]
    if not rows:
        return log_probs.sum() * 0.0, 0
    idx = torch.tensor(rows, device=log_probs.device)
    tgt = torch.tensor([expert[i] for i in rows], dtype=torch.long, device=log_probs.device)
    return -log_probs[idx].gather(1, tgt[:, None]).sum(), len(rows)


def policy_distill_loss(log_probs: torch.Tensor, teacher_log_probs: torch.Tensor,
                        mask: torch.Tensor) -> torch.Tensor:
    """``sum_i KL(pi_teacher(.|s_i) || pi(.|s_i))`` over the menu slots: scalar. All
    ``(N, K)``; ``mask`` true on real menu slots."""
    pt = teacher_log_probs.exp()
    kl = torch.where(mask, pt * (teacher_log_probs - log_probs), torch.zeros_like(pt))
    return kl.sum()


def token_nll(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood over the masked tokens: ``logp, mask (B, R)``."""
    m = mask.to(logp.dtype)
    return -(logp * m).sum() / m.sum().clamp(min=1.0)


__all__ = ["expert_distill_loss", "policy_distill_loss", "token_nll"]
