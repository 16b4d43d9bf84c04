"""What the trainer's env suite and the run evaluator ask an environment about its splits,
without knowing any environment by name.

An env class (the entry point an id is registered with) may answer two questions with class
methods; an env that defines neither gets the defaults below.

* ``split_kwargs(split, kwargs) -> dict``: the constructor arguments that make an env built
  with the config's ``kwargs`` play ``split``. Default: ``{"split": split}`` when the
  constructor takes ``split``, else nothing (an env without splits).
* ``task_list(split, kwargs) -> TaskList``: for an env whose split is a list of tasks known
  before any env is built (``deciplane/TextWorld-v0``: game files, generated once). The
  suite then plays it in *list mode*: reset seed ``s`` plays task ``s % size``, training
  draws tasks without replacement and evaluation plays every task once. Default: none, and
  the env runs in *seed mode* (the reset seed is the initial state).

Both are asked before any env exists, so they cost no env construction (no game engine,
no JVM).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Mapping

import gymnasium as gym


@dataclass(frozen=True)
class TaskList:
    """The tasks of one split: how many, and the fingerprint that names them (equal
    fingerprints mean the same episodes, so evaluations may be compared)."""

    size: int
    fingerprint: str


def env_entry_point(env_id: str) -> Any:
    """The class (or function) ``env_id`` is registered with, imported; None when it cannot
    be imported."""
    ep = gym.spec(env_id).entry_point
    if not isinstance(ep, str):
        return ep
    module, _, attr = ep.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except Exception:  # noqa: BLE001 - an entry point that does not load: no hooks
        return None


def env_params(env_id: str) -> set[str]:
    """Constructor parameter names of a registered env (to pass an option only if accepted)."""
    entry = env_entry_point(env_id)
    try:
        return set(inspect.signature(entry).parameters)
    except Exception:  # noqa: BLE001 - unknown signature: pass nothing extra
        return set()


def split_kwargs(env_id: str, split: str | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The constructor arguments that select ``split`` for an env built with ``kwargs``."""
    hook = getattr(env_entry_point(env_id), "split_kwargs", None)
    if hook is not None:
        return dict(hook(split, kwargs))
    return {"split": split} if "split" in env_params(env_id) else {}


def task_list(env_id: str, split: str, kwargs: Mapping[str, Any]) -> TaskList | None:
    """The tasks of ``split`` for an env built with ``kwargs``, or None for a seed-mode env."""
    hook = getattr(env_entry_point(env_id), "task_list", None)
    return None if hook is None else hook(split, kwargs)
