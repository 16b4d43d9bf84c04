"""Rollout collection for the trainers: the episode loop is
:mod:`deciplane.engine.episodes` (shared with evaluation); the trajectory rewards the
algorithms train on are here.

* :func:`~deciplane.engine.episodes.collect_menu_episodes`,
  :func:`~deciplane.engine.episodes.collect_text_episodes`,
  :func:`~deciplane.engine.episodes.collect_expert_episodes`,
  :class:`~deciplane.engine.episodes.RolloutStats`,
  :func:`~deciplane.engine.episodes.make_vector_env` (imported here as in 0.1);
* :func:`trajectory_rewards` — one scalar reward per trajectory (``return`` or ``won``,
  step and invalid-turn penalties).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from deciplane.engine.episodes import (RolloutStats, collect_expert_episodes,
                                       collect_menu_episodes, collect_text_episodes,
                                       make_vector_env)
from deciplane.types import Trajectory


def trajectory_rewards(trajs: Sequence[Trajectory], kind: str = "return",
                       step_penalty: float = 0.0, invalid_penalty: float = 0.0) -> np.ndarray:
    """One scalar reward per trajectory: ``return`` (summed env reward) or ``won`` (1/0),
    minus ``step_penalty`` per turn and ``invalid_penalty`` per invalid turn."""
    out = np.empty(len(trajs), dtype=np.float32)
    for i, tr in enumerate(trajs):
        base = float(tr.won) if kind == "won" else tr.total_reward
        out[i] = base - step_penalty * len(tr) - invalid_penalty * sum(t.invalid for t in tr.turns)
    return out


__all__ = ["RolloutStats", "collect_expert_episodes", "collect_menu_episodes",
           "collect_text_episodes", "make_vector_env", "trajectory_rewards"]
