"""What a deciplane env may show a client of another stack: JSON data, no held-out fields."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

WITHHELD_INFO = ("answer", "gold", "solution", "hidden", "tests", "reference", "target")
"""``info`` keys containing any of these words are never served (held-out answers)."""

def jsonable(value: Any) -> Any:
    """``value`` as JSON data: menus as their lines, numpy scalars and arrays as Python
    numbers and lists, non-finite floats as None, anything else unknown as its ``str``."""
    from deciplane.types import Menu

    if isinstance(value, Menu):
        return list(value.actions)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def served_info(info: Mapping[str, Any], split: str | None, expose_expert: bool) -> dict:
    """The part of ``info`` a client may see: no key naming a held-out field
    (:data:`WITHHELD_INFO`), the expert's fields only on ``train`` with ``expose_expert``,
    and no menu (served as its own field)."""
    out = {}
    for key, value in info.items():
        k = str(key).lower()
        if k in ("menu", "action_mask"):
            continue
        if k.startswith("expert"):                  # expert_action, expert_command
            if not (expose_expert and split == "train"):
                continue
        elif any(word in k for word in WITHHELD_INFO):
            continue
        out[str(key)] = jsonable(value)
    return out


def _labels(n: int, labels: str) -> list[str]:
    if labels == "letters" and n <= 26:
        return [chr(ord("A") + i) for i in range(n)]
    if labels in ("letters", "numbers"):
        return [str(i) for i in range(1, n + 1)]
    raise ValueError(f"labels must be 'numbers' or 'letters', not {labels!r}")


def menu_prompt(observation: str, menu: Any, labels: str = "numbers",
                ask: str | None = None) -> str:
    """The observation and, for a menu env, its legal actions, numbered from 1 (or
    lettered from A: ``labels="letters"``, numbers past 26 entries), then ``ask`` (by
    default: reply with one action)."""
    if menu is None:
        return str(observation)
    tags = _labels(len(menu), labels)
    lines = "\n".join(f"{t}) {a}" for t, a in zip(tags, menu))
    name = "letter" if tags and tags[0] == "A" else "number"
    if ask is None:
        ask = f"Reply with one action, as written (or its {name})."
    return f"{observation}\n\nLegal actions:\n{lines}\n\n{ask}"


def menu_choice(reply: str, menu: Any, labels: str = "numbers") -> int:
    """The menu index a reply names: a line of the menu (case and spacing ignored, a
    trailing period too) or its label as :func:`menu_prompt` listed it; ``len(menu)`` (the
    env's invalid action) otherwise."""
    from deciplane.envs.menu.text import normalize_command

    text = normalize_command(str(reply).strip().strip("."))
    lines = [normalize_command(str(a)) for a in menu]
    if text in lines:
        return lines.index(text)
    tags = [t.lower() for t in _labels(len(lines), labels)]
    if text.strip("()").lower() in tags:
        return tags.index(text.strip("()").lower())
    return len(lines)


def interop_status() -> tuple[bool, str]:
    """Whether the ``interop`` extra is installed (``deciplane doctor``), with versions."""
    from importlib import metadata

    found, missing = [], []
    for dist in ("openenv", "skyrl-gym", "trl"):
        try:
            found.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            missing.append(dist)
    if missing:
        return False, (f"{', '.join(missing)} not installed: pip install -e '.[interop]' "
                       "(deciplane serve, from_openenv, the SkyRL env, TRL's "
                       "environment_factory)")
    return True, ", ".join(found)


__all__ = ["WITHHELD_INFO", "interop_status", "jsonable", "menu_choice", "menu_prompt",
           "served_info"]
