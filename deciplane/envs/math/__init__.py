"""Math answers: the environment (:mod:`.env`, ``deciplane/Math-v0``), the math-verify
wrapper (:mod:`.verify`) and answer extraction / voting (:mod:`.answers`). Importing this
package loads none of them (math-verify is slow to import)."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"MathEnv": "deciplane.envs.math.env",
         "verify_math": "deciplane.envs.math.verify",
         "extract_answer": "deciplane.envs.math.answers",
         "majority_vote": "deciplane.envs.math.answers"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'deciplane.envs.math' has no attribute {name!r}")


__all__ = list(_LAZY)
