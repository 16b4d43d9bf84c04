"""Data-parallel training over ``torch.distributed`` (``accelerate launch`` or ``torchrun``).

deciplane has no scheduler of its own: a launcher (``accelerate launch``, ``torchrun``)
starts one process per device and sets ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/
``MASTER_ADDR``/``MASTER_PORT``; :func:`init_from_env` joins the process group (``gloo``
on CPU, ``nccl`` on CUDA). The scheme is the simplest exact one:

* every rank builds the **same** global batch (same seeds, same weights: the rollouts are a
  function of ``(seed, iteration)`` and the model), so every decision taken from the batch
  (degenerate-batch skip, minibatch permutation) is the same on every rank;
* in the engine's optimizer step (:func:`deciplane.engine.optim.accumulate`) each rank
  forwards and backpropagates only its contiguous slice of the optimizer batch's rows
  (:func:`shard`), each micro-batch scaled by its share of the **whole** batch's units (the
  declared :class:`~deciplane.engine.optim.Normaliser`), so that the **sum** of the ranks'
  gradients (:func:`all_reduce_grads`) is the single-process gradient of the whole batch;
* with CORD, the task and the teacher buffers are summed over the ranks *before* the
  (non-linear) projection; the clip norms and the skip decision are computed after the
  all-reduce, on identical gradients, so they agree on every rank;
* the optimizer's parameters are broadcast from rank 0 when it is built (as DDP does);
* rank 0 alone writes files (metrics, checkpoints, summary); every rank resumes from the
  same checkpoint.

Outside a launcher (``WORLD_SIZE`` unset or 1) every function here is a no-op.
"""

from __future__ import annotations

import datetime
import os
from typing import Any, Iterable, Sequence

import torch
import torch.distributed as dist

from deciplane.errors import ConfigError


def launched() -> bool:
    """Whether a launcher started this process as one of several (``WORLD_SIZE > 1``)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def active() -> bool:
    """Whether a process group of more than one process is initialised."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def is_main() -> bool:
    """Rank 0 (or the only process): the one that logs and writes files."""
    return rank() == 0


def local_device(device: str | None) -> str | None:
    """The device of this rank: ``cuda`` becomes ``cuda:LOCAL_RANK`` under a launcher."""
    if device in ("cuda", "auto") and torch.cuda.is_available() and launched():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return device


def init_from_env(device: str | None = "cpu", timeout_s: float = 1800.0) -> bool:
    """Join the launcher's process group (``gloo`` on CPU, ``nccl`` on CUDA).

    Returns whether data-parallel training is on. Does nothing without a launcher or when
    the group is already initialised (``accelerate``'s own state, a test's ``spawn``).
    """
    if not launched() or (dist.is_available() and dist.is_initialized()):
        return active()
    if not dist.is_available():  # pragma: no cover - every torch wheel has it
        raise ConfigError("this torch build has no torch.distributed; run one process")
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise ConfigError(f"WORLD_SIZE={os.environ['WORLD_SIZE']} but {', '.join(missing)} "
                          "unset; start the run with `accelerate launch` or `torchrun`")
    dev = local_device(device) or "cpu"
    if dev.startswith("cuda"):
        torch.cuda.set_device(torch.device(dev))
        backend = "nccl"
    else:
        backend = "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return active()


def describe() -> dict[str, Any]:
    """What ``summary.json`` records about the process group."""
    if not active():
        return {"world_size": 1}
    return {"world_size": world_size(), "rank": rank(), "backend": str(dist.get_backend())}


# ---------------------------------------------------------------------------------------
# the pieces of the optimizer step
# ---------------------------------------------------------------------------------------


def shard_bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    """``[start, stop)`` of rank ``rank``'s contiguous share of ``n`` rows: the first
    ``n % world`` ranks get one row more (as ``numpy.array_split``)."""
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"rank {rank} is not in a world of {world} processes")
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def shard(rows: Sequence[int], rank: int | None = None, world: int | None = None
          ) -> list[int]:
    """This rank's contiguous slice of ``rows`` (all of them outside a process group)."""
    rows = list(rows)
    r = (dist.get_rank() if active() else 0) if rank is None else rank
    w = world_size() if world is None else world
    start, stop = shard_bounds(len(rows), r, w)
    return rows[start:stop]


def all_reduce_sum_(*tensors: torch.Tensor) -> None:
    """Sum each tensor over the ranks, in place (no-op outside a process group)."""
    if not active():
        return
    for t in tensors:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)


def sum_int(value: int) -> int:
    """An integer summed over the ranks."""
    if not active():
        return int(value)
    t = torch.tensor([int(value)], dtype=torch.int64, device=_device())
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return int(t.item())


def all_reduce_grads(params: Iterable[torch.Tensor]) -> None:
    """Sum ``.grad`` over the ranks, in one flat buffer.

    A parameter without a gradient on a rank counts as zeros there; it stays ``None`` only
    when no rank has one (as in one process over the whole batch: AdamW then leaves it,
    and its weight decay, alone).
    """
    if not active():
        return
    params = [p for p in params if p.requires_grad]
    if not params:
        return
    dev = params[0].device
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=dev)
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p))
                      .reshape(-1).to(torch.float32) for p in params])
    dist.all_reduce(has, op=dist.ReduceOp.SUM)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for p, h in zip(params, has.tolist()):
        n = p.numel()
        p.grad = flat[offset:offset + n].view_as(p).to(p.dtype).clone() if h > 0 else None
        offset += n


def sum_metrics(values: dict[str, float]) -> dict[str, float]:
    """Per-rank partial sums of metrics -> their sums over the ranks (keys may differ: a
    rank without rows contributes nothing)."""
    if not active():
        return dict(values)
    gathered: list[dict[str, float] | None] = [None] * world_size()
    dist.all_gather_object(gathered, dict(values))
    out: dict[str, float] = {}
    for part in gathered:
        for k, v in (part or {}).items():
            out[k] = out.get(k, 0.0) + float(v)
    return out


def broadcast_parameters(params: Iterable[torch.Tensor], src: int = 0) -> None:
    """Copy rank ``src``'s values of ``params`` to every rank (the start DDP also makes)."""
    if not active():
        return
    with torch.no_grad():
        for p in params:
            dist.broadcast(p.data, src=src)


def agree(flag: bool) -> bool:
    """Rank 0's value of ``flag`` on every rank (e.g. a wall-time stop)."""
    if not active():
        return bool(flag)
    t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=_device())
    dist.broadcast(t, src=0)
    return bool(t.item())


def barrier() -> None:
    if active():
        dist.barrier()


def _device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


__all__ = ["active", "agree", "all_reduce_grads", "all_reduce_sum_", "barrier",
           "broadcast_parameters", "describe", "init_from_env", "is_main", "launched",
           "local_device", "rank", "shard", "shard_bounds", "sum_int", "sum_metrics",
           "world_size"]
