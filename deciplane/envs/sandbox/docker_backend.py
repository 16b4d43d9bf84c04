"""The ``docker`` backend (work in progress in this commit)."""
from __future__ import annotations


def available() -> tuple[bool, str]:
    return False, "docker backend not built yet in this revision"
