"""deciplane/ALFWorld-v0 on generated games: the menu contract, text mode, vector envs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env

import deciplane.envs  # noqa: F401 - registers the ids
from deciplane.errors import ConfigError, InvalidAction, MenuTooLarge
from deciplane.types import Menu

ENV_ID = "deciplane/ALFWorld-v0"
N_SMALL = 12


@pytest.fixture(scope="module")
def env(small_suites):
    e = gym.make(ENV_ID, source="generated", split="valid_seen", n_games=N_SMALL, expert=True)
    yield e
    e.close()


def test_check_env_menu_and_text_modes(small_suites):
    for mode in ("menu", "text"):
        e = gym.make(ENV_ID, source="generated", split="train", n_games=N_SMALL,
                     action_mode=mode)
        check_env(e.unwrapped, skip_render_check=True)
        e.close()


def test_menu_contract_and_info(env):
    obs, info = env.reset(seed=3, options={"game": 3})
    assert info["game_index"] == 3 and info["source"] == "generated"
    assert info["split"] == "valid_seen" and info["task_type"] == "pick_heat_then_place_in_recep"
    assert "Welcome" not in obs and obs.strip().endswith(f"Your task is to: {info['goal']}.")
    menu = info["menu"]
    assert isinstance(menu, Menu) and list(menu.actions) == sorted(menu.actions)
    assert "look" in menu.actions and "inventory" in menu.actions
    mask = info["action_mask"]
    assert mask.dtype == bool and mask.shape == (64,) and mask.sum() == len(menu)
    assert info["command_style"] == info["data_command_style"] == "move"
    assert menu[info["expert_action"]] == info["expert_command"]
    assert env.unwrapped.num_tasks == N_SMALL and info["split_fingerprint"].startswith("generated-")
    # same seed, same game; options pick by index or name
    assert env.reset(seed=7)[1]["game_name"] == env.reset(seed=7)[1]["game_name"]
    assert env.reset(options={"game": info["game_name"]})[1]["game_index"] == 3


def test_masked_index_is_an_invalid_move_and_out_of_space_raises(env):
    obs, info = env.reset(options={"game": 0})
    n = len(info["menu"])
    obs2, r, term, trunc, info2 = env.step(n)  # inside Discrete(64), outside the menu
    assert info2["invalid_action"] and r == 0.0 and not term and obs2 == obs
    assert info2["menu"] == info["menu"] and info2["invalid_actions"] == 1
    with pytest.raises(InvalidAction, match="Discrete"):
        env.step(64)
    with pytest.raises(InvalidAction):
        env.step("look")


def test_reward_only_on_success_and_step_after_end_raises(env):
    obs, info = env.reset(options={"game": 0})
    rewards = []
    while True:
        obs, r, term, trunc, info = env.step(info["expert_action"])
        rewards.append(r)
        if term or trunc:
            break
    assert info["won"] and rewards[-1] == 1.0 and sum(rewards) == 1.0
    assert "expert_action" not in info
    with pytest.raises(ResetNeeded, match="reset"):
        env.step(0)


def test_menu_larger_than_max_menu_raises_naming_it(small_suites):
    e = gym.make(ENV_ID, source="generated", split="train", n_games=N_SMALL, max_menu=4)
    with pytest.raises(MenuTooLarge, match="max_menu=4"):
        e.reset(options={"game": 0})


def test_text_mode_translates_the_other_versions_put_command(small_suites):
    e = gym.make(ENV_ID, source="generated", split="train", n_games=N_SMALL,
                 action_mode="text", expert=True)
    obs, info = e.reset(options={"game": 0})  # pick_and_place_simple
    while True:
        cmd = info["expert_command"]
        if cmd.startswith("move "):
            obj, recep = cmd[5:].split(" to ")
            cmd = f"Put  {obj} in/on {recep}"  # ALFWorld < 0.4 wording, odd spacing
        obs, r, term, trunc, info = e.step(cmd)
        if term or trunc:
            break
    assert info["won"] and r == 1.0 and not info["invalid_action"]
    assert info["translated_command"].endswith(f"-> move {obj} to {recep}")
    obs, info = e.reset(options={"game": 0})
    obs, r, term, trunc, info = e.step("dance wildly")
    assert info["invalid_action"] and obs == "Nothing happens."


def test_command_style_put_rewrites_the_menu(small_suites):
    e = gym.make(ENV_ID, source="generated", split="train", n_games=N_SMALL,
                 command_style="put", expert=True)
    obs, info = e.reset(options={"game": 0})
    while True:
        obs, r, term, trunc, info = e.step(info["expert_action"])
        if term or trunc:
            break
    assert info["won"] and info["command_style"] == "put" and info["data_command_style"] == "move"
    assert obs.startswith("You put the ") and " in/on the " in obs


def test_vector_env_runs_lockstep(small_suites):
    vec = gym.vector.SyncVectorEnv([
        lambda: gym.make(ENV_ID, source="generated", split="train", n_games=N_SMALL)
        for _ in range(2)])
    obs, infos = vec.reset(seed=[0, 1])
    assert len(obs) == 2
    obs, r, term, trunc, infos = vec.step(np.array([0, 0]))
    assert r.shape == (2,)
    vec.close()


def test_bad_arguments_are_config_errors(small_suites):
    with pytest.raises(ConfigError, match="source"):
        gym.make(ENV_ID, source="web")
    with pytest.raises(ConfigError, match="command_style"):
        gym.make(ENV_ID, source="generated", n_games=N_SMALL, command_style="drop")
    with pytest.raises(ConfigError, match="task types"):
        gym.make(ENV_ID, source="generated", n_games=N_SMALL, task_types=["slice"])
    e = gym.make(ENV_ID, source="generated", split="train", n_games=N_SMALL,
                 task_types=["look_at_obj_in_light"])
    assert e.unwrapped.num_tasks == 2
    with pytest.raises(ConfigError, match="0..1"):
        e.reset(options={"game": 5})


def test_task_in_observation_puts_the_task_before_every_observation(small_suites):
    e = gym.make(ENV_ID, source="generated", split="train", n_games=N_SMALL,
                 task_in_observation=True)
    obs, info = e.reset(options={"game": 1})
    assert obs.count("Your task is to:") == 1
    obs, r, term, trunc, info = e.step(info["menu"].index("look"))
    assert obs.startswith(f"Your task is to: {info['goal']}.\n\nYou are in the middle of")


def test_shuffled_menu_is_seeded_and_the_expert_follows_it(small_suites):
    kw = dict(source="generated", split="train", n_games=N_SMALL, expert=True)
    e = gym.make(ENV_ID, menu_order="shuffled", **kw)
    obs, a = e.reset(seed=0)
    obs, b = e.reset(seed=0)
    obs, c = e.reset(seed=0, options={"menu_seed": 5})
    assert a["menu"] == b["menu"] and set(a["menu"].actions) == set(c["menu"].actions)
    assert a["menu"] != c["menu"] and a["menu_seed"] == 0 and c["menu_seed"] == 5
    assert list(a["menu"].actions) != sorted(a["menu"].actions)
    assert a["menu"][a["expert_action"]] == a["expert_command"]


def test_menu_overflow_page_shows_pages_and_the_expert_still_wins(small_suites):
    e = gym.make(ENV_ID, source="generated", split="train", n_games=N_SMALL, expert=True,
                 max_menu=6, menu_overflow="page")
    obs, info = e.reset(options={"game": 0})
    assert info["menu_pages"] > 1 and len(info["menu"]) == 6
    assert info["menu"][5] == "(show more actions)"
    while True:
        obs, r, term, trunc, info = e.step(info["expert_action"])
        if term or trunc:
            break
    assert info["won"] and term


def test_expert_keeps_its_plan_and_replans_after_a_deviation(small_suites):
    from deciplane.envs.alfworld.expert import replan, replan_bounded

    e = gym.make(ENV_ID, source="generated", split="valid_seen", n_games=N_SMALL, expert=True)
    planner = e.unwrapped._planner
    obs, info = e.reset(seed=4, options={"game": 4})
    start_plan = list(planner.plan)
    assert replan_bounded(e.unwrapped._env, 30.0) == replan(e.unwrapped._env) == start_plan
    obs, r, term, trunc, info = e.step(info["expert_action"])   # follow: no replan
    assert planner.replans == 1 and planner.plan == start_plan[1:]
    assert info["expert_command"] == start_plan[1]
    wrong = next(i for i, c in enumerate(info["menu"]) if c not in (info["expert_command"],
                                                                     start_plan[0]))
    obs, r, term, trunc, info = e.step(wrong)                    # deviate: a fresh plan
    assert planner.replans == 2 and info["expert_timeouts"] == 0
    assert info["menu"][info["expert_action"]] == info["expert_command"] == planner.plan[0]
    while not (term or trunc):
        obs, r, term, trunc, info = e.step(info["expert_action"])
    assert info["won"] and "expert_action" not in info
    e.close()


def test_expert_replan_that_runs_out_of_time_gives_no_expert_action(small_suites):
    e = gym.make(ENV_ID, source="generated", split="valid_seen", n_games=N_SMALL, expert=True,
                 expert_timeout_s=1e-6)
    obs, info = e.reset(seed=4, options={"game": 4})  # the first plan has its own, long bound
    assert "expert_action" in info and info["expert_timeouts"] == 0
    wrong = next(i for i, c in enumerate(info["menu"]) if c != info["expert_command"])
    obs, r, term, trunc, info = e.step(wrong)
    assert "expert_action" not in info and "expert_command" not in info
    assert info["expert_timeouts"] == 1
    with pytest.raises(ConfigError, match="expert_timeout_s"):
        gym.make(ENV_ID, source="generated", split="valid_seen", n_games=N_SMALL,
                 expert_timeout_s=0)
    e.close()
