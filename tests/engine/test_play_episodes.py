"""The one episode loop (deciplane.engine.episodes.play_episodes): refill, per-episode
reset options, any action type, the step cap, the success rule, and the vector env's
limits."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium import spaces

from deciplane.engine.episodes import (EnvListSlots, EpisodeStart, VectorSlots,
                                       make_vector_env, play_episodes)


class EchoEnv(gym.Env):
    """Episodes last ``options["length"]`` steps (default 2); the reward of a step is the
    length of the text action; ``won`` is reported only when ``report_won``."""

    observation_space = spaces.Text(64)
    action_space = spaces.Text(64)

    def __init__(self, report_won: bool = True) -> None:
        self.report_won = report_won
        self.resets: list[tuple[int | None, dict | None]] = []
        self.actions: list[str] = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets.append((seed, options))
        self.length, self.t = int((options or {}).get("length", 2)), 0
        return f"start {seed}", {"seed": seed}

    def step(self, action):
        self.actions.append(action)
        self.t += 1
        done = self.t >= self.length
        info = {"won": action == "win"} if self.report_won and done else {}
        return f"t{self.t}", float(len(action)), done, False, info


def test_refills_free_envs_with_the_next_episode_in_order():
    envs = [EchoEnv(), EchoEnv()]
    starts = [EpisodeStart(10 + i, {"length": n}) for i, n in enumerate([3, 1, 2, 1, 2])]
    calls: list[tuple[int, list[int]]] = []
    ended: list[int] = []

    def act(eps, t):
        calls.append((t, [ep.index for ep in eps]))
        return ["win" if ep.steps == ep.start.options["length"] - 1 else "go" for ep in eps]

    played = play_episodes(EnvListSlots(envs), starts, act, max_steps=100,
                           on_end=lambda ep: ended.append(ep.index))
    # env 0 plays episode 0 (3 steps) while env 1 plays 1 (1 step) then 2 (2 steps); both
    # free after the third step and take episodes 3 and 4, in env order
    assert calls == [(0, [0, 1]), (1, [0, 2]), (2, [0, 2]), (3, [3, 4]), (4, [4])]
    assert ended == [1, 0, 2, 3, 4]
    assert [ep.index for ep in played.episodes] == [0, 1, 2, 3, 4]
    assert envs[0].resets == [(10, {"length": 3}), (13, {"length": 1})]
    assert envs[1].resets == [(11, {"length": 1}), (12, {"length": 2}), (14, {"length": 2})]
    assert envs[0].actions == ["go", "go", "win", "win"]
    ep0 = played.episodes[0]
    assert (ep0.steps, ep0.rewards, ep0.ret, ep0.won, ep0.truncated) == (3, [2.0, 2.0, 3.0],
                                                                        7.0, True, False)
    assert ep0.first_info == {"seed": 10} and ep0.obs == "t3"
    assert played.decisions == 3 + 1 + 2 + 1 + 2


def test_step_cap_truncates_and_success_falls_back_to_a_positive_return():
    env = EchoEnv(report_won=False)
    played = play_episodes(EnvListSlots([env]), [EpisodeStart(0, {"length": 9}),
                                                 EpisodeStart(1, {"length": 1})],
                           lambda eps, t: ["" if ep.index == 1 else "go" for ep in eps],
                           max_steps=4)
    capped, zero = played.episodes
    assert (capped.steps, capped.truncated, capped.won) == (4, True, True)   # return 8 > 0
    assert (zero.steps, zero.truncated, zero.won) == (1, False, False)       # return 0


def test_act_must_answer_every_live_episode():
    with pytest.raises(ValueError, match="act returned 0 actions for 1 episodes"):
        play_episodes(EnvListSlots([EchoEnv()]), [EpisodeStart(0)], lambda eps, t: [], 5)


def test_vector_env_plays_exactly_num_envs_episodes_from_seeds():
    from tests.trainers.coinflip_env import CoinFlipEnv

    vec = make_vector_env([lambda: CoinFlipEnv(length=2)] * 2)
    try:
        played = play_episodes(VectorSlots(vec), [EpisodeStart(5), EpisodeStart(6)],
                               lambda eps, t: [0] * len(eps), max_steps=10)
        assert [ep.steps for ep in played.episodes] == [2, 2]
        assert all(str(ep.first_info["menu"][0]) == "go east" for ep in played.episodes)
        with pytest.raises(ValueError, match="exactly num_envs episodes"):
            play_episodes(VectorSlots(vec), [EpisodeStart(s) for s in range(3)],
                          lambda eps, t: [0] * len(eps), max_steps=10)
        with pytest.raises(ValueError, match="without reset options"):
            play_episodes(VectorSlots(vec), [EpisodeStart(0, {"game": 1})] * 2,
                          lambda eps, t: [0] * len(eps), max_steps=10)
    finally:
        vec.close()
