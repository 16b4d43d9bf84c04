"""``deciplane/TextWorldExpress-v0``: the TextWorld-Express games with their legal actions
as a menu (same contract as ``deciplane/TextWorld-v0``)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from deciplane.envs.menu.base import MenuTextEnv, ParsedCommand, check_split
from deciplane.envs.menu.text import (clean_observation, inventory_items, normalize_command,
                                      state_view)
from deciplane.envs.twx.java import require_java
from deciplane.envs.twx.twc_expert import TwcPlanner, room_of
from deciplane.errors import ConfigError, GameError

GAMES = ("cookingworld", "twc", "coin", "mapreader", "arithmetic", "sorting", "simonsays",
         "peckingorder")
"""The games of TextWorld-Express 1.x (``game=``)."""

GAME_PARAMS: dict[str, tuple[str, ...]] = {
    "cookingworld": ("numLocations", "numIngredients", "numDistractorItems", "includeDoors",
                     "limitInventorySize"),
    "twc": ("numLocations", "numItemsToPutAway", "includeDoors", "limitInventorySize"),
    "coin": ("numLocations", "numDistractorItems", "includeDoors", "limitInventorySize"),
    "mapreader": ("numLocations", "maxDistanceApart", "maxDistractorItemsPerLocation",
                  "includeDoors", "limitInventorySize"),
    "arithmetic": (),
    "sorting": (),
    "simonsays": ("gameLength", "numDistractors", "memorization", "verbose"),
    "peckingorder": (),
}
"""Parameters each game accepts (``game_params=``); their ranges are checked by the game."""

LOOK_IS_IDLE = frozenset({"twc", "coin", "cookingworld", "mapreader"})
"""Games where ``look around`` changes nothing (the expert skips it; twc's gold path starts
with one). In Simon Says and the puzzle games any action can be the one asked for."""

REPLANNED = frozenset({"twc"})
"""Games with a replanning expert (:class:`deciplane.envs.twx.twc_expert.TwcPlanner`): the
expert has an action for every state, not only on the gold path."""

SPLIT_TO_FOLD = {"train": "train", "valid": "dev", "test": "test"}
"""deciplane split -> TextWorld-Express ``gameFold`` (the official folds)."""


class TextWorldExpressEnv(MenuTextEnv):
    """TextWorld-Express games (CookingWorld, TWC, Coin Collector, Map Reader, Arithmetic,
    Sorting, Simon Says, Pecking Order) as menus.

    ## Description

    `TextWorld-Express <https://github.com/cognitiveailab/TextWorldExpress>`_ generates each
    game from a seed, in a JVM (one per env, started at construction, stopped by
    ``close()``; it needs ``java`` on PATH). A split is one of the package's official
    folds: ``train`` (``gameFold="train"``, seeds 0..999), ``valid`` (``"dev"``, seeds
    10000..10999) and ``test`` (``"test"``, seeds 20000..20999); the fold also selects the
    held-out objects/recipes of the games that have them. ``reset(seed=s)`` picks a game
    seed of the fold deterministically from ``s``; ``reset(options={"game": i})`` (or
    ``{"task": i}``) plays the ``i``-th seed of the fold (or the game named ``i``,
    ``twx-<game>-<split>-s<seed>``), ``{"game_seed": n}`` the game of TextWorld-Express
    seed ``n`` (it must lie in the fold). Without options, games come in a shuffled order
    that covers the fold before repeating (the rule of every menu env:
    :class:`deciplane.envs.menu.base.MenuTextEnv`).

    ## Observation

    ``observation="feedback"`` (default): the game's text (``spaces.Text``), preceded by
    the task description (``"Your task is to ..."``) and a blank line when
    ``task_in_observation`` (default), so that the goal is in every observation and so in
    every prompt built from it. After ``take X`` the game's text is only ``"You take the
    X."``: where the agent is and what it holds are not in it.

    ``observation="state"``: the task, then ``Location:`` (the game's ``look`` text of the
    current room), the inventory, ``Score:`` (the game's normalised score: a wrong ``put``
    takes back the credit of its ``take``), ``Last action:`` and ``Last reply:`` (the
    game's reply, left out when it repeats the room's description) —
    :func:`deciplane.envs.menu.text.state_view`.

    ## Action

    ``Discrete(max_menu)``, an index into ``info["menu"]`` — a :class:`deciplane.Menu` of
    the valid actions, sorted (``menu_order="sorted"``, default) or in a seeded shuffled
    order (``menu_order="shuffled"``: see :mod:`deciplane.envs.menu.menu`; the menu seed is
    ``options["menu_seed"]``, else the reset seed, else random). ``info["action_mask"]``
    marks the valid indices. An index outside ``Discrete(max_menu)`` raises
    :class:`deciplane.errors.InvalidAction`; a masked index inside it is an *invalid move*:
    nothing is sent to the game, ``info["invalid_action"]`` is True, the observation is
    repeated and the reward is ``invalid_action_penalty``.

    ``action_mode="text"``: a command string (``spaces.Text``), compared with the valid
    actions case- and whitespace-insensitively; one that is not among them is an invalid
    move as above (TextWorld-Express has no parser beyond its action list: the game would
    answer "Unknown action" and change nothing). A command holding control characters or
    lone surrogates, or over 4,096 characters, is also invalid and
    ``info["action_rejected"]`` says why; a value that is not ``str`` (or UTF-8 ``bytes``)
    raises :class:`deciplane.errors.InvalidAction`. The menu is not paged and not limited by
    ``max_menu`` in this mode.

    ## Reward

    The change in the game's normalised score (1 when the task is done; some games give
    partial credit, e.g. Map Reader 0.5 for taking the coin, and a failure can score below
    0, e.g. Simon Says -1 for a wrong action), plus ``invalid_action_penalty`` on an
    invalid move.

    ## Episode end

    ``terminated`` when the task succeeds or fails (``info["won"]``/``info["lost"]``);
    ``truncated`` by Gymnasium's ``TimeLimit`` after ``max_episode_steps`` steps (invalid
    ones included; ``gym.make`` applies it, 100 unless ``gym.make(...,
    max_episode_steps=N)``; an env constructed directly has no step limit unless wrapped in
    ``gymnasium.wrappers.TimeLimit``), or by the env if a non-terminal state offers no
    action (``info["empty_menu"] = True``). ``step`` after the end raises
    ``gymnasium.error.ResetNeeded``.

    ## Info

    ``menu``, ``action_mask``, ``won``, ``lost``, ``score``, ``max_score`` (1.0), ``moves``,
    ``invalid_action``, ``invalid_actions``, ``task`` (the task description), ``game``,
    ``game_params`` (canonical ``"k=v,..."``), ``split``, ``fold``, ``game_seed``,
    ``game_name`` (``twx-<game>-<split>-s<seed>``, the evaluator's task name),
    ``game_index`` (index of the seed in the fold), ``seed_range`` (first and last seed of
    the fold), ``split_fingerprint`` (hash of package version, game, parameters, fold and
    its seeds; equal fingerprints mean the same evaluation games), ``menu_seed``,
    ``menu_page`` and ``menu_pages`` (0 and 1 unless the menu is paged), ``state_key``
    (:meth:`~deciplane.envs.menu.base.MenuTextEnv.state_key`: the room's text, the
    inventory and the legal actions as sets; equal for the same state however it was
    reached) and, with
    ``expert=True``, ``expert_action`` and ``expert_command``.

    The expert: ``expert_action`` is the menu index of its next action (it follows the
    menu order) and ``expert_command`` that action (in a paged menu, the page turn while
    the action is on another page); both are ``None`` when the expert has nothing to say.
    In **twc** it replans from any state (:class:`deciplane.envs.twx.twc_expert.TwcPlanner`:
    the gold path, replayed once at ``reset``, says where each object goes and how the
    rooms connect; the commands taken since say where everything is now; a held object goes
    into the nearest container the game accepts for it, :func:`twc_places`), so it has an
    action after a wrong put or a take-back too, and never a longer route than the gold
    path (which wanders between rooms in larger games). In the other games it is
    TextWorld-Express's gold path, computed once at ``reset`` (its entries that are not
    valid when reached, which the game would ignore, are skipped): while every valid action
    taken so far follows it, the expert plays its next action; once an action leaves the
    path (or the path is used up, or the episode is over) both are ``None`` — the package
    cannot replan from an arbitrary state, so distillation and behaviour cloning use only
    the states where ``expert_action`` is not ``None``. Invalid moves change nothing and
    keep the path.

    ## Arguments

    * ``game``: one of :data:`GAMES` (default ``"coin"``); ``game_params``: its parameters as
      a dict (``{"numLocations": 3}``) or a string (``"numLocations=3,includeDoors=0"``);
      accepted names per game in :data:`GAME_PARAMS`, ranges checked by the game.
    * ``split``: ``train`` | ``valid`` | ``test``.
    * ``max_menu`` (64): size of the action space. A state with more actions raises
      :class:`~deciplane.errors.MenuTooLarge` naming ``max_menu`` (``menu_overflow="error"``,
      the default; the same policy as ``TextWorld-v0``, and the menu agent also refuses
      menus larger than its label alphabet), or, with ``menu_overflow="page"``, is shown as
      a second-level menu: pages of ``max_menu - 1`` actions whose last entry
      ``"(show more actions)"`` turns the page (a step with reward 0 that does not act in
      the game; ``info["menu_page"]``/``info["menu_pages"]``; the expert turns pages too).
    * ``menu_order``: ``"sorted"`` (default) or ``"shuffled"``.
    * ``task_in_observation`` (True), ``expert`` (False: the gold path costs ~5 ms per
      reset, twc's replay of it a few ms more), ``invalid_action_penalty`` (0.0),
      ``render_mode`` (``"ansi"`` or ``"human"``), ``action_mode`` (``"menu"`` or
      ``"text"``, see Action), ``observation`` (``"feedback"`` or ``"state"``, see
      Observation).
    * ``drop_penalised`` (False): action elimination — a command that lost points (a put
      into the wrong container, a placed object taken out) leaves the menu for the rest
      of the episode (unless nothing else is left), so a memoryless policy does not repeat
      it (the game's own reward is the only judge; the expert never needs such a command).
    """

    def __init__(self, game: str = "coin", game_params: str | Mapping[str, Any] | None = None,
                 split: str = "train", max_menu: int = 64, menu_order: str = "sorted",
                 task_in_observation: bool = True, expert: bool = False,
                 invalid_action_penalty: float = 0.0,
                 render_mode: str | None = None, menu_overflow: str = "error",
                 action_mode: str = "menu", observation: str = "feedback",
                 drop_penalised: bool = False) -> None:
        if game not in GAMES:
            raise ConfigError(f"game={game!r} is not a TextWorld-Express game; choose one of "
                              f"{', '.join(GAMES)}")
        self.split = check_split(split, SPLIT_TO_FOLD)
        super().__init__(max_menu=max_menu, action_mode=action_mode, render_mode=render_mode,
                         menu_order=menu_order, menu_overflow=menu_overflow,
                         observation=observation, expert=expert,
                         invalid_action_penalty=invalid_action_penalty,
                         task_in_observation=task_in_observation,
                         drop_penalised=drop_penalised)
        self.game = game
        self.game_params = canonical_params(game, game_params)
        self.fold = SPLIT_TO_FOLD[split]

        self._twx: Any = None
        self._owner = os.getpid()  # a forked copy of this env must not stop the parent's JVM
        self._twx = _start_jvm()
        self._server = self._twx.server
        try:
            self._twx.load(self.game, self.game_params)
        except ValueError as e:  # the game's own check of names and ranges
            self.close()
            raise ConfigError(f"TextWorld-Express refused game={game!r} with game_params="
                              f"{self.game_params!r}: {str(e).strip()} (accepted parameters "
                              f"of {game}: {', '.join(GAME_PARAMS[game]) or 'none'})") from None
        seeds = {"train": self._server.getSeedsTrain, "dev": self._server.getSeedsDev,
                 "test": self._server.getSeedsTest}[self.fold]()
        self.seeds: tuple[int, ...] = tuple(int(s) for s in seeds)
        self._seed_set = frozenset(self.seeds)
        self._fingerprint = fold_fingerprint(_package_version(), game, self.game_params,
                                             self.fold, self.seeds)
        self._task = ""
        self._text = ""
        self._won = self._lost = False
        self._score = 0.0
        self._gold: list[str] = []
        self._gold_pos = 0
        self._on_path = False
        self._planner: TwcPlanner | None = None
        self._look = ""
        self._inventory = ""

    # ---- gymnasium API ------------------------------------------------------------------

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        if self._twx is None:
            raise GameError("reset() after close(); build a new env")
        return super().reset(seed=seed, options=options)

    def close(self) -> None:
        """Stop this env's JVM (waits for the java process to exit; kills it after 10 s)."""
        twx, self._twx = getattr(self, "_twx", None), None
        if twx is not None:
            if os.getpid() == self._owner:
                _stop_jvm(twx)
            else:  # a forked copy: the JVM is the parent's; the package's __del__ would stop it
                twx.close = lambda: None
        super().close()

    def __del__(self) -> None:  # a forgotten close() must not leave a JVM behind
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # ---- properties for evaluators ------------------------------------------------------

    @property
    def num_tasks(self) -> int:
        """Number of game seeds in the fold (``reset(options={"game": i})`` plays seed ``i``)."""
        return len(self.seeds)

    @property
    def split_fingerprint(self) -> str:
        return self._fingerprint

    @property
    def java_pid(self) -> int | None:
        """Process id of this env's JVM (None after ``close()``)."""
        if self._twx is None:
            return None
        return int(self._twx._gateway.java_process.pid)

    # ---- MenuTextEnv hooks ----------------------------------------------------------------

    def _requested_game(self, options: dict[str, Any]) -> int | None:
        if options.get("game_seed") is not None:  # wins over options["game"]
            return self._index_of_seed(options["game_seed"])
        return super()._requested_game(options)

    def _index_of_seed(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                or int(value) not in self._seed_set:
            raise ConfigError(f"options['game_seed']={value!r} is not a seed of the {self.split} "
                              f"fold ({self.fold}: {self.seeds[0]}..{self.seeds[-1]}); pick one "
                              "in that range or change split=")
        return self.seeds.index(int(value))

    def _find_game(self, name: str) -> int:
        """The index of ``twx-<game>-<split>-s<seed>`` (``info["game_name"]``), -1 if none."""
        prefix = f"twx-{self.game}-{self.split}-s"
        seed = name[len(prefix):] if name.startswith(prefix) else ""
        if seed.isdigit() and int(seed) in self._seed_set:
            return self.seeds.index(int(seed))
        return -1

    def _game_hint(self) -> str:
        return (f" of the {self.split} fold (e.g. twx-{self.game}-{self.split}-s"
                f"{self.seeds[0]}), or options['game_seed'] in "
                f"{self.seeds[0]}..{self.seeds[-1]}")

    def _load(self, index: int) -> dict[str, Any]:
        state = _loads(self._server.generateNewGameJSON(self.seeds[index], self.fold,
                                                        self.expert))
        if str(state.get("observation", "")).startswith("ERROR"):
            raise GameError(f"TextWorld-Express could not generate {self.game} seed "
                            f"{self.seeds[index]}: {state['observation']}")
        self._task = str(self._server.getTaskDescription())
        self._gold = [str(a) for a in self._server.getGoldActionSequence()] if self.expert else []
        if self.game in LOOK_IS_IDLE:   # its gold path's looks only waste a step
            self._gold = [a for a in self._gold if a != "look around"]
        if self.expert and not self._gold:
            raise GameError(f"TextWorld-Express found no gold path for {self.game} seed "
                            f"{self.seeds[index]} ({self.game_params or 'default params'}); "
                            "use expert=False or other game_params")
        self._gold_pos, self._on_path = 0, self.expert
        self._planner = None
        if self.expert and self.game in REPLANNED:
            state = self._learn_from_gold(state, self.seeds[index])
        self._score = 0.0
        return state

    def _send(self, command: str) -> float:
        before = room_of(self._look)
        if self._on_path:
            if self._gold_pos < len(self._gold) and command == self._gold[self._gold_pos]:
                self._gold_pos += 1
            else:
                self._on_path = False
        state = _loads(self._server.stepJSON(command))
        score = float(state["score"])
        reward = score - self._score
        self._score = score
        self._view.note_reward(command, reward)
        self._observe(state, command)
        if self._planner is not None:
            self._planner.observe(command, before, room_of(self._look), reward)
        return reward

    def _game_over(self) -> bool:
        return self._won or self._lost

    def _parse_command(self, command: str) -> ParsedCommand:
        """A valid action, matched as written or in the game's own spelling (case- and
        space-insensitively); anything else is an invalid move, never sent (the game has
        no parser beyond its action list)."""
        index = self._view.position(command)
        if index < 0:  # the game's own spelling, case/space-insensitively
            index = next((i for i, c in enumerate(self._view.actions)
                          if normalize_command(c) == command), -1)
        if index < 0:
            return ParsedCommand(None, send=False, invalid=True)
        return ParsedCommand(self._view.actions[index], send=True, invalid=False)

    def _observe(self, state: dict[str, Any], command: str | None = None) -> None:
        self._won = bool(state.get("tasksuccess"))
        self._lost = bool(state.get("taskfailure"))
        self._look = str(state.get("look") or "")
        self._inventory = str(state.get("inventory") or "")
        text = str(state["observation"])
        self._text = text
        if self.observation == "state":
            text = state_view(self._task, str(state.get("look") or ""),
                              str(state.get("inventory") or ""), text, command,
                              score=float(state.get("score") or 0.0))
        elif self.task_in_observation and self._task:
            text = f"{self._task}\n\n{text}"
        self._obs = clean_observation(text)
        self._view.show(state.get("validActions") or (), terminal=self._won or self._lost,
                        source=f"{self.game} seed {self.seeds[self._game_index]}",
                        hint=", game_params that make smaller games,",
                        cap=self.action_mode == "menu")

    def _anchor_state(self) -> tuple[str, list[str]]:
        """The room's ``look`` text (it lists what lies where) and the inventory."""
        return self._look, inventory_items(self._inventory)

    def _learn_from_gold(self, state: dict[str, Any], game_seed: int) -> dict[str, Any]:
        """Replay the gold path once (recording the room before each command) to build the
        replanning expert, then generate the same game again: the episode starts as before."""
        rooms = [room_of(str(state.get("look") or ""))]
        for command in self._gold:
            after = _loads(self._server.stepJSON(command))
            rooms.append(room_of(str(after.get("look") or "")) or rooms[-1])
        self._planner = TwcPlanner(self._gold, rooms, places=twc_places())
        return _loads(self._server.generateNewGameJSON(game_seed, self.fold, self.expert))

    def _expert(self) -> tuple[int | None, str | None]:
        """The next expert action and its menu index: the gold path while every action so
        far followed it, then (twc) the replanning expert. Gold-path entries that are not
        valid in the current state are skipped: TextWorld-Express's gold agents sometimes
        repeat an action that is already done (``open kitchen cupboard`` twice), which the
        game answers as an invalid step that changes nothing."""
        if self._won or self._lost:
            return None, None
        gold, view = self._gold, self._view
        while self._on_path and self._planner is None and self._gold_pos < len(gold):
            choice = view.expert_choice(gold[self._gold_pos])
            if choice is not None:
                return choice
            self._gold_pos += 1
        if self._planner is None:
            return None, None
        command = self._planner.next_command(self._look, view.actions)
        return (None, None) if command is None else view.expert_choice(command) or (None, None)

    def _info(self, invalid: bool) -> dict[str, Any]:
        view = self._view
        info = {
            "menu": view.menu,
            "action_mask": view.mask(),
            "won": self._won,
            "lost": self._lost,
            "score": self._score,
            "max_score": 1.0,
            "moves": self._steps,
            "invalid_action": invalid,
            "invalid_actions": self._invalid,
            "task": self._task,
            "game": self.game,
            "game_params": self.game_params,
            "split": self.split,
            "fold": self.fold,
            "game_seed": self.seeds[self._game_index],
            "game_name": f"twx-{self.game}-{self.split}-s{self.seeds[self._game_index]}",
            "game_index": self._game_index,
            "seed_range": (self.seeds[0], self.seeds[-1]),
            "split_fingerprint": self._fingerprint,
            "menu_seed": self._menu_seed,
            "menu_page": view.page,
            "menu_pages": view.pages,
        }
        if self.expert:
            info["expert_action"], info["expert_command"] = self._expert()
        return info


# ---- small pure helpers -------------------------------------------------------------------


def canonical_params(game: str, params: str | Mapping[str, Any] | None) -> str:
    """``game_params`` as the ``"k=v,k=v"`` string TextWorld-Express reads, keys sorted.

    Raises :class:`~deciplane.errors.ConfigError` for a string that does not parse, a value
    that is not an integer, or a name the game does not accept."""
    if params is None or params == "":
        return ""
    if isinstance(params, str):
        items: dict[str, Any] = {}
        for part in params.split(","):
            part = part.strip()
            if not part:
                continue
            if part.count("=") != 1:
                raise ConfigError(f"game_params={params!r}: {part!r} is not name=value; write "
                                  "e.g. 'numLocations=3,includeDoors=0' or pass a dict")
            key, value = (s.strip() for s in part.split("="))
            items[key] = value
    elif isinstance(params, Mapping):
        items = dict(params)
    else:
        raise ConfigError(f"game_params must be a dict or a 'name=value,...' string, got "
                          f"{type(params).__name__}")
    known = GAME_PARAMS[game]
    out = []
    for key in sorted(items):
        if key not in known:
            raise ConfigError(f"game_params: {game} has no parameter {key!r}; its parameters: "
                              f"{', '.join(known) or 'none'}")
        value = items[key]
        if isinstance(value, bool):
            value = int(value)
        try:
            number = int(str(value).strip())
        except ValueError:
            raise ConfigError(f"game_params: {key}={value!r} is not an integer") from None
        out.append(f"{key}={number}")
    return ",".join(out)


def fold_fingerprint(version: str, game: str, params: str, fold: str,
                     seeds: tuple[int, ...]) -> str:
    """16 hex digits identifying the games of a fold (package version, game, parameters,
    fold name and its seeds)."""
    blob = json.dumps({"package": "textworld-express", "version": version, "game": game,
                       "params": params, "fold": fold, "seeds": list(seeds)},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@functools.cache
def twc_places() -> dict[str, tuple[str, ...]]:
    """Every container twc accepts for each object (the package's object file, all folds):
    the game scores a put into any of them, the gold path uses one."""
    import textworld_express

    path = os.path.join(os.path.dirname(textworld_express.__file__), "twc_objects.folds.json")
    with open(path, encoding="utf-8") as f:
        folds = json.load(f)
    return {name: tuple(entry.get("locations") or ()) for fold in folds.values()
            for name, entry in fold.items()}


def _package_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("textworld-express")
    except metadata.PackageNotFoundError:  # pragma: no cover - imported from a checkout
        import textworld_express

        return str(getattr(textworld_express, "__version__", "unknown"))


try:  # the package's own parser, when present (faster than json)
    import orjson as _orjson

    _loads = _orjson.loads
except ImportError:  # pragma: no cover
    _loads = json.loads


def _start_jvm() -> Any:
    require_java()
    try:
        from textworld_express import TextWorldExpressEnv as _RawEnv
    except ImportError as e:
        raise ConfigError("deciplane/TextWorldExpress-v0 needs the textworld-express package: "
                          "pip install textworld-express") from e
    try:
        return _RawEnv(envStepLimit=10**9)  # deciplane counts steps itself
    except Exception as e:  # noqa: BLE001 - py4j/JVM start-up failures
        raise GameError(f"could not start the TextWorld-Express JVM ({type(e).__name__}: {e}); "
                        "check `java -version` (deciplane doctor) and that the machine has "
                        "memory for a JVM") from e


def _stop_jvm(twx: Any) -> None:
    import subprocess

    proc = getattr(twx._gateway, "java_process", None)
    try:
        twx.close()
    except Exception:  # noqa: BLE001 - the JVM may already be gone
        pass
    twx.close = lambda: None  # its __del__ calls close() again
    if proc is not None:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
    try:
        twx._obj_tree_tempfile.close()
    except Exception:  # noqa: BLE001
        pass


__all__ = ["TextWorldExpressEnv", "GAMES", "GAME_PARAMS", "SPLIT_TO_FOLD", "canonical_params",
           "fold_fingerprint"]
