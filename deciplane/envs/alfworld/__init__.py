"""ALFWorld: the official benchmark when ``$ALFWORLD_DATA`` has it, and offline-generated
ALFWorld games for everyone else (``deciplane/ALFWorld-v0``).

Modules: :mod:`.env` (the Gymnasium env), :mod:`.generator` (offline game generation and
its cache), :mod:`.official` (the official data's manifests), :mod:`.pddl` (domain,
grammar, names, command-template versions), :mod:`.vocab` (rooms, receptacles, objects).
Nothing heavy is imported until used.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "ALFWorldEnv": "deciplane.envs.alfworld.env",
    "make_suite": "deciplane.envs.alfworld.env",
    "per_task_type": "deciplane.envs.alfworld.env",
    "make_alfworld_suite": "deciplane.envs.alfworld.generator",
    "official_manifest": "deciplane.envs.alfworld.official",
    "TASK_TYPES": "deciplane.envs.alfworld.pddl",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'deciplane.envs.alfworld' has no attribute {name!r}")


__all__ = list(_LAZY)
