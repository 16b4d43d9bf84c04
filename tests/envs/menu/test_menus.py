"""deciplane.envs.menu.menu: the seeded menu shuffle shared by every menu environment."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from deciplane.envs.menu.menu import (PAGE_ACTION, MenuArranger, MenuView, as_menu_index,
                                      check_menu_order, check_menu_overflow, menu_page,
                                      menu_seed_for, page_count, shuffle_key, shuffled_order)
from deciplane.errors import ConfigError, InvalidAction, MenuTooLarge

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


def test_menu_view_whole_menu_index_checks_and_mask():
    view = MenuView(max_menu=8)                        # sorted order
    view.show(["look", "go north", "take coin"])
    assert view.menu.actions == ("go north", "look", "take coin") and view.pages == 1
    assert view.command_at(1) == "look"
    assert view.command_at(5) is None                 # masked: an invalid move, no error
    with pytest.raises(InvalidAction, match=r"outside the action space Discrete\(8\)"):
        view.command_at(8)
    assert not view.turn_page(2)                      # not paged: every index is an action
    assert view.position("take coin") == 2 and view.position("eat") == -1
    mask = view.mask()
    assert mask.tolist() == [True] * 3 + [False] * 5
    mask[:] = False
    assert view.mask().sum() == 3                     # each call returns a fresh copy
    assert view.expert_choice("look") == (1, "look") and view.expert_choice("eat") is None


def test_menu_view_overflow_error_paging_and_the_expert_across_pages():
    acts = [f"a{i}" for i in range(7)]
    with pytest.raises(MenuTooLarge, match=r"game 3 offers 7 actions but max_menu=3; pass "
                                           r"max_menu=7 or more .*, fewer items, or "
                                           r"menu_overflow='page'"):
        MenuView(3).show(acts, source="game 3", hint=", fewer items,")
    MenuView(3).show(acts, terminal=True)             # a finished game's menu is never chosen
    text = MenuView(3)
    text.show(acts, cap=False)                        # text mode: every action, no pages
    assert len(text.menu) == 7 and text.pages == 1

    view = MenuView(3, overflow="page")
    view.show(acts)
    assert (view.menu.actions, view.page, view.pages) == (("a0", "a1", PAGE_ACTION), 0, 4)
    # the expert's action on page 2 (a4): from page 0 it turns the page
    assert view.expert_choice("a4") == (2, PAGE_ACTION)
    assert view.command_at(2) == PAGE_ACTION and view.turn_page(2)
    assert view.menu.actions == ("a2", "a3", PAGE_ACTION)
    assert view.turn_page(2) and view.expert_choice("a4") == (0, "a4")
    assert view.turn_page(2) and view.menu.actions == ("a6", PAGE_ACTION)
    assert view.turn_page(1) and view.page == 0       # cyclic: the last page's turn -> page 0
    view.show(acts[:2])                               # a new state starts at its first page
    assert (view.menu.actions, view.pages) == (("a0", "a1"), 1)


def test_as_menu_index_accepts_integral_values_only():
    assert as_menu_index(3) == 3 and as_menu_index(np.int64(2)) == 2
    assert as_menu_index(np.array(4)) == 4 and as_menu_index(5.0) == 5
    for bad in (True, "1", b"1", 1.5, None):
        with pytest.raises(InvalidAction):
            as_menu_index(bad)


def test_drop_penalised_hides_a_command_that_lost_points_for_the_rest_of_the_episode():
    view = MenuView(8, "sorted", drop_penalised=True)
    view.start_episode(0)
    view.show(["put cup in fridge", "put cup in sink", "look"])
    view.note_reward("put cup in fridge", -0.25)
    view.note_reward("look", 0.0)                  # no loss: stays
    view.show(["take cup", "look"])
    view.show(["put cup in fridge", "put cup in sink", "look"])
    assert view.menu.actions == ("look", "put cup in sink")
    assert view.position("put cup in fridge") == -1
    view.show(["put cup in fridge"])               # never an empty menu
    assert view.menu.actions == ("put cup in fridge",)
    view.start_episode(1)                          # a new episode forgets
    view.show(["put cup in fridge", "look"])
    assert "put cup in fridge" in view.menu.actions
    plain = MenuView(8, "sorted")                  # off by default
    plain.start_episode(0)
    plain.note_reward("look", -1.0)
    plain.show(["look"])
    assert plain.menu.actions == ("look",)
