"""Shared building blocks of the objectives: masked reductions, segment (group) reductions,
per-token distribution quantities, and config validation.

Conventions used by every objective module:

* ``mask`` tensors are boolean (or 0/1) and mark the tokens that count (response tokens).
  Prompt and padding tokens are ``False`` and never enter a mean, a sum or a length.
* ``group_ids`` / ``episode_ids`` / ``menu_ids`` are ``(N,)`` int64 tensors; equal ids
  mean "same group". :func:`group_ids_from_keys` builds them from arbitrary keys.
"""

from __future__ import annotations

import typing
from typing import Any, Hashable, Iterable

import torch

from deciplane.errors import ConfigError, ObjectiveInputError

# ---------------------------------------------------------------------------------------
# config validation
# ---------------------------------------------------------------------------------------


def check_choice(owner: str, name: str, value: Any, literal_type: Any) -> None:
    """Raise ConfigError unless ``value`` is one of the values of ``Literal[...]`` type."""
    allowed = typing.get_args(literal_type)
    if value not in allowed:
        raise ConfigError(
            f"{owner}.{name}={value!r} is not allowed; choose one of "
            f"{', '.join(repr(a) for a in allowed)}"
        )


# ---------------------------------------------------------------------------------------
# input checks
# ---------------------------------------------------------------------------------------


def check_same_shape(**tensors: torch.Tensor | None) -> None:
    """Raise ObjectiveInputError if the given (non-None) tensors differ in shape."""
    shapes = {k: tuple(v.shape) for k, v in tensors.items() if v is not None}
    if len(set(shapes.values())) > 1:
        desc = ", ".join(f"{k}{list(s)}" for k, s in shapes.items())
        raise ObjectiveInputError(f"tensors must have the same shape, got {desc}; "
                                  "pad every per-token tensor to (B, T) with the same mask")


def check_dim(name: str, x: torch.Tensor, dim: int) -> None:
    if x.dim() != dim:
        raise ObjectiveInputError(f"{name} must have {dim} dimensions, got shape "
                                  f"{list(x.shape)}")


def as_bool_mask(mask: torch.Tensor) -> torch.Tensor:
    """A boolean view of a 0/1 or boolean mask."""
    return mask if mask.dtype == torch.bool else mask != 0


def per_sample(adv: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Broadcast per-sample ``(B,)`` values to per-token ``(B, T)``; pass ``(B, T)`` through."""
    if adv.dim() == 1:
        if adv.shape[0] != like.shape[0]:
            raise ObjectiveInputError(f"advantages have {adv.shape[0]} rows but the token "
                                      f"tensors have {like.shape[0]}; pass one per sample")
        return adv[:, None].expand_as(like)
    check_same_shape(advantages=adv, tokens=like)
    return adv


# ---------------------------------------------------------------------------------------
# masked reductions
# ---------------------------------------------------------------------------------------


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` over positions where ``mask`` is true (masked values may be NaN/inf)."""
    m = as_bool_mask(mask)
    z = torch.where(m, x, torch.zeros((), dtype=x.dtype, device=x.device))
    return z.sum() if dim is None else z.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over masked positions; 0 where nothing is masked in (never NaN)."""
    m = as_bool_mask(mask)
    count = m.sum() if dim is None else m.sum(dim)
    return masked_sum(x, m, dim) / count.clamp(min=1).to(x.dtype)


def masked_quantile(x: torch.Tensor, mask: torch.Tensor, q: float) -> torch.Tensor:
    """``q``-quantile of the masked values of ``x`` (linear interpolation, as numpy).

    Returns a scalar tensor; NaN if nothing is masked in.
    """
    vals = x[as_bool_mask(mask)]
    if vals.numel() == 0:
        return torch.full((), float("nan"), dtype=x.dtype, device=x.device)
    return torch.quantile(vals.detach().to(torch.float64), q).to(x.dtype)


def masked_minmax_normalize(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-12
                            ) -> torch.Tensor:
    """Min-max normalise each row of ``x`` (B, T) to [0, 1] over its masked positions.

    A row whose masked values are all equal maps to 0 (nothing stands out). Masked-out
    positions are 0.
    """
    m = as_bool_mask(mask)
    big = torch.finfo(x.dtype).max
    lo = torch.where(m, x, torch.full_like(x, big)).amin(dim=1, keepdim=True)   # (B, 1)
    hi = torch.where(m, x, torch.full_like(x, -big)).amax(dim=1, keepdim=True)  # (B, 1)
    span = hi - lo                                                               # (B, 1)
    out = torch.where(span > eps, (x - lo) / span.clamp(min=eps), torch.zeros_like(x))
    return torch.where(m, out, torch.zeros_like(x))                              # (B, T)


# ---------------------------------------------------------------------------------------
# groups
# ---------------------------------------------------------------------------------------


def group_ids_from_keys(keys: Iterable[Hashable] | torch.Tensor) -> torch.Tensor:
    """Map keys (group names, label tuples, ...) to dense int64 ids in first-seen order.

    >>> group_ids_from_keys(["b", "a", "b"]).tolist()
    [0, 1, 0]
    """
    if isinstance(keys, torch.Tensor):
        keys = keys.tolist()
    table: dict[Hashable, int] = {}
    ids = [table.setdefault(k, len(table)) for k in keys]
    return torch.tensor(ids, dtype=torch.long)


def _check_ids(ids: torch.Tensor, n: int, name: str = "group_ids") -> torch.Tensor:
    if ids.dim() != 1 or ids.shape[0] != n:
        raise ObjectiveInputError(f"{name} must be a (N,) tensor with N={n}, got shape "
                                  f"{list(ids.shape)}")
    if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise ObjectiveInputError(f"{name} must be an integer tensor, got {ids.dtype}; "
                                  "build it with group_ids_from_keys(...)")
    if n and int(ids.min()) < 0:
        raise ObjectiveInputError(f"{name} must be non-negative")
    return ids.long()


def dense_ids(ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Relabel ids to 0..G-1 (sorted order); return (dense ids, G)."""
    uniq, inv = torch.unique(ids, return_inverse=True)
    return inv, int(uniq.numel())


def segment_sum(x: torch.Tensor, ids: torch.Tensor, num: int) -> torch.Tensor:
    """Sum of ``x`` (N, ...) per segment id (N,) -> (num, ...)."""
    out = torch.zeros((num,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    return out.index_add(0, ids, x)


def group_stats(values: torch.Tensor, group_ids: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-element group mean, unbiased group std (0 for groups of one), group size.

    Returns ``(mean_i, std_i, size_i, dense_ids)``, each ``(N,)``, broadcast back to the
    elements.
    """
    ids, g = dense_ids(_check_ids(group_ids, values.shape[0]).to(values.device))
    size = segment_sum(torch.ones_like(values), ids, g)                 # (G,)
    mean = segment_sum(values, ids, g) / size                           # (G,)
    sq = segment_sum((values - mean[ids]) ** 2, ids, g)                 # (G,)
    std = (sq / (size - 1).clamp(min=1)).sqrt()                         # (G,)
    return mean[ids], std[ids], size[ids], ids


# ---------------------------------------------------------------------------------------
# distributions over the vocabulary
# ---------------------------------------------------------------------------------------


def gather_log_probs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[ids]: (B, T, V), (B, T) -> (B, T)."""
    logp = torch.log_softmax(logits.float(), dim=-1)                    # (B, T, V)
    return logp.gather(-1, ids.long().unsqueeze(-1)).squeeze(-1)        # (B, T)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of softmax(logits) over the last dim: (..., V) -> (...)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def kl_from_logits(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(p || q) per position, p = softmax(p_logits), q = softmax(q_logits): (..., V) -> (...)."""
    logp = torch.log_softmax(p_logits.float(), dim=-1)
    logq = torch.log_softmax(q_logits.float(), dim=-1)
    return (logp.exp() * (logp - logq)).sum(-1)
