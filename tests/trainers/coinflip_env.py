"""A small real Gymnasium env with the menu contract, for trainer tests that need reward
variance even from an untrained tiny model: every episode lasts ``length`` steps whatever
the agent does, and its final reward is a coin flip drawn from an RNG owned by the env
*instance* (not re-seeded by ``reset``), so episodes of the same group differ."""

from __future__ import annotations

import itertools
import string

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from deciplane import Menu

_instances = itertools.count()


class CoinFlipEnv(gym.Env):
    """Menu of three moves; ``expert_action`` is always 0; reward 0/1 at the end."""

    def __init__(self, length: int = 2, max_menu: int = 4, split: str = "train",
                 expert: bool = False):
        self.length, self.max_menu, self.expert = length, max_menu, expert
        self.observation_space = spaces.Text(max_length=128, charset=string.printable)
        self.action_space = spaces.Discrete(max_menu)
        self._coin = np.random.default_rng(1000 + next(_instances))
        self.t = 0

    def _info(self):
        menu = Menu(("go east", "go west", "wait"))
        info = {"menu": menu, "action_mask": menu.mask(self.max_menu), "won": False}
        if self.expert:
            info["expert_action"] = 0
        return info

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return "You stand in a corridor.", self._info()

    def step(self, action):
        self.t += 1
        done = self.t >= self.length
        info = self._info()
        reward = 0.0
        if done:
            won = bool(self._coin.random() < 0.5)
            info["won"], reward = won, float(won)
        return f"Step {self.t}.", reward, done, False, info


def register() -> str:
    from deciplane.envs import register as reg

    reg("tests/CoinFlip-v0", CoinFlipEnv, "coin-flip test env")
    return "tests/CoinFlip-v0"
