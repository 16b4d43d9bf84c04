"""Every ``deciplane/*`` environment answers ``step()`` after its episode ended (and before
the first ``reset()``) with ``gymnasium.error.ResetNeeded`` (issue 27: the menu envs raised
``GameError``, Math-v0 and CodeGen-v0 ``ResetNeeded``)."""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded

from deciplane.envs import registered_ids
from deciplane.errors import BackendUnavailable
from env_helpers import skip_unless_buildable

pytestmark = pytest.mark.filterwarnings("ignore::jericho.UnsupportedGameWarning")


def _expert(info: dict[str, Any] | None) -> int:
    return 0 if info is None else int(info.get("expert_action") or 0)


def _refused(info: dict[str, Any] | None) -> str:
    return "\ud800"  # a lone surrogate: refused unread, which ends the episode (no sandbox run)


# id -> (gym.make kwargs, reset options, the action to play given the last info)
EPISODES: dict[str, tuple[dict[str, Any], dict[str, Any], Callable[[Any], Any]]] = {
    "deciplane/TextWorld-v0": ({"expert": True}, {"game": 0}, _expert),
    "deciplane/TextWorldExpress-v0": ({"game": "coin", "expert": True}, {"game": 0}, _expert),
    "deciplane/ALFWorld-v0": ({"source": "generated", "split": "train", "n_games": 12,
                               "expert": True}, {"game": 0}, _expert),
    "deciplane/Math-v0": ({"benchmark": "arith", "split": "test", "limit": 5}, {},
                          lambda info: "1"),
    "deciplane/CodeGen-v0": ({"split": "test", "limit": 3}, {}, _refused),
    "deciplane/CodeOpt-v0": ({"split": "test"}, {}, _refused),
}


def _make(env_id: str, kwargs: dict[str, Any]) -> gym.Env:
    try:
        return gym.make(env_id, **kwargs)
    except BackendUnavailable as exc:
        pytest.skip(f"no sandbox backend here: {exc}")


@pytest.mark.parametrize("env_id", sorted(i for i in registered_ids() if i.startswith("deciplane/")))
def test_step_after_the_end_raises_reset_needed(env_id):
    assert env_id in EPISODES, f"{env_id} is registered: add it to EPISODES"
    kwargs, options, act = EPISODES[env_id]
    skip_unless_buildable(env_id)
    env = _make(env_id, kwargs)
    try:
        with pytest.raises(ResetNeeded):
            env.unwrapped.step(act(None))           # under gym.make's order check
        _, info = env.reset(seed=0, options=options)
        for _ in range(40):
            _, _, terminated, truncated, info = env.step(act(info))
            if terminated or truncated:
                break
        assert terminated, "the env ends this episode itself (not through a TimeLimit)"
        with pytest.raises(ResetNeeded, match="reset"):
            env.step(act(info))
        with pytest.raises(ResetNeeded, match="reset"):
            env.unwrapped.step(act(info))
        env.reset(seed=1, options=options)          # a reset starts a playable episode
        env.step(act(info))
    finally:
        env.close()
