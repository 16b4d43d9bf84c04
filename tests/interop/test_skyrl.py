"""skyrl-gym's own registry and ``make`` on deciplane envs: a menu env replied to in text
reaches the game's reward; a text env is scored by its verifier."""

from __future__ import annotations

import importlib.util
import shutil

import gymnasium as gym
import pytest

import deciplane  # noqa: F401

skyrl_gym = pytest.importorskip("skyrl_gym", reason="needs the interop extra (skyrl-gym)")
from deciplane.interop.skyrl import menu_choice, menu_prompt, register  # noqa: E402

needs_twx = pytest.mark.skipif(
    shutil.which("java") is None or importlib.util.find_spec("textworld_express") is None,
    reason="TextWorld-Express needs java and textworld-express")


def test_menu_replies_are_read_as_lines_or_numbers():
    menu = ["take clean cup", "move south"]
    assert menu_choice("Take  clean cup.", menu) == 0
    assert menu_choice("2", menu) == 1
    assert menu_choice("3", menu) == 2 and menu_choice("fly", menu) == 2    # invalid
    assert menu_prompt("You are here.", menu).endswith(
        "1) take clean cup\n2) move south\n\nReply with one action, as written (or its number).")
    assert menu_prompt("2+2?", None) == "2+2?"


def test_a_text_env_through_skyrl_make_gets_its_verifier_reward():
    from deciplane.benchmarks.data import load_labeled

    items, _ = load_labeled("arith", "train", limit=1)
    env = skyrl_gym.make(register(), env_config={"env_id": "deciplane/Math-v0",
                                                 "env_kwargs": {"split": "train"}},
                         extras={"seed": 0, "options": {"index": 0}})
    chat, meta = env.init([{"role": "system", "content": "Solve it."}])
    assert chat[-1] == {"role": "user", "content": items[0].prompt}
    out = env.step(items[0].gold)
    assert out["reward"] == 1.0 and out["done"] and out["observations"] == []
    assert out["metadata"]["correct"] is True
    env.close()


@needs_twx
def test_a_menu_env_through_skyrl_make_reaches_the_game_reward():
    kwargs = {"game": "twc", "game_params": {"numLocations": 2, "numItemsToPutAway": 2},
              "split": "train"}
    env = skyrl_gym.make(register(), env_config={"env_id": "deciplane/TextWorldExpress-v0",
                                                 "env_kwargs": kwargs},
                         extras={"seed": 3, "options": {"game": 3}})
    twin = gym.make("deciplane/TextWorldExpress-v0", expert=True, **kwargs)
    try:
        chat, meta = env.init([])
        _, info = twin.reset(seed=3, options={"game": 3})
        assert "Legal actions:" in chat[-1]["content"] and "expert_action" not in meta
        total, out = 0.0, {"done": False}
        for _ in range(20):
            command = info["expert_command"]
            out = env.step(command.upper() + ".")        # the reply as a model might write it
            _, r, term, trunc, info = twin.step(info["expert_action"])
            assert out["reward"] == r
            total += out["reward"]
            if out["done"]:
                break
        assert out["done"] and out["metadata"]["won"] and total == pytest.approx(1.0)
        assert env.get_metrics()["turns"] >= 4
    finally:
        env.close()
        twin.close()


def test_doctor_names_the_interop_extra():
    from typer.testing import CliRunner

    from deciplane.cli import app
    from deciplane.interop.common import interop_status

    ok, why = interop_status()
    assert ok and "openenv 0.10" in why and "skyrl-gym 0.4" in why and "trl 1.16" in why
    out = CliRunner().invoke(app, ["doctor"])
    assert "interop (OpenEnv, SkyRL): yes (openenv 0.10" in out.output
