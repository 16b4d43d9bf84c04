"""Plug-in environments: an installed distribution's ``deciplane.envs`` entry point shows up
in ``deciplane envs`` and runs through the public API unchanged."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "corridor_plugin"


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> Path:
    """Install the example plug-in the way pip lays it out (module + .dist-info with
    entry_points.txt) into a private site folder, without touching the shared venv."""
    site = tmp_path_factory.mktemp("site")
    shutil.copy(EXAMPLE / "corridor_plugin.py", site)
    dist = site / "corridor_plugin-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: corridor-plugin\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text(
        '[deciplane.envs]\ncorridor/Corridor-v0 = corridor_plugin:CorridorEnv\n')
    return site


def _run(args: list[str], site: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(site))
    return subprocess.run([sys.executable, "-m", "deciplane.cli", *args], env=env,
                          capture_output=True, text=True, timeout=300)


def test_plugin_listed_by_cli(plugin_path):
    out = _run(["envs"], plugin_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("corridor/Corridor-v0 ") for line in lines), out.stdout
    assert any(line.startswith("deciplane/TextWorld-v0 ") for line in lines)


def test_plugin_passes_check_env_and_runs(plugin_path):
    code = textwrap.dedent("""
        import gymnasium as gym
        from gymnasium.utils.env_checker import check_env
        import deciplane
        env = gym.make("corridor/Corridor-v0")
        check_env(env.unwrapped)
        obs, info = env.reset(seed=0)
        total, done = 0.0, False
        while not done:
            obs, r, term, trunc, info = env.step(info["expert_action"])
            total += r; done = term or trunc
        assert info["won"] and total == 1.0
        assert "corridor/Corridor-v0" in deciplane.envs.registered_ids()
        print("OK")
    """)
    env = dict(os.environ, PYTHONPATH=str(plugin_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr


def test_unknown_env_lists_registered_ids():
    import deciplane
    from deciplane.errors import UnknownEnvironment

    with pytest.raises(UnknownEnvironment, match="deciplane/TextWorld-v0"):
        deciplane.envs.make("deciplane/NoSuchEnv-v0")
