"""The wrappers that let one vector env play chosen tasks: the task travels in the reset
seed, and ``None`` info entries are left out so that a vector env can stack them."""

from __future__ import annotations

import gymnasium as gym

from deciplane.envs.wrappers import DropNoneInfo, GameSlotEnv, task_slots


class _Recorder(gym.Env):
    """Records the reset options it gets (to check the game travels in the seed)."""

    observation_space = gym.spaces.Text(16)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, num_tasks=None):
        if num_tasks is not None:
            self.num_tasks = num_tasks

    def reset(self, *, seed=None, options=None):
        self.options = options
        return "x", {"expert_action": None, "won": False}

    def step(self, action):
        return "y", 0.0, True, False, {"expert_action": None, "won": True}


def test_game_slot_env_maps_seed_to_game():
    env = GameSlotEnv(_Recorder(), n_games=6)
    env.reset(seed=14)
    assert env.unwrapped.options == {"game": 2}
    env.reset(seed=3, options={"game": 5})
    assert env.unwrapped.options == {"game": 5}  # an explicit choice wins


def test_task_slots_uses_num_tasks_and_leaves_other_envs_alone():
    env = task_slots(_Recorder(num_tasks=4))
    env.reset(seed=9)
    assert env.unwrapped.options == {"task": 1}
    plain = _Recorder()
    assert task_slots(plain) is plain


def test_drop_none_info_leaves_out_none_entries():
    env = DropNoneInfo(_Recorder())
    assert env.reset(seed=0)[1] == {"won": False}
    assert env.step(0)[4] == {"won": True}
