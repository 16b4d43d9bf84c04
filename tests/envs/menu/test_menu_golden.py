"""The menu envs' outputs for fixed seeds and actions are what they were (issue 23: the
step got faster without changing one observation, reward, flag, menu or info entry).
The digests come from ``tests/envs/menu/menu_golden.py --record``."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.envs.menu import menu_golden as mg

pytestmark = pytest.mark.filterwarnings("ignore::jericho.UnsupportedGameWarning")
GOLDEN = json.loads(mg.GOLDEN.read_text())


def _compare(now: dict, golden: dict) -> None:
    assert set(now) == set(golden)
    for name in golden:
        for ep, (got, want) in enumerate(zip(now[name], golden[name])):
            assert len(got) == len(want), f"{name} episode {ep}: {len(got)} records, " \
                                          f"recorded {len(want)}"
            first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
            assert first is None, f"{name} episode {ep}: record {first} differs"


def test_textworld_outputs_unchanged():
    from deciplane.envs.textworld.games import make_game_suite

    if make_game_suite("embedded", "test").fingerprint != GOLDEN["textworld_fingerprint"]:
        pytest.skip("another TextWorld generates other embedded games")
    _compare(mg.textworld_digests(), GOLDEN["textworld"])


def test_twx_outputs_unchanged():
    pytest.importorskip("textworld_express")
    if shutil.which("java") is None:
        pytest.skip("TextWorld-Express needs java")
    _compare(mg.twx_digests(), GOLDEN["twx"])
