"""deciplane.envs.menus: the seeded menu shuffle shared by every menu environment."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from deciplane.envs.menus import (MenuArranger, check_menu_order, menu_seed_for, shuffle_key,
                                  shuffled_order)
from deciplane.errors import ConfigError

ACTIONS = ["go north", "go south", "take coin", "open door", "look", "inventory", "eat apple"]


def test_shuffle_key_is_keyed_blake2b_of_the_action():
    # hand-computed: blake2b(b"look", digest_size=8, key=(7).to_bytes(8, "little")), little-endian
    expected = int.from_bytes(hashlib.blake2b(b"look", digest_size=8,
                                              key=bytes([7, 0, 0, 0, 0, 0, 0, 0])).digest(),
                              "little")
    assert shuffle_key("look", 7) == expected
    assert shuffle_key("look", 7) != shuffle_key("look", 8)
    assert shuffle_key("look", -1) == shuffle_key("look", 2**64 - 1)  # seeds taken mod 2**64


def test_same_seed_same_order_independent_of_input_order():
    order = shuffled_order(ACTIONS, 3)
    assert sorted(order) == list(range(len(ACTIONS)))  # a permutation
    assert order == shuffled_order(ACTIONS, 3)
    shown = [ACTIONS[i] for i in order]
    rev = ACTIONS[::-1]
    assert [rev[i] for i in shuffled_order(rev, 3)] == shown
    # sorted by key: check against the keys directly
    keys = [shuffle_key(a, 3) for a in shown]
    assert keys == sorted(keys)


def test_different_seeds_give_different_orders_and_no_position_bias():
    orders = {tuple(shuffled_order(ACTIONS, s)) for s in range(50)}
    assert len(orders) >= 45  # 7! = 5040 orders; 50 seeds almost never collide
    # every action shows up first for some seed (no action is pinned to a position)
    firsts = {ACTIONS[shuffled_order(ACTIONS, s)[0]] for s in range(200)}
    assert firsts == set(ACTIONS)


def test_arranger_sorted_is_plain_sort_and_shuffled_matches_the_pure_function():
    arr = MenuArranger("sorted")
    assert arr.arrange(ACTIONS) == tuple(sorted(ACTIONS))
    arr = MenuArranger("shuffled")
    arr.start_episode(11)
    expected = tuple(ACTIONS[i] for i in shuffled_order(ACTIONS, 11))
    assert arr.arrange(ACTIONS) == expected
    assert arr.arrange(ACTIONS[::-1]) == expected  # cached keys, same order
    arr.start_episode(12)
    assert arr.arrange(ACTIONS) == tuple(ACTIONS[i] for i in shuffled_order(ACTIONS, 12))
    with pytest.raises(ConfigError, match="sorted, shuffled"):
        check_menu_order("random")


def test_menu_seed_option_then_reset_seed_then_draw():
    rng = np.random.default_rng(0)
    assert menu_seed_for({"menu_seed": 5}, 9, rng) == 5
    assert menu_seed_for({}, 9, rng) == 9
    assert menu_seed_for(None, None, np.random.default_rng(1)) == \
        menu_seed_for(None, None, np.random.default_rng(1))
    before = rng.bit_generator.state
    assert menu_seed_for(None, None, rng, order="sorted") == 0  # sorted: nothing drawn
    assert rng.bit_generator.state == before
    with pytest.raises(ConfigError, match="menu_seed"):
        menu_seed_for({"menu_seed": "x"}, None, rng)
