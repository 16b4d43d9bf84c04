"""What an env tells the trainer about its splits before any env is built
(:mod:`deciplane.envs.splits`): the defaults that follow the constructor, and
TextWorld-v0's own answers (its games are listed and fingerprinted up front)."""

from __future__ import annotations

import gymnasium as gym

from deciplane.envs import register
from deciplane.envs.splits import TaskList, env_params, split_kwargs, task_list
from deciplane.envs.textworld.games import make_game_suite

TW = "deciplane/TextWorld-v0"


class _NoSplits(gym.Env):
    """An env whose constructor takes no split."""

    def __init__(self, size: int = 1):
        self.size = size


def test_defaults_follow_the_constructor():
    register("tests/NoSplits-v0", _NoSplits)
    assert env_params("tests/NoSplits-v0") == {"size"}
    assert split_kwargs("tests/NoSplits-v0", "test", {}) == {}
    assert split_kwargs("deciplane/Math-v0", "test", {}) == {"split": "test"}
    assert task_list("deciplane/Math-v0", "test", {}) is None   # seed mode


def test_textworld_lists_its_games_before_any_env_is_built():
    games = ["a.z8", "b.z8", "c.z8"]
    assert split_kwargs(TW, "test", {"games": games}) == {}       # a list has no splits
    assert split_kwargs(TW, "test", {"games": "embedded"}) == {"split": "test"}
    assert task_list(TW, "test", {"games": games}) == TaskList(3, "user-games")
    suite = make_game_suite("embedded", "test")
    assert task_list(TW, "test", {}) == TaskList(len(suite.paths), suite.fingerprint)
