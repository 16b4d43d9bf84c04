"""Generated ALFWorld games: deterministic, disjoint splits, solvable, safely cached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import deciplane.envs  # noqa: F401 - registers the ids
from deciplane.envs.alfworld import generator as gen
from deciplane.envs.alfworld.pddl import TASK_TYPES
from deciplane.errors import ConfigError

N_SMALL = 12  # = conftest.N_SMALL: two games of each task type

ROOT = Path(__file__).resolve().parents[3]


def test_generation_is_deterministic_by_seed():
    a = gen.generate_game("valid_seen", 3, seed=0)
    b = gen.generate_game("valid_seen", 3, seed=0)
    c = gen.generate_game("valid_seen", 3, seed=1)
    assert json.dumps(a["game"], sort_keys=True) == json.dumps(b["game"], sort_keys=True)
    assert a["hash"] == b["hash"] != c["hash"]
    assert a["game"]["deciplane"]["task_type"] == TASK_TYPES[3]


def test_splits_are_disjoint_by_content_hash_and_layout(small_suites):
    hashes = {s: {g["content_hash"] for g in m["games"]} for s, m in small_suites.items()}
    layouts = {s: {g["layout_hash"] for g in m["games"]} for s, m in small_suites.items()}
    assert all(len(h) == N_SMALL for h in hashes.values())  # no repeat within a split
    assert not hashes["train"] & hashes["valid_seen"]
    assert not hashes["train"] & hashes["valid_unseen"]
    assert not hashes["valid_seen"] & hashes["valid_unseen"]
    # unseen room layouts: no valid_unseen layout appears in train or valid_seen
    assert not layouts["valid_unseen"] & (layouts["train"] | layouts["valid_seen"])
    for split, m in small_suites.items():  # membership follows from the hashes alone
        for g in m["games"]:
            assert gen.game_split(g["layout_hash"], g["content_hash"]) == split
        assert m["task_type_counts"] == {t: N_SMALL // 6 for t in TASK_TYPES}


def test_games_are_alfworld_format_with_real_goals(small_suites):
    m = small_suites["train"]
    for g in m["games"]:
        d = Path(m["root"]) / g["folder"]
        game = json.loads((d / "game.tw-pddl").read_text())
        traj = json.loads((d / "traj_data.json").read_text())
        assert set(game) >= {"pddl_domain", "grammar", "pddl_problem", "solvable"}
        assert game["solvable"] is True and game["walkthrough"]
        assert "UNKNOWN GOAL" not in game["grammar"]
        assert f"Your task is to: {g['goal']}." in game["grammar"]
        assert traj["task_type"] == g["task_type"]


def test_expert_solves_every_small_test_game_of_each_type(small_suites):
    env = gym.make("deciplane/ALFWorld-v0", source="generated", split="test",
                   n_games=N_SMALL, expert=True)
    won = {t: 0 for t in TASK_TYPES}
    for i in range(env.unwrapped.num_tasks):
        obs, info = env.reset(options={"game": i})
        assert f"Your task is to: {info['goal']}." in obs
        total = 0.0
        while True:
            obs, r, term, trunc, info = env.step(info["expert_action"])
            total += r
            if term or trunc:
                break
        assert info["won"] and term and total == 1.0, info["game_name"]
        won[info["task_type"]] += 1
    assert won == {t: N_SMALL // 6 for t in TASK_TYPES}


@pytest.mark.slow
@pytest.mark.timeout(3600)  # generates the 60 games first: ~15 min on a loaded 2-core machine
def test_expert_solves_every_default_valid_unseen_game():
    """The default held-out split (60 games, 10 per type) is won by the expert."""
    env = gym.make("deciplane/ALFWorld-v0", source="generated", split="valid_unseen",
                   expert=True)
    assert env.unwrapped.num_tasks == 60
    for i in range(60):
        obs, info = env.reset(options={"game": i})
        while True:
            obs, r, term, trunc, info = env.step(info["expert_action"])
            if term or trunc:
                break
        assert info["won"], info["game_name"]


def test_cache_is_reused_and_a_corrupt_game_is_regenerated(tmp_path, monkeypatch):
    monkeypatch.setenv("DECIPLANE_HOME", str(tmp_path))
    m1 = gen.make_alfworld_suite("valid_seen", 2, seed=7)
    game = Path(m1["root"]) / m1["games"][0]["folder"] / "game.tw-pddl"
    mtime = game.stat().st_mtime_ns
    assert gen.make_alfworld_suite("valid_seen", 2, seed=7) == m1
    assert game.stat().st_mtime_ns == mtime  # nothing regenerated
    game.write_text("{broken")
    m2 = gen.make_alfworld_suite("valid_seen", 2, seed=7)
    assert m2["fingerprint"] == m1["fingerprint"]
    assert json.loads(game.read_text())["solvable"] is True


def test_concurrent_generation_gives_one_intact_suite(tmp_path):
    code = ("import json,sys; from deciplane.envs.alfworld.generator import make_alfworld_suite;"
            "print(json.dumps(make_alfworld_suite('train', 3, seed=11)['fingerprint']))")
    env = dict(os.environ, DECIPLANE_HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    fps = {json.loads(o[0].strip().splitlines()[-1]) for o in outs}
    assert len(fps) == 1
    m = gen._load_manifest(next(tmp_path.glob("games/alfworld/*/train/manifest-n3.json")))
    assert m is not None and m["fingerprint"] in fps


def test_bad_split_and_size_are_config_errors():
    with pytest.raises(ConfigError, match="valid_unseen"):
        gen.resolve_split("dev")
    assert gen.resolve_split("test") == "valid_unseen"
    with pytest.raises(ConfigError, match="n_games"):
        gen.make_alfworld_suite("train", 0)
