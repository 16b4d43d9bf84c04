"""What every ALFWorld game shares: the PDDL domain and grammar, task types and their goal
texts, entity names, and the two command-template versions of ALFWorld.

The domain (``alfred.pddl``) and grammar (``alfred.twl2``) come from the installed
``alfworld`` package (read from its folder; the package itself is never imported, since
importing it creates ``~/.cache/alfworld`` and sets ``$ALFWORLD_DATA``). Games are played
by TextWorld's PDDL engine (``textworld.envs.pddl.PddlEnv``, which needs the
``fast-downward-textworld`` planner library).
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from deciplane.errors import GameError

# ALFWorld's six task types (ids as in ALFWorld's configs) and the short names used in
# summaries.
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
SHORT_NAMES = {"pick_and_place_simple": "pick", "look_at_obj_in_light": "look",
               "pick_clean_then_place_in_recep": "clean", "pick_heat_then_place_in_recep": "heat",
               "pick_cool_then_place_in_recep": "cool", "pick_two_obj_and_place": "pick_two"}

# Goal texts, as ALFWorld's templates phrase them (first template of each type).
GOAL_TEMPLATES = {
    "pick_and_place_simple": "put a {obj} in {recep}",
    "look_at_obj_in_light": "look at {obj} under the {toggle}",
    "pick_clean_then_place_in_recep": "put a clean {obj} in {recep}",
    "pick_heat_then_place_in_recep": "put a hot {obj} in {recep}",
    "pick_cool_then_place_in_recep": "put a cool {obj} in {recep}",
    "pick_two_obj_and_place": "put two {obj} in {recep}",
}

# The put command changed between ALFWorld versions: the json_2.1.1 games (ALFWorld < 0.4)
# say "put {o} in/on {r}"; ALFWorld >= 0.4 (and games patched to 2.1.2) say "move {o} to {r}".
PUT_TEMPLATE = "put {o} in/on {r}"
MOVE_TEMPLATE = "move {o} to {r}"
COMMAND_STYLES = {
    "move": "move-to (ALFWorld >= 0.4: 'move X to Y')",
    "put": "put-in/on (ALFWorld < 0.4, json_2.1.1: 'put X in/on Y')",
}
_PUT_FEEDBACK = "You put the {o.name} in/on the {r.name}."
_MOVE_FEEDBACK = "You move the {o.name} to the {r.name}."
_PUT_CMD = re.compile(r"^put (.+) in/on (.+)$")
_MOVE_CMD = re.compile(r"^move (.+) to (.+)$")
_TASK_RULE = re.compile(r"Your task is to: (.*?)\.?\"")


def alfworld_data_dir() -> Path:
    """The ``data`` folder of the installed ``alfworld`` package (domain and grammar)."""
    spec = importlib.util.find_spec("alfworld")
    if spec is None or not spec.submodule_search_locations:
        raise GameError("the ALFWorld environment needs the 'alfworld' package (its PDDL "
                        "domain and grammar): pip install --no-deps alfworld==0.4.2")
    folder = Path(list(spec.submodule_search_locations)[0]) / "data"
    for name in ("alfred.pddl", "alfred.twl2"):
        if not (folder / name).is_file():
            raise GameError(f"the installed alfworld package has no {name} in {folder}; "
                            "reinstall it: pip install --force-reinstall --no-deps "
                            "alfworld==0.4.2")
    return folder


def alfworld_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("alfworld")
    except metadata.PackageNotFoundError:
        return "missing"


def domain_and_grammar() -> tuple[str, str]:
    """ALFWorld's PDDL domain and (goal-less) grammar text."""
    folder = alfworld_data_dir()
    return (folder / "alfred.pddl").read_text(), (folder / "alfred.twl2").read_text()


def check_planner() -> None:
    """Raise :class:`GameError` unless TextWorld's PDDL engine can run here."""
    try:
        import fast_downward  # noqa: F401
    except ImportError:
        raise GameError("ALFWorld games need the fast-downward planner library that "
                        "TextWorld's PDDL engine uses: pip install fast-downward-textworld "
                        "(it builds from source; run pip with the target venv's bin/ first "
                        "on PATH)") from None


def command_style(grammar: str) -> str:
    """Which put-command template a game's grammar uses: ``"move"`` or ``"put"``.

    Raises :class:`GameError` for a grammar with neither (an unknown ALFWorld version),
    rather than guessing and silently scoring every put action as invalid."""
    has_move, has_put = MOVE_TEMPLATE in grammar, PUT_TEMPLATE in grammar
    if has_move and not has_put:
        return "move"
    if has_put and not has_move:
        return "put"
    raise GameError("the game's grammar has " + ("both" if has_put else "neither") +
                    f" of the put-command templates {MOVE_TEMPLATE!r} (ALFWorld >= 0.4) and "
                    f"{PUT_TEMPLATE!r} (ALFWorld < 0.4); it is from an ALFWorld version "
                    "deciplane does not know")


def restyle_grammar(grammar: str, style: str) -> str:
    """``grammar`` with its put command (template and feedback) written in ``style``."""
    if style == "move":
        return grammar.replace(PUT_TEMPLATE, MOVE_TEMPLATE).replace(_PUT_FEEDBACK, _MOVE_FEEDBACK)
    if style == "put":
        return grammar.replace(MOVE_TEMPLATE, PUT_TEMPLATE).replace(_MOVE_FEEDBACK, _PUT_FEEDBACK)
    raise GameError(f"unknown command style {style!r}; use 'move' or 'put'")


def translate_command(command: str, style: str) -> str | None:
    """The other version's put command rewritten in ``style`` (``None`` if it is not one):
    ``translate_command("put apple 1 in/on table 1", "move") == "move apple 1 to table 1"``."""
    if style == "move":
        m = _PUT_CMD.match(command)
        return f"move {m.group(1)} to {m.group(2)}" if m else None
    m = _MOVE_CMD.match(command)
    return f"put {m.group(1)} in/on {m.group(2)}" if m else None


def entity_names(ids: Iterable[str]) -> dict[str, str]:
    """Readable names of PDDL entity ids, numbered the way ALFWorld names them.

    An id ``type_bar_...`` becomes ``"type N"`` (``..._bar_sinkbasin`` ids become
    ``sinkbasin N``/``bathtubbasin N``); the ids of one type, sorted, are numbered from
    the highest down (ALFWorld's own convention, so that names match its trajectories).
    Ids without ``_bar_`` (``agent1``, types) keep their id as name.
    """
    ids = sorted(set(ids))
    def base(i: str) -> str:
        name = i.split("_bar_", 1)[0]
        return name + "basin" if "basin" in i else name

    counts = Counter(base(i) for i in ids if "_bar_" in i)
    left = {name: list(range(1, n + 1)) for name, n in counts.items()}
    out = {}
    for i in ids:
        if "_bar_" in i:
            out[i] = f"{base(i)} {left[base(i)].pop()}"
        else:
            out[i] = i
    return out


@dataclass(frozen=True)
class GameData:
    """One ``game.tw-pddl`` (its JSON fields) and what deciplane knows about it."""

    path: Path
    data: Mapping[str, Any]
    task_type: str
    goal: str
    style: str

    @classmethod
    def read(cls, path: Path, traj: Mapping[str, Any] | None = None) -> "GameData":
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError, UnicodeDecodeError) as e:
            raise GameError(f"{str(path)!r} is not a readable game.tw-pddl JSON ({e})") from None
        if not isinstance(data, dict):
            raise GameError(f"{str(path)!r} is not a game.tw-pddl JSON object")
        missing = [k for k in ("pddl_domain", "grammar", "pddl_problem") if not data.get(k)]
        if missing:
            raise GameError(f"{str(path)!r} lacks {', '.join(missing)}; regenerate it with "
                            "alfworld-generate (or deciplane's generator)")
        meta = data.get("deciplane") or {}
        task_type = str(meta.get("task_type") or (traj or {}).get("task_type") or "")
        goal = str(meta.get("goal") or "")
        if not goal:
            m = _TASK_RULE.search(data["grammar"])
            if m and m.group(1) != "UNKNOWN GOAL":
                goal = m.group(1)
        if not goal and traj is not None:
            goal = goal_from_traj(traj)
        return cls(Path(path), data, task_type, goal, command_style(data["grammar"]))


def goal_from_traj(traj: Mapping[str, Any]) -> str:
    """The goal text of an ALFWorld ``traj_data.json`` (its templated description)."""
    params = traj.get("pddl_params") or {}
    template = GOAL_TEMPLATES.get(str(traj.get("task_type")))
    if template is None:
        raise GameError(f"unknown ALFWorld task type {traj.get('task_type')!r}; known: "
                        f"{', '.join(TASK_TYPES)}")
    return template.format(obj=str(params.get("object_target", "")).lower(),
                           recep=str(params.get("parent_target", "")).lower(),
                           toggle=str(params.get("toggle_target", "")).lower())


def with_goal(grammar: str, goal: str) -> str:
    """The grammar with ALFWorld's ``UNKNOWN GOAL`` placeholder replaced by ``goal``."""
    return grammar.replace("UNKNOWN GOAL", goal)
