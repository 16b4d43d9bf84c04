"""Gymnasium wrappers that let one vector env play chosen tasks of a split.

A ``gymnasium.vector`` env passes one ``options`` dict to every sub-env, so a sub-env's task
cannot travel in the options: :class:`GameSlotEnv` reads it from the per-env reset seed
instead (``task = seed % n``). :class:`DropNoneInfo` keeps ``info`` stackable across the
sub-envs. The trainer's env suite (:mod:`deciplane.trainers.env_suite`) builds its sub-envs
with these.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym


class GameSlotEnv(gym.Wrapper):
    """One sub-env of a rollout: ``reset(seed=s)`` plays game ``s % n_games`` of the suite.

    (``deciplane/TextWorld-v0`` picks a game with ``options={"game": i}``; a vector env
    passes one options dict to every sub-env, so the game travels in the per-env seed.)
    """

    def __init__(self, env: gym.Env, n_games: int, key: str = "game") -> None:
        super().__init__(env)
        self.n_games = int(n_games)
        self.key = key

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        opts = dict(options or {})
        if seed is not None:
            opts.setdefault(self.key, int(seed) % self.n_games)
        return self.env.reset(seed=seed, options=opts)


class DropNoneInfo(gym.Wrapper):
    """Leaves out ``info`` entries whose value is ``None`` (``expert_action`` once
    TextWorld-Express's gold path is used up): a vector env stacks an info key into one
    array per key, which cannot hold ``None`` next to integers; a missing entry is masked
    out instead and reads back as ``None`` in the episode loop."""

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        return obs, _drop_none(info)

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, _drop_none(info)


def _drop_none(info: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in info.items() if v is not None}


def task_slots(env: gym.Env) -> gym.Env:
    """``env`` wrapped in a :class:`GameSlotEnv` over its ``num_tasks`` (``options["task"]
    = seed % num_tasks``), or unchanged when it has none."""
    n = getattr(env.unwrapped, "num_tasks", None)
    return GameSlotEnv(env, int(n), key="task") if isinstance(n, int) and n > 0 else env
