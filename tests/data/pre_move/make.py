"""How the pre-move fixtures are made, at the commit named in each folder's made_at.txt:
``tests/data/pre_move/`` before the issue-27 moves, ``tests/data/pre_loop/`` before the
issue-49 move to one run loop.

A tiny quickstart training run stopped after iteration 1 of 2 (its checkpoint holds the
pickled state of that code), and the adapter runs ``ttrl`` and ``tasco`` cut after step 1
of 3 (``adapt_state.pt`` pickles the budget, records and guard classes of that code),
each with the uninterrupted run's result beside it. tests/test_pre_move_runs.py loads,
evaluates and resumes them with today's code.

    python tests/data/pre_move/make.py [OUT]      # OUT: a folder (default: this one)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(sys.argv[1]).resolve() if __name__ == "__main__" and len(sys.argv) > 1 else \
    Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from tests.adapt.test_resume import METHODS, Stop, _stop_after  # noqa: E402
from tools.behaviour_snapshot import tiny_train_data  # noqa: E402


def train_fixture() -> None:
    """`deciplane train` on the tiny quickstart (the snapshot's case), SIGKILLed once the
    checkpoint of iteration 1 is complete."""
    import os
    import signal
    import time

    import yaml

    out = HERE / "train_run"
    shutil.rmtree(out, ignore_errors=True)
    cfg = HERE / "_train.yaml"
    cfg.write_text(yaml.safe_dump(tiny_train_data(ROOT / "configs" / "quickstart.yaml")))
    proc = subprocess.Popen([sys.executable, "-m", "deciplane.cli", "train", str(cfg),
                             "--run-dir", str(out)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    meta = out / "checkpoints" / "iter_000001" / "meta.json"
    while not meta.is_file():
        assert proc.poll() is None, "the run ended before its first checkpoint"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    cfg.unlink()
    shutil.rmtree(out / "tb", ignore_errors=True)


def adapt_fixtures() -> None:
    from deciplane.adapt.runner import run_adaptation

    for method in ("ttrl", "tasco"):
        bench, sets = METHODS[method]
        kw = dict(benchmark=bench, split="test", model="deciplane/tiny", overrides=sets,
                  seed=1, limit=4, threads=1)
        cut = HERE / f"adapt_{method}"
        shutil.rmtree(cut, ignore_errors=True)
        try:
            run_adaptation(method, run_dir=cut, progress=_stop_after(1), **kw)
        except Stop:
            pass
        full = run_adaptation(method, run_dir=HERE / f"_full_{method}", **kw)
        (HERE / f"adapt_{method}_full.json").write_text(json.dumps(full, indent=1, sort_keys=True,
                                                                  default=str))
        shutil.rmtree(HERE / f"_full_{method}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    HERE.mkdir(parents=True, exist_ok=True)
    train_fixture()
    adapt_fixtures()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    (HERE / "made_at.txt").write_text(commit + "\n")
