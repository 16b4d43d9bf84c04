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


def interop_status() -> tuple[bool, str]:
    """Whether the ``interop`` extra is installed (``deciplane doctor``), with versions."""
    from importlib import metadata

    found, missing = [], []
    for dist in ("openenv", "skyrl-gym"):
        try:
            found.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            missing.append(dist)
    if missing:
        return False, (f"{', '.join(missing)} not installed: pip install -e '.[interop]' "
                       "(deciplane serve, from_openenv, the SkyRL env)")
    return True, ", ".join(found)


__all__ = ["WITHHELD_INFO", "interop_status", "jsonable", "served_info"]
