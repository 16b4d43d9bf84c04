"""``info["state_key"]`` on real TextWorld-Express twc games: one key per game state
however it was reached (GiGPO's anchor states, ``advantage: gigpo``)."""

from __future__ import annotations

import shutil

import pytest

from deciplane.envs.twx import TextWorldExpressEnv

pytest.importorskip("textworld_express")
pytestmark = pytest.mark.skipif(shutil.which("java") is None,
                                reason="TextWorld-Express needs java (deciplane doctor)")


@pytest.fixture(scope="module")
def twc():
    # the demo's settings (configs/quickstart_twx.yaml)
    env = TextWorldExpressEnv(game="twc", game_params={"numLocations": 2,
                                                       "numItemsToPutAway": 2},
                              menu_order="shuffled", observation="state",
                              drop_penalised=True)
    yield env
    env.close()


def play(env, commands, menu_seed):
    """Train game 0 from its start with ``menu_seed`` (the shuffled order), playing
    ``commands`` by name; returns (observations, state keys), the start's first."""
    obs, info = env.reset(options={"game": 0, "menu_seed": menu_seed})
    seen, keys = [obs], [info["state_key"]]
    for c in commands:
        obs, _, _, _, info = env.step(info["menu"].actions.index(c))
        seen.append(obs)
        keys.append(info["state_key"])
    return seen, keys


def test_the_same_state_reached_by_two_paths_has_one_key(twc):
    # game 0 (train seed 0) starts in the bedroom with a closed wardrobe and chest of drawers
    obs_a, a = play(twc, ["open wardrobe", "open chest of drawers"], menu_seed=1)
    obs_b, b = play(twc, ["open chest of drawers", "open wardrobe"], menu_seed=2)
    assert a[0] == b[0] and a[2] == b[2]
    assert a[1] != b[1]                    # one container open vs the other
    assert obs_a[2] != obs_b[2]            # the observations differ (last action, reply)
    _, back = play(twc, ["move north", "move south"], menu_seed=3)
    assert back[2] == back[0] != back[1]   # there and back: the start again
    _, idle = play(twc, ["look around"], menu_seed=4)
    assert idle[1] == idle[0]              # a look changes nothing


def test_different_inventories_have_different_keys(twc):
    obs, keys = play(twc, ["take black duvet"], menu_seed=1)
    assert "Inventory: a black duvet" in obs[1]
    assert keys[1] != keys[0]
    # the same key from any menu order, though the menus differ
    _, again = play(twc, ["take black duvet"], menu_seed=7)
    assert again == keys
