"""The official-data loader on a small folder in ALFWorld's json_2.1.1 layout, built here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gymnasium as gym
import pytest

import deciplane.envs  # noqa: F401 - registers the ids
from deciplane.envs.alfworld import official
from deciplane.envs.alfworld.pddl import restyle_grammar
from deciplane.errors import GameError

ENV_ID = "deciplane/ALFWorld-v0"


@pytest.fixture(scope="module")
def data_dir(small_suites, tmp_path_factory):
    """json_2.1.1/valid_seen with 3 good games (one written for ALFWorld < 0.4, one whose
    goal is only in traj_data.json) and 4 that must be reported: broken JSON, no game
    file, unsolvable, a sliced task."""
    root = tmp_path_factory.mktemp("alfworld_data")
    m = small_suites["valid_seen"]
    split = root / "json_2.1.1" / "valid_seen"
    src = [Path(m["root"]) / g["folder"] for g in m["games"]]

    def put(i: int, task: str, trial: str, edit=None) -> Path:
        d = split / task / trial
        d.mkdir(parents=True)
        shutil.copy(src[i] / "traj_data.json", d / "traj_data.json")
        game = json.loads((src[i] / "game.tw-pddl").read_text())
        game.pop("deciplane")  # official games carry no deciplane metadata
        if edit:
            edit(game)
        (d / "game.tw-pddl").write_text(json.dumps(game))
        return d

    put(0, "pick_and_place_simple-Candle-None-Shelf-1", "trial_T1")
    put(1, "look_at_obj_in_light-Mug-None-DeskLamp-2", "trial_T2",
        lambda g: g.update(grammar=restyle_grammar(g["grammar"], "put")))
    goal = m["games"][2]["goal"]
    put(2, "pick_clean_then_place_in_recep-Fork-None-CounterTop-3", "trial_T3",
        lambda g: g.update(grammar=g["grammar"].replace(goal, "UNKNOWN GOAL")))
    broken = put(3, "pick_heat_then_place_in_recep-Potato-None-Drawer-4", "trial_T4")
    (broken / "game.tw-pddl").write_text('{"pddl_domain": "(define')
    (put(4, "pick_cool_then_place_in_recep-Cup-None-Shelf-5", "trial_T5") / "game.tw-pddl").unlink()
    put(5, "pick_two_obj_and_place-Pen-None-Desk-6", "trial_T6",
        lambda g: g.update(solvable=False))
    put(0, "pick_and_place_simple-AppleSliced-None-Fridge-7", "trial_T7")
    return root


def test_manifest_lists_games_hashes_counts_and_every_skipped_game_with_its_reason(data_dir):
    m = official.official_manifest("valid_seen", data_dir, verify=True)
    assert m["source"] == "official" and m["n_games"] == 3 and m["expected_n_games"] == 140
    assert m["task_type_counts"]["look_at_obj_in_light"] == 1
    assert m["command_styles"] == {"move": 2, "put": 1}
    assert all(len(g["sha256"]) == 64 for g in m["games"])
    reasons = {s["folder"].split("/")[0].split("-")[0]: s["reason"] for s in m["skipped"]}
    assert len(m["skipped"]) == 4
    assert "not a readable game.tw-pddl JSON" in reasons["pick_heat_then_place_in_recep"]
    assert "no game.tw-pddl" in reasons["pick_cool_then_place_in_recep"]
    assert reasons["pick_two_obj_and_place"] == "marked unsolvable"
    assert "sliced" in reasons["pick_and_place_simple"]
    clean = next(g for g in m["games"] if g["task_type"] == "pick_clean_then_place_in_recep")
    assert clean["goal"].startswith("put a clean ")  # from traj_data.json's parameters


def test_auto_source_plays_the_official_games_and_names_the_version(data_dir, monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(data_dir))
    env = gym.make(ENV_ID, split="valid_seen", expert=True)
    assert env.unwrapped.source == "official" and env.unwrapped.num_tasks == 3
    for i in range(3):
        obs, info = env.reset(options={"game": i})
        assert info["source"] == "official" and "UNKNOWN GOAL" not in obs
        assert info["split_fingerprint"].startswith("official-")
        assert info["command_style"] == "move"
        while True:
            obs, r, term, trunc, info = env.step(info["expert_action"])
            if term or trunc:
                break
        assert info["won"], info["game_name"]
        if info["task_type"] == "look_at_obj_in_light":
            assert info["data_command_style"] == "put"  # detected, rewritten to "move"
    native = gym.make(ENV_ID, split="valid_seen", command_style="native")
    styles = {native.reset(options={"game": i})[1]["data_command_style"] for i in range(3)}
    assert styles == {"move", "put"}


def test_without_data_auto_falls_back_and_official_explains(small_suites, tmp_path, monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))  # exists but holds no json_2.1.1
    assert official.data_root() is None
    assert official.describe()["present"] is False
    with pytest.raises(GameError, match="ALFWORLD_DATA"):
        gym.make(ENV_ID, source="official", split="valid_seen")
    env = gym.make(ENV_ID, split="valid_seen", n_games=12)
    assert env.reset(seed=0)[1]["source"] == "generated"


def test_describe_reports_presence_counts_and_styles(data_dir):
    d = official.describe(data_dir)
    assert d["present"] and d["splits"]["valid_seen"] == 7 and d["splits"]["train"] == 0
    assert set(d["command_styles"]) <= {"move", "put"} and sum(d["command_styles"].values()) >= 1


def test_doctor_says_whether_data_is_present_and_its_command_version(data_dir, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    assert any("official data: no (ALFWORLD_DATA unset)" in x for x in official.doctor_lines())
    monkeypatch.setenv("ALFWORLD_DATA", str(data_dir))
    line = next(x for x in official.doctor_lines() if "official data" in x)
    assert line.startswith("ALFWorld official data: yes") and "valid_seen 7" in line
    assert "move-to (ALFWorld >= 0.4" in line or "put-in/on (ALFWorld < 0.4" in line


def test_doctor_command_prints_the_alfworld_lines(data_dir, monkeypatch):
    from typer.testing import CliRunner

    from deciplane.cli import app

    monkeypatch.setenv("ALFWORLD_DATA", str(data_dir))
    out = CliRunner().invoke(app, ["doctor"])
    assert "ALFWorld planner (fast-downward-textworld): yes" in out.output
    assert "ALFWorld official data: yes" in out.output
