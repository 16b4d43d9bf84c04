"""A collapse guard every adapter shares: unlabeled signals per step, a rollback when they fail.

Test-time adaptation trains on its own pseudo-labels, so it can talk itself into a
degenerate policy (TTPO at its defaults collapsed to 2-6-token answers such as "1" from a
greedy start of 0.56 on products-1d). The guard watches only what an unlabeled run can
see — never a gold answer:

* after every update (and once before the first), the **greedy answers of a fixed probe
  set** (the run's first ``guard_probe`` tasks): ``mean_tokens`` (generated tokens per
  answer) and ``extractable`` (the share with an answer the extraction rules accept; not
  for code adapters). These are what the adapters answer with, and where TTPO's collapse
  shows: its *sampled* responses only shrank from 18.8 to ~11 tokens (0.6x, as TTRL's
  healthy ones at times), its greedy answers to 0.36x;
* each step's **samples** (logged, not judged): ``mean_tokens``, ``extractable`` and
  ``agreement`` (the mean share of a prompt's samples agreeing with its majority).

The probe before any update is the reference. A state is unhealthy when its probe answers
are shorter than ``length_ratio`` times the reference, or their extractable share fell by
more than ``extractable_drop``; after ``patience`` unhealthy states in a row the run stops
and the trained parameters roll back to the last healthy state. A run whose answers
legitimately get shorter (TTRL's greedy answers went from 16 to 9.5 tokens: 0.59x) stays
above the default ratio 0.4.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch


def step_signals(generated_tokens: int, samples: int,
                 votes: Sequence[Sequence[Any]] = ()) -> dict[str, float | None]:
    """The unlabeled signals of one step: ``generated_tokens`` over ``samples`` drawn, and
    for each prompt's extracted answers in ``votes`` (None = nothing extractable) the
    extractable share and the majority's share of the prompt's samples."""
    out: dict[str, float | None] = {
        "mean_tokens": generated_tokens / samples if samples else None,
        "extractable": None, "agreement": None}
    answers = [a for v in votes for a in v]
    if answers:
        out["extractable"] = sum(a is not None for a in answers) / len(answers)
        shares = []
        for v in votes:
            valid = [a for a in v if a is not None]
            if v:
                top = max((valid.count(a) for a in set(valid)), default=0)
                shares.append(top / len(v))
        out["agreement"] = sum(shares) / len(shares)
    return out


def collapse_reasons(reference: Mapping[str, float | None], current: Mapping[str, float | None],
                     length_ratio: float, extractable_drop: float) -> list[str]:
    """Why ``current`` looks collapsed next to ``reference`` (empty: it does not)."""
    out = []
    ref, cur = reference.get("mean_tokens"), current.get("mean_tokens")
    if ref and cur is not None and cur < length_ratio * ref:
        out.append(f"answers are {cur:.1f} tokens long, under {length_ratio:g} x the starting "
                   f"state's {ref:.1f}")
    ref, cur = reference.get("extractable"), current.get("extractable")
    if ref is not None and cur is not None and cur < ref - extractable_drop:
        out.append(f"{cur:.0%} of the answers are extractable, down from {ref:.0%} "
                   f"(more than {extractable_drop:g})")
    return out


@dataclass
class CollapseGuard:
    """The guard's state across steps (saved with the adapter's state for resume)."""

    length_ratio: float = 0.4
    extractable_drop: float = 0.3
    patience: int = 2
    enabled: bool = True
    reference: dict[str, float | None] | None = None
    streak: int = 0
    healthy: dict[str, torch.Tensor] | None = None
    healthy_optimizer_steps: int = 0
    fired: dict[str, Any] = field(default_factory=dict)

    def observe(self, step: int, signals: Mapping[str, float | None],
                params: Mapping[str, torch.Tensor], optimizer_steps: int) -> bool:
        """Judge the probe ``signals`` of the state after ``step`` (its trained ``params``,
        after ``optimizer_steps`` optimizer steps; step 0: the starting state, the
        reference); True when the run must stop."""
        if self.reference is None:
            self.reference = dict(signals)
        reasons = collapse_reasons(self.reference, signals, self.length_ratio,
                                   self.extractable_drop)
        if not reasons:
            self.streak = 0
            self.healthy = {n: t.detach().clone() for n, t in params.items()}
            self.healthy_optimizer_steps = optimizer_steps
            return False
        self.streak += 1
        if not self.enabled or self.streak < self.patience:
            return False
        self.fired = {"step": step, "reasons": reasons, "signals": dict(signals),
                      "reference": dict(self.reference),
                      "rolled_back_to_optimizer_steps": self.healthy_optimizer_steps,
                      "unhealthy_steps": self.streak}
        return True

    def state(self) -> dict[str, Any]:
        return {"reference": self.reference, "streak": self.streak, "healthy": self.healthy,
                "healthy_optimizer_steps": self.healthy_optimizer_steps, "fired": self.fired}

    def load(self, state: Mapping[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)


__all__ = ["CollapseGuard", "collapse_reasons", "step_signals"]
