"""TLM-DRE — turn-level multiscale density-ratio weighting (docs/methods.md §2).

**Paper-inspired, parameters ours**: the paper's exact form is not public. The formulas
below are the ones docs/methods.md fixes; every default value (``tau``, ``s_min``, ``s_max``,
``alpha``/``eps`` per sign) is our choice, not the paper's.

Inputs keep the turn of every token: ``turn_ids (B, T)`` int64, ``turn_ids[b, j] = t``
for a token of the agent's turn ``t`` and ``-1`` for everything else (prompt, observation,
padding). Calling without turn ids raises :class:`deciplane.errors.MissingTurnIds` —
concatenating turns into one string is not TLM-DRE.

* :func:`turn_confidence` — ``c_t = mean_{j in turn t} log pi_ref(y_j)``;
* :func:`turn_weights` — ``s = T * softmax(-c / tau)`` over a trajectory's turns (mean 1,
  lower confidence -> larger weight), clamped to ``[s_min, s_max]``;
* :func:`asymmetric_token_loss` —
  ``-s_t^alpha_sign * min(rho A, clip(rho, 1-eps_low_sign, 1+eps_high_sign) A)`` with
  separate settings for ``A > 0`` and ``A < 0``;
* :func:`turn_mean_aggregate` — token mean within a turn, then turn mean, then
  trajectory mean (a long turn does not drown a short decisive one).

:func:`tlm_dre_loss` composes them from a :class:`TLMDRELossConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from deciplane.errors import ConfigError, MissingTurnIds, ObjectiveInputError
from deciplane.options import check_options, option

from deciplane._moved import renamed_names

from .common import check_dim, check_same_shape, masked_mean, segment_sum
from .policy_loss import LossOutput, clipped_surrogate


def check_turn_ids(turn_ids: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """Validate the token-to-turn tensor: same (B, T) shape as ``like``, integer, >= -1."""
    if turn_ids is None:
        raise MissingTurnIds(
            "TLM-DRE needs turn_ids (B, T): the turn index of every response token and -1 "
            "elsewhere; keep the turn boundaries when building the batch (e.g. from "
            "Trajectory.turns) instead of concatenating turns into one sequence")
    if turn_ids.is_floating_point() or turn_ids.dtype == torch.bool:
        raise ObjectiveInputError(f"turn_ids must be an integer tensor, got {turn_ids.dtype}")
    check_same_shape(turn_ids=turn_ids, tokens=like)
    if turn_ids.numel() and int(turn_ids.min()) < -1:
        raise ObjectiveInputError("turn_ids must be >= -1 (-1 marks non-turn tokens)")
    if not (turn_ids >= 0).any():
        raise MissingTurnIds("turn_ids marks no token as part of a turn (all -1); "
                             "label each response token with its turn index")
    return turn_ids.long()


def _turn_slots(turn_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Flat slot ``b * M + t`` per token (0 for non-turn tokens), valid-token mask, M."""
    valid = turn_ids >= 0                                                       # (B, T)
    m = int(turn_ids.max()) + 1
    rows = torch.arange(turn_ids.shape[0], device=turn_ids.device)[:, None]     # (B, 1)
    slot = torch.where(valid, rows * m + turn_ids, torch.zeros_like(turn_ids))  # (B, T)
    return slot, valid, m


def turn_confidence(ref_logp: torch.Tensor, turn_ids: torch.Tensor | None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Length-averaged reference log-prob of each turn.

    Args:
        ref_logp: ``(B, T)`` log-probs of the sampled tokens under the frozen reference.
        turn_ids: ``(B, T)`` token-to-turn ids, -1 outside turns.

    Returns:
        ``(c, turn_mask)``, both ``(B, M)``: confidence per turn (0 where the turn has no
        token) and which turns exist.
    """
    check_dim("ref_logp", ref_logp, 2)
    tid = check_turn_ids(turn_ids, ref_logp)
    slot, valid, m = _turn_slots(tid)
    b = ref_logp.shape[0]
    x = torch.where(valid, ref_logp.detach().float(), ref_logp.new_zeros((), dtype=torch.float32))
    total = segment_sum(x.flatten(), slot.flatten(), b * m)                     # (B*M,)
    count = segment_sum(valid.flatten().float(), slot.flatten(), b * m)         # (B*M,)
    conf = (total / count.clamp(min=1)).view(b, m)                              # (B, M)
    return conf, (count > 0).view(b, m)


def turn_weights(conf: torch.Tensor, turn_mask: torch.Tensor, tau: float = 1.0,
                 s_min: float = 0.5, s_max: float = 2.0) -> torch.Tensor:
    """Multiscale turn weights ``clamp(T * softmax(-c / tau), s_min, s_max)``: (B, M).

    The softmax runs over the existing turns of each trajectory (``T`` = their number),
    so before clamping the weights average to 1. Missing turns get 0.
    """
    if tau <= 0:
        raise ConfigError(f"tau={tau!r} must be > 0")
    z = torch.where(turn_mask, -conf / tau, torch.full_like(conf, float("-inf")))  # (B, M)
    n = turn_mask.sum(1, keepdim=True).to(conf.dtype)                           # (B, 1)
    sm = torch.softmax(z, dim=1)                                                # (B, M)
    s = (n * torch.nan_to_num(sm, nan=0.0)).clamp(s_min, s_max)                 # (B, M)
    return torch.where(turn_mask, s, torch.zeros_like(s))


def token_turn_weights(s: torch.Tensor, turn_ids: torch.Tensor) -> torch.Tensor:
    """Broadcast turn weights ``(B, M)`` to tokens ``(B, T)`` (0 outside turns)."""
    valid = turn_ids >= 0
    idx = turn_ids.clamp(min=0).long()                                          # (B, T)
    return torch.where(valid, s.gather(1, idx), torch.zeros_like(idx, dtype=s.dtype))


def asymmetric_token_loss(logp: torch.Tensor, old_logp: torch.Tensor,
                          advantages: torch.Tensor, token_weights: torch.Tensor,
                          mask: torch.Tensor, cfg: "TLMDRELossConfig") -> torch.Tensor:
    """Per-token loss ``-s^alpha_sign * min(rho A, clip(rho, 1-eps_low_sign, 1+eps_high_sign) A)``.

    ``advantages (B,)`` are per trajectory; the sign selects ``(alpha, eps_low,
    eps_high)`` from ``cfg`` (``*_pos`` for A >= 0, ``*_neg`` for A < 0). Returns
    ``(B, T)``, 0 where ``mask`` is false.
    """
    if advantages.dim() != 1 or advantages.shape[0] != logp.shape[0]:
        raise ObjectiveInputError(f"advantages must be (B,) with B={logp.shape[0]} (one per "
                                  f"trajectory), got {list(advantages.shape)}")
    zero = logp.new_zeros(())
    log_rho = torch.where(mask, logp - old_logp.detach(), zero)                 # (B, T)
    rho = log_rho.exp()                                                         # (B, T)
    a = advantages.detach().to(logp.device, logp.dtype)[:, None].expand_as(logp)             # (B, T)
    pos = a >= 0                                                                # (B, T)
    loss_pos = clipped_surrogate(rho, a, cfg.eps_low_pos, cfg.eps_high_pos)     # (B, T)
    loss_neg = clipped_surrogate(rho, a, cfg.eps_low_neg, cfg.eps_high_neg)     # (B, T)
    s = token_weights.detach().clamp(min=1e-12)                                 # (B, T)
    w = torch.where(pos, s ** cfg.alpha_pos, s ** cfg.alpha_neg)                # (B, T)
    out = w * torch.where(pos, loss_pos, loss_neg)                              # (B, T)
    return torch.where(mask, out, zero)


def turn_mean_aggregate(token_loss: torch.Tensor, turn_ids: torch.Tensor) -> torch.Tensor:
    """Mean over the tokens of each turn, then over the turns of each trajectory, then
    over trajectories that have at least one turn token: scalar."""
    tid = check_turn_ids(turn_ids, token_loss)
    slot, valid, m = _turn_slots(tid)
    b = token_loss.shape[0]
    x = torch.where(valid, token_loss, token_loss.new_zeros(()))                # (B, T)
    total = segment_sum(x.flatten(), slot.flatten(), b * m).view(b, m)          # (B, M)
    count = segment_sum(valid.flatten().to(x.dtype), slot.flatten(), b * m).view(b, m)
    per_turn = total / count.clamp(min=1)                                       # (B, M)
    per_traj = masked_mean(per_turn, count > 0, dim=1)                          # (B,)
    return masked_mean(per_traj, (count > 0).any(1))


@dataclass(frozen=True)
class TLMDRELossConfig:
    """TLM-DRE settings — paper-inspired, every default here is ours."""

    tau: float = option(1.0, gt=0)
    """Softmax temperature of the turn weights (smaller = sharper)."""
    s_min: float = option(0.5, gt=0)
    """Lower clamp of a turn weight (> 0)."""
    s_max: float = 2.0
    """Upper clamp of a turn weight."""
    alpha_pos: float = option(1.0, ge=0)
    """Exponent of the turn weight for trajectories with A >= 0 (0 = no weighting)."""
    alpha_neg: float = option(0.5, ge=0)
    """Exponent of the turn weight for trajectories with A < 0 (0.5 since 0.2: the value the
    shipped config ``text_ppo_tlm_dre.yaml`` and the trainer always used; 0.1's loss
    default was 1.0)."""
    eps_low_pos: float = option(0.2, ge=0, le=1)
    """Lower clip for A >= 0."""
    eps_high_pos: float = option(0.28, ge=0)
    """Upper clip for A >= 0."""
    eps_low_neg: float = option(0.2, ge=0, le=1)
    """Lower clip for A < 0."""
    eps_high_neg: float = option(0.2, ge=0)
    """Upper clip for A < 0."""

    def __post_init__(self) -> None:
        check_options(self, "TLMDRELossConfig.")
        if self.s_max < self.s_min:
            raise ConfigError(f"TLMDRELossConfig: s_min ({self.s_min}) must be <= s_max "
                              f"({self.s_max})")


def tlm_dre_loss(cfg: TLMDRELossConfig, logp: torch.Tensor, old_logp: torch.Tensor,
                 ref_logp: torch.Tensor, advantages: torch.Tensor,
                 turn_ids: torch.Tensor | None) -> LossOutput:
    """TLM-DRE loss: turn weights from the reference, asymmetric ratio loss, turn-mean.

    Args:
        logp, old_logp, ref_logp: ``(B, T)`` log-probs of the sampled tokens under the
            current, sampling (old) and frozen reference policies.
        advantages: ``(B,)`` one per trajectory.
        turn_ids: ``(B, T)`` token-to-turn ids (-1 outside the agent's turns); required.
    """
    check_dim("logp", logp, 2)
    check_same_shape(logp=logp, old_logp=old_logp, ref_logp=ref_logp)
    tid = check_turn_ids(turn_ids, logp)
    conf, tmask = turn_confidence(ref_logp, tid)                                # (B, M)
    s = turn_weights(conf, tmask, cfg.tau, cfg.s_min, cfg.s_max)                # (B, M)
    s_tok = token_turn_weights(s, tid)                                          # (B, T)
    valid = tid >= 0                                                            # (B, T)
    tok = asymmetric_token_loss(logp, old_logp, advantages, s_tok, valid, cfg)  # (B, T)
    loss = turn_mean_aggregate(tok, tid)
    metrics = {"loss/policy": float(loss.detach()),
               "tlm_dre/weight_max": float(s[tmask].max()),
               "tlm_dre/weight_min": float(s[tmask].min()),
               "tlm_dre/turn_conf_mean": float(conf[tmask].mean())}
    return LossOutput(loss, metrics)


__getattr__ = renamed_names(__name__)
