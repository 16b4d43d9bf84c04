"""`deciplane adapt --resume`: a run stopped after any step (a crash, SIGKILL) resumes from
its last finished step and ends with the answers and budget counts of an uninterrupted run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deciplane.engine.checkpoint import latest_checkpoint
from deciplane.engine.logger import read_metrics

from deciplane.adapt.runner import run_adaptation
from deciplane.errors import CheckpointError, ConfigError

REPO = Path(__file__).resolve().parents[2]
COMMON = ["votes=4", "train_samples=2", "max_new_tokens=6", "prompts_per_step=2",
          "max_steps=3", "lr=1e-2", "temperature=1.5", "checkpoints=1"]
METHODS = {
    "ttrl": ("arith-shift", COMMON + ["lora_rank=4"]),
    "ttpo": ("arith-shift", COMMON + ["lora_rank=4"]),
    "tasco": ("arith-shift", ["samples=2", "max_new_tokens=6", "prompts_per_step=2",
                              "max_steps=3", "lr=1e-2", "temperature=1.5", "loss.mu=0.5",
                              "loss.perturbation=random", "checkpoints=1"]),
    "probe-erpo": ("easy-funcs", ["votes=3", "max_new_tokens=10", "prompts_per_step=2",
                                  "max_steps=2", "lr=1e-2", "temperature=1.5", "lora_rank=4",
                                  "model_probe_samples=1", "probe_max_new_tokens=10",
                                  "probe_timeout_s=0.5", "penalize_invalid=false"]),
}
COUNTS = ("samples", "generated_tokens", "prefill_tokens", "forward_tokens", "backward_tokens",
          "optimizer_steps", "skipped_steps")


class Stop(Exception):
    pass


def _stop_after(n: int):
    def progress(phase, done, total, metrics):
        if phase == "adapt" and done == n:
            raise Stop   # as if the process died right after step n's state was written
    return progress


def _same_result(a: dict, b: dict) -> None:
    assert a["after"] == b["after"] and a["curve"] == b["curve"]
    assert a.get("baselines") == b.get("baselines")
    assert a["diagnostics"] == b["diagnostics"]
    assert {k: a["budget"][k] for k in COUNTS} == {k: b["budget"][k] for k in COUNTS}


@pytest.mark.parametrize("method", list(METHODS))
def test_stopped_run_resumes_to_the_uninterrupted_result(tmp_path, method):
    bench, sets = METHODS[method]
    kw = dict(benchmark=bench, split="test", model="deciplane/tiny", overrides=sets, seed=1,
              limit=4, threads=1)
    full = run_adaptation(method, run_dir=tmp_path / "full", **kw)
    with pytest.raises(Stop):
        run_adaptation(method, run_dir=tmp_path / "cut", progress=_stop_after(1), **kw)
    cut = tmp_path / "cut"
    assert latest_checkpoint(cut).name == "iter_000001" and not (cut / "summary.json").exists()
    assert [r["iteration"] for r in read_metrics(cut)] == [1]
    # a resume needs nothing but the run directory
    resumed = run_adaptation(method, run_dir=cut, resume=True)
    _same_result(full, resumed)
    assert resumed["resumed"] == 1 and full["resumed"] == 0
    assert resumed["status"] == full["status"] == "completed"
    assert json.loads((cut / "answers.json").read_text()) == \
        json.loads((tmp_path / "full" / "answers.json").read_text())
    assert latest_checkpoint(cut) is None          # finished: the state is gone
    # every step's metrics, as an uninterrupted run logged them (the resumed run dropped
    # nothing and repeated nothing)
    strip = lambda rs: [{k: v for k, v in r.items() if "time" not in k} for r in rs]  # noqa: E731
    assert strip(read_metrics(cut)) == strip(read_metrics(tmp_path / "full"))
    assert [r["iteration"] for r in read_metrics(cut)] == [1, 2, 3][:len(read_metrics(cut))]


def test_resume_refuses_other_arguments_and_finished_runs(tmp_path):
    bench, sets = METHODS["ttrl"]
    kw = dict(benchmark=bench, split="test", model="deciplane/tiny", overrides=sets, limit=4,
              threads=1)
    with pytest.raises(Stop):
        run_adaptation("ttrl", run_dir=tmp_path / "r", seed=1, progress=_stop_after(1), **kw)
    # a new run (no resume) never starts in a folder holding a run, as for training
    shutil.copytree(tmp_path / "r" / "checkpoints", tmp_path / "r2" / "checkpoints")
    with pytest.raises(CheckpointError, match="already holds a run; pass --resume"):
        run_adaptation("ttrl", run_dir=tmp_path / "r2", seed=1, **kw)
    with pytest.raises(ConfigError, match=r"seed=2 \(run: 1\)"):
        run_adaptation("ttrl", run_dir=tmp_path / "r", seed=2, resume=True, **kw)
    run_adaptation("ttrl", run_dir=tmp_path / "r", seed=1, resume=True, **kw)
    with pytest.raises(ConfigError, match="finished run"):
        run_adaptation("ttrl", run_dir=tmp_path / "r", resume=True)
    with pytest.raises(ConfigError, match="not a `deciplane adapt` run directory"):
        run_adaptation("ttrl", run_dir=tmp_path / "empty", resume=True)


@pytest.mark.slow
def test_sigkilled_cli_run_resumes_to_the_same_summary(tmp_path):
    """The real thing: SIGKILL the CLI process once a step's state exists, then
    ``deciplane adapt ttrl --run-dir RUN --resume``."""
    bench, sets = METHODS["ttrl"]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def cmd(run: Path, *extra: str) -> list[str]:
        return [sys.executable, "-m", "deciplane.cli", "adapt", "ttrl", "--benchmark", bench,
                "--model", "deciplane/tiny", "--limit", "4", "--seed", "1", "--threads", "1",
                "--run-dir", str(run), *[x for s in sets for x in ("--set", s)], *extra]

    subprocess.run(cmd(tmp_path / "full"), check=True, env=env, timeout=600, capture_output=True)
    killed = tmp_path / "killed"
    proc = subprocess.Popen(cmd(killed), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while latest_checkpoint(killed) is None and proc.poll() is None \
            and time.time() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    out = subprocess.run([sys.executable, "-m", "deciplane.cli", "adapt", "ttrl", "--run-dir",
                          str(killed), "--resume"], env=env, timeout=600, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    a = json.loads((tmp_path / "full" / "summary.json").read_text())
    b = json.loads((killed / "summary.json").read_text())
    _same_result(a, b)
    assert b["resumed"] == 1
