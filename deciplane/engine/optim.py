"""THE optimizer step, shared by every trainer, the warm starts and the test-time adapters.

One optimizer step over an *optimizer batch* (a list of row indices) is:

1. zero the gradients;
2. split the rows into micro-batches of ``micro_batch_size`` (in order) and call the
   objective's ``loss_fn(micro)`` on each; it returns a :class:`MicroLoss` (the task
   loss, optionally a distillation loss, metrics, and the tokens it forwarded);
3. scale each loss to its share of the optimizer batch with the :class:`Normaliser`
   its objective declared **once** for the whole batch (``weights``: the objective's
   units in each row — tokens, rows, rows with a teacher target — and ``reduction``:
   whether ``loss_fn`` returns a mean over the micro-batch's units or their sum), so that
   the sum over micro-batches is the loss of the whole batch;
4. backpropagate: the plain sum of the losses, or — with a :class:`CordRule` — the task
   and distillation gradients into two separate buffers over the **whole** optimizer
   batch, combined by CORD (:func:`deciplane.objectives.cord.cord_combine`) before the
   step (the projection is non-linear, it must see full-batch gradients);
5. :meth:`Optimizer.step`: clip each parameter group separately (a value head's
   gradient does not shrink the policy's step), then step — or **skip** the step (no
   optimizer call, so no weight decay either) when the gradient norm is not finite.

A batch in which nothing can be learnt (every group degenerate) is skipped by the caller
with :meth:`Optimizer.skip` before any forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

import torch

from deciplane.engine import distributed
from deciplane.engine.budget import Budget, phase
from deciplane.errors import ConfigError
from deciplane.objectives.cord import CordGradBuffers, cord_combine, cord_stats


# ---------------------------------------------------------------------------------------
# the optimizer
# ---------------------------------------------------------------------------------------


class Optimizer:
    """AdamW over one or more parameter groups, clipped per group, with skip bookkeeping.

    ``groups`` is a list of parameters (one group, named ``policy``) or a list of
    ``{"params": [...], "lr": ...}`` dicts named by ``names`` (the first is the policy's).
    ``max_grad_norm`` clips each group's gradient norm (0 = no clipping). Steps taken and
    skipped are counted in ``steps`` / ``skipped`` and in ``budget`` when given. ``opt`` is
    the underlying ``torch.optim.AdamW`` (its ``state_dict`` is what checkpoints hold).

    ``data_parallel``: sum the gradients over the ranks of the ``torch.distributed``
    process group in :func:`accumulate`, each rank taking its slice of the optimizer
    batch (:mod:`deciplane.engine.distributed`); ``None`` (default) = whenever a group of
    more than one process is initialised. The parameters are then broadcast from rank 0
    here, so that every rank starts from the same weights.
    """

    def __init__(self, groups: Sequence[torch.nn.Parameter] | Sequence[dict[str, Any]], *,
                 lr: float, weight_decay: float = 0.0,
                 betas: Sequence[float] = (0.9, 0.999), max_grad_norm: float = 1.0,
                 budget: Budget | None = None, names: Sequence[str] | None = None,
                 data_parallel: bool | None = None) -> None:
        groups = list(groups)
        if groups and not isinstance(groups[0], dict):
            groups = [{"params": [p for p in groups if p.requires_grad]}]
        if not groups or not groups[0]["params"]:
            raise ConfigError("no trainable parameters; add LoRA adapters (finetune=lora) or "
                              "unfreeze the model (finetune=full)")
        if lr <= 0:
            raise ConfigError(f"lr must be > 0, got {lr}")
        if max_grad_norm < 0:
            raise ConfigError(f"max_grad_norm = {max_grad_norm} must be >= 0 (0 = off)")
        self.names = list(names) if names is not None else ["policy"] + [
            f"group{i}" for i in range(1, len(groups))]
        if len(self.names) != len(groups):
            raise ConfigError(f"{len(groups)} parameter groups but {len(self.names)} names")
        self.opt = torch.optim.AdamW(groups, lr=lr, betas=tuple(betas),
                                     weight_decay=weight_decay)
        self.params = [p for g in self.opt.param_groups for p in g["params"]]
        self.max_grad_norm = max_grad_norm
        self.budget = budget
        self.steps = 0
        self.skipped = 0
        self.data_parallel = (distributed.active() if data_parallel is None
                              else bool(data_parallel))
        if self.data_parallel:
            if not distributed.active():
                raise ConfigError("data_parallel=True needs an initialised torch.distributed "
                                  "process group; start with `accelerate launch` or `torchrun`")
            distributed.broadcast_parameters(self.params)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> dict[str, float]:
        """Clip every group, step (or skip when the norm is not finite), zero the grads.

        Returns the pre-clip norm of each group as ``optim/grad_norm`` (the policy's) and
        ``optim/grad_norm_<name>``, plus ``optim/nonfinite_grad = 1`` on a skipped step.
        """
        limit = self.max_grad_norm if self.max_grad_norm > 0 else float("inf")
        out: dict[str, float] = {}
        with phase(self.budget, "optimizer"):
            norms = [torch.nn.utils.clip_grad_norm_(g["params"], limit)
                     for g in self.opt.param_groups]
            for name, norm in zip(self.names, norms):
                out["optim/grad_norm" + ("" if name == "policy" else "_" + name)] = float(norm)
            finite = bool(torch.isfinite(torch.stack([n.float() for n in norms]).sum()))
            if finite:
                self.opt.step()
            self.zero_grad()
        if finite:
            self.steps += 1
            if self.budget is not None:
                self.budget.optimizer_steps += 1
        else:
            out["optim/nonfinite_grad"] = 1.0
            self._count_skip()
        return out

    def skip(self) -> None:
        """Record a skipped step (nothing to learn): grads are dropped, no AdamW call."""
        self.zero_grad()
        self._count_skip()

    def _count_skip(self) -> None:
        self.skipped += 1
        if self.budget is not None:
            self.budget.skipped_steps += 1

    # what checkpoints save and restore
    def state_dict(self) -> dict[str, Any]:
        return self.opt.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.opt.load_state_dict(state)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.opt.param_groups

    @property
    def state(self) -> Any:
        return self.opt.state


# ---------------------------------------------------------------------------------------
# micro-batch accumulation
# ---------------------------------------------------------------------------------------


@dataclass
class MicroLoss:
    """An objective's losses on one micro-batch, before normalisation."""

    task: torch.Tensor
    """The task (RL) loss: a mean over the micro-batch's units or their sum, as the
    objective's :class:`Normaliser` says."""
    distill: torch.Tensor | None = None
    """The distillation loss (combined with the task's gradient by CORD), or ``None``."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Per-micro-batch metrics; averaged over the optimizer batch by the engine."""
    tokens: int = 0
    """Tokens of the forward passes behind the losses (counted as backpropagated)."""


@dataclass(frozen=True)
class Normaliser:
    """How an objective normalises over the optimizer batch, declared once per batch.

    ``weights[i]`` is the number of the objective's units in row ``i`` of the batch (its
    response tokens for a token mean, 1 for a mean over rows, 1 or 0 for a mean over the
    rows that have a teacher target). ``reduction="mean"``: ``loss_fn`` returns the mean
    over the micro-batch's units and is scaled by the micro-batch's share of the units;
    ``"sum"``: it returns their sum and is divided by the batch's units.
    """

    weights: Sequence[int | float]
    reduction: Literal["mean", "sum"] = "mean"

    def units(self, rows: Sequence[int]) -> int | float:
        return sum(self.weights[i] for i in rows)

    def share(self, micro: Sequence[int], rows: Sequence[int]) -> float:
        """The micro-batch's share of the optimizer batch's units."""
        return self.units(micro) / max(self.units(rows), 1)

    def scale(self, loss: torch.Tensor, micro: Sequence[int], rows: Sequence[int]
              ) -> torch.Tensor:
        if self.reduction == "sum":
            return loss / max(self.units(rows), 1)
        return loss * self.share(micro, rows)


@dataclass(frozen=True)
class CordRule:
    """RL + distillation: how the two full-batch gradients become the update direction."""

    lam: float = 1.0
    combine: Literal["conflict", "always", "sum"] = "conflict"
    protect: Literal["task", "teacher"] = "task"


def combine_gradients(g_task: torch.Tensor, g_teacher: torch.Tensor, rule: Any
                      ) -> tuple[torch.Tensor, dict[str, float]]:
    """Full-batch task and (unweighted) teacher gradients -> the update direction.

    ``combine=conflict|always`` is CORD (:func:`deciplane.objectives.cord.cord_combine`),
    ``combine=sum`` the plain ``g_task + lam * g_teacher`` baseline. ``rule`` has ``lam``,
    ``combine`` and ``protect`` (a :class:`CordRule` or the trainer's ``DistillConfig``).
    """
    stats = cord_stats(g_task, g_teacher, rule.lam)
    if rule.combine == "sum":
        g = g_task + rule.lam * g_teacher
    else:
        g = cord_combine(g_task, g_teacher, rule.lam, protected=rule.protect, mode=rule.combine)
    stats["cord/projected"] = float(not torch.equal(g, g_task + rule.lam * g_teacher))
    return g, stats


def chunks(rows: Sequence[int], size: int) -> list[list[int]]:
    """``rows`` in consecutive chunks of ``size`` (the last one shorter): micro-batches."""
    rows = list(rows)
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def micro_batches(n: int, size: int) -> list[list[int]]:
    """``[0..n)`` in consecutive chunks of ``size``."""
    return chunks(range(n), size)


def minibatches(order: Sequence[int], count: int) -> list[list[int]]:
    """``order`` in ``count`` consecutive blocks of near-equal size, the first
    ``len(order) % count`` one longer (``numpy.array_split``'s rule; a block is empty when
    ``count`` exceeds the rows). The one split of an optimizer batch into the minibatches
    of PPO/GRPO epochs, each one optimizer step."""
    if count < 1:
        raise ConfigError(f"minibatches = {count} must be >= 1")
    order = list(order)
    base, extra = divmod(len(order), count)
    out, start = [], 0
    for k in range(count):
        end = start + base + (k < extra)
        out.append(order[start:end])
        start = end
    return out


def accumulate(optimizer: Optimizer, rows: Sequence[int], micro_batch_size: int,
               loss_fn: Callable[[list[int]], MicroLoss], task: Normaliser,
               distill: Normaliser | None = None, *, cord: Any | None = None,
               metric_share: Literal["task", "rows"] = "task") -> dict[str, float]:
    """Steps 2-4 of the module docstring: gradients of the optimizer batch ``rows`` in the
    parameters' ``.grad``. Metrics are weighted by the micro-batch's share of the task's
    units (``metric_share="task"``) or of the rows (``"rows"``); ``loss/distill`` is the
    batch's normalised distillation loss.

    Data-parallel (``optimizer.data_parallel``): this rank forwards only its slice of
    ``rows`` (:func:`deciplane.engine.distributed.shard`), still scaled by its share of
    the whole batch; the gradients (or, with CORD, both buffers before the projection)
    and the metric sums are then summed over the ranks, which gives every rank the
    single-process result of the whole batch."""
    rows = list(rows)
    dp = getattr(optimizer, "data_parallel", False)
    local = distributed.shard(rows) if dp else rows
    budget = optimizer.budget
    sums: dict[str, float] = {}
    bufs = CordGradBuffers(optimizer.params) if cord is not None else None
    for micro in chunks(local, micro_batch_size):
        out = loss_fn(micro)
        loss = task.scale(out.task, micro, rows)
        if metric_share == "task":
            share = task.share(micro, rows)
            for k, v in out.metrics.items():
                sums[k] = sums.get(k, 0.0) + v * share
        else:
            for k, v in out.metrics.items():
                sums[k] = sums.get(k, 0.0) + v * len(micro) / len(rows)
        dloss = None
        if out.distill is not None:
            if distill is None:
                raise ConfigError("loss_fn returned a distillation loss but no distillation "
                                  "Normaliser was declared; pass distill=Normaliser(...)")
            dloss = distill.scale(out.distill, micro, rows)
            sums["loss/distill"] = sums.get("loss/distill", 0.0) + float(dloss.detach())
        with phase(budget, "backward"):
            if bufs is None or dloss is None:
                total = loss if dloss is None else loss + dloss
                if total.requires_grad:
                    total.backward()
            else:
                bufs.accumulate(loss if loss.requires_grad else None,
                                dloss if dloss.requires_grad else None)
        if budget is not None:
            budget.backward_tokens += out.tokens
            budget.backward_passes += 1
    if dp:
        sums = distributed.sum_metrics(sums)
        used = distributed.sum_int(bufs.micro_batches if bufs is not None else 0)
        if used:                      # CORD: full-batch buffers before the projection
            distributed.all_reduce_sum_(bufs.task, bufs.teacher)
            bufs.micro_batches = used
        else:
            distributed.all_reduce_grads(optimizer.params)
    if bufs is not None and bufs.micro_batches:
        g, stats = combine_gradients(bufs.task, bufs.teacher, cord)
        sums.update(stats)
        bufs.write_grads(g)
    return sums


def is_step_metric(key: str) -> bool:
    """A metric :meth:`Optimizer.step` adds (grad norms, the non-finite flag), not a loss's."""
    return key.startswith("optim/grad_norm") or key == "optim/nonfinite_grad"


def optimizer_step(optimizer: Optimizer, rows: Sequence[int], micro_batch_size: int,
                   loss_fn: Callable[[list[int]], MicroLoss], task: Normaliser,
                   distill: Normaliser | None = None, *, cord: Any | None = None,
                   metric_share: Literal["task", "rows"] = "task") -> dict[str, float]:
    """One optimizer step over ``rows``: zero, :func:`accumulate`, clip + step (or skip on a
    non-finite norm). Returns the metrics and the grad norms (see :meth:`Optimizer.step`)."""
    if micro_batch_size < 1:
        raise ConfigError(f"micro_batch_size = {micro_batch_size} must be >= 1")
    optimizer.zero_grad()
    metrics = accumulate(optimizer, rows, micro_batch_size, loss_fn, task, distill,
                         cord=cord, metric_share=metric_share)
    metrics.update(optimizer.step())
    return metrics


__all__ = ["CordRule", "MicroLoss", "Normaliser", "Optimizer", "accumulate", "chunks",
           "combine_gradients", "is_step_metric", "micro_batches", "minibatches",
           "optimizer_step"]
