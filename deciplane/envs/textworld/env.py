"""``deciplane/TextWorld-v0``: TextWorld games with their legal actions as a menu."""

from __future__ import annotations

import os
import re
import sys
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from deciplane.envs.menu.base import MenuTextEnv, ParsedCommand, check_split
# normalize_command stays importable from here (0.1's textworld_env defined it)
from deciplane.envs.menu.text import (MAX_COMMAND_CHARS, clean_observation,  # noqa: F401
                                      inventory_items, normalize_command, state_view)
from deciplane.envs.splits import TaskList
from deciplane.envs.textworld.games import (EMBEDDED, SPLITS, GameSuite, available_presets,
                                            make_game_suite, suite_from_paths)
from deciplane.errors import ConfigError, GameError, UnknownPreset

# Interpreter meta-commands that would desynchronise TextWorld's state tracking (or end
# the story); in text mode they are refused as invalid and never sent to the game.
META_COMMANDS = frozenset({"quit", "q", "restart", "restore", "save", "undo", "script",
                           "unscript", "transcript", "noscript"})
_BANNER_CHARS = frozenset(" _|\\/$<>")
# What the interpreter (jericho's frotz) or the compiled story prints when the story file
# fails at run time: frotz's own halt, Inform 6's veneer and Inform 7's run-time problems.
# A game in that state still gets menus from TextWorld's own state tracking, so without
# this check it would be "played" to truncation with zero reward.
_RUNTIME_ERROR = re.compile(r"Emulator halted due to runtime error|\[\*\* Programming error"
                            r"|\*\*\* Run-time problem")
# Literal parts of _RUNTIME_ERROR: a substring test per step (C speed) spares the regex scan
# of every healthy reply, ~10 us a step on TextWorld's replies
_RUNTIME_MARKS = ("Emulator halted", "Programming error", "Run-time problem")
_PROBE_COMMAND = "look"
_GAME_CACHE_SIZE = 64  # started games kept per env (~2 MB each; a load costs 50-150 ms)


class TextWorldEnv(MenuTextEnv):
    """TextWorld text games (``tw-make`` presets or your own ``.z8`` files) as menus.

    ## Description

    Each episode plays one game of a suite: the games of one split (``train``, ``valid``,
    ``test``; disjoint) of a TextWorld preset, generated once offline with ``tw-make`` and
    cached (see :func:`deciplane.envs.make_game_suite`), or a list of ``.z8`` files.
    ``reset(seed=s)`` picks the game deterministically from ``s`` (the same seed gives the
    same game, which is what group baselines need); ``reset(options={"game": i})`` (or
    ``{"task": i}``) plays game ``i`` of the suite (an index, a name or a path). Without
    options, games come in a shuffled order that covers the whole suite before repeating
    (the rule of every menu env: :class:`deciplane.envs.menu.base.MenuTextEnv`).

    ## Observation

    The game's text (``spaces.Text``), as TextWorld prints it (the ASCII-art banner at
    the start of a game is dropped unless ``strip_banner=False``).

    ## Action

    ``action_mode="menu"`` (default): ``Discrete(max_menu)``, an index into
    ``info["menu"]`` — a :class:`deciplane.Menu` of the admissible commands, without
    TextWorld escape commands (``\\...``), sorted (``menu_order="sorted"``, default) or in
    a seeded shuffled order (``menu_order="shuffled"``, see :mod:`deciplane.envs.menu.menu`: the
    menu seed is ``reset(options={"menu_seed": s})``, else the reset seed, else random; the
    expert index follows the order). ``info["action_mask"]`` marks the
    valid indices. An index outside ``Discrete(max_menu)`` raises
    :class:`deciplane.errors.InvalidAction`; a masked index inside it is an *invalid move*:
    the game does not change, ``info["invalid_action"]`` is True, the observation is
    repeated and the reward is ``invalid_action_penalty``.

    ``action_mode="text"``: a free command string. A command that is not in the menu
    (compared case- and whitespace-insensitively) is counted as invalid but still sent to
    the game, which answers it. These are invalid and never sent (the game state does not
    change, the observation is repeated, ``info["action_rejected"]`` says why): empty
    commands, commands over 192 bytes once whitespace is collapsed (or over 4,096
    characters raw), control characters other than tab/newline/carriage return (a NUL
    crashes the interpreter), lone surrogates, and interpreter
    meta-commands (``quit``, ``restart``, ``undo``, ``save``...). A value that is not
    ``str`` (or UTF-8 ``bytes``) raises :class:`deciplane.errors.InvalidAction`.

    ## Reward

    The change in the game's score (TextWorld reports a cumulative score), plus
    ``invalid_action_penalty`` on an invalid action. Without a penalty the rewards of an
    episode sum to its final score.

    ## Episode end

    ``terminated`` when the game is won or lost; ``truncated`` by Gymnasium's
    ``TimeLimit`` after ``max_episode_steps`` steps (invalid ones included; ``gym.make``
    applies it, 100 unless ``gym.make(..., max_episode_steps=N)``; an env constructed
    directly has no step limit unless wrapped in ``gymnasium.wrappers.TimeLimit``), or by
    the env if a non-terminal state offers no action at all (``info["empty_menu"] = True``;
    menu mode only). ``step`` after the end raises ``gymnasium.error.ResetNeeded``.

    ## Info

    ``menu``, ``action_mask``, ``won``, ``lost``, ``score``, ``max_score``, ``moves``
    (steps taken), ``invalid_action`` (this step), ``invalid_actions`` (this episode),
    ``game`` (path), ``game_name``, ``game_index``, ``split_fingerprint``, ``menu_seed``,
    ``menu_page``/``menu_pages`` (0 and 1 unless the menu is paged),
    ``task`` (the game's objective text, "" when the game has none) and, with
    ``expert=True``, ``expert_action`` (menu index of the first command of TextWorld's
    winning policy; absent when there is none) and ``expert_command``.

    ## Arguments

    * ``games``: a preset (``tw-simple``, ``tw-coin_collector``, ``tw-treasure_hunter``,
      ``tw-cooking``, ``custom``), ``"embedded"`` (the built-in mix, the default), a list
      of ``.z8`` paths (or one path, or a folder of them), or a
      :class:`~deciplane.envs.textworld.games.GameSuite`.
    * ``split``: ``train`` | ``valid`` | ``test`` (presets only).
    * ``n_games``: games per split for a preset (default 10); ``game_options``: tw-make
      options of the preset (e.g. ``{"level": 5}``); ``suite_seed``: another family of games.
    * ``max_menu``: size of the action space; a state with more actions raises
      :class:`~deciplane.errors.MenuTooLarge` (then raise ``max_menu``), or, with
      ``menu_overflow="page"``, is shown as a second-level menu: pages of ``max_menu - 1``
      actions whose last entry ``"(show more actions)"`` turns the page (a step with reward
      0 that does not act in the game; ``info["menu_page"]``/``info["menu_pages"]``).
    * ``menu_order``: ``"sorted"`` (default) or ``"shuffled"`` (see Action).
    * ``task_in_observation`` (False): put the objective text and a blank line before
      every observation, so that the goal stays in every prompt built from it.
    * ``observation``: ``"feedback"`` (default: the game's reply) or ``"state"``: the
      objective, ``Location:`` (TextWorld's ``description``, the room as ``look`` prints
      it), the inventory, ``Last action:`` and ``Last reply:`` the game's reply
      (:func:`deciplane.envs.menu.text.state_view`; TextWorld computes the first two
      without spending a move).
    * ``expert`` (False), ``action_mode`` (``"menu"``),
      ``invalid_action_penalty`` (0.0), ``strip_banner`` (True), ``render_mode``
      (``"ansi"`` or ``"human"``), ``progress`` (a bar while games are generated;
      default: when stderr is a terminal).
    * ``drop_penalised`` (False): action elimination — a command that lost points leaves
      the menu for the rest of the episode (unless nothing else is left).
    """

    empty_menu_ends_text_episode = False  # the parser takes commands the menu does not list

    def __init__(self, games: str | Sequence[str | os.PathLike] | GameSuite = EMBEDDED,
                 split: str = "train", n_games: int | None = None,
                 game_options: dict[str, Any] | None = None, suite_seed: int = 0,
                 max_menu: int = 64, expert: bool = False,
                 action_mode: str = "menu", invalid_action_penalty: float = 0.0,
                 strip_banner: bool = True, render_mode: str | None = None,
                 progress: bool | None = None, menu_order: str = "sorted",
                 task_in_observation: bool = False, menu_overflow: str = "error",
                 observation: str = "feedback", drop_penalised: bool = False) -> None:
        self.split = check_split(split, SPLITS)
        super().__init__(max_menu=max_menu, action_mode=action_mode, render_mode=render_mode,
                         menu_order=menu_order, menu_overflow=menu_overflow,
                         observation=observation, expert=expert,
                         invalid_action_penalty=invalid_action_penalty,
                         task_in_observation=task_in_observation,
                         drop_penalised=drop_penalised)
        if progress is None:  # a bar while games are generated, when someone can see it
            progress = sys.stderr.isatty()
        self.suite = _resolve_suite(games, split, n_games, game_options or {}, suite_seed,
                                    progress)
        self._names = self.suite.names
        self.strip_banner = bool(strip_banner)
        self._task = ""

        import textworld

        self._request = textworld.EnvInfos(admissible_commands=True, won=True, lost=True,
                                           score=True, max_score=True, objective=True,
                                           policy_commands=self.expert,
                                           description=self.observation == "state",
                                           inventory=self.observation == "state")
        self._games: OrderedDict[Path, Any] = OrderedDict()  # path -> loaded textworld env
        self._env: Any = None
        self._state: Any = None
        self._score = 0

    def close(self) -> None:
        for env in self._games.values():
            env.close()
        self._games.clear()
        self._env = None
        super().close()

    # ---- properties for evaluators ------------------------------------------------------

    @property
    def num_tasks(self) -> int:
        """Number of games in the suite (``reset(options={"game": i})`` plays game ``i``)."""
        return len(self.suite)

    @property
    def split_fingerprint(self) -> str:
        return self.suite.fingerprint

    # ---- what a trainer asks before building envs (deciplane.envs.splits) ----------------

    @classmethod
    def split_kwargs(cls, split: str | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """``split`` picks a preset's games; a list of game files has no splits."""
        return {} if isinstance(kwargs.get("games"), (list, tuple)) else {"split": split}

    @classmethod
    def task_list(cls, split: str, kwargs: Mapping[str, Any]) -> TaskList:
        """The games of ``split`` for an env built with ``kwargs``, generated (once) now, so
        that every sub-env of a rollout finds them: a preset's suite and its fingerprint,
        or a list of game files (fingerprint ``"user-games"``)."""
        games = kwargs.get("games", EMBEDDED)
        if isinstance(games, (list, tuple)):
            return TaskList(len(games), "user-games")
        suite = make_game_suite(games, split, kwargs.get("n_games"),
                                seed=kwargs.get("suite_seed", 0),
                                **dict(kwargs.get("game_options") or {}))
        return TaskList(len(suite.paths), suite.fingerprint)

    # ---- MenuTextEnv hooks ----------------------------------------------------------------

    def _find_game(self, name: str) -> int:
        for i, (game, path) in enumerate(zip(self._names, self.suite.paths)):
            if name in (game, str(path)):
                return i
        return -1

    def _game_hint(self) -> str:
        return f" (one of: {', '.join(self._names[:20])})"

    def _load(self, index: int) -> Any:
        self._env = self._started(self.suite.paths[index])
        state = self._env.reset()
        self._check_runtime(state.feedback)
        self._task = clean_observation(str(state["objective"] or "").strip())
        self._score = 0
        return state

    def _send(self, command: str) -> float:
        state, _, _ = self._env.step(command)
        self._check_runtime(state.feedback, command)
        score = int(state["score"] or 0)
        reward = float(score - self._score)
        self._score = score
        self._view.note_reward(command, reward)
        self._observe(state, command)
        return reward

    def _game_over(self) -> bool:
        return bool(self._state["won"]) or bool(self._state["lost"])

    def _observe(self, state: Any, command: str | None = None) -> None:
        self._state = state
        obs = state.feedback
        if command is None and self.strip_banner:
            obs = strip_banner(obs)
        if self.observation == "state":   # TextWorld runs look/inventory without a move
            obs = state_view(self._task, state["description"] or "", state["inventory"] or "",
                             obs, command, score=state.get("score"))
        elif self.task_in_observation and self._task:
            obs = f"{self._task}\n\n{obs}"
        self._obs = clean_observation(obs)
        self._view.show([c for c in state["admissible_commands"] or () if c[:1] != "\\"],
                        terminal=bool(state["won"] or state["lost"]),
                        source=self._names[self._game_index])

    def _anchor_state(self) -> tuple[str, list[str]] | None:
        """The room's description and the inventory: TextWorld computes them only with
        ``observation="state"`` (an extra look and inventory per step), so in the
        ``feedback`` view there is no ``info["state_key"]``."""
        if self.observation != "state":
            return None
        return (str(self._state["description"] or ""),
                inventory_items(str(self._state["inventory"] or "")))

    def _parse_command(self, command: str) -> ParsedCommand:
        """Refused unsent: empty, too long for the Z-machine, interpreter meta-commands;
        sent otherwise, invalid when the menu does not list it."""
        if not command:
            return ParsedCommand(command, send=False, invalid=True, rejected="empty command")
        if len(command.encode()) > MAX_COMMAND_CHARS:
            return ParsedCommand(command, send=False, invalid=True,
                                 rejected=f"{len(command.encode())} bytes; the game reads "
                                          f"at most {MAX_COMMAND_CHARS}")
        if command.split()[0] in META_COMMANDS or command[0] == "\\":
            return ParsedCommand(command, send=False, invalid=True,
                                 rejected="interpreter meta-command")
        return ParsedCommand(command, send=True, invalid=self._view.position(command) < 0)

    # ---- internals -----------------------------------------------------------------------

    def _started(self, path: Path) -> Any:
        """A started TextWorld env for ``path`` (kept in a small LRU cache)."""
        env = self._games.get(path)
        if env is not None:
            self._games.move_to_end(path)
            return env
        import textworld

        try:
            env = textworld.start(str(path), self._request)
        except Exception as e:  # noqa: BLE001 - anything TextWorld/jericho raises on load
            raise GameError(f"TextWorld could not load {str(path)!r} ({type(e).__name__}: "
                            f"{e}); regenerate the game with tw-make or remove it from "
                            "games=[...]") from e
        try:  # a story that fails in the emulator is never played (see _RUNTIME_ERROR)
            for feedback in (env.reset().feedback, env.step(_PROBE_COMMAND)[0].feedback):
                _raise_on_runtime_error(path, feedback, "when loaded")
        except GameError:
            env.close()
            raise
        self._games[path] = env
        if len(self._games) > _GAME_CACHE_SIZE:
            _, old = self._games.popitem(last=False)
            old.close()
        return env

    def _check_runtime(self, feedback: str, command: str | None = None) -> None:
        """Raise (and drop the game) if ``feedback``, the reply to ``command`` (None: the
        reset), shows a run-time error; the message is only built then."""
        if runtime_error_in(feedback) is None:
            return
        when = "on reset" if command is None else f"after the command {command!r}"
        try:
            _raise_on_runtime_error(self.suite.paths[self._game_index], feedback, when)
        except GameError:
            self._done = True
            env = self._games.pop(self.suite.paths[self._game_index], None)
            if env is not None:
                env.close()
            self._env = None
            raise

    def _info(self, invalid: bool) -> dict[str, Any]:
        state = self._state
        view = self._view
        info = {
            "menu": view.menu,
            "action_mask": view.mask(),
            "won": bool(state["won"]),
            "lost": bool(state["lost"]),
            "score": self._score,
            "max_score": int(state["max_score"] or 0),
            "moves": self._steps,
            "invalid_action": invalid,
            "invalid_actions": self._invalid,
            "game": str(self.suite.paths[self._game_index]),
            "game_name": self._names[self._game_index],
            "game_index": self._game_index,
            "split_fingerprint": self.suite.fingerprint,
            "menu_seed": self._menu_seed,
            "menu_page": view.page,
            "menu_pages": view.pages,
            "task": self._task,
        }
        if self.expert:
            policy = state["policy_commands"] or ()
            if policy:
                info["expert_command"] = policy[0]
                choice = view.expert_choice(policy[0])
                if choice is not None:
                    info["expert_action"], info["expert_command"] = choice
        return info


# ---- small pure helpers -------------------------------------------------------------------


def runtime_error_in(feedback: str | None) -> str | None:
    """The interpreter/story run-time error message in ``feedback``, or None."""
    if not feedback or not any(mark in feedback for mark in _RUNTIME_MARKS):
        return None
    m = _RUNTIME_ERROR.search(feedback)
    if m is None:
        return None
    end = feedback.find("\n", m.end())
    return feedback[m.start(): end if end >= 0 else m.end() + 120].strip()[:200]


def _raise_on_runtime_error(path: Path, feedback: str | None, when: str) -> None:
    problem = runtime_error_in(feedback)
    if problem is not None:
        raise GameError(
            f"the game {str(path)!r} failed in the emulator {when} ({problem!r}): the story "
            "file is corrupt or not a working Z-machine game. Regenerate it (a preset: delete "
            "the file and its manifest folder, it is generated again; your own game: rebuild "
            "it with tw-make) or re-download it; it is not played, since every step would "
            "score 0 and look like a weak agent")


def strip_banner(text: str) -> str:
    """Drop TextWorld's ASCII-art title (leading lines made only of ``_|\\/$<>``)."""
    lines = text.split("\n")
    k = 0
    while k < len(lines) and set(lines[k]) <= _BANNER_CHARS:
        k += 1
    return "\n".join(lines[k:]) if k else text


def _resolve_suite(games: Any, split: str, n_games: int | None, options: dict[str, Any],
                   suite_seed: int, progress: bool) -> GameSuite:
    if isinstance(games, GameSuite):
        return games
    if isinstance(games, (str, os.PathLike)) and Path(games).is_dir():
        paths = sorted(Path(games).glob("*.z8"))
        if not paths:
            raise GameError(f"folder {str(games)!r} holds no .z8 games; generate some with "
                            "tw-make or pass a preset name")
        return suite_from_paths(paths)
    if isinstance(games, (str, os.PathLike)) and not str(games).endswith(".z8"):
        name = str(games)
        if name not in available_presets():
            raise UnknownPreset(f"games={name!r} is neither a preset nor a .z8 file; presets: "
                              f"{', '.join(available_presets())}; or pass a list of .z8 paths")
        if name == EMBEDDED:
            if n_games is not None or options:
                raise ConfigError("games='embedded' has fixed sizes; pass a preset "
                                  "(e.g. games='tw-simple') to set n_games/game_options")
            return make_game_suite(EMBEDDED, split, seed=suite_seed, progress=progress)
        return make_game_suite(name, split, n_games, seed=suite_seed, progress=progress,
                               **options)
    paths = [games] if isinstance(games, (str, os.PathLike)) else list(games)
    return suite_from_paths(paths)
