"""``deciplane train`` under ``accelerate launch`` with 2 CPU processes (gloo).

One RLiD-PPO run on ``deciplane/tiny`` in one process, the same run data-parallel over two
processes (``configs/accelerate/cpu_2proc.yaml``), and a two-process run stopped after one
iteration and resumed (again on two processes) to the full budget. The data-parallel run
logs the single process's metrics (floats within rounding: the gradient is summed in
another order) and ends with its held-out numbers; the resumed run equals the
uninterrupted two-process run exactly, parameters of the last checkpoint included.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
ACCEL = REPO / "configs" / "accelerate" / "cpu_2proc.yaml"
CONFIG = """
algorithm: rlid_ppo
seed: 3
iterations: 3
progress: false
history: 0
model: {name: deciplane/tiny, finetune: lora, lora_rank: 4, lora_alpha: 8, threads: 1}
env: {games_per_iteration: 2, group_size: 2, max_episode_steps: 3}
optim: {lr: 0.01, epochs: 2, micro_batch_size: 2}
eval: {every: 0, final_splits: [test], episodes: 2, before: false}
checkpoint: {every: 1, keep_last: 1}
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    return env


def _port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _train(cwd: Path, *args: str, procs: int = 1) -> None:
    launch = ([sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ACCEL),
               "--main_process_port", _port(), "-m", "deciplane.cli"] if procs > 1
              else [sys.executable, "-m", "deciplane.cli"])
    out = subprocess.run([*launch, "train", *args], env=_env(), cwd=cwd, timeout=600,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]


def _metrics(run: Path) -> list[dict]:
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in recs]


def _last_params(run: Path) -> dict[str, torch.Tensor]:
    (last,) = sorted((run / "checkpoints").iterdir())
    return torch.load(last / "state.pt", weights_only=False)["params"]


@pytest.mark.slow
def test_accelerate_two_processes_match_one_and_resume_across_processes(tmp_path):
    from deciplane.agents.loading import ensure_tiny

    ensure_tiny()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    one, two, resumed = tmp_path / "one", tmp_path / "two", tmp_path / "resumed"
    _train(tmp_path, str(cfg), "--run-dir", str(one))
    _train(tmp_path, str(cfg), "--run-dir", str(two), procs=2)
    _train(tmp_path, str(cfg), "--run-dir", str(resumed), "--set", "iterations=1", procs=2)
    assert [r["iteration"] for r in _metrics(resumed)] == [1]
    _train(tmp_path, "--run-dir", str(resumed), "--resume", "--set", "iterations=3", procs=2)

    s1, s2 = (json.loads((r / "summary.json").read_text()) for r in (one, two))
    assert s1["data_parallel"] == {"world_size": 1}
    assert s2["data_parallel"] == {"world_size": 2, "rank": 0, "backend": "gloo"}
    assert s1["eval"] == s2["eval"] and s1["optimizer_steps"] == s2["optimizer_steps"] > 0
    m1, m2 = _metrics(one), _metrics(two)
    assert [r["iteration"] for r in m2] == [1, 2, 3]
    for a, b in zip(m1, m2):
        assert a.keys() == b.keys()
        assert a == pytest.approx(b, rel=1e-4, abs=1e-6)
    for name, t in _last_params(one).items():
        torch.testing.assert_close(_last_params(two)[name], t, rtol=1e-4, atol=1e-6)

    # rank 0 wrote one checkpoint folder (no half-written temp folders of rank 1), and the
    # two ranks resumed the same state: the resumed run is the uninterrupted one
    assert [p.name for p in (resumed / "checkpoints").iterdir()] == ["iter_000003"]
    assert _metrics(resumed) == m2
    sr = json.loads((resumed / "summary.json").read_text())
    assert sr["eval"] == s2["eval"] and sr["optimizer_steps"] == s2["optimizer_steps"]
    p2, pr = _last_params(two), _last_params(resumed)
    assert p2.keys() == pr.keys()
    for name in p2:
        assert torch.equal(p2[name], pr[name]), name
