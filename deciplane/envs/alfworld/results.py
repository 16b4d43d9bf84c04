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


def training_eval_report(evaluation: Mapping[str, Any], tasks: Mapping[str, Any]
                         ) -> dict[str, Any]:
    """A ``deciplane train`` evaluation (``summary.json``'s ``before.<split>``,
    ``after_warm_start.<split>`` or ``eval.<split>``: ``episode_seeds`` and ``episode_wins``)
    as an evaluation report with game names, for :func:`per_task_type_report`.

    The trainer records seeds, not game names; ``tasks`` is a ``deciplane evaluate --json``
    report on the same split (any agent: the expert's is cheap) whose episodes name the game
    of each seed (seed ``s`` plays the same game in both). Its split fingerprint must match.
    """
    fp_eval, fp_tasks = evaluation.get("split_fingerprint"), tasks.get("split_fingerprint")
    if fp_eval and fp_tasks and fp_eval != fp_tasks:
        raise ValueError(f"split fingerprints differ: training evaluation {fp_eval}, "
                         f"tasks report {fp_tasks} (not the same games)")
    game_of = {int(ep["seed"]): str(ep["task"]) for ep in tasks["per_episode"]}
    missing = [s for s in evaluation["episode_seeds"] if int(s) not in game_of]
    if missing:
        raise ValueError(f"the tasks report has no episode with seed(s) {missing[:5]}: "
                         f"evaluate at least {max(missing) + 1} episodes from seed 0")
    return {"per_episode": [{"seed": int(s), "task": game_of[int(s)], "won": bool(w)}
                            for s, w in zip(evaluation["episode_seeds"],
                                            evaluation["episode_wins"])],
            "split_fingerprint": fp_eval}
