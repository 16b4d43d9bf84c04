"""The GRPO-family update on groups of single-turn samples: Math-v0 GRPO and TTRL.

Usage (what a trainer or an adapter does per step)::

    from deciplane.engine import Budget, GRPOConfig, GRPOUpdate, sample_groups
    from deciplane.objectives import PolicyLossConfig

    budget = Budget()
    update = GRPOUpdate(policy, GRPOConfig(loss=PolicyLossConfig(kl_beta=0.001)),
                        budget=budget, lr=1e-5)
    with budget.clock():                                   # wall time
        groups = sample_groups(policy, prompts, group_size=8, max_new_tokens=24,
                               temperature=1.0, seed=step, budget=budget)
        for g in groups:                                   # one group per prompt
            for traj in g:
                traj.turns[0].reward = my_reward(traj.turns[0].action)
        stats = update.step(groups)                        # one optimizer step (or a skip)

Group advantages, the clipped surrogate, the KL to the frozen reference and the
aggregation all come from :mod:`deciplane.objectives`; the optimizer step (micro-batch
accumulation under the aggregation's normaliser, clipping, skip-step) is
:mod:`deciplane.engine.optim`'s. The step is skipped (no optimizer call, so no weight
decay either) when every group is degenerate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

import torch

from deciplane.agents.policy import unpad_left
from deciplane.engine.budget import Budget
from deciplane.errors import ConfigError
from deciplane.engine.logprobs import forward_responses, pad_responses
from deciplane.engine.trunk import TrunkStates, trunk_boundary
from deciplane.engine.optim import (MicroLoss, Normaliser, Optimizer, is_step_metric,
                                    micro_batches, minibatches, optimizer_step)
from deciplane.options import check_options, option
from deciplane.objectives import (AdvantageConfig, PolicyLossConfig, compute_advantages,
                                  degenerate_groups, group_ids_from_keys, policy_loss)
from deciplane.objectives.policy_loss import aggregation_weights
from deciplane.types import Trajectory


@dataclass
class GRPOConfig:
    """The GRPO-family loss and update schedule (docs/methods.md, GRPO family)."""

    advantage: Literal["grpo", "dr_grpo", "rloo", "reinforce_pp"] = "grpo"
    """Group advantage estimator."""
    loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    """The clipped surrogate, its aggregation over the whole optimizer batch
    (micro-batches are re-weighted so that accumulation equals the full-batch value) and
    the KL penalty to the frozen reference (initial policy): one
    :class:`~deciplane.objectives.policy_loss.PolicyLossConfig`, used as it is."""
    temperature: float = option(1.0, gt=0)
    """Logits are divided by this (use the sampling temperature)."""
    epochs: int = option(1, ge=1)
    """Passes over each rollout batch."""
    minibatches: int = option(1, ge=1)
    """Optimizer steps per epoch (the batch is split in this many parts)."""
    micro_batch_size: int = option(8, ge=1)
    """Sequences per forward pass (gradients accumulate across micro-batches)."""
    max_grad_norm: float = option(1.0, ge=0)
    """Global gradient-norm clip (0 = off)."""
    old_logprobs: Literal["auto", "recompute", "sampler"] = "auto"
    """Where ``log pi_old`` comes from. ``recompute``: a no-grad forward before the
    first update; ``sampler``: the generator's log-probs; ``auto``: with a single
    optimizer step per batch (epochs = minibatches = 1) the detached log-probs of the
    training forward itself — the same weights, so identical to ``recompute`` without the
    extra pass — else ``recompute``."""
    drop_degenerate_groups: bool = False
    """Leave groups with all-equal rewards out of the update (they carry no policy
    gradient, only the KL term); saves their forward/backward."""
    frozen_trunk: bool = True
    """When only the top decoder layers train (LoRA on the last k layers) and a step runs
    more than one forward per sample (a reference for the KL term, recomputed old
    log-probs, several epochs), run the frozen bottom layers once per sample and only the
    top layers in every forward (exact; see ``deciplane.engine.trunk``)."""

    def __post_init__(self) -> None:
        validate_grpo(self)


def validate_grpo(cfg: GRPOConfig) -> None:
    """The declared ranges and choices and the estimator's own rules (the loss config
    checked itself when it was built)."""
    check_options(cfg, "GRPOConfig.")
    if not isinstance(cfg.loss, PolicyLossConfig):
        raise ConfigError(f"GRPOConfig.loss must be a PolicyLossConfig, got "
                          f"{type(cfg.loss).__name__}")
    AdvantageConfig(estimator=cfg.advantage)


@dataclass
class StepStats:
    """What one :meth:`GRPOUpdate.step` did. ``metrics`` use namespaced names."""

    skipped: bool
    n_samples: int
    n_tokens: int
    grad_norm: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)


class GRPOUpdate:
    """One GRPO-family optimisation step per call on groups of single-turn samples.

    ``policy`` is a :class:`~deciplane.agents.Policy`; the reference for the KL term is
    ``policy.reference()`` (LoRA adapters off, or a frozen copy of the initial weights).
    ``optimizer`` is an :class:`~deciplane.engine.optim.Optimizer` (a trainer passes its
    own, which it checkpoints); without one, a fresh AdamW at ``lr``, the caller's
    config's learning rate (there is no default here: one rule for ``lr``, declared and
    checked by the method's config, :func:`deciplane.options.learning_rate`).
    """

    def __init__(self, policy, config: GRPOConfig, *, budget: Budget | None = None,
                 optimizer: Optimizer | None = None, lr: float | None = None,
                 weight_decay: float = 0.0):
        if (optimizer is None) == (lr is None):
            raise ConfigError("GRPOUpdate takes either the caller's optimizer or its config's "
                              "learning rate (lr=config.lr), not both or neither")
        self.policy = policy
        self.cfg = config
        self.budget = budget if budget is not None else Budget()
        self.loss_cfg = config.loss
        self.optimizer = optimizer or Optimizer(policy.trainable_parameters(), lr=lr,
                                                weight_decay=weight_decay,
                                                max_grad_norm=config.max_grad_norm,
                                                budget=self.budget)

    # -- pieces ---------------------------------------------------------------------------
    def advantages(self, trajs: Sequence[Trajectory]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(advantages (N,), degenerate (N,) bool)`` from the trajectories' rewards."""
        rewards = torch.tensor([t.total_reward for t in trajs], dtype=torch.float32)
        gids = group_ids_from_keys([t.group_id for t in trajs])
        adv = compute_advantages(AdvantageConfig(estimator=self.cfg.advantage), rewards, gids)
        return adv, degenerate_groups(rewards, gids)

    def _logp_no_grad(self, trajs: Sequence[Trajectory], reference: bool,
                      trunk: TrunkStates | None = None) -> list[torch.Tensor]:
        """Per-sample detached log-probs under the reference or the current policy."""
        out: list[torch.Tensor] = []
        for mb in micro_batches(len(trajs), self.cfg.micro_batch_size):
            prompts = [trajs[i].turns[0].prompt_ids for i in mb]
            resps = [trajs[i].turns[0].response_ids for i in mb]
            with self.budget.phase("forward"):
                if reference:
                    with self.policy.reference() as ref:
                        fwd = forward_responses(self.policy, prompts, resps, grad=False, model=ref,
                                                temperature=self.cfg.temperature, budget=self.budget,
                                                trunk=trunk)
                else:
                    fwd = forward_responses(self.policy, prompts, resps, grad=False,
                                            temperature=self.cfg.temperature, budget=self.budget,
                                            trunk=trunk)
            lengths = [int(trajs[i].turns[0].response_ids.numel()) for i in mb]
            out += [lp.detach().cpu() for lp in unpad_left(fwd.logp, lengths)]
        return out

    def normaliser(self, trajs: Sequence[Trajectory]) -> Normaliser:
        """The aggregation's normaliser, declared once per batch: each response's units."""
        return Normaliser(aggregation_weights(
            self.loss_cfg.aggregation, [int(t.turns[0].response_ids.numel()) for t in trajs]))

    def micro_loss(self, trajs: Sequence[Trajectory], adv: torch.Tensor,
                   old: list[torch.Tensor] | None, ref: list[torch.Tensor] | None,
                   trunk: TrunkStates | None = None) -> Callable[[list[int]], MicroLoss]:
        """The policy loss on a micro-batch of ``trajs`` (indices), aggregated over it.
        ``old``/``ref``: per-sample old and reference log-probs (``old=None``: the
        training forward's own detached log-probs)."""

        def loss_fn(idx: list[int]) -> MicroLoss:
            with self.budget.phase("forward"):
                fwd = forward_responses(self.policy, [trajs[i].turns[0].prompt_ids for i in idx],
                                        [trajs[i].turns[0].response_ids for i in idx],
                                        temperature=self.cfg.temperature, budget=self.budget,
                                        trunk=trunk)
            width = fwd.logp.shape[1]
            dev = fwd.logp.device
            old_t = fwd.logp.detach() if old is None else \
                pad_responses([old[i] for i in idx], width)[0].to(dev)
            ref_t = None if ref is None else pad_responses([ref[i] for i in idx], width)[0].to(dev)
            out = policy_loss(self.loss_cfg, fwd.logp, old_t, adv[idx].to(dev), fwd.mask,
                              ref_logp=ref_t)
            return MicroLoss(task=out.loss, metrics=out.metrics, tokens=fwd.n_tokens)

        return loss_fn

    @property
    def keep_layer(self) -> int | None:
        """The layer whose input states the sampler should keep for this update
        (``sample_groups(..., keep_layer=update.keep_layer)``): the frozen-trunk boundary
        when ``frozen_trunk`` is on and only the top layers train, else ``None``."""
        if not self.cfg.frozen_trunk:
            return None
        return trunk_boundary(self.policy.model)

    def _trunk(self) -> TrunkStates | None:
        """Frozen-trunk states for one step, when enabled and only top layers train."""
        if not self.cfg.frozen_trunk:
            return None
        boundary = trunk_boundary(self.policy.model)
        return None if boundary is None else TrunkStates(boundary)

    # -- the step -------------------------------------------------------------------------
    def step(self, groups: Sequence[Sequence[Trajectory]]) -> StepStats:
        """Advantages -> (old / reference log-probs) -> micro-batched loss -> optimizer step.

        Skips the step (no optimizer call) when every group has all-equal rewards.
        Returns the mean of the metrics over the optimizer steps taken.
        """
        trajs = [t for g in groups for t in g]
        if not trajs:
            self.optimizer.skip()
            return StepStats(skipped=True, n_samples=0, n_tokens=0)
        adv, degen = self.advantages(trajs)
        rewards = [t.total_reward for t in trajs]
        base = {"rollout/reward_mean": float(sum(rewards) / len(rewards)),
                "rollout/degenerate_frac": float(degen.float().mean())}
        if bool(degen.all()):
            self.optimizer.skip()
            return StepStats(skipped=True, n_samples=len(trajs), n_tokens=0, metrics=base)
        if self.cfg.drop_degenerate_groups:
            keep = [i for i in range(len(trajs)) if not bool(degen[i])]
            trajs, adv = [trajs[i] for i in keep], adv[keep]
        n_updates = self.cfg.epochs * self.cfg.minibatches
        mode = self.cfg.old_logprobs
        if mode == "auto":
            mode = "detached" if n_updates == 1 else "recompute"
        passes = n_updates + (mode == "recompute") + (self.loss_cfg.kl_beta > 0)  # per sample
        kept = self.keep_layer is not None and any(
            t.turns[0].boundary_hidden is not None and t.turns[0].boundary_layer == self.keep_layer
            for t in trajs)
        trunk = self._trunk() if passes > 1 or kept else None
        if trunk is not None:
            for t in trajs:             # the sampler's states: the trunk is never rerun
                turn = t.turns[0]
                if turn.boundary_hidden is not None and turn.boundary_layer == trunk.boundary:
                    trunk.seed(torch.cat([turn.prompt_ids, turn.response_ids]),
                               turn.boundary_hidden)
        old: list[torch.Tensor] | None = None
        if mode == "recompute":
            old = self._logp_no_grad(trajs, reference=False, trunk=trunk)
        elif mode == "sampler":
            old = [t.turns[0].response_logprobs for t in trajs]
        ref = self._logp_no_grad(trajs, reference=True, trunk=trunk) \
            if self.loss_cfg.kl_beta > 0 else None
        norm = self.normaliser(trajs)
        micro_loss = self.micro_loss(trajs, adv, old, ref, trunk)
        tokens = [0]

        def loss_fn(idx: list[int]) -> MicroLoss:
            out = micro_loss(idx)
            tokens[0] += out.tokens
            return out

        collected: list[dict[str, float]] = []
        norms: list[float] = []
        gen = torch.Generator().manual_seed(len(trajs))
        for _epoch in range(self.cfg.epochs):
            order = torch.randperm(len(trajs), generator=gen).tolist() if self.cfg.minibatches > 1 \
                else list(range(len(trajs)))
            for part in minibatches(order, self.cfg.minibatches):
                if not part:
                    continue
                m = optimizer_step(self.optimizer, part, self.cfg.micro_batch_size, loss_fn, norm)
                norms.append(m["optim/grad_norm"])
                collected.append({k: v for k, v in m.items() if not is_step_metric(k)})
        avg = {k: sum(m[k] for m in collected) / len(collected) for k in collected[0]}
        avg.update(base)
        avg["optim/grad_norm"] = sum(norms) / len(norms)
        return StepStats(skipped=False, n_samples=len(trajs), n_tokens=tokens[0],
                         grad_norm=avg["optim/grad_norm"], metrics=avg)


__all__ = ["GRPOConfig", "GRPOUpdate", "StepStats", "validate_grpo"]
