"""PPO's value-function regression (the critic of ``advantage: gae``)."""

from __future__ import annotations

import torch

from deciplane.errors import ConfigError


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               clip: float | None = None) -> torch.Tensor:
    """PPO's value regression, a scalar: ``mean_i (V_i - R_i)^2``, or with ``clip``
    ``mean_i max((V_i - R_i)^2, (V_old_i + clip(V_i - V_old_i, -c, c) - R_i)^2)``
    (the value may move at most ``c`` from the rollout's estimate before the loss stops
    rewarding it). All ``(N,)``; ``old_values`` and ``returns`` are constants."""
    if not (values.shape == old_values.shape == returns.shape) or values.dim() != 1:
        raise ConfigError(f"value_loss needs three (N,) tensors, got {list(values.shape)}, "
                          f"{list(old_values.shape)}, {list(returns.shape)}")
    if values.numel() == 0:
        return values.sum() * 0.0
    r = returns.detach().to(values)
    err = (values - r) ** 2                                                       # (N,)
    if clip is not None:
        old = old_values.detach().to(values)
        clipped = old + (values - old).clamp(-clip, clip)                         # (N,)
        err = torch.maximum(err, (clipped - r) ** 2)
    return err.mean()


__all__ = ["value_loss"]
