"""Intervals for held-out success rates, and paired comparisons of two agents (stdlib
only, so every layer — evaluation, trainers, adapters — can report them).

Small pure functions (numbers in, numbers out) so that every reported interval can be
checked by hand:

* :func:`wilson_interval` — the Wilson score interval of a binomial proportion (it stays
  inside [0, 1] and is not degenerate at 0/n or n/n, unlike the normal approximation);
* :func:`paired_difference` — agents A and B played the *same* episodes: the difference of
  their success rates with the Bonett–Price adjusted-Wald interval for paired
  proportions (J. Educ. Behav. Stat. 37:479, 2012: one pseudo-episode added to each
  discordant cell, n + 2; it keeps its coverage at small n and never collapses to zero
  width when no episode is discordant), and the exact McNemar p-value of the discordant
  episodes. "A beats B at 95%" means the interval's lower end is above 0.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

Z95 = 1.959963984540054  # two-sided 95% normal quantile


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of ``successes / n``; ``(0.0, 1.0)`` when ``n == 0``."""
    if n < 0 or not 0 <= successes <= max(n, 0):
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if successes == 0 else max(0.0, center - half)    # exact ends (no 1e-17)
    hi = 1.0 if successes == n else min(1.0, center + half)
    return lo, hi


def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: ``b`` episodes won only by A, ``c`` only by B
    (a binomial test of ``b`` out of ``b + c`` at p = 1/2)."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class PairedComparison:
    """A vs B on the same ``n`` episodes: ``both`` won by both, ``only_a``, ``only_b``,
    ``neither``; ``difference = rate_a - rate_b`` with its 95% interval."""

    n: int
    both: int
    only_a: int
    only_b: int
    neither: int
    rate_a: float
    rate_b: float
    difference: float
    ci95: tuple[float, float]
    mcnemar_p: float

    @property
    def a_better(self) -> bool:
        """A's success rate is higher than B's at 95% (interval entirely above 0)."""
        return self.ci95[0] > 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "a_better_95": self.a_better}


def paired_counts(a: Sequence[bool], b: Sequence[bool]) -> tuple[int, int, int, int]:
    """``(both, only_a, only_b, neither)`` of two outcome lists over the same episodes."""
    if len(a) != len(b):
        raise ValueError(f"paired outcomes need the same episodes: {len(a)} vs {len(b)}")
    both = sum(1 for x, y in zip(a, b) if x and y)
    only_a = sum(1 for x, y in zip(a, b) if x and not y)
    only_b = sum(1 for x, y in zip(a, b) if y and not x)
    return both, only_a, only_b, len(a) - both - only_a - only_b


def paired_difference(a: Sequence[bool], b: Sequence[bool], z: float = Z95) -> PairedComparison:
    """Success of A minus success of B on the same episodes, with the Bonett–Price
    interval ``d ± z * sqrt((p12 + p21 - d^2) / (n + 2))``, where
    ``p12 = (only_a + 1) / (n + 2)``, ``p21 = (only_b + 1) / (n + 2)``, ``d = p12 - p21``,
    and the exact McNemar p-value."""
    both, only_a, only_b, neither = paired_counts(a, b)
    n = len(a)
    if n == 0:
        raise ValueError("no episodes to compare")
    p12, p21 = (only_a + 1) / (n + 2), (only_b + 1) / (n + 2)
    centre = p12 - p21
    half = z * math.sqrt((p12 + p21 - centre ** 2) / (n + 2))
    return PairedComparison(n, both, only_a, only_b, neither, (both + only_a) / n,
                            (both + only_b) / n, (only_a - only_b) / n,
                            (max(-1.0, centre - half), min(1.0, centre + half)),
                            mcnemar_exact_p(only_a, only_b))


__all__ = ["wilson_interval", "mcnemar_exact_p", "paired_counts", "paired_difference",
           "PairedComparison", "Z95"]
