"""TextWorld games as menus: the environment (:mod:`.env`) and game generation,
caching and suites (:mod:`.games`). Importing this package loads neither: the tw-make
workers run ``python -m deciplane.envs.textworld.games``, which a package that imported it
would load twice."""

from __future__ import annotations

from deciplane.utils import lazy_exports

_LAZY = {"TextWorldEnv": "deciplane.envs.textworld.env",
         "make_game_suite": "deciplane.envs.textworld.games",
         "GameSuite": "deciplane.envs.textworld.games"}


__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = list(_LAZY)
