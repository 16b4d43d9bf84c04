"""Advantage estimators of the PPO/GRPO family (docs/methods.md §4), as pure tensor functions.

Group estimators take one scalar reward per trajectory ``rewards (N,)`` and the group of
each trajectory ``group_ids (N,)`` (same prompt / same game+seed = same group) and return
one advantage per trajectory ``(N,)``:

* :func:`grpo_advantages` — ``(r_i - mean_g r) / (std_g r + eps)`` (unbiased std, as TRL/verl)
* :func:`dr_grpo_advantages` — ``r_i - mean_g r`` (no std division)
* :func:`rloo_advantages` — ``r_i - mean_{j != i} r_j``; a group of size 1 is an error
* :func:`reinforce_pp_advantages` — group-centred, then divided by the std of the batch

:func:`gae` is the critic-based estimator (per step, with a value head).

:func:`gigpo_advantages` (GiGPO, Feng et al. 2025, arXiv 2505.10978) is per decision
``(E, T)``: the episode-level group advantage plus ``weight`` x a step-level one, computed
among the decisions of one episode group taken in the same anchor state
(:func:`step_group_advantages` on :func:`discounted_returns`);
:func:`step_group_share` is the share of decisions whose anchor state recurs.
:func:`is_degenerate_batch` says whether every group has all-equal rewards: the trainer
then skips the optimizer step (weight decay would still move the weights).

Choose an estimator with :class:`AdvantageConfig` and :func:`compute_advantages`
(a typed option mapped to a function in :data:`ADVANTAGE_ESTIMATORS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import torch

from deciplane.errors import ConfigError, ObjectiveInputError
from deciplane.options import check_options, option

from .common import (_check_ids, check_dim, dense_ids,
                     group_stats, segment_sum)

AdvantageEstimator = Literal["grpo", "dr_grpo", "rloo", "reinforce_pp"]


def _check_rewards(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    check_dim("rewards", rewards, 1)
    _check_ids(group_ids, rewards.shape[0])
    if not torch.isfinite(rewards).all():
        raise ObjectiveInputError("rewards contain NaN/inf; fix the reward function")
    return rewards.float() if not rewards.is_floating_point() else rewards


def grpo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6
                    ) -> torch.Tensor:
    """GRPO: ``A_i = (r_i - mean_g r) / (std_g r + eps)`` with the unbiased group std.

    A group with all-equal rewards (or a single member) gets advantage 0.
    """
    r = _check_rewards(rewards, group_ids)                       # (N,)
    mean, std, _, _ = group_stats(r, group_ids)                  # (N,) each
    return (r - mean) / (std + eps)                              # (N,)


def dr_grpo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 0.0
                       ) -> torch.Tensor:
    """Dr. GRPO: ``A_i = r_i - mean_g r`` (no std division; ``eps`` is unused).

    Pair it with the ``seq_sum_const`` aggregation (sum over a response's tokens divided
    by a constant max length), see :mod:`deciplane.objectives.policy_loss`.
    """
    r = _check_rewards(rewards, group_ids)                       # (N,)
    mean, _, _, _ = group_stats(r, group_ids)                    # (N,)
    return r - mean                                              # (N,)


def rloo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 0.0
                    ) -> torch.Tensor:
    """RLOO: ``A_i = r_i - mean_{j != i} r_j`` (leave-one-out baseline).

    Raises ConfigError for a group of size 1 (there is no "other" sample).
    """
    r = _check_rewards(rewards, group_ids)                       # (N,)
    _, _, size, ids = group_stats(r, group_ids)                  # (N,)
    if (size < 2).any():
        bad = int(ids[size < 2][0])
        raise ConfigError(f"rloo needs at least 2 samples per group, but group #{bad} has 1; "
                          "sample group_size >= 2 per prompt or use advantage='grpo'")
    g = int(ids.max()) + 1
    total = segment_sum(r, ids, g)[ids]                          # (N,)
    return r - (total - r) / (size - 1)                          # (N,)


def reinforce_pp_advantages(rewards: torch.Tensor, group_ids: torch.Tensor,
                            eps: float = 1e-6) -> torch.Tensor:
    """REINFORCE++ (baseline variant): subtract the group mean, then divide by the
    (unbiased) std of the centred values over the whole batch."""
    r = _check_rewards(rewards, group_ids)                       # (N,)
    mean, _, _, _ = group_stats(r, group_ids)                    # (N,)
    centred = r - mean                                           # (N,)
    std = centred.std() if centred.numel() > 1 else centred.new_zeros(())
    return centred / (std + eps)                                 # (N,)


GiGPONorm = Literal["std", "mean"]
"""GiGPO's ``F_norm`` at both levels: ``std`` (``(x - mean) / (std + eps)``, verl-agent's
``mean_std_norm``, the setting of its example scripts) or ``mean`` (``x - mean``, the
paper's variant without std, verl-agent's ``mean_norm``)."""


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float
                       ) -> torch.Tensor:
    """Per-decision discounted return from each step on, ``R_t = sum_{k>=t} gamma^(k-t)
    r_k`` within its own episode (GiGPO Eq. 5: the return after an anchor state).

    Args:
        rewards: ``(E, T)`` reward of each decision (right padded).
        mask: ``(E, T)`` valid decisions, each row a contiguous prefix.
        gamma: discount per decision in [0, 1] (1 = the undiscounted rest of the episode).

    Returns ``(E, T)``, 0 on padding. Example: rewards ``[0, 0, 1]``, gamma 0.5 ->
    ``[0.25, 0.5, 1]``.
    """
    check_dim("rewards", rewards, 2)
    if mask.shape != rewards.shape:
        raise ObjectiveInputError(f"rewards {list(rewards.shape)} and mask "
                                  f"{list(mask.shape)} must both be (E, T)")
    if not 0.0 <= gamma <= 1.0:
        raise ConfigError(f"gamma = {gamma} must be in [0, 1]; e.g. 0.95 (GiGPO's)")
    m = mask.bool().to(rewards.device)
    r = torch.where(m, rewards.float(), torch.zeros((), device=rewards.device))  # (E, T)
    out = torch.zeros_like(r)                                                  # (E, T)
    running = torch.zeros(r.shape[0], device=r.device)                        # (E,)
    for t in reversed(range(r.shape[1])):
        running = r[:, t] + gamma * running * m[:, t].float()                   # (E,)
        out[:, t] = running
    return out * m.float()                                                     # (E, T)


def step_group_advantages(returns: torch.Tensor, step_ids: torch.Tensor,
                          norm: GiGPONorm = "std", eps: float = 1e-6) -> torch.Tensor:
    """GiGPO's step-level relative advantage (Eq. 7): each decision's return minus the
    mean over its step group (the decisions of one episode group in the same anchor state),
    divided by the group's unbiased std + ``eps`` when ``norm="std"``. A decision alone in
    its step group gets 0.

    ``returns (N,)``, ``step_ids (N,)`` -> ``(N,)``. Example: returns ``[1, 0, 0.5]`` with
    ids ``[0, 0, 1]`` -> ``[0.707, -0.707, 0]`` (std of ``[1, 0]`` is 0.707) with ``std``,
    ``[0.5, -0.5, 0]`` with ``mean``.
    """
    r = _check_rewards(returns, step_ids)                                     # (N,)
    mean, std, _, _ = group_stats(r, step_ids)                               # (N,) each
    centred = r - mean                                                       # (N,)
    if norm == "mean":
        return centred                                                       # (N,)
    # a singleton or all-equal group is centred to 0: keep it 0 even with eps = 0
    return torch.where(std > 0, centred / (std + eps), torch.zeros_like(centred))  # (N,)


def step_group_ids(group_ids: torch.Tensor, anchor_ids: torch.Tensor, mask: torch.Tensor
              ) -> torch.Tensor:
    """GiGPO's step groups: one id per valid decision ``(N,)`` for each (episode group,
    anchor state) pair, in the row-major order of ``mask``. ``(E,), (E, T), (E, T) -> (N,)``;
    example: groups ``[0, 1]``, anchors ``[[5, 6], [5, 5]]`` -> ``[0, 1, 2, 2]``."""
    g = group_ids.long()[:, None].expand_as(anchor_ids)[mask]                   # (N,)
    a = anchor_ids.long()[mask]                                              # (N,)
    if a.numel() and int(a.min()) < 0:
        raise ObjectiveInputError("anchor_ids must be >= 0 on every valid decision; give "
                                  "each distinct anchor state a non-negative id")
    _, ids = torch.unique(torch.stack([g, a], dim=1), dim=0, return_inverse=True)
    return ids.reshape(-1)                                                   # (N,)


def _check_gigpo(rewards: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor,
                 anchor_ids: torch.Tensor) -> torch.Tensor:
    check_dim("rewards", rewards, 2)
    if mask.shape != rewards.shape or anchor_ids.shape != rewards.shape:
        raise ObjectiveInputError(f"rewards {list(rewards.shape)}, mask {list(mask.shape)} "
                                  f"and anchor_ids {list(anchor_ids.shape)} must all be (E, T)")
    _check_ids(group_ids, rewards.shape[0])
    m = mask.bool()
    if (m[:, 1:] & ~m[:, :-1]).any():
        raise ObjectiveInputError("gigpo needs right-padded rows (valid steps first, then "
                                  "padding); move the padding to the end of each row")
    return m


def gigpo_advantages(rewards: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor,
                     anchor_ids: torch.Tensor, gamma: float = 0.95, weight: float = 1.0,
                     norm: GiGPONorm = "std", eps: float = 1e-6) -> torch.Tensor:
    """GiGPO (Feng et al. 2025, arXiv 2505.10978, Eq. 8): per decision,
    ``A = A_episode + weight * A_step``.

    * ``A_episode``: the group advantage of the episode's undiscounted return
      ``sum_t r_t`` among the episodes of its group (:func:`grpo_advantages` for
      ``norm="std"``, :func:`dr_grpo_advantages` for ``norm="mean"``), the same for every
      decision of the episode.
    * ``A_step``: :func:`step_group_advantages` of the decision's ``gamma``-discounted
      return from that step on (:func:`discounted_returns`), among the decisions of the same
      episode group whose anchor state is the same (however the episodes reached it, and
      possibly several times in one episode). A decision whose anchor state no other
      decision of its group visited gets 0, so with no recurring state GiGPO is the episode
      estimator, and so is ``weight=0``.

    Args:
        rewards: ``(E, T)`` reward of each decision (right padded).
        mask: ``(E, T)`` valid decisions, each row a contiguous prefix.
        group_ids: ``(E,)`` episode group (same game and start = same group).
        anchor_ids: ``(E, T)`` int id of the state each decision was taken in (equal ids =
            the same state); any value on padding.
        gamma: discount of the step returns (not of the episode return); the paper's 0.95.
        weight: ``omega``, the step advantage's weight; the paper's 1.
        norm: ``std`` or ``mean`` (:data:`GiGPONorm`), at both levels.

    Returns ``(E, T)``, 0 on padding.
    """
    m = _check_gigpo(rewards, mask, group_ids, anchor_ids)
    r = rewards.float()                                                      # (E, T)
    episode = torch.where(m, r, r.new_zeros(())).sum(dim=1)                 # (E,)
    est = grpo_advantages if norm == "std" else dr_grpo_advantages
    a_ep = est(episode, group_ids, eps=eps)                                  # (E,)
    ret = discounted_returns(r, m, gamma)                                    # (E, T)
    a_step = step_group_advantages(ret[m], step_group_ids(group_ids, anchor_ids, m),
                                   norm, eps)                                # (N,)
    out = a_ep[:, None].expand_as(r).clone()                                 # (E, T)
    out[m] = out[m] + weight * a_step
    return out * m.float()                                                   # (E, T)


def step_group_share(group_ids: torch.Tensor, anchor_ids: torch.Tensor,
                     mask: torch.Tensor) -> float:
    """Share of valid decisions whose step group (same episode group, same anchor state)
    holds at least 2 decisions: the decisions GiGPO's step advantage can be non-zero for.
    ``(E,), (E, T), (E, T)`` -> float; 0 for no decision. Example: one group, anchors
    ``[[0, 1], [0, 2]]`` -> 2/4."""
    m = _check_gigpo(torch.zeros(anchor_ids.shape), mask, group_ids, anchor_ids)
    if not m.any():
        return 0.0
    ids = step_group_ids(group_ids, anchor_ids, m)                                # (N,)
    size = torch.bincount(ids)[ids]                                          # (N,)
    return float((size >= 2).float().mean())


ADVANTAGE_ESTIMATORS: dict[str, Callable[..., torch.Tensor]] = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "rloo": rloo_advantages,
    "reinforce_pp": reinforce_pp_advantages,
}
"""Typed option -> group advantage function, all ``(rewards, group_ids, eps) -> (N,)``."""


@dataclass(frozen=True)
class AdvantageConfig:
    """Which group advantage estimator to use."""

    estimator: AdvantageEstimator = "grpo"
    """``grpo`` | ``dr_grpo`` | ``rloo`` | ``reinforce_pp`` (see module docstring)."""
    eps: float = option(1e-6, ge=0)
    """Added to the std before dividing (grpo, reinforce_pp)."""

    def __post_init__(self) -> None:
        check_options(self, "AdvantageConfig.")


def compute_advantages(cfg: AdvantageConfig, rewards: torch.Tensor,
                       group_ids: torch.Tensor) -> torch.Tensor:
    """Apply the estimator chosen by ``cfg``: ``(N,), (N,) -> (N,)``."""
    return ADVANTAGE_ESTIMATORS[cfg.estimator](rewards, group_ids, eps=cfg.eps)


# ---------------------------------------------------------------------------------------
# degenerate groups / skip-step
# ---------------------------------------------------------------------------------------


def degenerate_groups(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Per-element flag ``(N,)``: True where the element's group has all-equal rewards."""
    r = _check_rewards(rewards, group_ids)
    ids, g = dense_ids(group_ids.long().to(r.device))
    big = torch.finfo(r.dtype).max
    init = torch.full((g,), big, dtype=r.dtype, device=r.device)               # (G,)
    lo = init.scatter_reduce(0, ids, r, "amin")                                 # (G,)
    hi = (-init).scatter_reduce(0, ids, r, "amax")                              # (G,)
    return (hi == lo)[ids]                                                        # (N,)


def varied_group_share(rewards: torch.Tensor, group_ids: torch.Tensor) -> float:
    """Share of groups whose rewards are not all equal: the groups a group baseline learns
    from (the rest have zero advantage). Example: groups ``[1, 0]``, ``[0, 0]``, ``[.5, .5]``
    -> 1/3. 0 for an empty batch."""
    if rewards.numel() == 0:
        return 0.0
    flat = degenerate_groups(rewards, group_ids)                                  # (N,)
    ids, g = dense_ids(group_ids.long().to(flat.device))
    per_group = torch.zeros(g, dtype=torch.bool, device=flat.device).scatter(0, ids, flat)
    return float((~per_group).float().mean())


def is_degenerate_batch(rewards: torch.Tensor, group_ids: torch.Tensor) -> bool:
    """True if every group of the optimizer batch has all-equal rewards.

    The trainer must then skip the optimizer step: the policy gradient is zero, but
    AdamW's weight decay and momentum would still move the weights. An empty batch is
    degenerate too.
    """
    if rewards.numel() == 0:
        return True
    return bool(degenerate_groups(rewards, group_ids).all())


# ---------------------------------------------------------------------------------------
# GAE (critic)
# ---------------------------------------------------------------------------------------


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
        lam: float = 0.95, bootstrap: torch.Tensor | None = None
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over right-padded step sequences.

    Args:
        rewards: ``(B, T)`` reward of each step.
        values: ``(B, T)`` value-head estimate ``V(s_t)`` (treated as constants).
        mask: ``(B, T)`` valid steps; each row must be a contiguous prefix (steps
            ``0..L_b-1``), the rest is padding.
        gamma, lam: discount and GAE lambda.
        bootstrap: ``(B,)`` value of the state after the last valid step (a truncated
            episode); ``None`` or 0 for terminated episodes.

    Returns:
        ``(advantages, returns)``, both ``(B, T)`` and 0 on padding;
        ``returns = advantages + values`` (the critic's regression target).
    """
    check_dim("rewards", rewards, 2)
    if values.shape != rewards.shape or mask.shape != rewards.shape:
        raise ObjectiveInputError(f"rewards {list(rewards.shape)}, values "
                                  f"{list(values.shape)} and mask {list(mask.shape)} "
                                  "must all be (B, T)")
    m = mask.bool().to(rewards.device)
    if (m[:, 1:] & ~m[:, :-1]).any():
        raise ObjectiveInputError("gae needs right-padded rows (valid steps first, then "
                                  "padding); move the padding to the end of each row")
    b, t_len = rewards.shape
    r, v = rewards.float(), values.detach().float()                  # (B, T)
    dev = r.device
    boot = (torch.zeros(b, device=dev) if bootstrap is None
            else bootstrap.detach().float().to(dev))                 # (B,)
    adv = torch.zeros_like(r)                                        # (B, T)
    last = torch.zeros(b, device=dev)                                       # (B,)
    for t in reversed(range(t_len)):
        if t + 1 < t_len:
            nxt_valid = m[:, t + 1].float()                          # (B,)
            next_v = torch.where(m[:, t + 1], v[:, t + 1], boot)     # (B,)
        else:
            nxt_valid, next_v = torch.zeros(b, device=dev), boot
        delta = r[:, t] + gamma * next_v - v[:, t]                   # (B,)
        last = delta + gamma * lam * nxt_valid * last                # (B,)
        last = last * m[:, t].float()
        adv[:, t] = last
    returns = (adv + v) * m.float()                                  # (B, T)
    return adv, returns
