"""A story file that passes the header checksum but fails in the emulator is a GameError
(never played as silent zero rewards)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from gymnasium.error import ResetNeeded

from deciplane.envs.textworld.env import TextWorldEnv, runtime_error_in
from deciplane.envs.textworld.games import z8_problem
from deciplane.errors import GameError


def _corrupt_copy(src: Path, dst: Path, start_frac: float, length: int | None) -> Path:
    """``src`` with part of its high memory (code and strings) zeroed and the header
    checksum recomputed, so that deciplane's file check accepts it."""
    data = bytearray(src.read_bytes())
    high = int.from_bytes(data[4:6], "big")
    declared = int.from_bytes(data[0x1A:0x1C], "big") * 8  # v8: length / 8
    start = high + int((declared - high) * start_frac)
    end = declared if length is None else min(declared, start + length)
    data[start:end] = bytes(end - start)
    data[0x1C:0x1E] = (sum(data[64:declared]) & 0xFFFF).to_bytes(2, "big")
    dst.write_bytes(bytes(data))
    shutil.copy(src.with_suffix(".json"), dst.with_suffix(".json"))
    assert z8_problem(bytes(data)) == ""  # the checksum matches: only running it can tell
    return dst


@pytest.fixture(scope="module")
def game() -> Path:
    env = TextWorldEnv()
    path = Path(env.suite.paths[0])
    env.close()
    return path


@pytest.mark.parametrize("start_frac,length", [(0.0, None), (0.05, 4096)],
                         ids=["all-code-zeroed", "4k-zeroed"])
def test_checksummed_corrupt_game_raises_game_error(game, tmp_path, start_frac, length):
    bad = _corrupt_copy(game, tmp_path / "broken.z8", start_frac, length)
    env = TextWorldEnv(games=[bad], action_mode="text")
    with pytest.raises(GameError) as err:
        env.reset(seed=0)
        for _ in range(5):
            env.step("look")
    msg = str(err.value)
    assert str(bad) in msg and "Emulator halted due to runtime error" in msg
    assert "Regenerate" in msg and "re-download" in msg
    with pytest.raises(ResetNeeded, match="call reset"):  # never played on
        env.step("look")
    env.close()


def test_intact_game_plays(game):
    env = TextWorldEnv(games=[game])
    obs, info = env.reset(seed=0)
    assert runtime_error_in(obs) is None and info["menu"].actions
    env.close()


def test_runtime_error_markers():
    assert runtime_error_in("Emulator halted due to runtime error.\n") == (
        "Emulator halted due to runtime error.")
    assert runtime_error_in("You see a box.\n[** Programming error: tried to read from "
                            "--> call [** ]\nmore") == (
        "[** Programming error: tried to read from --> call [** ]")
    assert runtime_error_in("*** Run-time problem P10: Since the ...") is not None
    assert runtime_error_in("You are carrying: a programming book. Error? No.") is None
    assert runtime_error_in("") is None and runtime_error_in(None) is None
