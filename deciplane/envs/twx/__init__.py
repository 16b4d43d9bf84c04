"""``deciplane/TextWorldExpress-v0``: TextWorld-Express games (a JVM per env) as menus.

Importing this package does not start Java nor import ``textworld_express``; building an
env does.
"""

from deciplane.envs.twx.env import (GAME_PARAMS, GAMES, SPLIT_TO_FOLD, TextWorldExpressEnv,
                                    canonical_params, fold_fingerprint)
from deciplane.envs.twx.java import java_status

__all__ = ["TextWorldExpressEnv", "GAMES", "GAME_PARAMS", "SPLIT_TO_FOLD", "canonical_params",
           "fold_fingerprint", "java_status"]
