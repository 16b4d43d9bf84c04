"""OpenEnv export and import, with OpenEnv's own server, client and validator: a served
TextWorld-Express episode equals the in-process one, a served CodeGen env never sends its
hidden tests, a SIGKILLed client frees its session, the exported folder validates."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import deciplane  # noqa: F401
from deciplane.errors import ConfigError

pytest.importorskip("openenv.core", reason="needs the interop extra (openenv)")
import uvicorn  # noqa: E402

from deciplane.interop.common import served_info  # noqa: E402
from deciplane.interop.openenv import (DeciplaneAction, create_app, environment_class,  # noqa: E402
                                       from_openenv)

TWX = "deciplane/TextWorldExpress-v0"
TWC = dict(game="twc", game_params={"numLocations": 2, "numItemsToPutAway": 2},
           menu_order="shuffled")
needs_twx = pytest.mark.skipif(
    shutil.which("java") is None or importlib.util.find_spec("textworld_express") is None,
    reason="TextWorld-Express needs java and textworld-express")


class Server:
    """OpenEnv's app for an env on a free localhost port, in a thread."""

    def __init__(self, env_id, kwargs, **options):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(create_app(env_id, kwargs, **options),
                                                    host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            assert time.time() < deadline, "server did not start"
            time.sleep(0.05)
        return self

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return json.loads(r.read())

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)


def test_served_info_drops_held_out_fields_and_the_expert_off_train():
    info = {"menu": ["a"], "won": False, "gold_answer": "42", "hidden_tests": "assert",
            "expert_action": 3, "expert_command": "take x", "score": 0.25}
    assert served_info(info, "test", expose_expert=True) == {"won": False, "score": 0.25}
    assert served_info(info, "train", expose_expert=True) == {
        "won": False, "expert_action": 3, "expert_command": "take x", "score": 0.25}
    assert served_info(info, "train", expose_expert=False) == {"won": False, "score": 0.25}
    with pytest.raises(ConfigError, match="train split"):
        environment_class(TWX, {**TWC, "split": "test"}, expose_expert=True)
    with pytest.raises(ConfigError, match="registered"):
        environment_class("nobody/Nothing-v0")


@needs_twx
def test_served_twx_episode_equals_the_in_process_one_and_passes_check_env():
    kwargs = {**TWC, "split": "train", "expert": True}
    local = gym.make(TWX, **kwargs)
    with Server(TWX, kwargs, max_sessions=2, expose_expert=True) as srv:
        assert srv.get("/health")["status"] == "healthy"
        meta = srv.get("/metadata")
        assert meta["name"] == TWX and "never sent" in meta["description"]
        remote = from_openenv(srv.url)
        try:
            for game in (3, 7):
                o1, i1 = remote.reset(seed=game, options={"game": game})
                o2, i2 = local.reset(seed=game, options={"game": game})
                assert o1 == o2 and list(i1["menu"]) == list(i2["menu"])
                done = False
                while not done:       # the in-process expert's choices, played on both
                    k = i2["expert_action"]
                    o1, r1, t1, tr1, i1 = remote.step(k)
                    o2, r2, t2, tr2, i2 = local.step(k)
                    assert (o1, r1, t1, tr1) == (o2, r2, t2, tr2)
                    assert list(i1["menu"]) == list(i2["menu"])
                    assert i1["expert_command"] == i2["expert_command"]
                    done = t2 or tr2
                assert i1["won"] and i2["won"]
            assert srv.get("/deciplane/sessions") == {"active": 1, "max": 2}
            check_env(remote, skip_render_check=True)
        finally:
            remote.close()
            local.close()
        deadline = time.time() + 20
        while srv.get("/deciplane/sessions")["active"] and time.time() < deadline:
            time.sleep(0.2)
        assert srv.get("/deciplane/sessions")["active"] == 0


@needs_twx
def test_the_expert_is_not_served_on_test_and_a_wrong_command_is_an_invalid_step():
    env_cls = environment_class(TWX, {**TWC, "split": "test", "expert": True})
    env = env_cls()
    try:
        obs = env.reset(seed=0, options={"game": 0})
        assert obs.menu and not any(k.startswith("expert") for k in obs.info)
        obs = env.step(DeciplaneAction(command="dance wildly"))
        assert obs.info["invalid_action"] is True and obs.reward == 0.0
        obs = env.step(DeciplaneAction(command=obs.menu[0]))
        assert obs.info["invalid_action"] is False
        with pytest.raises(ValueError, match="exactly one"):
            env.step(DeciplaneAction(index=0, command=obs.menu[0]))
    finally:
        env.close()


def test_served_codegen_never_sends_hidden_tests():
    """Every raw WebSocket message of full episodes (a right and a wrong program per task)
    is searched for each hidden case's call, its message and its expected value."""
    from websockets.sync.client import connect

    from deciplane.envs.code import easy_funcs

    tasks = easy_funcs.generate_splits()["test"][:3]
    messages = []
    with Server("deciplane/CodeGen-v0", {"benchmark": "easy-funcs", "split": "test"},
                max_sessions=1) as srv:
        with connect(f"ws://127.0.0.1:{srv.port}/ws", open_timeout=10) as ws:
            for i, task in enumerate(tasks):
                for program in ("    return 0\n", "    return None\n"):
                    ws.send(json.dumps({"type": "reset", "data": {"options": {"index": i}}}))
                    messages.append(ws.recv(timeout=60))
                    ws.send(json.dumps({"type": "step", "data": {"command": program}}))
                    messages.append(ws.recv(timeout=120))
    raw = "\n".join(messages)
    assert '"done":true' in raw.replace(" ", "") and "hidden tests" in raw   # it was judged
    for task in tasks:
        assert task.prompt.split("\n")[0] in raw
        for line in task.tests.splitlines()[1:]:
            check, label = line.split(", 'input ", 1)     # assert candidate(-21) == -672
            call, expected = check.split("assert ", 1)[1].split(" == ", 1)
            label = "input " + label.rstrip("'")            # the assertion's message
            assert call not in raw and label not in raw, line
            if len(expected) >= 4 and expected not in task.prompt:
                assert expected not in raw, line


@needs_twx
def test_a_sigkilled_client_frees_its_session():
    with Server(TWX, {**TWC, "split": "train"}, max_sessions=1, session_timeout_s=5) as srv:
        code = ("import sys, time\nfrom deciplane.interop.openenv import from_openenv\n"
                f"env = from_openenv({srv.url!r})\nenv.reset(seed=0, options={{'game': 0}})\n"
                "print('ready', flush=True)\ntime.sleep(300)\n")
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                 text=True)
        try:
            assert child.stdout.readline().strip() == "ready"
            assert srv.get("/deciplane/sessions")["active"] == 1
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
            deadline = time.time() + 30
            while srv.get("/deciplane/sessions")["active"] and time.time() < deadline:
                time.sleep(0.2)
            assert srv.get("/deciplane/sessions")["active"] == 0
            again = from_openenv(srv.url)          # the slot is free again
            again.reset(seed=1, options={"game": 1})
            again.close()
        finally:
            if child.poll() is None:
                child.kill()


@needs_twx
def test_from_openenv_in_process_and_registered_like_a_plugin():
    cls = environment_class(TWX, {**TWC, "split": "train", "expert": True},
                            expose_expert=True)
    env = from_openenv(cls, register_as="test/openenv-twc-v0")
    made = gym.make("test/openenv-twc-v0")
    try:
        obs, info = env.reset(seed=2, options={"game": 2})
        obs2, info2 = made.reset(seed=2, options={"game": 2})
        assert obs == obs2 and isinstance(env.action_space, gym.spaces.Discrete)
        won = False
        for _ in range(20):
            obs, r, term, trunc, info = env.step(info["expert_action"])
            if term or trunc:
                won = info["won"]
                break
        assert won
    finally:
        env.close()
        made.close()


def test_a_text_env_in_process_takes_text_actions():
    from deciplane.benchmarks.data import load_labeled

    items, _ = load_labeled("arith", "train", limit=1)
    env = from_openenv(environment_class("deciplane/Math-v0", {"split": "train"}))
    try:
        obs, info = env.reset(seed=0, options={"index": 0})
        assert "menu" not in info and isinstance(env.action_space, gym.spaces.Text)
        assert obs == items[0].prompt
        _, r, term, _, info = env.step(items[0].gold)
        assert r == 1.0 and term and info["correct"] is True
        assert not any("answer" in k for k in info)
    finally:
        env.close()


def test_exported_folder_passes_openenv_validate(tmp_path):
    from typer.testing import CliRunner

    from deciplane.cli import app

    out = tmp_path / "twc-env"
    res = CliRunner().invoke(app, ["serve", TWX, "-e", "game=twc", "-e", "split=train",
                                   "--export", str(out)])
    assert res.exit_code == 0, res.output
    assert {p.name for p in out.iterdir()} >= {"openenv.yaml", "server", "pyproject.toml"}
    assert (out / "server" / "Dockerfile").is_file() and (out / "server" / "app.py").is_file()
    openenv = shutil.which("openenv", path=os.path.dirname(sys.executable))
    assert openenv, "the openenv CLI is installed with the interop extra"
    v = subprocess.run([openenv, "validate", str(out), "--level", "static", "--skip-build"],
                       capture_output=True, text=True, timeout=120)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "PASS" in v.stdout


@needs_twx
def test_deciplane_trains_and_evaluates_on_an_openenv_environment(tmp_path):
    """RLiD-PPO with a BC warm start on the expert's actions the OpenEnv environment serves
    (the tiny model, one iteration): the trainer builds the env from its registered id."""
    import torch

    from deciplane.trainers.config import load_config
    from deciplane.trainers.run import run_training

    torch.set_num_threads(1)
    cls = environment_class(TWX, {**TWC, "split": "train", "expert": True},
                            expose_expert=True)
    from_openenv(cls, register_as="test/openenv-train-v0").close()
    cfg = load_config(data={
        "progress": False, "seed": 0, "algorithm": "rlid_ppo", "iterations": 1, "history": 0,
        "model": {"name": "deciplane/tiny", "finetune": "full", "threads": 1},
        "env": {"id": "test/openenv-train-v0", "games_per_iteration": 1, "group_size": 2,
                "max_episode_steps": 3},
        "bc": {"episodes": 2, "epochs": 1},
        "eval": {"every": 0, "final_splits": ["test"], "episodes": 2}, "optim": {"lr": 1e-3}})
    s = run_training(cfg, tmp_path / "run")
    assert s["warm_start"]["decisions"] == 6 and s["optimizer_steps"] >= 1
    assert s["eval"]["test"]["episodes"] == 2 and s["env_steps"] > 0
