"""Shared ALFWorld fixtures: small generated suites of each split (cached in DECIPLANE_HOME)."""

from __future__ import annotations

import pytest

pytest.importorskip("fast_downward", reason="ALFWorld needs fast-downward-textworld")

N_SMALL = 12  # two games of each of the six task types


@pytest.fixture(scope="session")
def small_suites():
    from deciplane.envs.alfworld.generator import make_alfworld_suite

    return {s: make_alfworld_suite(s, N_SMALL) for s in ("train", "valid_seen", "valid_unseen")}
