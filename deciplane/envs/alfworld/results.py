"""Per-task-type success of ALFWorld evaluations, with 95% Wilson intervals.

``deciplane evaluate --env deciplane/ALFWorld-v0 ... --json report.json`` records every
episode's game name; ALFWorld game names start with the task type (generated games) or
its trial folder does (official games: ``<task_type>-<object>-...-<scene>/trial_...``).
"""

from __future__ import annotations

from typing import Any, Mapping

from deciplane.envs.alfworld.pddl import TASK_TYPES
from deciplane.stats import wilson_interval


def task_type_of(game_name: str) -> str | None:
    """The task type a generated or official game's name starts with (else ``None``)."""
    for t in sorted(TASK_TYPES, key=len, reverse=True):
        if game_name.startswith(t):
            return t
    return None


def per_task_type_report(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{task type | "all": {"episodes", "won", "success_rate", "ci95"}}`` of an
    evaluation report (the dict ``deciplane evaluate --json`` writes)."""
    groups: dict[str, list[bool]] = {}
    for ep in report["per_episode"]:
        t = task_type_of(str(ep["task"])) or "unknown"
        groups.setdefault(t, []).append(bool(ep["won"]))
    groups["all"] = [bool(ep["won"]) for ep in report["per_episode"]]
    out = {}
    for t in [*TASK_TYPES, "unknown", "all"]:
        won = groups.get(t)
        if won:
            k, n = sum(won), len(won)
            out[t] = {"episodes": n, "won": k, "success_rate": k / n,
                      "ci95": wilson_interval(k, n)}
    return out
