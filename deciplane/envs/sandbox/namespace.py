"""The ``namespace`` backend (work in progress in this commit)."""
from __future__ import annotations


def available() -> tuple[bool, str]:
    return False, "namespace backend not built yet in this revision"
