"""deciplane.envs.menus: the seeded menu shuffle shared by every menu environment."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from deciplane.envs.menus import (PAGE_ACTION, MenuArranger, check_menu_order,
                                  check_menu_overflow, menu_page, menu_seed_for, page_count,
                                  shuffle_key, shuffled_order)
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


def test_pages_of_a_menu_larger_than_the_action_space():
    acts = [f"a{i}" for i in range(7)]
    assert page_count(7, 7) == 1 and menu_page(acts, 0, 7) == tuple(acts)
    # 7 actions in menus of 3 slots: 2 actions + the page turn per page -> 4 pages
    assert page_count(7, 3) == 4
    assert menu_page(acts, 0, 3) == ("a0", "a1", PAGE_ACTION)
    assert menu_page(acts, 2, 3) == ("a4", "a5", PAGE_ACTION)
    assert menu_page(acts, 3, 3) == ("a6", PAGE_ACTION)
    assert page_count(8, 5) == 2 and menu_page(acts + ["a7"], 1, 5) == ("a4", "a5", "a6", "a7",
                                                                        PAGE_ACTION)
    with pytest.raises(ConfigError, match="max_menu >= 2"):
        check_menu_overflow("page", 1)
    with pytest.raises(ConfigError, match="error, page"):
        check_menu_overflow("truncate", 8)
