"""What an algorithm supplies to the training loop, and the typed batches it hands over.

Ownership follows Stable-Baselines3: the loop (:class:`~deciplane.trainers.trainer.Trainer`)
owns rollout scheduling, the optimizer step (:mod:`deciplane.engine.optim`), logging,
evaluation scheduling and checkpoints. An :class:`Algorithm` supplies:

* :meth:`Algorithm.rollout` — one iteration's :class:`RolloutBatch` (its ``data`` is one
  of the typed payloads below: :class:`DecisionBatch`, :class:`TextBatch`,
  :class:`SampleGroups`);
* :meth:`Algorithm.normaliser` (and :meth:`Algorithm.distill_normaliser`) — what its
  loss is a mean over, declared once per batch;
* :meth:`Algorithm.loss` — its :class:`~deciplane.engine.optim.MicroLoss` on a micro-batch;
* :meth:`Algorithm.evaluate` — held-out metrics on a split.

Optional hooks: a warm start, extra trainable modules (a value head), the RL +
distillation settings (CORD), or — for an update with its own schedule, the GRPO family
— :meth:`Algorithm.update` with the loop's optimizer.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Generic, TypeVar, Union

import torch

from deciplane.engine.method import Method
from deciplane.engine.optim import MicroLoss, Normaliser, Optimizer
from deciplane.trainers.config import DistillConfig, TrainConfig
from deciplane.types import Decision, Trajectory

# ---------------------------------------------------------------------------------------
# typed batches
# ---------------------------------------------------------------------------------------


def select_rows(payload: Any, rows: list[int]) -> Any:
    """The payload's rows ``rows``, in that order: every list field and every tensor field
    (indexed on its first dimension) is sliced, ``None`` stays ``None``."""
    idx = torch.tensor(rows, dtype=torch.long)
    picked = {}
    for f in fields(payload):
        v = getattr(payload, f.name)
        if isinstance(v, torch.Tensor):
            picked[f.name] = v[idx]
        elif isinstance(v, list):
            picked[f.name] = [v[i] for i in rows]
    return replace(payload, **picked)


@dataclass
class DecisionBatch:
    """Flattened menu decisions of a rollout, with everything the loss needs (detached)."""

    decisions: list[Decision]
    actions: torch.Tensor        # (N,) chosen index
    old_logp: torch.Tensor       # (N,) old log-prob of the chosen index
    advantages: torch.Tensor     # (N,) the episode's (or, gae, the turn's) advantage
    episode_ids: torch.Tensor    # (N,)
    weights: torch.Tensor        # (N,) length-balanced weights over the whole batch
    menu_keys: list[tuple[str, ...]]
    expert: list[int | None]     # env expert's menu index per decision
    returns: torch.Tensor | None = None     # (N,) gae: the value head's regression target
    old_values: torch.Tensor | None = None  # (N,) gae: V(s) at rollout time (value clip)

    def select(self, rows: list[int]) -> "DecisionBatch":
        return select_rows(self, rows)


@dataclass
class TextBatch:
    """Free-text episodes: one loss unit per trajectory."""

    trajs: list[Trajectory]
    advantages: torch.Tensor     # (N,) per trajectory, or (N, M) per turn (gigpo)
    n_tokens: list[int]          # response tokens per trajectory

    def select(self, rows: list[int]) -> "TextBatch":
        return select_rows(self, rows)


@dataclass
class SampleGroups:
    """Single-turn samples grouped by prompt (the GRPO family)."""

    groups: list[list[Trajectory]]


Payload = TypeVar("Payload", DecisionBatch, TextBatch, SampleGroups)
AnyPayload = Union[DecisionBatch, TextBatch, SampleGroups]


@dataclass
class RolloutBatch(Generic[Payload]):
    """One iteration's training data, as the algorithm collected it.

    ``n_units`` is the number of loss units (decisions, trajectories or samples) the loop
    splits into minibatches and micro-batches; ``data`` the typed payload.
    """

    n_units: int
    data: Payload
    env_steps: int = 0
    episodes: int = 0
    degenerate: bool = False
    metrics: dict[str, float] = field(default_factory=dict)

    def select(self, rows: list[int]) -> "RolloutBatch[Payload]":
        """The units ``rows`` (a micro-batch) as a batch of their own: the payload sliced
        row by row (its ``select``); the rollout's counters stay with the whole batch."""
        return RolloutBatch(n_units=len(rows), data=self.data.select(rows))


Objectives = MicroLoss
"""0.1's name of a micro-batch's losses (now :class:`deciplane.engine.optim.MicroLoss`,
unscaled: the engine applies the algorithm's :class:`Normaliser`)."""


# ---------------------------------------------------------------------------------------
# the algorithm interface
# ---------------------------------------------------------------------------------------


class Algorithm(Method, abc.ABC):
    """What an algorithm supplies to :class:`~deciplane.trainers.trainer.Trainer`: a
    :class:`~deciplane.engine.method.Method` of the ``train`` family."""

    kind = "train"
    Config = TrainConfig
    """A method's own config class (a subclass) is named by its registry entry."""

    metric_share = "rows"
    """How the loop averages :attr:`MicroLoss.metrics` over an optimizer batch: by the
    micro-batch's share of the rows (``rows``) or of the task normaliser's units
    (``task``)."""

    on_bc_epoch: Callable[[int, int, float], bool] | None = None
    """Set by the trainer: pass it as ``run_bc_epochs(on_epoch=...)`` in :meth:`warm_start`
    (progress lines, and the time plan may stop the warm start after an epoch)."""

    warm_start_fits: Callable[[float], bool] | None = None
    """Set by the trainer: ``warm_start_fits(seconds)`` says whether a piece of the warm
    start that long still ends within its share of the time plan."""

    def __init__(self, config: TrainConfig, policy: Any) -> None:
        self.config = config
        self.policy = policy

    @abc.abstractmethod
    def rollout(self, iteration: int, seed: int) -> RolloutBatch:
        """Collect one iteration's batch with the current policy; randomness from ``seed``."""

    @abc.abstractmethod
    def evaluate(self, split: str) -> dict[str, float]:
        """Held-out metrics on ``split`` (e.g. ``success_rate``, ``episodes`` or ``accuracy``)."""

    def normaliser(self, batch: RolloutBatch) -> Normaliser:
        """What the task loss is a mean (or sum) over, per unit of ``batch``; default: a
        mean over units."""
        return Normaliser([1] * batch.n_units)

    def distill_normaliser(self, batch: RolloutBatch) -> Normaliser | None:
        """The distillation loss's normaliser, when :meth:`loss` returns one."""
        return None

    def loss(self, batch: RolloutBatch, micro: list[int]) -> MicroLoss:
        """Losses on the units ``micro`` (indices into the batch), normalised as
        :meth:`normaliser` declares (the engine scales them to the optimizer batch)."""
        raise NotImplementedError(f"{type(self).__name__} defines neither loss() nor update()")

    def update(self, batch: RolloutBatch, optimizer: Optimizer
               ) -> tuple[dict[str, float], int, int] | None:
        """Override only for an update with its own schedule (the GRPO family) run with the
        loop's optimizer; return ``(metrics, steps taken, steps skipped)``. The default
        ``None`` means: the loop's epochs and minibatches over :meth:`loss`."""
        return None

    def distill_config(self) -> DistillConfig | None:
        """The RL + distillation settings, if the algorithm has a distillation objective."""
        return None

    def trainable_modules(self) -> dict[str, tuple[torch.nn.Module, float | None]]:
        """Trainable modules the algorithm owns besides the policy (e.g. a value head):
        ``name -> (module, learning rate or None for optim.lr)``. The loop puts each in
        its own parameter group of the same optimizer, clips and steps it with the policy,
        and saves/restores its state with every checkpoint."""
        return {}

    def warm_start(self, optimizer: Optimizer) -> dict[str, Any] | None:
        """Optional behaviour-cloning warm start before RL; returns what it did (or None)."""
        return None

    def eval_costs(self) -> dict[str, float]:
        """Relative cost per episode of this algorithm's evaluations, for the time plan:
        ``{"before": w0, "trained": w}`` against the first timed evaluation (1.0 each when
        empty). E.g. an untrained policy that needs no forward costs 0."""
        return {}

    def split_fingerprints(self) -> dict[str, str]:
        return {}

    def baseline_key(self, kind: str, split: str, weights: str | None = None) -> str | None:
        """The baseline-cache key of the ``kind`` evaluation (``eval_spec``) on ``split``
        with the current weights (:mod:`deciplane.engine.baselines`; ``weights``:
        their digest if already computed); None for an algorithm without an env suite and
        ``eval_spec``, and for a suite of several envs (``envs:``)."""
        suite, spec = getattr(self, "suite", None), getattr(self, "eval_spec", None)
        if suite is None or spec is None:
            return None
        from deciplane.engine.baselines import baseline_key, weights_fingerprint

        c = self.config
        if getattr(c, "envs", None):   # a suite's evaluations are not cached (yet)
            return None
        agent, _ = spec(kind)
        env = {"id": c.env.id, "kwargs": c.env.kwargs,
               "max_episode_steps": c.env.max_episode_steps}
        weights = weights or weights_fingerprint(self.policy.model)
        return baseline_key(kind, agent, weights, env, split,
                            suite.split_fingerprint(split),
                            suite.eval_seeds(split, c.eval.episodes))


__all__ = ["Algorithm", "AnyPayload", "DecisionBatch", "Objectives", "RolloutBatch",
           "SampleGroups", "TextBatch"]
