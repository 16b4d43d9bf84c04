"""Planning a run's wall time (``max_wall_time_s`` covers the whole run), and its account.

Pure functions of measured times (no clocks here), used by the
:class:`~deciplane.trainers.trainer.Trainer` and, for an adapter's ``max_wall_time_s``, by
:class:`~deciplane.adapt.base.BaseAdapter` (each as the ``room`` of
:func:`deciplane.engine.loop.run_steps`):

* :func:`eval_episodes_that_fit` — once :data:`PLAN_AFTER_EPISODES` episodes of the first
  held-out evaluation have been timed, how many episodes every evaluation of the run (before training, after
  the warm start, final) may play so that together they stay within ``eval_share`` of the
  budget (at least one batch, at most what the config asks for; the same number for
  every evaluation, so the agents compared play the same episodes). Evaluations come
  before RL: :func:`eval_share_of` gives them all of the budget the warm start's share
  leaves unless a config caps them lower, and RL iterations get the time that is left
  (:func:`room_for_iteration`); :func:`eval_cut_reason` says why episodes were cut;
* :func:`continue_epochs` — whether the warm start may run another epoch before its
  deadline (``warm_start_share`` of the budget after it began; the first epoch always
  runs);
* :func:`room_for_iteration` — whether another RL iteration (an adapter's step) fits before
  the budget ends, with the final evaluation's (the final answers') time kept in reserve
  (the first iteration runs whenever the reserve still fits: the warm-start checkpoint
  already holds the weights), and
  :func:`wall_time_status` — the status of a run it stopped;
* :func:`time_breakdown` and :func:`decision_cost_summary` — where the time went: seconds
  per phase of the run, and what one decision cost in each phase (``summary.json``
  ``time`` and ``decision_cost``).
"""

from __future__ import annotations

import math
from typing import Any

PLAN_AFTER_EPISODES = 8
"""The evaluations' share is planned once this many episodes of the first evaluation are
done (one in-process batch; a pooled evaluation reports smaller batches): the floor of
every evaluation, and enough episodes for a steady per-episode time."""


def eval_episodes_that_fit(budget_s: float, eval_share: float, per_episode_s: float,
                           evaluations: float, requested: int, minimum: int) -> int:
    """Episodes per evaluation such that ``evaluations`` evaluations of that many episodes,
    each costing ``per_episode_s``, take at most ``eval_share * budget_s``; clamped to
    ``[min(minimum, requested), requested]``."""
    floor = min(minimum, requested)
    if per_episode_s <= 0 or evaluations <= 0:
        return requested
    fit = math.floor(eval_share * budget_s / (evaluations * per_episode_s))
    return max(floor, min(requested, fit))


def eval_share_of(eval_share: float | None, warm_start_share: float) -> float:
    """The evaluations' share of the budget: ``eval_share`` when a config caps it, else
    everything the warm start's share leaves (evaluations come before RL iterations)."""
    return 1.0 - warm_start_share if eval_share is None else eval_share


def eval_cut_reason(episodes: int, requested: int, per_episode_s: float, evaluations: float,
                    budget_s: float, eval_share: float) -> str | None:
    """Why every evaluation plays ``episodes`` of the ``requested`` (None when none were
    cut), in numbers a reader can check."""
    if episodes >= requested:
        return None
    need = evaluations * requested * per_episode_s
    return (f"{evaluations:.2f} evaluations x {requested} episodes x {per_episode_s:.1f} s = "
            f"{need:.0f} s would exceed the evaluations' {eval_share:.0%} of the "
            f"{budget_s:.0f} s budget ({eval_share * budget_s:.0f} s): {episodes} episodes fit")


def continue_epochs(now_s: float, deadline_s: float | None, last_epoch_s: float) -> bool:
    """Another epoch (about as long as the last one) ends before ``deadline_s``."""
    return deadline_s is None or now_s + last_epoch_s <= deadline_s


def room_for_iteration(elapsed_s: float, budget_s: float | None, iteration_s: float | None,
                       reserve_s: float) -> bool:
    """An iteration of ``iteration_s`` (None: not measured yet, taken as 0) plus the
    ``reserve_s`` of the final evaluation still fit in ``budget_s`` after ``elapsed_s``."""
    if budget_s is None:
        return True
    return elapsed_s + (iteration_s or 0.0) + reserve_s <= budget_s


def wall_time_status(budget_s: float, done: int, elapsed_s: float, step_s: float | None,
                     reserve_s: float, step: str = "iteration",
                     final: str = "the final evaluation") -> str:
    """The status of a run that :func:`room_for_iteration` stopped after ``done`` steps (a
    trainer's iterations, an adapter's steps), in numbers a reader can check."""
    return (f"stopped at the wall-time limit ({budget_s:.0f} s) after {done} {step}s: "
            f"{elapsed_s:.0f} s used, the next {step} (~{step_s or 0:.0f} s) and {final} "
            f"(~{reserve_s:.0f} s) would not fit")


def time_breakdown(phases: dict[str, float], wall_s: float) -> dict[str, Any]:
    """Seconds per phase, their sum's remainder as ``other`` (logging, set-up), and each
    phase's share of the wall time."""
    known = sum(phases.values())
    out = {k: round(v, 3) for k, v in phases.items()}
    out["other"] = round(max(0.0, wall_s - known), 3)
    share = {k: round(v / wall_s, 4) if wall_s > 0 else 0.0 for k, v in out.items()}
    return {"phases_s": out, "share_of_wall": share, "wall_s": round(wall_s, 3)}


def decision_cost_summary(costs: dict[str, dict[str, float]], cache: Any) -> dict[str, Any]:
    """Per phase, what a menu decision cost in this process: prompt tokens, tokens computed
    and CPU-s per decision (a phase's CPU-s include its env steps and updates; with
    ``eval.workers: 2`` a helper's decisions and CPU are not in them), and the prompt
    cache's state (``prompt_cache.mode: blocks``; this session's counters)."""
    phases = {}
    for name, row in costs.items():
        n = max(1.0, row["decisions"])
        phases[name] = {"decisions": int(row["decisions"]),
                        "prompt_tokens_per_decision": row["prompt_tokens"] / n,
                        "computed_tokens_per_decision": row["computed_tokens"] / n,
                        "cpu_s_per_decision": row["cpu_s"] / n}
    return {"phases": phases, "prompt_cache": None if cache is None else cache.describe()}


__all__ = ["PLAN_AFTER_EPISODES", "continue_epochs", "decision_cost_summary", "eval_cut_reason",
           "eval_episodes_that_fit", "eval_share_of", "room_for_iteration", "time_breakdown",
           "wall_time_status"]
