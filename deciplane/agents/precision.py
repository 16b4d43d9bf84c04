"""A bf16 trunk: the frozen bottom of a decoder runs in bfloat16 weights, the rest in fp32.

On CPUs with native bf16 matrix instructions (AVX-512 BF16, AMX) a bf16 matmul runs ~2.4x
an fp32 one; SmolLM2-135M in bf16 weights takes 0.5x the CPU time of fp32 with the same
top-1 token (measured on this project's machines). Nothing below the first trainable
layer ever receives a gradient, so only precision changes there:

* the decoder layers ``[0, upto)`` are cast to ``dtype`` and cast what they receive (the
  hidden states, the rotary tables and a float mask, which the decoder builds once in
  fp32); the embedding keeps its fp32 weights (tied to the output layer in SmolLM2);
* at the input of layer ``upto`` (or of the final norm, when ``upto`` is the number of
  layers) the hidden states are cast back to fp32: the trainable layers, the final norm
  and the output layer compute in fp32 with the decoder's own fp32 rotary tables and
  mask, exactly as when the update runs them from the kept boundary states.

The policy is defined by this mixed model: rollouts, evaluation, behaviour-cloning
features and the frozen-trunk update all run it (the update reads the boundary states the
rollout kept), so old and new log-probs are computed by the same function.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch
from torch import nn

from deciplane.errors import ConfigError

TRUNK_DTYPES = ("auto", "float32", "bfloat16")


@functools.lru_cache(maxsize=1)
def native_bf16() -> bool:
    """Whether this CPU has bf16 matrix instructions (``avx512_bf16`` or ``amx_bf16`` in
    ``/proc/cpuinfo``). False where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def matmul_gflops(dtype: torch.dtype = torch.float32, n: int = 1024, repeats: int = 3,
                  threads: int = 1) -> float:
    """This CPU's measured ``n x n x n`` matmul rate in GFLOP/s on ``threads`` torch threads
    (the best of ``repeats`` after a warm-up): what a decision's FLOPs are compared with.
    Where bf16 is emulated (no AVX-512 BF16) its rate is a small fraction of fp32's."""
    import time

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(0)
        a = torch.randn(n, n, generator=gen).to(dtype)
        b = torch.randn(n, n, generator=gen).to(dtype)
        a @ b
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t0)
        return 2 * n ** 3 / best / 1e9
    finally:
        torch.set_num_threads(old)


def resolve_trunk_dtype(name: str, device: str | torch.device = "cpu") -> torch.dtype:
    """``auto`` -> bfloat16 on a CPU with native bf16 (or any CUDA device), else float32."""
    if name not in TRUNK_DTYPES:
        raise ConfigError(f"trunk_dtype must be one of {', '.join(TRUNK_DTYPES)}, got {name!r}")
    if name == "auto":
        on_cuda = torch.device(device).type == "cuda"
        return torch.bfloat16 if on_cuda or native_bf16() else torch.float32
    return getattr(torch, name)


def _decoder(model: nn.Module) -> nn.Module:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(base, "model", None)
    if inner is None or not isinstance(getattr(inner, "layers", None), nn.ModuleList):
        raise ConfigError(f"{type(base).__name__} has no decoder at `.model.layers`; a bf16 "
                          "trunk supports Llama-style causal LMs (use trunk_dtype: float32)")
    return inner


def _cast(x: Any, dtype: torch.dtype) -> Any:
    """Floating tensors (also inside tuples: the rotary ``(cos, sin)``) to ``dtype``."""
    if torch.is_tensor(x) and x.is_floating_point() and x.dtype != dtype:
        return x.to(dtype)
    if isinstance(x, tuple):
        return tuple(_cast(t, dtype) for t in x)
    return x


def apply_trunk_dtype(model: nn.Module, upto: int, dtype: torch.dtype = torch.bfloat16) -> int:
    """Run decoder layers ``[0, upto)`` in ``dtype`` (module docstring); ``upto`` is the
    first trainable layer, or the number of layers when nothing trains. Returns the number
    of layers cast (0 for float32 or ``upto == 0``: nothing changes). Call it once, after
    LoRA adapters are added and before any forward."""
    if dtype == torch.float32 or upto <= 0:
        return 0
    decoder = _decoder(model)
    n = len(decoder.layers)
    if not 0 < upto <= n:
        raise ConfigError(f"bf16 trunk up to layer {upto}: the model has {n} layers")
    below = list(decoder.layers)[:upto]
    if any(p.requires_grad for layer in below for p in layer.parameters()):
        raise ConfigError(f"a bf16 trunk up to layer {upto}: a parameter below it is "
                          "trainable; cast only the frozen layers (trunk_dtype: float32 for "
                          "full fine-tuning or LoRA in every layer)")
    if getattr(decoder, "_deciplane_trunk_dtype", None) is not None:
        raise ConfigError("the trunk dtype is already set on this model; apply it once")
    def to_low(module, args, kwargs):
        return _cast(args, dtype), {k: _cast(v, dtype) for k, v in kwargs.items()}

    for layer in below:    # each bottom layer casts what it receives (the decoder builds
        layer.to(dtype)    # the rotary tables and the mask once, in fp32, for all layers)
        layer.register_forward_pre_hook(to_low, with_kwargs=True)

    def back_to_float32(module, args, kwargs):
        return _cast(args, torch.float32), {k: _cast(v, torch.float32) for k, v in kwargs.items()}

    target = decoder.layers[upto] if upto < n else decoder.norm
    target.register_forward_pre_hook(back_to_float32, with_kwargs=True)
    decoder._deciplane_trunk_dtype = (dtype, upto)
    return upto


def _warn_if_slow(device_type: str, dtype: torch.dtype) -> None:
    if device_type == "cpu" and dtype == torch.bfloat16 and not native_bf16():
        warnings.warn("bf16 compute on a CPU without native bf16 instructions runs far slower "
                      "than fp32 (deciplane doctor); use float32 here", stacklevel=3)


def _to_low(module, args):
    return _cast(args, module.weight.dtype)


def _to_float32(module, args, out):
    return _cast(out, torch.float32)


def cast_frozen_linears(model: nn.Module, dtype: torch.dtype = torch.bfloat16) -> int:
    """Every frozen ``nn.Linear`` of ``model`` (PEFT's LoRA ``base_layer`` included) gets
    ``dtype`` weights and computes in ``dtype``: its input is cast to ``dtype``, its output
    back to fp32. Everything else stays fp32: trainable weights (LoRA's A and B, a full
    fine-tune), the embedding and the output layer tied to it, norms, rotary tables and
    attention (so a KV cache, TASCO's prefix included, stays fp32).

    This is the bf16 path where a frozen trunk of whole layers does not exist — LoRA in
    every layer (the test-time adapters) or a fully frozen model with a trainable prefix
    (TASCO): gradients still reach every trainable tensor, through the bf16 matmuls.
    Returns the number of linear modules cast (0 for float32: nothing changes). Call it
    after adapters are added and before any forward (a second call finds nothing left to
    cast); it changes ``model`` in place."""
    if dtype == torch.float32:
        return 0
    _warn_if_slow(next(model.parameters()).device.type, dtype)
    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    n = 0
    for module in model.modules():
        if type(module) is not nn.Linear or module is out_emb:
            continue
        params = list(module.parameters(recurse=False))
        if any(p.requires_grad for p in params) or module.weight.dtype != torch.float32:
            continue           # trainable, or already cast (a bf16 trunk layer)
        module.to(dtype)
        module.register_forward_pre_hook(_to_low)
        module.register_forward_hook(_to_float32)
        n += 1
    return n


def autocast_layers(model: nn.Module, dtype: torch.dtype = torch.bfloat16) -> int:
    """Run every fp32 decoder layer of ``model`` under ``torch.autocast(dtype)``: its
    matmuls compute in ``dtype`` from the fp32 master weights (which the optimizer keeps
    and updates), in the forward and in the backward. The residual stream between layers,
    the embedding, the final norm and the output layer stay fp32, so log-probs come from
    fp32 logits. Per layer (not around the whole model), so that every path that runs a
    layer — generation, the teacher-forced update, the frozen-trunk update that runs only
    the top layers — computes the same function. Layers already cast by
    :func:`apply_trunk_dtype` are left alone. Returns the number of layers wrapped (0 for
    float32)."""
    if dtype == torch.float32:
        return 0
    device_type = next(model.parameters()).device.type
    _warn_if_slow(device_type, dtype)
    n = 0
    for layer in _decoder(model).layers:
        if getattr(layer, "_deciplane_autocast", None) is not None:
            raise ConfigError("autocast_layers: this model's layers are already wrapped")
        if any(p.dtype != torch.float32 for p in layer.parameters()):
            continue                      # a bf16 trunk layer: already low precision
        stack: list = []

        def enter(module, args, stack=stack):
            ctx = torch.autocast(device_type, dtype=dtype)
            ctx.__enter__()
            stack.append(ctx)

        def leave(module, args, out, stack=stack):
            stack.pop().__exit__(None, None, None)
            return _cast(out, torch.float32)      # anything else passes unchanged

        layer.register_forward_pre_hook(enter)
        layer.register_forward_hook(leave, always_call=True)
        layer._deciplane_autocast = dtype
        n += 1
    return n


def trunk_dtype_of(model: nn.Module) -> tuple[torch.dtype, int] | None:
    """``(dtype, upto)`` set by :func:`apply_trunk_dtype`, or None (all fp32)."""
    try:
        return getattr(_decoder(model), "_deciplane_trunk_dtype", None)
    except ConfigError:
        return None


__all__ = ["TRUNK_DTYPES", "apply_trunk_dtype", "autocast_layers", "cast_frozen_linears",
           "native_bf16", "resolve_trunk_dtype", "trunk_dtype_of"]
