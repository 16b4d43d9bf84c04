"""A pretend GPU for CPU-only tests of device placement.

:class:`FakeGPU` runs everything on the CPU but tracks which tensors would live on the
GPU: the model's parameters and buffers, every tensor made with ``device=`` the policy's
device (``meta`` stands for it) or moved there with ``.to(...)``, and every result of an
op on such a tensor. An op that meets a tensor that would be on the GPU and a (non-scalar)
tensor that would still be on the CPU is what raises ``Expected all tensors to be on the
same device`` on a real GPU: it is recorded in ``mixed``. ``.device`` of a GPU tensor reads
``meta``, so ``torch.zeros(..., device=x.device)`` follows ``x`` as it would on a GPU.
"""

from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

GPU = torch.device("meta")     # what the policy's device reads while the mode is on
_TAG = "_fake_gpu"
# ops that take tensors of two devices on a real GPU too: moves, copies, CPU index
# tensors, a shape read from another tensor
_MIXED_OK = {torch.Tensor.to, torch.Tensor.copy_, torch.Tensor.__setitem__,
             torch.Tensor.__getitem__, torch.Tensor.cpu, torch.Tensor.expand_as}


def _on_gpu(x) -> bool:
    return isinstance(x, torch.Tensor) and getattr(x, _TAG, False)


def _tag(out):
    def mark(t):
        if isinstance(t, torch.Tensor):
            setattr(t, _TAG, True)
        return t
    return tree_map(mark, out)


def _is_gpu_device(d) -> bool:
    return d == GPU if isinstance(d, torch.device) else isinstance(d, str) and d == "meta"


def _to_cpu(d):
    return torch.device("cpu") if _is_gpu_device(d) else d


class FakeGPU(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.mixed: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if getattr(func, "__self__", None) is torch.Tensor.device:    # reading x.device
            return GPU if _on_gpu(args[0]) else func(*args, **kwargs)
        to_gpu = _is_gpu_device(kwargs.get("device")) or any(_is_gpu_device(a) for a in args[1:])
        if "device" in kwargs:
            kwargs["device"] = _to_cpu(kwargs["device"])
        args = tuple(_to_cpu(a) if isinstance(a, (str, torch.device)) else a for a in args)
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        gpu = [t for t in tensors if _on_gpu(t)]
        cpu = [t for t in tensors if not _on_gpu(t) and t.dim() > 0]   # 0-dim CPU: a scalar
        if gpu and cpu and func not in _MIXED_OK:
            self.mixed.append(getattr(func, "__name__", str(func)))
        out = func(*args, **kwargs)
        if func is torch.Tensor.cpu or (func is torch.Tensor.to and not to_gpu and args
                                        and any(isinstance(a, (str, torch.device)) for a in args[1:])):
            # moved back to the CPU (on the CPU .cpu() returns the tensor itself: a new view)
            return out.view_as(out) if out is args[0] and _on_gpu(out) else out
        if to_gpu or (gpu and func not in (torch.Tensor.__setitem__,)):
            if func is torch.Tensor.__getitem__ and not _on_gpu(args[0]):
                return out
            return _tag(out)
        return out


@contextlib.contextmanager
def fake_gpu(policy, *modules: torch.nn.Module):
    """Put ``policy`` (and ``modules``) on the pretend GPU for the ``with`` block; yields
    the :class:`FakeGPU` whose ``mixed`` lists the ops that would mix devices."""
    tensors = [t for m in (policy.model, *modules) for t in (*m.parameters(), *m.buffers())]
    for t in tensors:
        setattr(t, _TAG, True)
    old = policy.device
    policy.device = GPU
    try:
        with FakeGPU() as mode:
            yield mode
    finally:
        policy.device = old
        for t in tensors:
            with contextlib.suppress(AttributeError):
                delattr(t, _TAG)
