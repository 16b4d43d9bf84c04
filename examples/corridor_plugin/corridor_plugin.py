"""A complete deciplane plug-in: a text corridor with the menu contract of every text game."""

import string

import gymnasium as gym
from gymnasium import spaces

from deciplane import Menu


class CorridorEnv(gym.Env):
    """Walk east to the exit of a corridor of `length` rooms; reward 1 on reaching it."""

    def __init__(self, length: int = 3, max_menu: int = 4):
        self.length, self.max_menu = length, max_menu
        self.observation_space = spaces.Text(max_length=256, charset=string.printable)
        self.action_space = spaces.Discrete(max_menu)

    def _info(self):
        menu = Menu(("go east", "go west", "wait"))
        return {"menu": menu, "action_mask": menu.mask(self.max_menu),
                "won": self.pos == self.length, "expert_action": 0}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0
        return f"You are in room 0 of {self.length}.", self._info()

    def step(self, action):
        action = int(action)
        if action == 0:
            self.pos += 1
        elif action == 1:
            self.pos = max(0, self.pos - 1)
        won = self.pos == self.length
        return f"You are in room {self.pos} of {self.length}.", float(won), won, False, self._info()
