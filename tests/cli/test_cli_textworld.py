"""`deciplane play`, `deciplane evaluate` and `deciplane demo` end to end (typer's CliRunner)."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from typer.testing import CliRunner

import deciplane  # noqa: F401
from deciplane.cli import app
from deciplane.envs.textworld.games import make_game_suite
from deciplane.cli.evaluate import (menu_label, parse_choice, parse_options, status_line,
                                    without_inform_epilogue)

pytestmark = pytest.mark.filterwarnings("ignore::jericho.UnsupportedGameWarning")
runner = CliRunner()


@pytest.fixture(scope="module")
def suite():
    return make_game_suite("embedded", "test")


def test_evaluate_expert_writes_json(suite, tmp_path):
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["evaluate", "--agent", "expert", "--env", "deciplane/TextWorld-v0",
                              "--split", "test", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert suite.fingerprint in res.output and "100.0%" in res.output
    report = json.loads(out.read_text())
    assert report["success_rate"] == 1.0 and report["episodes"] == len(suite)
    assert report["split_fingerprint"] == suite.fingerprint


def test_evaluate_random_with_env_options(suite):
    res = runner.invoke(app, ["evaluate", "--agent", "random", "--episodes", "3", "--num-envs",
                              "2", "--no-progress", "-e", "max_episode_steps=5"])
    assert res.exit_code == 0, res.output
    assert "random" in res.output and suite.fingerprint in res.output


def test_evaluate_unknown_agent_lists_agents():
    res = runner.invoke(app, ["evaluate", "--agent", "gpt-9"])
    assert res.exit_code != 0
    assert res.exit_code == 2 and "registered agents: expert" in res.output


def test_play_by_menu_letters_wins(suite):
    env = gym.make("deciplane/TextWorld-v0", games=suite, expert=True)
    _, info = env.reset(options={"game": 0})
    keys = ["zz"]  # not on the menu: asked again
    while True:
        keys.append(menu_label(info["expert_action"]))
        _, _, term, trunc, info = env.step(info["expert_action"])
        if term or trunc:
            break
    env.close()
    res = runner.invoke(app, ["play", "--split", "test", "--game", "0"],
                        input="\n".join(keys) + "\n")
    assert res.exit_code == 0, res.output
    assert "'zz' is not on the menu" in res.output and "won after" in res.output
    assert "step 0 · score 0/" in res.output and f"step {len(keys) - 2} · score" in res.output
    assert "RESTART" not in res.output and " turns." not in res.output   # Inform's epilogue


def test_play_quits_on_q_or_end_of_input():
    res = runner.invoke(app, ["play", "--split", "test", "--game", "1"], input="q\n")
    assert res.exit_code == 0 and "bye" in res.output
    res = runner.invoke(app, ["play", "--split", "test", "--game", "1"], input="")
    assert res.exit_code == 0


def test_demo_writes_chart_and_results(suite, tmp_path):
    res = runner.invoke(app, ["demo", "--out", str(tmp_path), "--random-episodes", "1"])
    assert res.exit_code == 0, res.output
    png = tmp_path / "textworld_success.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and str(png) in res.output.replace("\n", "")
    expert, random = json.loads((tmp_path / "results.json").read_text())
    assert expert["agent"] == "expert" and expert["success_rate"] == 1.0
    assert random["agent"] == "random" and random["episodes"] == len(suite)
    assert expert["split_fingerprint"] == random["split_fingerprint"] == suite.fingerprint


def test_small_helpers():
    assert parse_options(["n_games=3", "games=tw-simple", "x=[1, 2]"]) == \
        {"n_games": 3, "games": "tw-simple", "x": [1, 2]}
    assert [menu_label(i) for i in (0, 25, 26, 52)] == ["A", "Z", "a", "52"]
    assert parse_choice(" C ", 5) == 2 and parse_choice("7", 5) is None
    assert parse_choice("c", 5) == 2          # lower case picks the capital on small menus
    assert parse_choice("a", 30) == 26         # ... but is its own label on a 27+ menu
    assert parse_choice("3", 5) == 3 and parse_choice("hello", 5) is None


def test_inform_epilogue_and_status_line():
    last = ("You pick up the coin.\n\n   *** The End ***\n\nYou scored 1 out of a possible 1, "
            "in 3 turns.\n\n\nWould you like to RESTART, RESTORE a saved game, QUIT or UNDO "
            "the last command?")
    assert without_inform_epilogue(last) == "You pick up the coin.\n\n   *** The End ***"
    assert without_inform_epilogue("You scored a goal.") == "You scored a goal."
    assert status_line(2, {"score": 1, "max_score": 3}) == "step 2 · score 1/3"
    assert status_line(0, {}) == "step 0"
