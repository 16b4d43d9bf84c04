"""The text of the menu games: the observation and command character sets, observation
cleaning, command normalisation and the ``state`` observation view (:func:`state_view`)."""

from __future__ import annotations

import hashlib
import json
import re
import string

from deciplane.errors import ConfigError

# Everything TextWorld (Inform7 -> Z-machine -> jericho) prints: ZSCII is ASCII plus
# accented Latin letters; typographic punctuation is added for user games. Anything else
# is replaced by "?" so that every observation lies in the observation space.
OBS_CHARSET = frozenset(
    string.printable
    + "".join(chr(c) for c in range(0xA0, 0x250))       # Latin-1 supplement, Latin ext. A/B
    + "".join(chr(c) for c in range(0x2010, 0x2060))    # dashes, quotes, ellipsis, bullets
    + "\u20ac\u2122"
)
MAX_OBS_CHARS = 65_536
MAX_COMMAND_CHARS = 192  # the Z-machine reads at most ~198 bytes per command
MAX_RAW_COMMAND_CHARS = 4096  # before whitespace is collapsed; longer is refused unread
COMMAND_CHARSET = string.ascii_letters + string.digits + " -'.,"
_ASCII_OBS = bytes(range(0x20, 0x7F)) + b"\t\n\r\x0b\x0c"  # the ASCII part of OBS_CHARSET
_NOT_OBS = re.compile("[^\t\n\r\x0b\x0c\x20-\x7e\xa0-\u024f\u2010-\u205f\u20ac\u2122]")
_SPACES = re.compile(r"\s+")


def clean_observation(text: str) -> str:
    """``text`` with characters outside :data:`OBS_CHARSET` replaced by ``?`` and cut to
    :data:`MAX_OBS_CHARS`, so it always lies in the observation space."""
    text = text[:MAX_OBS_CHARS]
    if text.isascii() and not text.encode("ascii").translate(None, _ASCII_OBS):
        return text  # the common case, checked at C speed (~10x faster than the regex)
    return _NOT_OBS.sub("?", text)


def normalize_command(command: str) -> str:
    """Lower-case, one line, single spaces: how menu commands are written."""
    return _SPACES.sub(" ", command).strip().lower()


OBSERVATION_VIEWS = ("feedback", "state")
"""``observation=`` of the menu games: ``feedback`` (the game's reply to the last action,
as the game prints it) or ``state`` (:func:`state_view`: task, location, inventory and the
last reply, so the observation after ``take X`` still says where the agent is and what it
holds)."""


def check_observation_view(view: str) -> str:
    if view not in OBSERVATION_VIEWS:
        raise ConfigError(f"observation must be one of {', '.join(OBSERVATION_VIEWS)}, got "
                          f"{view!r}")
    return view


def state_view(task: str, location: str, inventory: str, reply: str,
               action: str | None = None, score: float | None = None) -> str:
    """The ``state`` observation: the task, the current location's description, the
    inventory, the game's score (when given: the player sees it in the game's status line;
    it says whether the last action counted), the last action and the game's reply to it
    (left out when it repeats the location, e.g. after ``look``, a move or at the start).
    Empty parts are left out. The last action keeps a step that changes nothing (``look``)
    from showing the very same observation again. Example::

        Your task is to put the towel away.

        Location: You are in the bathroom. ...
        Inventory: a towel
        Score: 0.5
        Last action: take towel
        Last reply: You take the towel.
    """
    parts = [task.strip()] if task.strip() else []
    lines = []
    loc, rep = (" ".join(x.split()) for x in (location, reply))
    items = inventory_items(inventory)
    if loc:
        lines.append(f"Location: {loc}")
    if items:
        lines.append("Inventory: " + ", ".join(items))
    if score is not None:
        lines.append(f"Score: {round(float(score), 3):g}")
    if action:
        lines.append(f"Last action: {' '.join(action.split())}")
    if rep and not (loc and loc in rep):
        lines.append(f"Last reply: {rep}")
    if lines:
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def inventory_items(inventory: str) -> list[str]:
    """The items of a game's inventory text, one per line, without its ``Inventory:``
    header: ``"Inventory:\n  a towel\n  a key"`` -> ``["a towel", "a key"]``."""
    items = [line.strip() for line in inventory.splitlines() if line.strip()]
    if items and items[0].lower().startswith("inventory"):   # "Inventory:\n  a towel\n ..."
        items[0] = items[0].split(":", 1)[1].strip() if ":" in items[0] else ""
        items = [x for x in items if x]
    return items


def state_key(game: int, location: str, inventory: list[str] | tuple[str, ...],
              actions: list[str] | tuple[str, ...]) -> str:
    """16 hex digits naming an environment state however it was reached (the anchor state
    of GiGPO's step groups, ``info["state_key"]``): the game, the location's text
    (whitespace collapsed), the inventory as a set and the legal actions as a set. Not the
    observation (it carries the score and the last reply) and not the menu's order (a
    shuffled menu differs between episodes of one state)."""
    blob = json.dumps([int(game), " ".join(location.split()),
                       sorted(" ".join(x.split()) for x in inventory), sorted(actions)],
                      separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def ambiguous_share(records: list[tuple[str, tuple[str, ...] | list[str], str]]) -> float:
    """Share of decisions whose ``(observation, sorted menu)`` equals another decision's
    with a *different* expert action: what no policy of that observation can get right
    every time. ``records``: ``(observation, menu actions, expert action)`` per decision
    (the menu is sorted here: a shuffled order would hide every collision). 0 for none."""
    if not records:
        return 0.0
    actions: dict[tuple[str, tuple[str, ...]], set[str]] = {}
    keys = []
    for obs, menu, act in records:
        key = (obs, tuple(sorted(menu)))
        actions.setdefault(key, set()).add(act)
        keys.append(key)
    return sum(len(actions[k]) > 1 for k in keys) / len(keys)


__all__ = ["OBSERVATION_VIEWS", "ambiguous_share", "check_observation_view", "state_view",
           "inventory_items", "state_key",
           "OBS_CHARSET", "MAX_OBS_CHARS", "MAX_COMMAND_CHARS", "MAX_RAW_COMMAND_CHARS",
           "COMMAND_CHARSET", "clean_observation", "normalize_command"]
