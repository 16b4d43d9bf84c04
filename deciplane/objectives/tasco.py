"""TASCO loss pieces (docs/methods.md §5.3) — **paper-inspired, parameters ours**.

Only a task-level prefix is trained (the base model is frozen; that is the adapter's
job). On unlabeled prompts the loss is

    L = H(p(.|prefix, x)) + mu * D(p(.|prefix, x), p(.|prefix + eps, x))

with ``H`` the mean predictive entropy over the answer positions and ``D`` the KL over
the same positions, averaged over ``n`` perturbation draws. The perturbation ``eps`` of
the prefix parameters is random (:func:`random_perturbation`, ``N(0, sigma^2)``) or
sharpness-aware (:func:`sam_perturbation`, ``rho * g / ||g||``). Every default value
(``mu``, ``sigma``, ``n_draws``, ``rho``) is ours.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import torch

from deciplane.errors import ObjectiveInputError
from deciplane.options import check_options, option

from deciplane._moved import renamed_names

from .common import (as_bool_mask, entropy_from_logits,
                     kl_from_logits, masked_mean)
from .policy_loss import LossOutput

Perturbation = Literal["random", "sam"]


def mean_entropy(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean predictive entropy over the masked (answer) positions: (B, T, V), (B, T) -> scalar."""
    _check_logits(logits, mask)
    return masked_mean(entropy_from_logits(logits), mask)


def consistency_kl(logits: torch.Tensor, perturbed_logits: torch.Tensor,
                   mask: torch.Tensor) -> torch.Tensor:
    """Mean ``KL(p || p_eps)`` over the masked positions: scalar."""
    _check_logits(logits, mask)
    if perturbed_logits.shape != logits.shape:
        raise ObjectiveInputError(f"perturbed logits {list(perturbed_logits.shape)} must match "
                                  f"logits {list(logits.shape)}; run both forwards on the "
                                  "same batch")
    return masked_mean(kl_from_logits(logits, perturbed_logits), mask)


def _check_logits(logits: torch.Tensor, mask: torch.Tensor) -> None:
    if logits.dim() != 3 or tuple(logits.shape[:2]) != tuple(mask.shape):
        raise ObjectiveInputError(f"logits must be (B, T, V) matching mask (B, T); got "
                                  f"{list(logits.shape)} and {list(mask.shape)}")


def tasco_loss(logits: torch.Tensor, perturbed_logits: Sequence[torch.Tensor],
               mask: torch.Tensor, mu: float) -> LossOutput:
    """``H + mu * mean_draws KL(p || p_eps)`` over the answer positions.

    Args:
        logits: ``(B, T, V)`` with the trained prefix.
        perturbed_logits: one ``(B, T, V)`` per perturbation draw (prefix + eps).
        mask: ``(B, T)`` answer positions.
        mu: consistency weight.
    """
    m = as_bool_mask(mask)
    h = mean_entropy(logits, m)
    if len(perturbed_logits) == 0:
        raise ObjectiveInputError("tasco_loss needs at least one perturbed forward "
                                  "(n_draws >= 1)")
    d = torch.stack([consistency_kl(logits, pl, m) for pl in perturbed_logits]).mean()
    loss = h + mu * d
    return LossOutput(loss, {"loss/total": float(loss.detach()),
                             "tasco/entropy": float(h.detach()),
                             "tasco/consistency_kl": float(d.detach())})


def random_perturbation(params: Sequence[torch.Tensor], sigma: float,
                        generator: torch.Generator | None = None) -> list[torch.Tensor]:
    """``eps ~ N(0, sigma^2)`` shaped like each parameter (no grad)."""
    return [torch.randn(p.shape, generator=generator, dtype=p.dtype, device=p.device) * sigma
            for p in params]


def sam_perturbation(grads: Sequence[torch.Tensor | None], rho: float) -> list[torch.Tensor]:
    """SAM-style ``eps = rho * g / ||g||`` with the global norm over all tensors.

    ``None`` gradients count as zeros; an all-zero gradient gives a zero perturbation.
    """
    dev = next((g.device for g in grads if g is not None), None)   # where the grads are
    gs = [torch.zeros((), device=dev) if g is None else g.detach() for g in grads]
    norm = torch.sqrt(sum((g.float() ** 2).sum() for g in gs))
    if float(norm) == 0.0:
        return [torch.zeros_like(g) for g in gs]
    return [rho * g / norm.to(g.dtype) for g in gs]


@dataclass(frozen=True)
class TASCOLossConfig:
    """TASCO loss settings — paper-inspired, every default is ours."""

    mu: float = option(1.0, ge=0)
    """Weight of the consistency KL."""
    perturbation: Perturbation = "random"
    """``random`` (Gaussian on the prefix) | ``sam`` (sharpness-aware, one draw)."""
    sigma: float = option(0.01, ge=0)
    """Std of the random perturbation."""
    n_draws: int = option(2, ge=1)
    """Number of random draws averaged (``sam`` uses 1)."""
    rho: float = option(0.05, ge=0)
    """Radius of the SAM perturbation."""

    def __post_init__(self) -> None:
        check_options(self, "TASCOLossConfig.")


__getattr__ = renamed_names(__name__)
