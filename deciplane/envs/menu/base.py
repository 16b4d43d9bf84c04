""":class:`MenuTextEnv`, the base of ``deciplane/TextWorld-v0``,
``deciplane/TextWorldExpress-v0`` and ``deciplane/ALFWorld-v0``: one copy of the argument
checks, of the rule that picks a reset's game, of reading an action (a menu index or a text
command, both read into a :class:`ParsedCommand`) and of the end of a step. A game env
supplies hooks only: load a game, send it a command, observe its state, build the info."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from deciplane.envs.menu.menu import (TEXT_TYPE_ERROR, MenuView, as_menu_index,
                                      check_menu_order, menu_seed_for)
from deciplane.envs.menu.text import (COMMAND_CHARSET, MAX_COMMAND_CHARS, MAX_OBS_CHARS,
                                      MAX_RAW_COMMAND_CHARS, OBS_CHARSET,
                                      check_observation_view, normalize_command, state_key)
from deciplane.envs.spaces import ObservationText, check_text_action
from deciplane.errors import ConfigError
from deciplane.types import Menu

ACTION_MODES = ("menu", "text")
RENDER_MODES = (None, "ansi", "human")

REMOVED_ARGUMENTS = {
    "max_episode_steps": "the step limit is Gymnasium's TimeLimit alone: "
                         "gym.make(env_id, max_episode_steps=N), or "
                         "gymnasium.wrappers.TimeLimit(env, N) around an env built directly",
}
"""Constructor arguments the menu envs no longer take -> what to use instead."""


def check_split(split: str, splits: Collection[str]) -> str:
    if split not in splits:
        raise ConfigError(f"split must be one of {', '.join(splits)}, got {split!r}")
    return split


def check_menu_args(max_menu: int, action_mode: str, render_mode: str | None) -> None:
    """The checks every menu env runs on its shared arguments (before any heavy work)."""
    if action_mode not in ACTION_MODES:
        raise ConfigError(f"action_mode must be 'menu' or 'text', got {action_mode!r}")
    if int(max_menu) < 1:
        raise ConfigError(f"max_menu must be >= 1, got {max_menu}")
    if render_mode not in RENDER_MODES:
        raise ConfigError(f"render_mode must be None, 'ansi' or 'human', got {render_mode!r}")


@dataclass(slots=True)
class ParsedCommand:
    """What one action asks of the game: the result of reading a menu index or a text
    command, the same for every menu env."""

    command: str | None
    """The command to send (the menu's own spelling when the menu has it)."""
    send: bool
    """Whether the game sees it (not for a masked index, a refused command, a page turn)."""
    invalid: bool
    """An invalid move: penalised and counted. TextWorld and ALFWorld still send a text
    command the menu does not list (their parsers answer it)."""
    rejected: str | None = None
    """Why a text command was refused unsent (``info["action_rejected"]``)."""
    translated: str | None = None
    """``"asked -> sent"`` when the command was rewritten (``info["translated_command"]``)."""


class MenuTextEnv(gym.Env[str, Any]):
    """Base of the menu text games: spaces per ``action_mode``, ``reset``, ``step``,
    ``render``, ``menu``.

    **Which game a reset plays** (one rule for every menu env; ``n`` = ``num_tasks``):

    * ``options={"game": g}`` (or ``{"task": g}``) plays game ``g``: an index ``0..n-1``
      (a Python or NumPy integer) or a name (``info["game_name"]``; TextWorld also takes
      the game's path, ALFWorld its folder). A bool names no game and raises
      ``ConfigError``, as does an index out of range or an unknown name.
    * Otherwise the games come in a shuffled order that covers the suite before repeating:
      ``reset(seed=s)`` draws a new order from the seeded ``np_random`` and plays its first
      game (the same seed plays the same game); a reset without a seed plays the next game
      of the current order.
    * A reset with a seed starts a new order whether or not it names a game.

    ALFWorld used to play game ``s % n`` on ``reset(seed=s)``; under this rule it plays
    the first game of the order seeded by ``s`` like the other two. ``s % n`` is what
    ``options={"game": s % n}`` plays, and what deciplane's trainers and evaluator ask
    for explicitly (``options={"task": seed % num_tasks}``), so their episodes are
    unchanged.

    **The step limit** is Gymnasium's ``TimeLimit`` (``gym.make(..., max_episode_steps=N)``;
    the registered ids set a default); the env counts steps only for ``info["moves"]``. The
    env itself ends an episode when the game is won or lost (``terminated``) or when a
    non-terminal state offers no action (``truncated``, ``info["empty_menu"]``). ``step``
    after that, or before the first ``reset``, raises ``gymnasium.error.ResetNeeded``.

    **Hooks** a game env implements: ``num_tasks``; ``_load(index)`` (start game ``index``,
    return its first state), ``_send(command)`` (play a command, observe the new state,
    return the game's reward), ``_observe(state, command)`` (set ``self._obs`` and show the
    state's menu in ``self._view``), ``_game_over()``, ``_info(invalid)``, and for text
    mode ``_parse_command(command)`` (a normalised command -> :class:`ParsedCommand`);
    optionally ``_find_game(name)`` and ``_game_hint()`` (game names), and
    ``_anchor_state()`` (location and inventory: ``info["state_key"]``, :meth:`state_key`).
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}
    empty_menu_ends_text_episode = True
    """Whether a state with no listed action truncates a text-mode episode too (TextWorld:
    no, its parser takes commands the menu does not list)."""
    _view: MenuView
    _obs: str

    def __new__(cls, *args: Any, **kwargs: Any) -> MenuTextEnv:
        # a removed argument fails naming its replacement, not as an unknown keyword
        for name, instead in REMOVED_ARGUMENTS.items():
            if name in kwargs:
                raise ConfigError(f"{cls.__name__} no longer takes {name}=: {instead}")
        return super().__new__(cls)

    def __init__(self, *, max_menu: int, action_mode: str, render_mode: str | None,
                 menu_order: str, menu_overflow: str, observation: str, expert: bool,
                 invalid_action_penalty: float, task_in_observation: bool,
                 drop_penalised: bool = False) -> None:
        check_menu_args(max_menu, action_mode, render_mode)
        self.observation = check_observation_view(observation)
        self._view = MenuView(max_menu, check_menu_order(menu_order), menu_overflow,
                              drop_penalised)
        self.max_menu = int(max_menu)
        self.action_mode = action_mode
        self.render_mode = render_mode
        self.menu_order = menu_order
        self.menu_overflow = menu_overflow
        self.drop_penalised = bool(drop_penalised)
        self.expert = bool(expert)
        self.invalid_action_penalty = float(invalid_action_penalty)
        self.task_in_observation = bool(task_in_observation)
        self._init_spaces()
        self._order: np.ndarray | None = None  # the shuffled game order and where we are in it
        self._pos = 0
        self._game_index = -1
        self._menu_seed = 0
        self._obs = ""
        self._steps = 0
        self._invalid = 0
        self._done = True

    def _init_spaces(self) -> None:
        """Text observations; ``Discrete(max_menu)`` in menu mode, command strings in text
        mode."""
        self.observation_space = ObservationText(max_length=MAX_OBS_CHARS, min_length=0,
                                                 charset=OBS_CHARSET)
        if self.action_mode == "menu":
            self.action_space: spaces.Space = spaces.Discrete(self.max_menu)
        else:
            self.action_space = spaces.Text(max_length=MAX_COMMAND_CHARS, min_length=0,
                                            charset=COMMAND_CHARSET)

    # ---- gymnasium API ------------------------------------------------------------------

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        index = self._choose_game(seed, options or {})
        self._done = True  # until the game has started: a failed load leaves nothing to step
        self._game_index = index
        self._menu_seed = menu_seed_for(options, seed, self.np_random, self.menu_order)
        self._view.start_episode(self._menu_seed)
        state = self._load(index)
        self._steps, self._invalid, self._done = 0, 0, False
        self._observe(state)
        return self._obs, self._with_state_key(self._info(invalid=False))

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done:
            raise ResetNeeded("step() before reset(); call reset() first" if self._game_index < 0
                              else "step() after the episode ended; call reset() first")
        parsed = self._parse_index(action) if self.action_mode == "menu" \
            else self._parse_text(action)
        self._steps += 1
        reward = self._send(parsed.command) if parsed.send else 0.0
        if parsed.invalid:
            self._invalid += 1
            reward += self.invalid_action_penalty
        return self._end_step(reward, parsed)

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._obs
        if self.render_mode == "human":
            print(self._obs)
        return None

    @property
    def menu(self) -> Menu:
        """The menu shown now (the current page when the menu is paged)."""
        return self._view.menu

    @property
    def num_tasks(self) -> int:
        """Number of games of the split (``reset(options={"game": i})`` plays game ``i``)."""
        raise NotImplementedError

    # ---- which game ---------------------------------------------------------------------

    def _choose_game(self, seed: int | None, options: dict[str, Any]) -> int:
        """The game this reset plays (the rule is in the class docstring)."""
        if seed is not None or self._order is None:
            self._order, self._pos = self.np_random.permutation(self.num_tasks), 0
        index = self._requested_game(options)
        if index is not None:
            return index
        if self._pos >= len(self._order):
            self._order, self._pos = self.np_random.permutation(self.num_tasks), 0
        index = int(self._order[self._pos])
        self._pos += 1
        return index

    def _requested_game(self, options: dict[str, Any]) -> int | None:
        """The game ``options`` ask for, or None."""
        game = options.get("game", options.get("task"))
        return None if game is None else self._game_index_of(game)

    def _game_index_of(self, game: Any) -> int:
        n = self.num_tasks
        if isinstance(game, (bool, np.bool_)):
            raise ConfigError(f"options['game']={game!r} names no game; pass an index "
                              f"0..{n - 1} or a game name{self._game_hint()}")
        if isinstance(game, (int, np.integer)):
            if not 0 <= int(game) < n:
                raise ConfigError(f"options['game']={game} but the suite has {n} games: pass "
                                  f"an index 0..{n - 1}{self._game_hint()}")
            return int(game)
        index = self._find_game(str(game))
        if index < 0:
            raise ConfigError(f"options['game']={game!r} is not in the suite; pass an index "
                              f"0..{n - 1} or a game name{self._game_hint()}")
        return index

    def _find_game(self, name: str) -> int:
        """Index of the game called ``name``, -1 if none."""
        return -1

    def _game_hint(self) -> str:
        """Examples of game names for an error message (``" (one of: ...)"``)."""
        return ""

    # ---- reading an action --------------------------------------------------------------

    def _parse_index(self, action: Any) -> ParsedCommand:
        """A menu index: out of the action space raises ``InvalidAction``; a masked index
        is an invalid move; the page turn of a paged menu shows the next page unsent."""
        index = as_menu_index(action)
        command = self._view.command_at(index)
        if command is None:
            return ParsedCommand(None, send=False, invalid=True)
        return ParsedCommand(command, send=not self._view.turn_page(index), invalid=False)

    def _parse_text(self, action: Any) -> ParsedCommand:
        """A text command: refused unread with control characters, lone surrogates or over
        ``MAX_RAW_COMMAND_CHARS`` characters (a wrong type raises ``InvalidAction``); else
        normalised and read by the env's :meth:`_parse_command`."""
        checked = check_text_action(action, MAX_RAW_COMMAND_CHARS, what="command",
                                    type_error=TEXT_TYPE_ERROR)
        if not checked.ok:
            return ParsedCommand("", send=False, invalid=True, rejected=checked.problem)
        return self._parse_command(normalize_command(checked.text))

    def _parse_command(self, command: str) -> ParsedCommand:
        raise NotImplementedError

    # ---- the end of a step --------------------------------------------------------------

    def _end_step(self, reward: float, parsed: ParsedCommand
                  ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """The step's return value. A non-terminal state with no legal action truncates
        the episode (``info["empty_menu"]``), so that a policy never waits on a menu with
        nothing to pick."""
        terminated = self._game_over()
        truncated = (not terminated and not self._view.menu.actions
                     and (self.action_mode == "menu" or self.empty_menu_ends_text_episode))
        self._done = terminated or truncated
        info = self._with_state_key(self._info(invalid=parsed.invalid))
        if parsed.rejected is not None:
            info["action_rejected"] = parsed.rejected
        if truncated:
            info["empty_menu"] = True
        if parsed.translated is not None:
            info["translated_command"] = parsed.translated
        return self._obs, float(reward), terminated, truncated, info

    def state_key(self) -> str | None:
        """The current state's key (``info["state_key"]``): equal for the same game state
        however it was reached — location, inventory (a set) and the legal actions (a set,
        so not the shuffled menu order); not the observation text (it carries the score and
        the last reply). ``None`` where the env cannot observe its state
        (:meth:`_anchor_state`). GiGPO's step groups (``advantage: gigpo``) are built from
        it."""
        parts = self._anchor_state()
        if parts is None:
            return None
        location, inventory = parts
        return state_key(self._game_index, location, inventory, self._view.actions)

    def _with_state_key(self, info: dict[str, Any]) -> dict[str, Any]:
        key = self.state_key()
        if key is not None:
            info["state_key"] = key
        return info

    # ---- hooks ----------------------------------------------------------------------------

    def _load(self, index: int) -> Any:
        """Start game ``index``; return its first state (given to :meth:`_observe`)."""
        raise NotImplementedError

    def _send(self, command: str) -> float:
        """Play ``command``, observe the new state; return the game's reward."""
        raise NotImplementedError

    def _observe(self, state: Any, command: str | None = None) -> None:
        """Set ``self._obs`` and show the state's menu; ``command``: the one that led here
        (None at reset)."""
        raise NotImplementedError

    def _game_over(self) -> bool:
        """Whether the game is won or lost (``terminated``)."""
        raise NotImplementedError

    def _info(self, invalid: bool) -> dict[str, Any]:
        raise NotImplementedError

    def _anchor_state(self) -> tuple[str, list[str]] | None:
        """``(location text, inventory items)`` of the current state, for
        :meth:`state_key`; ``None``: this env cannot tell (no ``info["state_key"]``)."""
        return None


__all__ = ["MenuTextEnv", "ParsedCommand", "REMOVED_ARGUMENTS", "ACTION_MODES",
           "RENDER_MODES", "check_menu_args", "check_split"]
