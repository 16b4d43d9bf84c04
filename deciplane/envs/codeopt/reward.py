"""Pure reward math for CodeOpt (docs/methods.md §6). Standard library only, no I/O.

Costs are "smaller is faster" numbers of one unit: CPU seconds (``cpu`` timer) or
instruction counts (``instructions`` timer).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# the z-value of the cpu timer's noise band: speedups within z standard errors of 1.0
# are treated as noise
DEFAULT_Z = 3.0
# the narrowest band: even a perfectly quiet machine does not reward a < 1% change
DEFAULT_FLOOR = 0.01
# sqrt(pi / 2): standard error of a sample median / standard error of a sample mean,
# for normal data
_MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)


def median(values: Sequence[float]) -> float:
    """The median (mean of the two middle values for an even count)."""
    if not values:
        raise ValueError("median of an empty sequence; measure at least one run")
    s = sorted(values)
    mid = len(s) // 2
    return float(s[mid]) if len(s) % 2 else (s[mid - 1] + s[mid]) / 2.0


def speedup(ref_cost: float, cand_cost: float) -> float:
    """``ref_cost / cand_cost``: 2.0 means the candidate takes half the time."""
    if ref_cost <= 0 or cand_cost <= 0:
        raise ValueError(f"costs must be positive, got ref={ref_cost!r} cand={cand_cost!r}")
    return ref_cost / cand_cost


def net_cost(total: float, baseline: float, floor: float = 1.0) -> float:
    """The cost of a run beyond the baseline (an empty program's interpreter start-up and
    shutdown), at least ``floor`` so that speedups stay finite."""
    return max(float(total) - float(baseline), floor)


def noise_band(ref_a: Sequence[float], ref_b: Sequence[float], repeats: int,
               z: float = DEFAULT_Z, floor: float = DEFAULT_FLOOR) -> float:
    """Relative half-width of the cpu timer's noise band, from reference-vs-reference runs.

    ``ref_a[i]`` and ``ref_b[i]`` are the CPU times of the reference measured back to back
    (pair ``i``). With ``d_i = ln(ref_a[i] / ref_b[i])`` and its robust spread
    ``sigma = 1.4826 * MAD(d)``, the log of a speedup computed from ``repeats`` interleaved
    pairs as ``median(ref) / median(cand)`` has standard error
    ``se = sqrt(pi/2) * sigma / sqrt(repeats)``. The band is
    ``exp(max(z * se, |ln(median(ref_a) / median(ref_b))|)) - 1``, at least ``floor``:
    the larger of what the noise predicts and what the reference-vs-reference
    measurement actually showed.

    Returns e.g. 0.03: speedups within ``[1/1.03, 1.03]`` are noise.
    """
    if len(ref_a) != len(ref_b) or not ref_a:
        raise ValueError("noise_band needs the same positive number of runs in ref_a and "
                         f"ref_b, got {len(ref_a)} and {len(ref_b)}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    d = [math.log(a / b) for a, b in zip(ref_a, ref_b)]
    m = median(d)
    sigma = 1.4826 * median([abs(x - m) for x in d])
    se = _MEDIAN_SE_FACTOR * sigma / math.sqrt(repeats)
    offset = abs(math.log(median(ref_a) / median(ref_b)))
    return max(floor, math.exp(max(z * se, offset)) - 1.0)


def apply_noise_band(raw_speedup: float, band: float) -> float:
    """``1.0`` if ``1/(1+band) <= raw_speedup <= 1+band`` (indistinguishable from the
    reference), else ``raw_speedup`` unchanged."""
    if band < 0:
        raise ValueError(f"band must be >= 0, got {band}")
    if 1.0 / (1.0 + band) <= raw_speedup <= 1.0 + band:
        return 1.0
    return raw_speedup


def log_speedup_reward(s: float, cap: float) -> float:
    """``clip(log2(s), 0, cap)``: 0 for no gain (or a slowdown), 1 for 2x, capped."""
    if s <= 0:
        raise ValueError(f"speedup must be positive, got {s}")
    if cap < 0:
        raise ValueError(f"cap must be >= 0, got {cap}")
    return min(max(math.log2(s), 0.0), cap)


def percentile_reward(cand_cost: float, reference_costs: Sequence[float]) -> float:
    """Mercury's "Beyond" score: where the candidate's cost falls in the range of the
    reference solutions' costs, ``(max - c) / (max - min)`` with ``c`` clipped to
    ``[min, max]`` — 1.0 at least as fast as the fastest reference solution, 0.0 as slow
    as the slowest. With a single reference cost (no range): 1.0 if strictly faster, else
    0.0 — as slow as the slowest reference, like the formula (so resubmitting the
    reference shown in the observation earns nothing).
    """
    if not reference_costs:
        raise ValueError("percentile_reward needs at least one reference cost")
    lo, hi = min(reference_costs), max(reference_costs)
    if hi == lo:
        return 1.0 if cand_cost < lo else 0.0
    c = min(max(cand_cost, lo), hi)
    return (hi - c) / (hi - lo)


def summarize_speedups(speedups: Sequence[float], threshold: float = 1.1) -> dict[str, float]:
    """The docs/methods.md §6 report: mean speedup and share of tasks with speedup >= threshold.
    Pass 1.0 for tasks whose candidate failed (the agent keeps the reference)."""
    if not speedups:
        raise ValueError("summarize_speedups needs at least one task")
    return {
        "mean_speedup": sum(speedups) / len(speedups),
        f"share_speedup_ge_{threshold:g}": sum(s >= threshold for s in speedups) / len(speedups),
        "n_tasks": float(len(speedups)),
    }
