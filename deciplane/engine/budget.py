"""What a run spends: samples, generated tokens, forward/backward tokens and passes,
optimizer steps (taken and skipped), wall time and seconds per phase.

Every count is incremented by :mod:`deciplane.engine` only (generation, teacher-forced
forwards, backward passes, the optimizer step), so a :class:`Budget` passed through a
trainer or an adapter counts everything exactly once.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field
from typing import Iterator


@dataclass
class Budget:
    """What a run spent. Every count is incremented by the functions of this module only.

    ``forward_tokens`` counts the non-padding tokens (prompt + response) of every
    teacher-forced forward pass (with or without grad); generation is counted separately
    (``prefill_tokens`` = prompt tokens per sampled sequence, ``generated_tokens`` =
    response tokens). ``backward_tokens`` counts the tokens of the forwards whose loss
    was backpropagated.
    """

    samples: int = 0
    generated_tokens: int = 0
    prefill_tokens: int = 0
    forward_tokens: int = 0
    forward_passes: int = 0
    backward_tokens: int = 0
    backward_passes: int = 0
    optimizer_steps: int = 0
    skipped_steps: int = 0
    wall_time_s: float = 0.0
    seconds: dict[str, float] = field(default_factory=dict)
    """Seconds per phase: ``generate``, ``forward``, ``backward``, ``optimizer``."""

    @contextlib.contextmanager
    def clock(self) -> Iterator[None]:
        """Add the wall time of the ``with`` block to ``wall_time_s``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.wall_time_s += time.perf_counter() - t0

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def as_dict(self) -> dict:
        d = asdict(self)
        d["seconds"] = {k: round(v, 3) for k, v in self.seconds.items()}
        d["wall_time_s"] = round(self.wall_time_s, 3)
        return d

    def __iadd__(self, other: "Budget") -> "Budget":
        for f in ("samples", "generated_tokens", "prefill_tokens", "forward_tokens",
                  "forward_passes", "backward_tokens", "backward_passes", "optimizer_steps",
                  "skipped_steps", "wall_time_s"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        for k, v in other.seconds.items():
            self.seconds[k] = self.seconds.get(k, 0.0) + v
        return self


def phase(budget: Budget | None, name: str):
    """``budget.phase(name)``, or a no-op context without a budget."""
    return budget.phase(name) if budget is not None else contextlib.nullcontext()


def forward_token_equivalents(budget: Budget | dict) -> int:
    """Compute of a budget in forward-token equivalents: generation (prefill + generated
    tokens) + teacher-forced forward tokens + 2 x backpropagated tokens (a backward costs
    about two forwards). A prefix's virtual tokens (TASCO) are never forwarded, so never
    counted. The unit of an adapter whose class says ``budget_unit =
    "forward_token_equivalents"``: its equal-compute baselines get as many samples as its
    budget buys in it."""
    b = budget.as_dict() if isinstance(budget, Budget) else budget
    return int(b["prefill_tokens"] + b["generated_tokens"] + b["forward_tokens"]
               + 2 * b["backward_tokens"])


__all__ = ["Budget", "forward_token_equivalents", "phase"]
