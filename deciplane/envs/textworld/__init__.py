"""TextWorld games as menus: the environment (:mod:`.env`) and game generation,
caching and suites (:mod:`.games`). Importing this package loads neither."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"TextWorldEnv": "deciplane.envs.textworld.env",
         "make_game_suite": "deciplane.envs.textworld.games",
         "GameSuite": "deciplane.envs.textworld.games"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'deciplane.envs.textworld' has no attribute {name!r}")


__all__ = list(_LAZY)
