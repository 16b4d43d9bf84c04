"""Paired comparisons in a run's summary: two agents on the same items, 95%.

Both kinds of run pair their outcomes item by item with
:func:`deciplane.stats.paired_difference` and write the same record (:func:`paired`): a
training run each later stage against each earlier one on the same held-out episodes
(:func:`paired_comparisons`, ``summary.json`` ``comparisons``), an adaptation run its
adapted answers against each baseline's on the same tasks (:func:`paired_vs`,
``summary.json`` ``paired_vs_baselines``).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from deciplane.stats import paired_difference


def paired(a: Sequence[bool], b: Sequence[bool]) -> dict[str, Any]:
    """A minus B on the same items as summary.json holds it: counts, both rates, the
    difference with its Bonett-Price 95% interval, the exact McNemar p and
    ``a_better_95``."""
    return json.loads(json.dumps(paired_difference(a, b).to_dict()))


def paired_comparisons(stages: dict[str, dict[str, dict[str, Any]]]
                       ) -> dict[str, dict[str, Any]]:
    """Per split, each later stage minus each earlier one (``final - warm_start_only``,
    ...), paired on the same episodes; only stages that played the same ``episode_seeds``
    are paired."""
    out: dict[str, dict[str, Any]] = {}
    names = [k for k, v in stages.items() if v]
    splits = sorted({s for v in stages.values() for s in v})
    for split in splits:
        for j, a in enumerate(names):
            for b in names[:j]:
                ea, eb = stages[a].get(split), stages[b].get(split)
                if not ea or not eb or "episode_wins" not in ea or "episode_wins" not in eb:
                    continue
                if ea.get("episode_seeds") != eb.get("episode_seeds") or not ea["episode_wins"]:
                    continue
                out.setdefault(split, {})[f"{a} - {b}"] = paired(
                    [bool(x) for x in ea["episode_wins"]], [bool(x) for x in eb["episode_wins"]])
    return out


def per_env_comparisons(stages: dict[str, dict[str, dict[str, Any]]]
                        ) -> dict[str, dict[str, dict[str, Any]]]:
    """A suite's :func:`paired_comparisons` env by env (each evaluation result's
    ``per_env``): ``{env: {split: {"final - zero_shot": ...}}}``; empty for one env."""
    envs = sorted({name for v in stages.values() for res in v.values()
                   for name in (res or {}).get("per_env", {})})
    return {env: paired_comparisons({stage: {split: res["per_env"][env]
                                             for split, res in v.items()
                                             if env in (res or {}).get("per_env", {})}
                                     for stage, v in stages.items()})
            for env in envs}


def paired_vs(a: dict[str, bool], b: dict[str, bool]) -> dict[str, Any]:
    """A (the adapted answers) vs B (a baseline) on the same tasks, ``{task_id: correct}``
    on both sides."""
    ids = sorted(a)
    if set(ids) != set(b):
        raise ValueError("paired comparison needs the same task ids on both sides")
    return paired([a[i] for i in ids], [b[i] for i in ids])


__all__ = ["paired", "paired_comparisons", "paired_vs", "per_env_comparisons"]
