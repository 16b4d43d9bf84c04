"""Math answers: the environment (:mod:`.env`, ``deciplane/Math-v0``), the math-verify
wrapper (:mod:`.verify`) and answer extraction / voting (:mod:`.answers`). math-verify
itself loads on the first verification (it is slow to import)."""

from __future__ import annotations

from deciplane.envs.math.answers import extract_answer, majority_vote
from deciplane.envs.math.env import MathEnv
from deciplane.envs.math.verify import verify_math

__all__ = ["MathEnv", "verify_math", "extract_answer", "majority_vote"]
