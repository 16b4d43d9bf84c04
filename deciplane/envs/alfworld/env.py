"""``deciplane/ALFWorld-v0``: ALFWorld's household text games with their legal actions as
a menu — the official games when ``$ALFWORLD_DATA`` has them, generated ones otherwise."""

from __future__ import annotations

import json
import os
import sys
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deciplane.envs.alfworld import official
from deciplane.envs.alfworld.expert import DEFAULT_TIMEOUT_S, PlanFollower
from deciplane.envs.alfworld.generator import (ALIASES, load_game, make_alfworld_suite,
                                               new_pddl_env, resolve_split)
from deciplane.envs.alfworld.pddl import (COMMAND_STYLES, TASK_TYPES, GameData,
                                          restyle_grammar, translate_command, with_goal)
from deciplane.envs.menu.base import MenuTextEnv, ParsedCommand
from deciplane.envs.menu.text import MAX_COMMAND_CHARS, clean_observation, state_view
from deciplane.errors import ConfigError, GameError

SOURCES = ("auto", "official", "generated")
DEFAULT_GENERATED_GAMES = {"train": 120, "valid_seen": 60, "valid_unseen": 60}
_WELCOME = "-= Welcome to TextWorld, ALFRED! =-"
_GAME_CACHE_SIZE = 16  # loaded games kept per env (a load costs ~0.3 s)


@dataclass(frozen=True)
class ALFWorldSuite:
    """The games of one split: their folders, names, task types, and the manifest."""

    source: str
    split: str
    folders: tuple[Path, ...]
    names: tuple[str, ...]
    task_types: tuple[str, ...]
    manifest: dict[str, Any]
    fingerprint: str

    def __len__(self) -> int:
        return len(self.folders)


def make_suite(source: str = "auto", split: str = "train", n_games: int | None = None,
               data_dir: str | os.PathLike | None = None, seed: int = 0,
               task_types: Sequence[str] | None = None, verify: bool | None = None,
               progress: bool = False) -> ALFWorldSuite:
    """The games of ``split`` from ``source`` (see :class:`ALFWorldEnv`)."""
    if source not in SOURCES:
        raise ConfigError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    split = resolve_split(split)
    if source == "auto":
        source = "official" if official.data_root(data_dir) is not None else "generated"
    if source == "official":
        if verify is None:
            verify = split != "train"  # the 3553 training games take ~20 min to load once
        manifest = official.official_manifest(split, data_dir, verify=verify, progress=progress)
        root = Path(manifest["root"])
        games = manifest["games"]
        if n_games is not None:
            games = games[: int(n_games)]
    else:
        n = DEFAULT_GENERATED_GAMES[split] if n_games is None else int(n_games)
        manifest = make_alfworld_suite(split, n, seed=seed, progress=progress)
        root = Path(manifest["root"])
        games = manifest["games"]
    if task_types is not None:
        unknown = sorted(set(task_types) - set(TASK_TYPES))
        if unknown:
            raise ConfigError(f"unknown task types {unknown}; known: {', '.join(TASK_TYPES)}")
        games = [g for g in games if g["task_type"] in set(task_types)]
    if not games:
        raise GameError(f"the {source} {split} split has no playable games"
                        + (f" of types {list(task_types)}" if task_types else "")
                        + (f"; skipped: {manifest.get('skipped', [])[:3]}" if source == "official" else ""))
    from deciplane.utils import fingerprint

    # the source is part of the fingerprint, so every report that records it says which ran
    fp = source + "-" + fingerprint({g["name"]: f"{g['sha256']}:{g['traj_sha256']}"
                                     for g in games})
    return ALFWorldSuite(source, split, tuple(root / g["folder"] for g in games),
                         tuple(g["name"] for g in games), tuple(g["task_type"] for g in games),
                         manifest, fp)


class ALFWorldEnv(MenuTextEnv):
    """ALFWorld's household text games (pick, look, clean, heat, cool, pick two) as menus.

    ## Description

    Each episode plays one ALFWorld game: a room of receptacles and objects and a goal of
    one of ALFWorld's six task types (``pick_and_place_simple``, ``look_at_obj_in_light``,
    ``pick_clean_then_place_in_recep``, ``pick_heat_then_place_in_recep``,
    ``pick_cool_then_place_in_recep``, ``pick_two_obj_and_place``), played by TextWorld's
    PDDL engine. ``source="official"`` plays the ALFWorld release found in
    ``$ALFWORLD_DATA`` (``json_2.1.1/<split>``; each split has a manifest: file hashes,
    counts per task type, every game left out with the reason); ``source="generated"``
    plays games deciplane generates offline over ALFWorld's domain and vocabulary
    (deterministic, cached, each checked solvable); ``source="auto"`` (default) takes the
    official data when it is there, else generated games. ``info["source"]`` says which.
    Splits: ``train``, ``valid_seen``, ``valid_unseen`` (``test`` is ``valid_unseen``,
    ``valid`` is ``valid_seen``); generated ``valid_unseen`` games use room layouts that
    no ``train``/``valid_seen`` game uses.

    ``reset(seed=s)`` picks the game deterministically from ``s`` (the first game of an
    order shuffled with ``s``; up to deciplane 0.2.0 it was game ``s % num_tasks``, which
    ``options={"game": s % num_tasks}`` plays); ``reset(options={"game": i})`` (or
    ``{"task": i}``) plays game ``i`` (an index, a name or a folder). Without options,
    games come in a shuffled order that covers the suite before repeating (the rule of
    every menu env: :class:`deciplane.envs.menu.base.MenuTextEnv`).

    ## Observation

    The game's text (``spaces.Text``): the room and the task (``Your task is to: ...``) at
    reset, then the feedback of each command (after the task again with
    ``task_in_observation=True``). ALFWorld's welcome line is dropped.

    ``observation="state"``: the task, ``Location:`` (the receptacle the agent last went
    to, or the room's overview before it moved), the inventory (what the agent holds, from
    the game's facts), ``Last action:`` and ``Last reply:`` the game's feedback —
    :func:`deciplane.envs.menu.text.state_view`.

    ## Action

    ``action_mode="menu"`` (default): ``Discrete(max_menu)``, an index into
    ``info["menu"]`` — a :class:`deciplane.Menu` of the admissible commands, sorted
    (``menu_order="sorted"``, default) or in a seeded shuffled order
    (``menu_order="shuffled"``, see :mod:`deciplane.envs.menu.menu`: the menu seed is
    ``reset(options={"menu_seed": s})``, else the reset seed, else random).
    ``info["action_mask"]`` marks the valid indices. An index outside the space raises
    :class:`deciplane.errors.InvalidAction`; a masked index is an *invalid move*: the game
    does not change, ``info["invalid_action"]`` is True, the observation is repeated and
    the reward is ``invalid_action_penalty``. A state with more than ``max_menu`` commands
    raises :class:`~deciplane.errors.MenuTooLarge` naming ``max_menu``, or with
    ``menu_overflow="page"`` is shown as pages of ``max_menu - 1`` commands whose last
    slot turns the page (never a silently cut menu).

    ``action_mode="text"``: a free command. One that is not admissible is counted invalid
    and answered by the game ("Nothing happens."). A put command written in the other
    ALFWorld version's template (``put X in/on Y`` vs ``move X to Y``) is rewritten to the
    env's ``command_style`` and ``info["translated_command"]`` says so.

    ## Reward

    1.0 on the step that wins the game, else 0, plus ``invalid_action_penalty`` on an
    invalid action.

    ## Episode end

    ``terminated`` when the goal is reached (ALFWorld games cannot be lost); ``truncated``
    by Gymnasium's ``TimeLimit`` (``gym.make`` applies one of 50 steps, ALFWorld's own
    budget, unless ``gym.make(..., max_episode_steps=N)``; an env constructed directly has
    no step limit unless wrapped in ``gymnasium.wrappers.TimeLimit``), or by the env at
    once when a state offers no command at all (``info["empty_menu"] = True``; the same
    rule as the other menu envs). ``step`` after the end raises
    ``gymnasium.error.ResetNeeded``.

    ## Info

    ``menu``, ``action_mask``, ``won``, ``lost``, ``score``, ``max_score``, ``moves``,
    ``invalid_action``, ``invalid_actions``, ``game`` (folder), ``game_name``,
    ``game_index``, ``task_type``, ``goal``, ``source``, ``split``,
    ``split_fingerprint`` (``"generated-<hash>"`` or ``"official-<hash>"``: the source is
    part of it, so every evaluation report and training summary records it), ``menu_seed``, ``menu_page``/``menu_pages``, ``command_style`` (the put template the menu uses) and
    ``data_command_style`` (the one the game file was written with: ALFWorld < 0.4 data
    says ``put``; the env rewrites it, explicitly, to ``command_style``), and with
    ``expert=True`` ``expert_action`` (menu index of the planner's next command),
    ``expert_command`` and ``expert_timeouts`` (replans this episode that found no plan
    within ``expert_timeout_s``; that step has no ``expert_action``).

    ## Arguments

    * ``source``: ``"auto"`` | ``"official"`` | ``"generated"``; ``data_dir``: the
      official data folder (default ``$ALFWORLD_DATA``).
    * ``split``: ``train`` | ``valid_seen`` | ``valid_unseen`` (| ``test`` | ``valid``).
    * ``n_games``: games of the split (generated: default 120 train, 60 per validation
      split, balanced over the six types; official: the first ``n`` of the manifest,
      default all); ``task_types``: keep only these types; ``suite_seed``: another family
      of generated games; ``verify_games``: load every official game once when the
      manifest is built (default: the validation splits only).
    * ``command_style``: ``"move"`` (ALFWorld >= 0.4, default) or ``"put"`` (< 0.4) or
      ``"native"`` (whatever each game file says).
    * ``task_in_observation`` (False): put ``Your task is to: <goal>.`` and a blank line
      before every later observation too (the first one always ends with it), for agents
      that see only the last few observations.
    * ``menu_order``: ``"sorted"`` (default) or ``"shuffled"``; ``menu_overflow``:
      ``"error"`` (default) or ``"page"`` (see Action).
    * ``max_menu`` (64), ``expert`` (False), ``expert_timeout_s``
      (2.0: the plan is kept while the agent follows it; a replan after a deviation runs in
      a child process killed after this long, as fast-downward can search for minutes from
      states off the expert's path), ``action_mode``,
      ``invalid_action_penalty`` (0.0), ``render_mode`` (``"ansi"``/``"human"``),
      ``progress`` (a bar while games are generated or checked), ``observation``
      (``"feedback"`` or ``"state"``, see Observation).
    """

    def __init__(self, source: str = "auto", split: str = "train", n_games: int | None = None,
                 data_dir: str | os.PathLike | None = None,
                 task_types: Sequence[str] | None = None, suite_seed: int = 0,
                 verify_games: bool | None = None, command_style: str = "move",
                 max_menu: int = 64, expert: bool = False,
                 expert_timeout_s: float = DEFAULT_TIMEOUT_S, action_mode: str = "menu",
                 invalid_action_penalty: float = 0.0, task_in_observation: bool = False,
                 menu_order: str = "sorted", menu_overflow: str = "error",
                 render_mode: str | None = None, progress: bool | None = None,
                 observation: str = "feedback") -> None:
        super().__init__(max_menu=max_menu, action_mode=action_mode, render_mode=render_mode,
                         menu_order=menu_order, menu_overflow=menu_overflow,
                         observation=observation, expert=expert,
                         invalid_action_penalty=invalid_action_penalty,
                         task_in_observation=task_in_observation)
        if command_style not in ("move", "put", "native"):
            raise ConfigError(f"command_style must be 'move', 'put' or 'native', got "
                              f"{command_style!r}")
        if progress is None:
            progress = sys.stderr.isatty()
        self.suite = make_suite(source, split, n_games, data_dir, suite_seed, task_types,
                                verify_games, progress)
        self.source = self.suite.source
        self.split = self.suite.split
        self.command_style = command_style
        self._planner = PlanFollower(float(expert_timeout_s))  # ConfigError unless > 0
        self._room = ""
        self._at: str | None = None
        self._games: OrderedDict[int, tuple[Any, GameData, str]] = OrderedDict()
        self._env: Any = None
        self._game: GameData | None = None
        self._style = "move"
        self._state: Any = None

    def close(self) -> None:
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

    # ---- MenuTextEnv hooks ----------------------------------------------------------------

    def _find_game(self, name: str) -> int:
        for i, (game, folder) in enumerate(zip(self.suite.names, self.suite.folders)):
            if name in (game, str(folder)):
                return i
        return -1

    def _game_hint(self) -> str:
        return f" (one of: {', '.join(self.suite.names[:10])})"

    def _load(self, index: int) -> Any:
        self._env, self._game, self._style = self._cached_game(index)
        state = self._env.reset()
        if self.expert:
            self._planner.start(self._env)
        self._room = strip_welcome(state.feedback).split("Your task is to")[0].strip()
        self._at = None   # the receptacle the agent went to last (state view)
        return state

    def _send(self, command: str) -> float:
        won_before = bool(self._state["won"])
        state, _, _ = self._env.step(command)
        if self.expert:
            self._planner.after(self._env, command, bool(state["won"]))
        self._observe(state, command)
        return float(bool(state["won"]) and not won_before)

    def _game_over(self) -> bool:
        return bool(self._state["won"])   # ALFWorld games cannot be lost

    def _observe(self, state: Any, command: str | None = None) -> None:
        if command is None:   # the reset's text: the room and the task
            obs = strip_welcome(state.feedback)
        elif self.task_in_observation and self.observation == "feedback":
            obs = f"Your task is to: {self._game.goal}.\n\n{state.feedback}"
        else:
            obs = state.feedback
        self._state = state
        if self.observation == "state":
            reply = obs.split("Your task is to")[0].strip()
            self._at = arrival_place(reply) or self._at
            where = f"You are at {self._at}." if self._at else self._room
            held = alfworld_inventory(state._facts)
            obs = state_view(f"Your task is to: {self._game.goal}.", where,
                             "Inventory: " + (", ".join(f"a {x}" for x in held) or "nothing"),
                             "" if reply == self._room else reply, command)
        self._obs = clean_observation(obs)
        self._view.show(state["admissible_commands"] or (), terminal=bool(state["won"]),
                        source=self.suite.names[self._game_index])

    def _anchor_state(self) -> tuple[str, list[str]]:
        """Where the agent is (the receptacle it went to last, else the room's overview)
        and what it holds (from the game's facts)."""
        return self._at or self._room, alfworld_inventory(self._state._facts)

    def _parse_command(self, command: str) -> ParsedCommand:
        """Empty or too long: invalid, unsent. A put command in the other ALFWorld
        version's template is rewritten to the env's ``command_style``; a command the menu
        does not list is sent (the game answers "Nothing happens.") and invalid."""
        if not command or len(command.encode()) > MAX_COMMAND_CHARS:
            return ParsedCommand(command, send=False, invalid=True)
        translated = None
        if self._view.position(command) < 0:
            other = translate_command(command, self._style)
            if other is not None:
                translated, command = f"{command} -> {other}", other
        return ParsedCommand(command, send=True, invalid=self._view.position(command) < 0,
                             translated=translated)

    # ---- internals -----------------------------------------------------------------------

    def _cached_game(self, index: int) -> tuple[Any, GameData, str]:
        """A loaded PDDL env for game ``index`` (kept in a small LRU cache)."""
        hit = self._games.get(index)
        if hit is not None:
            self._games.move_to_end(index)
            return hit
        folder = self.suite.folders[index]
        traj_path = folder / "traj_data.json"
        try:
            traj = json.loads(traj_path.read_text()) if traj_path.is_file() else None
            game = GameData.read(folder / "game.tw-pddl", traj)
            style = game.style if self.command_style == "native" else self.command_style
            data = dict(game.data)
            data["grammar"] = with_goal(restyle_grammar(data["grammar"], style), game.goal)
            env = new_pddl_env(expert=False)  # plans come from self._planner
            load_game(env, data)
        except GameError:
            raise
        except Exception as e:  # noqa: BLE001 - anything the PDDL engine raises on load
            raise GameError(f"ALFWorld game {str(folder)!r} does not load ({type(e).__name__}: "
                            f"{e}); remove it or regenerate it") from e
        hit = (env, game, style)
        self._games[index] = hit
        if len(self._games) > _GAME_CACHE_SIZE:
            self._games.popitem(last=False)
        return hit

    def _info(self, invalid: bool) -> dict[str, Any]:
        state, game = self._state, self._game
        assert game is not None
        won = bool(state["won"])
        view = self._view
        info = {
            "menu": view.menu,
            "action_mask": view.mask(),
            "won": won,
            "lost": False,
            "score": int(won),
            "max_score": 1,
            "moves": self._steps,
            "invalid_action": invalid,
            "invalid_actions": self._invalid,
            "game": str(self.suite.folders[self._game_index]),
            "game_name": self.suite.names[self._game_index],
            "game_index": self._game_index,
            "task_type": game.task_type,
            "goal": game.goal,
            "source": self.source,
            "split": self.split,
            "split_fingerprint": self.suite.fingerprint,
            "menu_seed": self._menu_seed,
            "menu_page": view.page,
            "menu_pages": view.pages,
            "command_style": self._style,
            "data_command_style": game.style,
        }
        if self.expert:
            command = self._planner.next_command
            info["expert_timeouts"] = self._planner.timeouts
            if command is not None and not won:
                info["expert_command"] = command
                choice = view.expert_choice(command)
                if choice is not None:
                    info["expert_action"], info["expert_command"] = choice
        return info


def alfworld_inventory(facts: Sequence[Any]) -> list[str]:
    """The objects the agent holds, from the PDDL facts, in the game's words. Example:
    ``holds(agent1: agent, candle_bar_1: object)`` -> ``["candle 1"]``."""
    held = []
    for fact in facts:
        name, args = _fact_parts(str(fact))
        if name == "holds" and len(args) == 2 and args[0].startswith("agent"):
            held.append(args[1].replace("_bar_", " "))
    return sorted(held)


def arrival_place(feedback: str) -> str | None:
    """The receptacle of ``"You arrive at cabinet 2. ..."`` (``"cabinet 2"``), else None."""
    if not feedback.startswith("You arrive at "):
        return None
    return feedback[len("You arrive at "):].split(".")[0].strip() or None


def _fact_parts(text: str) -> tuple[str, list[str]]:
    """``holds(agent1: agent, candle_bar_1: object)`` -> ``("holds", ["agent1", "candle_bar_1"])``."""
    name, _, rest = text.partition("(")
    return name.strip(), [a.split(":")[0].strip() for a in rest.rstrip(")").split(",") if a.strip()]


def strip_welcome(text: str) -> str:
    """The reset text without ALFWorld's ``-= Welcome to TextWorld, ALFRED! =-`` line."""
    if text.startswith(_WELCOME):
        return text[len(_WELCOME):].lstrip("\n")
    return text


def per_task_type(results: Sequence[Any], task_types: Sequence[str]) -> dict[str, dict[str, float]]:
    """Success per task type: ``{type: {"episodes", "won", "success_rate"}}`` from
    per-episode results (anything with a ``won`` attribute) and their task types."""
    out: dict[str, dict[str, float]] = {}
    for t in TASK_TYPES:
        won = [bool(r.won) for r, tt in zip(results, task_types) if tt == t]
        if won:
            out[t] = {"episodes": len(won), "won": sum(won), "success_rate": sum(won) / len(won)}
    return out


__all__ = ["ALFWorldEnv", "ALFWorldSuite", "make_suite", "per_task_type", "strip_welcome",
           "SOURCES", "COMMAND_STYLES", "ALIASES"]
