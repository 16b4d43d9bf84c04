"""Shared by the env tests: skip an env this machine cannot build, with the reason."""

from __future__ import annotations

import importlib.util
import shutil

import pytest


def skip_unless_buildable(env_id: str) -> None:
    """TextWorld-Express needs its package and Java; ALFWorld its planner."""
    if env_id == "deciplane/TextWorldExpress-v0":
        pytest.importorskip("textworld_express")
        if shutil.which("java") is None:
            pytest.skip("TextWorld-Express needs java")
    if env_id == "deciplane/ALFWorld-v0" and importlib.util.find_spec("fast_downward") is None:
        pytest.skip("ALFWorld needs fast-downward-textworld")
