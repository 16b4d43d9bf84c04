"""What the three menu envs share through ``deciplane.envs.menu.base.MenuTextEnv`` (issue
27): one game-choice rule, the step limit in Gymnasium's ``TimeLimit`` only, one typed
result (``ParsedCommand``) for every text parser."""

from __future__ import annotations


import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils import seeding

import deciplane.envs  # noqa: F401 - registers the ids
from deciplane.envs.menu.base import MenuTextEnv, ParsedCommand
from deciplane.envs.menu.menu import PAGE_ACTION
from deciplane.errors import ConfigError
from tests.envs.env_helpers import skip_unless_buildable

pytestmark = pytest.mark.filterwarnings("ignore::jericho.UnsupportedGameWarning")

MENU_ENVS = {
    "textworld": ("deciplane/TextWorld-v0", {}, 100),
    "twx": ("deciplane/TextWorldExpress-v0", {"game": "coin"}, 100),
    "alfworld": ("deciplane/ALFWorld-v0", {"source": "generated", "split": "train",
                                           "n_games": 12}, 50),
}
"""name -> (id, gym.make kwargs, the registered step limit)."""


@pytest.fixture(scope="module", params=list(MENU_ENVS))
def menu_case(request):
    """``(name, env)`` for each menu env this machine can build."""
    skip_unless_buildable(MENU_ENVS[request.param][0])
    env_id, kwargs, _ = MENU_ENVS[request.param]
    env = gym.make(env_id, **kwargs)
    yield request.param, env
    env.close()


# ---- which game a reset plays ---------------------------------------------------------------


def test_reset_seed_plays_the_first_game_of_the_order_it_seeds(menu_case):
    _, env = menu_case
    n = env.unwrapped.num_tasks
    for seed in (0, 7, 123):
        order = seeding.np_random(seed)[0].permutation(n)
        played = [env.reset(seed=seed)[1]["game_index"]]
        played += [env.reset()[1]["game_index"] for _ in range(min(n, 12) - 1)]
        assert played == order[:len(played)].tolist()  # then the rest of that order


def test_options_pick_a_game_by_index_or_name(menu_case):
    _, env = menu_case
    n = env.unwrapped.num_tasks
    name = env.reset(options={"game": 2})[1]["game_name"]
    assert env.reset(options={"game": np.int64(2)})[1]["game_index"] == 2
    assert env.reset(options={"task": 2})[1]["game_index"] == 2
    assert env.reset(options={"game": name})[1]["game_index"] == 2
    # ALFWorld's old reset(seed=s) (game s % n) is this option, the same in every env
    assert env.reset(seed=n + 3, options={"game": (n + 3) % n})[1]["game_index"] == 3
    # a seeded reset starts a new order even when it names the game
    order = seeding.np_random(5)[0].permutation(n)
    env.reset(seed=5, options={"game": 1})
    assert env.reset()[1]["game_index"] == order[0]


@pytest.mark.parametrize("game,message", [(True, "names no game"),
                                          (np.bool_(False), "names no game"),
                                          (10**6, "suite has"),
                                          ("no-such-game", "not in the suite")])
def test_a_bad_game_option_is_a_config_error(menu_case, game, message):
    _, env = menu_case
    with pytest.raises(ConfigError, match=message):
        env.reset(options={"game": game})


# ---- the step limit is TimeLimit's -----------------------------------------------------------


def test_truncation_comes_from_time_limit(menu_case):
    name, registered = menu_case
    env_id, kwargs, limit = MENU_ENVS[name]
    assert registered.spec.max_episode_steps == limit
    assert registered.get_wrapper_attr("_max_episode_steps") == limit
    assert not hasattr(registered.unwrapped, "max_episode_steps")
    masked = registered.action_space.n - 1  # an invalid move: cheap, and it counts as a step
    env = gym.make(env_id, max_episode_steps=3, **kwargs)
    bare = env.unwrapped
    try:
        env.reset(seed=0)
        results = [env.step(masked) for _ in range(3)]
        assert [r[3] for r in results] == [False, False, True] and results[-1][4]["moves"] == 3
        # the env under the TimeLimit has no limit of its own: it plays on past 3 steps
        assert not any(bare.step(masked)[3] for _ in range(limit + 5))
    finally:
        env.close()


@pytest.mark.parametrize("name", list(MENU_ENVS))
def test_the_removed_max_episode_steps_argument_names_time_limit(name):
    env_cls = gym.spec(MENU_ENVS[name][0]).entry_point.split(":")[1]
    cls = getattr(deciplane.envs, env_cls)
    assert issubclass(cls, MenuTextEnv)
    with pytest.raises(ConfigError, match=r"max_episode_steps.*TimeLimit"):
        cls(max_episode_steps=5)  # refused before any game or JVM is loaded


def test_trainer_episodes_are_cut_by_time_limit():
    from deciplane.trainers.config import EnvConfig
    from deciplane.trainers.env_suite import EnvSuite

    suite = EnvSuite(EnvConfig(kwargs={"games": "embedded"}, max_episode_steps=2))
    env = suite._make_env("train")()
    try:
        assert env.get_wrapper_attr("_max_episode_steps") == 2
        env.reset(seed=0)
        masked = env.action_space.n - 1
        assert [env.step(masked)[3] for _ in range(2)] == [False, True]
    finally:
        env.close()


# ---- one parsed-command type -----------------------------------------------------------------


def test_every_parser_returns_a_parsed_command():
    env = gym.make("deciplane/TextWorld-v0", action_mode="text").unwrapped
    env.reset(options={"game": 0})
    command = env.menu[0]
    assert env._parse_text(f"  {command.upper()} ") == ParsedCommand(command, True, False)
    assert env._parse_text("dance") == ParsedCommand("dance", True, True)   # sent, invalid
    assert env._parse_text("quit") == ParsedCommand("quit", False, True,
                                                    rejected="interpreter meta-command")
    assert env._parse_text("a\x00b").rejected and not env._parse_text("a\x00b").send
    paged = gym.make("deciplane/TextWorld-v0", max_menu=2, menu_overflow="page").unwrapped
    _, info = paged.reset(options={"game": 0})
    assert info["menu"][1] == PAGE_ACTION
    assert paged._parse_index(0) == ParsedCommand(info["menu"][0], send=True, invalid=False)
    assert paged._parse_index(1) == ParsedCommand(PAGE_ACTION, send=False, invalid=False)
    menu = gym.make("deciplane/TextWorld-v0").unwrapped
    _, info = menu.reset(options={"game": 0})
    masked = len(info["menu"])   # inside Discrete(64), past the menu: an invalid move
    assert menu._parse_index(masked) == ParsedCommand(None, send=False, invalid=True)


def test_each_envs_text_parser_returns_a_parsed_command(menu_case):
    _, env = menu_case
    _, info = env.reset(options={"game": 0})
    bare = env.unwrapped
    command = info["menu"][0]
    assert bare._parse_text(f"  {command.upper()} ") == ParsedCommand(command, True, False)
    unlisted = bare._parse_text("dance wildly")
    assert isinstance(unlisted, ParsedCommand) and unlisted.invalid and unlisted.rejected is None
    refused = bare._parse_text("a\x00b")
    assert refused.invalid and not refused.send and "control" in refused.rejected
