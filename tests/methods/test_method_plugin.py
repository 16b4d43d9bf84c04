"""A training method from another package, end to end through the command line: the
example plug-in (examples/toy_method_plugin, REINFORCE on the menu agent) installed through
its ``deciplane.methods`` entry point is listed, trains on the corridor plug-in env with
the tiny model, resumes, and its checkpoint is scored by ``deciplane evaluate``."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLUGINS = {  # distribution -> (what to copy, entry_points.txt)
    "toy-method": (EXAMPLES / "toy_method_plugin" / "toy_method",
                   "[deciplane.methods]\ntoy_reinforce = toy_method:SPEC\n"),
    "corridor-plugin": (EXAMPLES / "corridor_plugin" / "corridor_plugin.py",
                        "[deciplane.envs]\ncorridor/Corridor-v0 = corridor_plugin:CorridorEnv\n"),
}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """Both example plug-ins laid out as pip installs them, in a private site folder."""
    site = tmp_path_factory.mktemp("site")
    for dist, (source, entry_points) in PLUGINS.items():
        if source.is_dir():
            shutil.copytree(source, site / source.name)
        else:
            shutil.copy(source, site)
        info = site / f"{dist.replace('-', '_')}-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
        (info / "entry_points.txt").write_text(entry_points)
    return site


def _cli(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-m", "deciplane.cli", *args], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out


def test_the_plugin_is_listed(site):
    lines = _cli(site, "methods").stdout.splitlines()
    assert any(line.startswith("toy_reinforce  (train, plug-in from toy-method)  REINFORCE")
               for line in lines), lines
    assert "    paper: Williams, 1992: Simple statistical gradient-following algorithms for " \
           "connectionist reinforcement learning" in lines
    assert "ToyReinforceConfig" in _cli(site, "train", "--help-config").stdout


def _iterations(run: Path) -> list[int]:
    return [json.loads(x)["iteration"] for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_plugin_trains_resumes_and_evaluates(site, tmp_path):
    run = tmp_path / "run"
    _cli(site, "train", str(EXAMPLES / "toy_method_plugin" / "toy.yaml"), "--run-dir", str(run))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["algorithm"] == "toy_reinforce" and summary["status"] == "completed"
    assert summary["optimizer_steps"] == 2 and summary["eval"]["test"]["episodes"] == 4
    assert _iterations(run) == [0, 1, 2]
    steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()][1:]
    assert all(math.isfinite(m["loss/policy"]) and m["rollout/episodes"] == 8 for m in steps)

    _cli(site, "train", "--run-dir", str(run), "--resume", "--set", "iterations=3")
    assert _iterations(run) == [0, 1, 2, 3]
    assert json.loads((run / "summary.json").read_text())["optimizer_steps"] == 3
    # the method's own state (its reward history) came back with the checkpoint
    steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()][1:]
    rewards = [m["rollout/reward"] for m in steps]
    assert steps[-1]["rollout/reward_running_mean"] == pytest.approx(sum(rewards) / 3)
    assert [m["rollout/iterations_seen"] for m in steps] == [1, 2, 3]

    out = _cli(site, "evaluate", str(run), "--episodes", "2", "--json", str(tmp_path / "e.json"))
    report = json.loads((tmp_path / "e.json").read_text())
    assert report["checkpoint"] == "iter_000003" and report["episodes"] == 2, out.stdout
