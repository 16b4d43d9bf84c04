"""Gymnasium environments, their data, the sandbox, verifiers and the held-out scorer.

Importing this module registers the built-in ids under the ``deciplane/`` namespace and
the environments of installed plug-ins (entry-point group ``deciplane.envs``). Heavy
modules (textworld, docker, math-verify) load lazily, on first use.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, Callable

import gymnasium as gym

from deciplane._moved import renamed_names
from deciplane.errors import UnknownEnvironment
from deciplane.utils import lazy_exports

ENTRY_POINT_GROUP = "deciplane.envs"

# id -> short description, for `deciplane envs`
_REGISTRY: dict[str, str] = {}

_BUILTIN = {
    "deciplane/TextWorld-v0": (
        "deciplane.envs.textworld.env:TextWorldEnv",
        "TextWorld games (tw-make presets or your .z8 files); legal actions as a menu",
    ),
    "deciplane/TextWorldExpress-v0": (
        "deciplane.envs.twx.env:TextWorldExpressEnv",
        "TextWorld-Express games (cookingworld, twc, coin, ...; needs Java); valid actions as a menu",
    ),
    "deciplane/ALFWorld-v0": (
        "deciplane.envs.alfworld.env:ALFWorldEnv",
        "ALFWorld household games (official data or generated offline); legal actions as a menu",
    ),
    "deciplane/Math-v0": (
        "deciplane.envs.math.env:MathEnv",
        "math word problems; action = answer text; reward from math-verify",
    ),
    "deciplane/CodeOpt-v0": (
        "deciplane.envs.codeopt.env:CodeOptEnv",
        "optimise a program: correctness-gated, calibrated speedup reward (sandboxed)",
    ),
    "deciplane/CodeGen-v0": (
        "deciplane.envs.code.env:CodeGenEnv",
        "write a Python function; reward = all hidden tests pass (sandboxed)",
    ),
}


def register(id: str, entry_point: str | Callable[..., gym.Env], description: str = "",
             **kwargs: Any) -> None:
    """Register an environment so that ``gym.make``, ``deciplane envs``, ``evaluate`` and
    ``train`` know it. ``kwargs`` go to :func:`gymnasium.register` (``max_episode_steps``,
    default ``kwargs`` ...)."""
    if id not in gym.registry:
        gym.register(id=id, entry_point=entry_point, **kwargs)
    if not description:
        description = _describe(entry_point)
    _REGISTRY[id] = description


def _describe(entry_point: Any) -> str:
    if isinstance(entry_point, str):
        return entry_point
    doc = (getattr(entry_point, "__doc__", None) or "").strip().splitlines()
    return doc[0] if doc else getattr(entry_point, "__name__", repr(entry_point))


def _load_plugins() -> None:
    """Entry points in group ``deciplane.envs``: ``name = env id``, ``value =
    "module:EnvClass"`` (registered as is) or ``"module:function"`` taking no arguments
    that registers its own ids through :func:`register`."""
    try:
        eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:  # pragma: no cover - python < 3.10
        eps = metadata.entry_points().get(ENTRY_POINT_GROUP, [])
    for ep in eps:
        if "/" in ep.name:  # an environment id: register the class lazily
            register(ep.name, ep.value)
        else:  # a registration hook
            ep.load()()


def registered_ids() -> list[str]:
    """Every environment deciplane knows, built-in and plug-in, sorted."""
    return sorted(_REGISTRY)


def registry() -> dict[str, str]:
    return dict(sorted(_REGISTRY.items()))


def make(id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` with a helpful error for unknown ids."""
    if id not in gym.registry:
        raise UnknownEnvironment(
            f"unknown environment id {id!r}; registered: {', '.join(registered_ids())}. "
            "Install the plug-in that provides it or call deciplane.envs.register(...)."
        )
    return gym.make(id, **kwargs)


# gym.make wraps these in TimeLimit (overridable: gym.make(id, max_episode_steps=N))
_BUILTIN_LIMITS = {"deciplane/TextWorld-v0": 100, "deciplane/TextWorldExpress-v0": 100,
                   "deciplane/ALFWorld-v0": 50}
for _id, (_ep, _desc) in _BUILTIN.items():
    register(_id, _ep, _desc, max_episode_steps=_BUILTIN_LIMITS.get(_id))
_load_plugins()

# Lazy public names: `from deciplane.envs import Sandbox` imports only what it needs.
_LAZY = {
    "Sandbox": "deciplane.sandbox",
    "SandboxResult": "deciplane.sandbox",
    "verify_math": "deciplane.envs.math.verify",
    "load_benchmark": "deciplane.benchmarks",
    "list_benchmarks": "deciplane.benchmarks",
    "HeldOutScorer": "deciplane.benchmarks.scorer",
    "TextWorldEnv": "deciplane.envs.textworld.env",
    "TextWorldExpressEnv": "deciplane.envs.twx.env",
    "ALFWorldEnv": "deciplane.envs.alfworld.env",
    "MathEnv": "deciplane.envs.math.env",
    "CodeOptEnv": "deciplane.envs.codeopt.env",
    "CodeGenEnv": "deciplane.envs.code.env",
    "make_game_suite": "deciplane.envs.textworld.games",
}


# the lazy names and the old ones (deciplane._moved.RENAMED)
__getattr__ = renamed_names(__name__, lazy_exports(__name__, _LAZY))


__all__ = ["register", "registered_ids", "registry", "make", *_LAZY]
