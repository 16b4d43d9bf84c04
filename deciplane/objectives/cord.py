"""CORD — conflict-aware combination of task-RL and distillation gradients (docs/methods.md §3).

Two objectives: task RL ``L_1`` (gradient ``g_task``) and teacher distillation ``L_2``
(gradient ``g_teacher``), weight ``lambda`` on ``L_2``. The projection is non-linear, so
it acts on each objective's gradient accumulated over the **whole optimizer batch**
(all micro-batches), flattened over all trainable parameters:

1. ``g_2 = lambda * g_teacher``; if ``lambda == 0`` return ``g_task`` unchanged;
2. the protected objective ``p`` (``task`` | ``teacher``) keeps its gradient; the other
   is ``u``; if ``||g_p|| == 0`` nothing is projected;
3. ``conflict``: if ``<g_u, g_p> < 0``, ``g_u <- g_u - <g_u, g_p>/||g_p||^2 g_p``;
   ``always``: project whatever the sign (also removes a helpful parallel part);
4. ``g = g_p + g_u``.

This is a first-order property of the update direction before the optimizer; it does
not guarantee that a finite AdamW step lowers either objective.

:func:`cord_combine` is the pure vector function; :class:`CordGradBuffers` accumulates
the two objectives' gradients over micro-batches into separate flat buffers and writes
the combined vector back to ``.grad`` (pure torch, no trainer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal

import torch

from deciplane.errors import ObjectiveInputError
from deciplane.options import check_options, option

from deciplane._moved import renamed_names

from .common import check_choice

Protected = Literal["task", "teacher"]
CordMode = Literal["conflict", "always"]


def project_out(g_u: torch.Tensor, g_p: torch.Tensor) -> torch.Tensor:
    """``g_u - (<g_u, g_p> / ||g_p||^2) g_p``; ``g_u`` unchanged if ``||g_p|| == 0``."""
    nsq = g_p.dot(g_p)
    if float(nsq) == 0.0:
        return g_u
    return g_u - (g_u.dot(g_p) / nsq) * g_p


def _should_project_conflict(g_u: torch.Tensor, g_p: torch.Tensor) -> bool:
    return float(g_u.dot(g_p)) < 0.0


def _should_project_always(g_u: torch.Tensor, g_p: torch.Tensor) -> bool:
    return True


PROJECTION_RULES = {"conflict": _should_project_conflict, "always": _should_project_always}
"""Typed ``mode`` option -> ``(g_u, g_p) -> bool`` (project or not)."""


def cord_combine(g_task: torch.Tensor, g_teacher: torch.Tensor, lam: float,
                 protected: Protected = "task", mode: CordMode = "conflict") -> torch.Tensor:
    """Combine the full-batch flat gradients of the two objectives (see module docstring).

    Args:
        g_task: ``(P,)`` gradient of the task-RL loss, summed over the optimizer batch.
        g_teacher: ``(P,)`` gradient of the distillation loss, **without** ``lam``.
        lam: weight of the distillation objective.
        protected: whose gradient is kept intact: ``task`` or ``teacher``.
        mode: ``conflict`` (project only when the inner product is negative) or
            ``always``.

    Returns:
        ``(P,)`` the combined gradient ``g_p + g_u``.
    """
    check_choice("cord_combine", "protected", protected, Protected)
    check_choice("cord_combine", "mode", mode, CordMode)
    if g_task.dim() != 1 or g_task.shape != g_teacher.shape:
        raise ObjectiveInputError(f"g_task {list(g_task.shape)} and g_teacher "
                                  f"{list(g_teacher.shape)} must be flat vectors of the "
                                  "same length (all trainable parameters, flattened)")
    if lam == 0:
        return g_task
    g_2 = lam * g_teacher                                                       # (P,)
    g_p, g_u = (g_task, g_2) if protected == "task" else (g_2, g_task)
    if float(g_p.dot(g_p)) > 0.0 and PROJECTION_RULES[mode](g_u, g_p):
        g_u = project_out(g_u, g_p)
    return g_p + g_u


def cord_stats(g_task: torch.Tensor, g_teacher: torch.Tensor, lam: float) -> dict[str, float]:
    """Diagnostics: norms, inner product and cosine of ``g_task`` and ``lam * g_teacher``."""
    g_2 = lam * g_teacher
    n1, n2 = float(g_task.norm()), float(g_2.norm())
    dot = float(g_task.dot(g_2))
    cos = dot / (n1 * n2) if n1 > 0 and n2 > 0 else 0.0
    return {"cord/task_norm": n1, "cord/teacher_norm": n2, "cord/dot": dot,
            "cord/cosine": cos, "cord/conflict": float(dot < 0)}


@dataclass(frozen=True)
class CORDLossConfig:
    """CORD settings."""

    lam: float = option(1.0, ge=0)
    """Weight ``lambda`` of the distillation objective (0 = task RL only)."""
    protected: Protected = "task"
    """Objective whose gradient is never modified: ``task`` | ``teacher``."""
    mode: CordMode = "conflict"
    """``conflict`` (project only on negative inner product) | ``always``."""

    def __post_init__(self) -> None:
        check_options(self, "CORDLossConfig.")


class CordGradBuffers:
    """Accumulate two objectives' gradients over micro-batches in separate flat buffers.

    >>> bufs = CordGradBuffers(model.parameters())
    >>> for mb in micro_batches:                     # the whole optimizer batch
    ...     task_loss, teacher_loss = ...            # scaled by 1/num_micro_batches
    ...     bufs.accumulate(task_loss, teacher_loss)
    >>> g = bufs.write_combined(CORDLossConfig(lam=0.5)) # sets p.grad, returns the flat vector
    >>> optimizer.step(); bufs.reset()

    Only parameters with ``requires_grad`` are tracked; a parameter that does not reach
    a loss contributes zeros.
    """

    def __init__(self, params: Iterable[torch.Tensor]) -> None:
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ObjectiveInputError("CordGradBuffers got no trainable parameter "
                                      "(requires_grad=True); pass model.parameters()")
        self.numel = sum(p.numel() for p in self.params)
        dtype = torch.float32
        device = self.params[0].device
        self.task = torch.zeros(self.numel, dtype=dtype, device=device)        # (P,)
        self.teacher = torch.zeros(self.numel, dtype=dtype, device=device)     # (P,)
        self.micro_batches = 0

    def _flat_grad(self, loss: torch.Tensor, retain_graph: bool) -> torch.Tensor:
        grads = torch.autograd.grad(loss, self.params, retain_graph=retain_graph,
                                    allow_unused=True)
        return torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1).float()
                          for p, g in zip(self.params, grads)])                 # (P,)

    def accumulate(self, task_loss: torch.Tensor | None,
                   teacher_loss: torch.Tensor | None) -> None:
        """Add one micro-batch's gradients of each loss (either may be ``None``)."""
        if task_loss is not None:
            self.task += self._flat_grad(task_loss, retain_graph=teacher_loss is not None)
        if teacher_loss is not None:
            self.teacher += self._flat_grad(teacher_loss, retain_graph=False)
        self.micro_batches += 1

    def combine(self, cfg: CORDLossConfig) -> torch.Tensor:
        """The CORD-combined flat gradient of everything accumulated so far: (P,)."""
        return cord_combine(self.task, self.teacher, cfg.lam, cfg.protected, cfg.mode)

    def write_grads(self, flat: torch.Tensor) -> None:
        """Write a flat ``(P,)`` vector into the parameters' ``.grad`` (overwriting)."""
        if flat.shape != (self.numel,):
            raise ObjectiveInputError(f"flat gradient has shape {list(flat.shape)}, expected "
                                      f"[{self.numel}]")
        offset = 0
        for p in self.params:
            n = p.numel()
            p.grad = flat[offset:offset + n].view_as(p).to(p.dtype).clone()
            offset += n

    def write_combined(self, cfg: CORDLossConfig) -> torch.Tensor:
        """:meth:`combine` then :meth:`write_grads`; returns the combined vector."""
        g = self.combine(cfg)
        self.write_grads(g)
        return g

    def stats(self, cfg: CORDLossConfig) -> dict[str, float]:
        return cord_stats(self.task, self.teacher, cfg.lam)

    def reset(self) -> None:
        self.task.zero_()
        self.teacher.zero_()
        self.micro_batches = 0


__getattr__ = renamed_names(__name__)
