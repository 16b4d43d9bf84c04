"""The ``state`` observation view of every menu game (location + inventory + last reply)
and the ambiguity metric of a view, on real games with fixed seeds."""

from __future__ import annotations

import importlib.util
import shutil

import gymnasium as gym
import pytest

import deciplane  # noqa: F401
from deciplane.envs.menu.text import ambiguous_share, state_view
from deciplane.errors import ConfigError


def test_state_view_hand_built():
    text = state_view("Your task is X.", "You are in the bedroom.  \nTo the East ...",
                      "Inventory: \n  a white blanket\n  a newspaper\n", "You take the newspaper.")
    assert text == ("Your task is X.\n\nLocation: You are in the bedroom. To the East ...\n"
                    "Inventory: a white blanket, a newspaper\nLast reply: You take the newspaper.")
    # a reply that repeats the room (look, a move, the start) is left out
    assert "Last reply" not in state_view("T", "You are here.", "", "T You are here.")
    assert state_view("", "", "", "Hi.") == "Last reply: Hi."
    # a step that changes nothing still shows a new observation: the last action
    assert state_view("T", "Here.", "", "Here.", "look around") == \
        "T\n\nLocation: Here.\nLast action: look around"


def test_ambiguous_share_on_a_hand_built_trajectory():
    records = [("obs", ["b", "a"], "a"),        # same observation and menu (any order) ...
               ("obs", ["a", "b"], "b"),        # ... another expert action: both ambiguous
               ("obs", ["a", "b", "c"], "c"),   # another menu: not the same state
               ("other", ["a"], "a")]
    assert ambiguous_share(records) == 0.5
    assert ambiguous_share([]) == 0.0
    assert ambiguous_share([("o", ["a"], "a"), ("o", ["a"], "a")]) == 0.0


def _walk(env, commands):
    obs, info = env.reset(seed=0, options={"game": 0})
    seen = [obs]
    for c in commands:
        obs, _, term, trunc, info = env.step(info["menu"].actions.index(c))
        seen.append(obs)
        if term or trunc:
            break
    return seen


@pytest.mark.skipif(shutil.which("java") is None or importlib.util.find_spec("textworld_express") is None,
                    reason="TextWorld-Express needs java and textworld-express")
def test_twx_state_view_has_the_room_and_the_inventory_after_take_and_move():
    env = gym.make("deciplane/TextWorldExpress-v0", game="twc", split="test",
                   game_params={"numLocations": 2, "numItemsToPutAway": 2}, observation="state")
    feedback = gym.make("deciplane/TextWorldExpress-v0", game="twc", split="test",
                        game_params={"numLocations": 2, "numItemsToPutAway": 2})
    try:
        # test game 0 (seed 20000): the living room, the bedroom to the west holds both items
        path = ["move west", "take white blanket", "move east"]
        seen, plain = _walk(env, path), _walk(feedback, path)
        assert plain[2] .endswith("You take the white blanket.")   # the game's own reply ...
        assert "bedroom" not in plain[2] and "Inventory" not in plain[2]
        taken = seen[2]                                             # ... and the state view
        assert taken.startswith("Your task is to")
        assert "Location: You are in the bedroom." in taken
        assert "Inventory: a white blanket" in taken
        assert "Last action: take white blanket\nLast reply: You take the white blanket." in taken
        moved = seen[3]
        assert "Location: You are in the living room." in moved
        assert "Inventory: a white blanket" in moved
        assert "Inventory: Your inventory is currently empty." in seen[0]
    finally:
        env.close()
        feedback.close()
    with pytest.raises(ConfigError, match="observation"):
        gym.make("deciplane/TextWorldExpress-v0", game="twc", observation="everything")


def test_textworld_state_view_has_the_room_and_the_inventory_after_take():
    env = gym.make("deciplane/TextWorld-v0", games="embedded", split="train", expert=True,
                   observation="state")
    try:
        obs, info = env.reset(seed=1)
        assert "Location: -= Kitchen =-" in obs and "Inventory: You are carrying nothing." in obs
        assert "Last reply" not in obs                   # the start repeats the room
        command = info["menu"][info["expert_action"]]
        assert command.startswith("take ")
        obs, *_ = env.step(info["expert_action"])
        item = command.split(" from ")[0][len("take "):]
        assert "Location: -= Kitchen =-" in obs
        assert f"Inventory: You are carrying: a chopped {item}" in obs or item in obs.split("Inventory:")[1]
        assert "Last reply: You take the" in obs
    finally:
        env.close()


@pytest.mark.skipif(importlib.util.find_spec("fast_downward") is None,
                    reason="ALFWorld needs fast-downward-textworld")
def test_alfworld_state_view_has_the_place_and_the_inventory_after_go_and_take():
    env = gym.make("deciplane/ALFWorld-v0", source="generated", split="valid_unseen",
                   n_games=6, expert=True, observation="state")
    try:
        obs, info = env.reset(seed=0, options={"game": 0})
        assert obs.startswith("Your task is to:")
        assert "Location: You are in the middle of a room." in obs and "Inventory: nothing" in obs
        for _ in range(8):   # the expert's plan: go to a receptacle ... take an object
            command = info["menu"][info["expert_action"]]
            obs, _, term, trunc, info = env.step(info["expert_action"])
            if command.startswith("go to "):
                assert f"Location: You are at {command[len('go to '):]}." in obs
            if command.startswith("take "):
                item = command[len("take "):].split(" from ")[0]
                assert f"Inventory: a {item}" in obs
                break
            assert not (term or trunc)
        else:
            pytest.fail("the expert took nothing in 8 steps")
    finally:
        env.close()


def test_state_key_reads_sets_not_orders_and_tells_inventories_apart():
    from deciplane.envs.menu.text import inventory_items, state_key

    here = "You are in the kitchen.  There is a fridge."
    k = state_key(0, here, ["a towel", "a key"], ["take mug", "move north"])
    assert k == state_key(0, " ".join(here.split()), ["a key", "a towel"],
                          ["move north", "take mug"])
    assert k != state_key(0, here, ["a towel"], ["take mug", "move north"])
    assert k != state_key(0, here, ["a towel", "a key"], ["take mug"])
    assert k != state_key(1, here, ["a towel", "a key"], ["take mug", "move north"])
    assert len(k) == 16 and int(k, 16) >= 0
    assert inventory_items("Inventory:\n  a towel\n  a key\n") == ["a towel", "a key"]
