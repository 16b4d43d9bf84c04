"""ALFWorld: the official benchmark when ``$ALFWORLD_DATA`` has it, and offline-generated
ALFWorld games for everyone else (``deciplane/ALFWorld-v0``).

Modules: :mod:`.env` (the Gymnasium env), :mod:`.generator` (offline game generation and
its cache), :mod:`.official` (the official data's manifests), :mod:`.pddl` (domain,
grammar, names, command-template versions), :mod:`.vocab` (rooms, receptacles, objects).
TextWorld and the planner load only when a game is played.
"""

from __future__ import annotations

from deciplane.envs.alfworld.env import ALFWorldEnv, make_suite, per_task_type
from deciplane.envs.alfworld.generator import make_alfworld_suite
from deciplane.envs.alfworld.official import official_manifest
from deciplane.envs.alfworld.pddl import TASK_TYPES

__all__ = ["ALFWorldEnv", "make_suite", "per_task_type", "make_alfworld_suite",
           "official_manifest", "TASK_TYPES"]
