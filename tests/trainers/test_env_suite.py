"""The trainer's env suite plays any env that lists its tasks up front in list mode (the
env's ``task_list``; the suite knows no env by name) and every other env in seed mode."""

from __future__ import annotations

import string

import gymnasium as gym
from gymnasium import spaces

from deciplane.envs import register
from deciplane.envs.splits import TaskList
from deciplane.trainers.config import EnvConfig
from deciplane.trainers.env_suite import EnvSuite

from .coinflip_env import register as register_coinflip


class _Numbered(gym.Env):
    """``n`` numbered one-step tasks per split, known before any env is built."""

    observation_space = spaces.Text(max_length=32, charset=string.printable)
    action_space = spaces.Discrete(2)

    def __init__(self, n: int = 3, split: str = "train"):
        self.n, self.split = n, split

    @classmethod
    def task_list(cls, split, kwargs):
        return TaskList(int(kwargs.get("n", 3)), f"numbered-{split}")

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        task = int((options or {})["game"])
        return f"task {task}", {"task_index": task, "split": self.split}

    def step(self, action):
        return "done", 0.0, True, False, {}


def test_an_env_with_a_task_list_plays_in_list_mode():
    register("tests/Numbered-v0", _Numbered)
    suite = EnvSuite(EnvConfig(id="tests/Numbered-v0", kwargs={"n": 3}, games_per_iteration=5,
                               group_size=2, max_episode_steps=2))
    try:
        vec, seeds = suite.train_batch(0)
        tasks = [s % 3 for s in seeds]
        assert sorted(tasks[:3]) == [0, 1, 2] and len(set(tasks[3:])) == 2  # no repeats per pass
        _, infos = vec.reset(seed=[s for s in seeds for _ in range(2)])
        assert list(infos["task_index"]) == [t for t in tasks for _ in range(2)]  # a group
        assert set(infos["split"]) == {"train"}
        assert suite.eval_seeds("test", None) == [0, 1, 2]       # every task once
        assert suite.eval_seeds("test", 4) == [0, 1, 2, 3]
        assert suite.fingerprints() == {"train": "numbered-train", "test": "numbered-test"}
    finally:
        suite.close()


def test_an_env_without_one_plays_in_seed_mode():
    suite = EnvSuite(EnvConfig(id=register_coinflip(), games_per_iteration=3, group_size=2))
    try:
        assert suite.tasks("train") is None
        assert suite.eval_seeds("test", None) == list(range(10))
        _, seeds = suite.train_batch(0)
        assert len(set(seeds)) == 3
    finally:
        suite.close()
