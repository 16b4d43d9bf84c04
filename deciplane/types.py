"""Typed records shared by environments, agents, trainers and adapters.

Only numpy/stdlib are imported at module level so that environments stay light; tensors
in records are annotated via TYPE_CHECKING.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np

from deciplane._moved import renamed_names

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclass(frozen=True)
class Menu:
    """The legal actions of one state, in a deterministic order.

    Every text game (TextWorld, ALFWorld, user games) exposes its actions this way in
    ``info["menu"]``; agents compile it into single-token labels.
    """

    actions: tuple[str, ...]

    def __post_init__(self) -> None:
        # map(str, ...) runs in C: a menu is built on every env step
        object.__setattr__(self, "actions", tuple(map(str, self.actions)))

    def __len__(self) -> int:
        return len(self.actions)

    def __getitem__(self, i: int) -> str:
        return self.actions[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self.actions)

    def index(self, action: str) -> int:
        return self.actions.index(action)

    def mask(self, size: int) -> np.ndarray:
        """Boolean mask of length ``size``: True for the first ``len(self)`` slots."""
        m = np.zeros(size, dtype=bool)
        m[: min(len(self), size)] = True
        return m


@dataclass(frozen=True)
class UnlabeledTask:
    """A task as the adapter sees it: id, prompt, metadata — never the gold answer."""

    id: str
    prompt: str
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta)))

    def __reduce__(self):  # MappingProxyType does not pickle; rebuild from a dict
        return (UnlabeledTask, (self.id, self.prompt, dict(self.meta)))


@dataclass
class Decision:
    """One menu decision of the decision-plane agent, with everything a trainer needs.

    Tensors are detached CPU tensors; ``log_probs`` are the *old* log-probs of the
    rollout, never recomputed from the current model.
    """

    menu: Menu
    labels: tuple[str, ...]            # label strings, one per action, e.g. (" A", " B")
    label_token_ids: "torch.Tensor"    # (K,) int64
    label_logits: "torch.Tensor"       # (K,) float32, raw next-token logits at the labels
    log_probs: "torch.Tensor"          # (K,) float32, log-softmax over the menu only
    index: int                         # chosen action's index in the menu
    prompt_ids: "torch.Tensor"         # (T,) int64, the unpadded prompt the model read
    greedy: bool = False
    boundary_hidden: "torch.Tensor | None" = None  # (T, H) hidden states entering layer
    boundary_layer: int | None = None              # `boundary_layer` (frozen-trunk cache)
    readout: str = "labels"                        # "labels" (RLiD) or "items" (entry tokens)
    item_spans: "tuple[tuple[int, int], ...] | None" = None  # items: token range of each entry
    readout_hidden: "torch.Tensor | None" = None   # items: (T, H) states at the head's layer

    @property
    def action(self) -> str:
        return self.menu[self.index]

    @property
    def log_prob(self) -> float:
        """Old log-prob of the chosen action."""
        return float(self.log_probs[self.index])

    @property
    def probs(self) -> np.ndarray:
        return self.log_probs.exp().numpy()


@dataclass
class Turn:
    """One step of an episode: what the agent saw and did, and what it got."""

    observation: str
    action: str
    reward: float
    decision: Decision | None = None          # menu agents
    prompt_ids: "torch.Tensor | None" = None  # (T,) free-text agents
    response_ids: "torch.Tensor | None" = None     # (R,) generated tokens
    response_logprobs: "torch.Tensor | None" = None  # (R,) old log-probs
    boundary_hidden: "torch.Tensor | None" = None    # (T + R, H) states entering layer
    boundary_layer: int | None = None                # `boundary_layer` (frozen-trunk cache)
    expert_index: int | None = None           # env expert's menu index, if known
    invalid: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trajectory:
    """An episode (or a single-turn sample), with its group for group baselines."""

    turns: list[Turn]
    group_id: str
    won: bool = False
    truncated: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def total_reward(self) -> float:
        return float(sum(t.reward for t in self.turns))

    def __len__(self) -> int:
        return len(self.turns)


@dataclass
class _GroupBatch:
    """Deprecated in 0.2 (never built by deciplane; goes away in the next release): the
    trainers hand typed batches around (:mod:`deciplane.trainers.algorithm`)."""

    trajectories: list[Trajectory]
    advantages: "torch.Tensor | None" = None  # (N,) one per trajectory

    def groups(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for i, t in enumerate(self.trajectories):
            out.setdefault(t.group_id, []).append(i)
        return out

    def rewards(self) -> np.ndarray:
        return np.array([t.total_reward for t in self.trajectories], dtype=np.float32)

    @staticmethod
    def from_groups(groups: Sequence[Sequence[Trajectory]]) -> "_GroupBatch":
        return _GroupBatch([t for g in groups for t in g])


__getattr__ = renamed_names(__name__)   # GroupBatch
