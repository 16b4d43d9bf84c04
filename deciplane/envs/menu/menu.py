"""The menu a menu environment (TextWorld, TextWorld-Express, ALFWorld) shows for a state's
legal actions: its order, its pages and the expert's index in it (:class:`MenuView`).

A menu shown in the game's own order or in sorted order lets a policy learn a *position*
shortcut ("the first action is usually right") instead of reading the actions. With
``menu_order="shuffled"`` the env shows its legal actions in a seeded pseudo-random order:

* the order of a menu depends only on the **menu seed** and the **set of actions** (each
  action gets the key ``blake2b(seed, action)``; the menu is sorted by key), never on the
  order the game listed them in nor on the step number. Episodes that share a menu seed
  and a state therefore see the same menu (a group of episodes started with the same seed
  keeps its shared prefix shared), and a different seed gives an unrelated order;
* the env's expert index (``info["expert_action"]``) is looked up in the shown menu, so it
  follows the shuffle.

Menus larger than the action space: ``menu_overflow="error"`` (default) raises
:class:`~deciplane.errors.MenuTooLarge` naming ``max_menu``; ``menu_overflow="page"`` shows
a second-level menu instead: pages of ``max_menu - 1`` actions whose last slot is
:data:`PAGE_ACTION`, which turns to the next page (cyclically) without acting in the game
(:func:`menu_page`, :func:`page_count`).

``menu_seed_for`` is how every env derives the per-episode menu seed: an explicit
``reset(options={"menu_seed": s})`` wins; otherwise the reset seed (so evaluation episode
``i``, reset with seed ``seed + i``, gets the same fixed shuffle for every agent compared);
otherwise a draw from the env's ``np_random``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, SupportsInt

import numpy as np

from deciplane.errors import ConfigError, InvalidAction, MenuTooLarge
from deciplane.types import Menu

MENU_ORDERS = ("sorted", "shuffled")
"""``sorted``: alphabetical (the default of a directly built env); ``shuffled``: seeded."""

MENU_OVERFLOWS = ("error", "page")
"""What a menu larger than ``max_menu`` does: raise ``MenuTooLarge``, or show pages."""

PAGE_ACTION = "(show more actions)"
"""The last slot of every page of a paged menu: turns to the next page (no game action)."""

TEXT_TYPE_ERROR = ("action_mode='text' takes a command string, got {type}; use "
                   "action_mode='menu' for indices")
"""The message of every menu env's ``action_mode='text'`` for a non-string action."""

_MASK64 = (1 << 64) - 1


def as_menu_index(action: Any) -> int:
    """A menu env's action as a Python int: ints, integer NumPy scalars and 0-d arrays and
    integral floats pass; strings, bools and anything else raise ``InvalidAction`` (the
    range is checked by the env, which knows its menu)."""
    if type(action) is int:  # the common case first
        return action
    if isinstance(action, (bool, np.bool_)) or isinstance(action, (str, bytes)):
        raise InvalidAction(f"menu mode takes an integer index, got {action!r}; use "
                            "action_mode='text' to send commands")
    if isinstance(action, np.ndarray) and action.shape == ():
        action = action.item()
    if isinstance(action, (float, np.floating)) and float(action).is_integer():
        action = int(action)
    if not isinstance(action, (int, np.integer, SupportsInt)) or isinstance(action, float):
        raise InvalidAction(f"menu mode takes an integer index, got {action!r}")
    return int(action)


def check_menu_order(menu_order: str) -> str:
    if menu_order not in MENU_ORDERS:
        raise ConfigError(f"menu_order must be one of {', '.join(MENU_ORDERS)}, got "
                          f"{menu_order!r}")
    return menu_order


def check_menu_overflow(menu_overflow: str, max_menu: int) -> str:
    if menu_overflow not in MENU_OVERFLOWS:
        raise ConfigError(f"menu_overflow must be one of {', '.join(MENU_OVERFLOWS)}, got "
                          f"{menu_overflow!r}")
    if menu_overflow == "page" and int(max_menu) < 2:
        raise ConfigError(f"menu_overflow='page' needs max_menu >= 2 (one action and the "
                          f"page turn), got max_menu={max_menu}")
    return menu_overflow


def page_count(n_actions: int, size: int) -> int:
    """Pages needed to show ``n_actions`` in menus of ``size`` slots (1 when they fit; else
    ``size - 1`` actions per page plus the page turn)."""
    if n_actions <= size:
        return 1
    return -(-n_actions // (size - 1))


def menu_page(actions: Sequence[str], page: int, size: int) -> tuple[str, ...]:
    """Page ``page`` of ``actions`` as a menu of at most ``size`` slots: all of them when
    they fit, else actions ``page*(size-1) .. page*(size-1)+size-2`` followed by
    :data:`PAGE_ACTION`."""
    if len(actions) <= size:
        return tuple(actions)
    k = size - 1
    return tuple(actions[page * k:(page + 1) * k]) + (PAGE_ACTION,)


def index_on_page(position: int, page: int, pages: int, size: int) -> int:
    """The index on page ``page`` (of ``pages``, menus of ``size`` slots) of the action at
    ``position`` of the unpaged order, or -1 when it is on another page (then the page
    turn, the last entry of the shown menu, leads to it)."""
    if pages == 1:
        return position
    k = size - 1
    if position // k == page:
        return position % k
    return -1


def shuffle_key(action: str, seed: int) -> int:
    """The 64-bit sort key of ``action`` under menu seed ``seed`` (blake2b, stable across
    processes and Python versions, unlike ``hash``)."""
    h = hashlib.blake2b(action.encode("utf-8"), digest_size=8,
                        key=(int(seed) & _MASK64).to_bytes(8, "little"))
    return int.from_bytes(h.digest(), "little")


def shuffled_order(actions: Sequence[str], seed: int) -> list[int]:
    """The permutation that shows ``actions`` shuffled under ``seed``: a list of indices
    into ``actions``, ordered by ``(shuffle_key(action, seed), action)``. It depends only on
    the seed and the actions themselves (not on their input order)."""
    keys = [shuffle_key(a, seed) for a in actions]
    return sorted(range(len(actions)), key=lambda i: (keys[i], actions[i]))


def menu_seed_for(options: dict[str, Any] | None, seed: int | None,
                  np_random: np.random.Generator, order: str = "shuffled") -> int:
    """The menu seed of an episode: ``options["menu_seed"]``, else the reset ``seed``, else a
    draw from ``np_random`` (call after ``super().reset(seed=seed)``). With
    ``order="sorted"`` the seed is unused and nothing is drawn (0 without seed/option), so a
    sorted env's random stream, hence its game order, is what it was before menus were
    shuffled."""
    if options and options.get("menu_seed") is not None:
        value = options["menu_seed"]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ConfigError(f"options['menu_seed'] must be an integer, got {value!r}")
        return int(value)
    if seed is not None:
        return int(seed)
    if order == "sorted":
        return 0
    return int(np_random.integers(0, 2**63 - 1))


class MenuArranger:
    """Puts a state's legal actions in the env's menu order (a small per-episode cache of
    shuffle keys, so a shuffled menu costs one dict lookup per action after the first
    sight of each action)."""

    __slots__ = ("order", "seed", "_keys")

    def __init__(self, order: str = "sorted") -> None:
        self.order = check_menu_order(order)
        self.seed = 0
        self._keys: dict[str, int] = {}

    def start_episode(self, seed: int) -> None:
        if int(seed) != self.seed or len(self._keys) > 4096:
            self._keys = {}
        self.seed = int(seed)

    def arrange(self, actions: Sequence[str]) -> tuple[str, ...]:
        """``actions`` in this env's order: sorted, or sorted by their shuffle keys."""
        if self.order == "sorted":
            return tuple(sorted(actions))
        keys = self._keys
        seed = self.seed
        for a in actions:
            if a not in keys:
                keys[a] = shuffle_key(a, seed)
        return tuple(sorted(actions, key=lambda a: (keys[a], a)))


class MenuView:
    """What a menu env shows of a state's legal actions: the env's order
    (:class:`MenuArranger`), then the whole menu, a page of it (``menu_overflow="page"``)
    or ``MenuTooLarge`` (``"error"``); the menu index of a command, the page turn, the
    expert's index on the shown page, and the action mask. TextWorld, TextWorld-Express
    and ALFWorld share it, so the menu contract is one piece of code.

    ``show(actions, terminal=..., source=...)`` takes a new state's actions; ``menu`` is the
    :class:`~deciplane.types.Menu` shown now, ``actions`` every legal action in menu order.

    ``drop_penalised=True`` (action elimination): a command that lost points when played
    (:meth:`note_reward` with a negative reward) is left out of every later menu of the
    episode, unless that would leave the menu empty.
    """

    __slots__ = ("max_menu", "overflow", "arranger", "actions", "menu", "page", "pages",
                 "_lookup", "_masks", "drop_penalised", "dropped")

    def __init__(self, max_menu: int, order: str = "sorted", overflow: str = "error",
                 drop_penalised: bool = False) -> None:
        self.max_menu = int(max_menu)
        self.overflow = check_menu_overflow(overflow, self.max_menu)
        self.arranger = MenuArranger(order)
        self.actions: tuple[str, ...] = ()
        self.menu = Menu(())
        self.page, self.pages = 0, 1
        self._lookup: dict[str, int] | None = None
        self._masks: dict[int, np.ndarray] = {}
        self.drop_penalised = bool(drop_penalised)
        self.dropped: set[str] = set()

    def start_episode(self, menu_seed: int) -> None:
        self.arranger.start_episode(menu_seed)
        self.dropped = set()

    def note_reward(self, command: str, reward: float) -> None:
        """Record the reward ``command`` just got (before the next :meth:`show`): with
        ``drop_penalised`` a negative one removes it from the episode's later menus."""
        if self.drop_penalised and reward < 0:
            self.dropped.add(command)

    def show(self, actions: Sequence[str], *, terminal: bool = False, source: str = "the game",
             hint: str = "", cap: bool = True) -> None:
        """Show the legal ``actions`` of a new state (first page). A menu over ``max_menu``
        raises ``MenuTooLarge`` naming ``source`` and the options that fix it (``hint``
        adds env-specific ones), unless paging is on or the state is ``terminal``;
        ``cap=False`` shows every action (a text-mode env, where no index is chosen)."""
        if self.dropped:
            kept = [a for a in actions if a not in self.dropped]
            actions = kept or actions
        arranged = self.arranger.arrange(actions)
        self.actions, self.page, self.pages, self._lookup = arranged, 0, 1, None
        n = len(arranged)
        if n > self.max_menu and not terminal and cap:
            if self.overflow == "error":
                raise MenuTooLarge(
                    f"{source} offers {n} actions but max_menu={self.max_menu}; pass "
                    f"max_menu={n} or more (gym.make(..., max_menu=N)){hint} or "
                    "menu_overflow='page' (a second-level menu)")
            self.pages = page_count(n, self.max_menu)
            self.menu = Menu(menu_page(arranged, 0, self.max_menu))
        else:
            self.menu = Menu(arranged[: self.max_menu] if cap else arranged)

    def check_index(self, index: int) -> int:
        """``index`` if it lies in ``Discrete(max_menu)``, else ``InvalidAction``."""
        if not 0 <= index < self.max_menu:
            raise InvalidAction(
                f"action {index} is outside the action space Discrete({self.max_menu}); the "
                f"current menu has {len(self.menu)} actions, valid indices are "
                f"0..{len(self.menu) - 1} (see info['action_mask'])")
        return index

    def command_at(self, index: int) -> str | None:
        """The command at menu index ``index`` (``None``: a masked index, an invalid move);
        an index outside the action space raises ``InvalidAction``."""
        actions = self.menu.actions  # the tuple itself: Menu.__len__ is a Python call
        if self.check_index(index) >= len(actions):
            return None
        return actions[index]

    def turn_page(self, index: int) -> bool:
        """If ``index`` is the page turn of a paged menu, show the next page (cyclically)
        and return True; otherwise False (the index is a game action)."""
        if self.pages > 1 and index == len(self.menu.actions) - 1:
            self.page = (self.page + 1) % self.pages
            self.menu = Menu(menu_page(self.actions, self.page, self.max_menu))
            return True
        return False

    def position(self, command: str) -> int:
        """Position of ``command`` among all legal actions (-1: not legal)."""
        if self._lookup is None:
            self._lookup = {c: i for i, c in enumerate(self.actions)}
        return self._lookup.get(command, -1)

    def expert_choice(self, command: str) -> tuple[int, str] | None:
        """The menu index the expert picks to play ``command`` now and the command it shows
        there: its own index on this page, else the page turn; ``None`` if not legal."""
        pos = self.position(command)
        if pos < 0:
            return None
        index = index_on_page(pos, self.page, self.pages, self.max_menu)
        if index >= 0:
            return index, command
        turn = len(self.menu) - 1  # on another page: the expert turns the page
        return turn, self.menu.actions[turn]

    def mask(self) -> np.ndarray:
        """``Menu.mask`` of the shown menu (a fresh copy of an array cached per size)."""
        n = len(self.menu.actions)
        m = self._masks.get(n)
        if m is None:
            m = self._masks[n] = self.menu.mask(self.max_menu)
        return m.copy()


__all__ = ["MENU_ORDERS", "MENU_OVERFLOWS", "PAGE_ACTION", "TEXT_TYPE_ERROR", "as_menu_index",
           "check_menu_order", "check_menu_overflow", "page_count", "menu_page",
           "index_on_page", "shuffle_key", "shuffled_order", "menu_seed_for", "MenuArranger",
           "MenuView"]
