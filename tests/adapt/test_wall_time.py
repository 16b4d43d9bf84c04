"""An adapter's time plan (``max_wall_time_s``): a step starts only if it and the final
answers still fit; the tasks are answered all the same, the summary says how the steps
ended, and a run killed under a limit resumes to the same stop. Real TTRL on the tiny
model; where the number of steps must be exact, a fake clock makes every step take 10 s."""

from __future__ import annotations

import pytest

from deciplane.adapt import TTRL, TTRLConfig
from deciplane.adapt.runner import run_adaptation
from deciplane.agents import load_policy
from deciplane.engine.checkpoint import latest_checkpoint
from deciplane.engine.logger import read_metrics
from deciplane.envs import load_benchmark

# 4 tasks, 2 per step, 2 epochs: 4 steps planned
SETTINGS = dict(votes=4, train_samples=3, max_new_tokens=6, prompts_per_step=2, epochs=2,
                max_steps=None, lr=1e-2, temperature=1.5, lora_rank=4, lora_alpha=8,
                answer_batch=8, checkpoints=1, guard_probe=2, max_wall_time_s=25)
STOP = ("stopped at the wall-time limit (25 s) after 2 steps: 20 s used, the next step "
        "(~10 s) and the final answers")


class Stop(Exception):
    pass


@pytest.fixture(scope="module")
def tasks():
    tasks, scorer = load_benchmark("arith-shift", "test", limit=4)
    scorer.close()
    return tasks


def _adapter(progress=None) -> TTRL:
    """TTRL whose clock reads 10 s per step done: before step 3, 20 s used + a 10 s step +
    the final answers' reserve (real probe seconds, well under 5 s) pass the 25 s limit."""
    ad = TTRL(load_policy("deciplane/tiny"), TTRLConfig(**SETTINGS), progress=progress)
    ad.clock = lambda: 10.0 * ad.step_count
    return ad


def test_the_limit_stops_before_a_step_that_would_not_fit_and_every_task_is_answered(
        tmp_path, tasks):
    ad = _adapter()
    answers = ad.run(tasks, run_dir=tmp_path / "run")
    assert ad.planned_steps(len(tasks)) == 4 and ad.step_count == 2
    assert ad.status.startswith(STOP) and ad.status.endswith("would not fit")
    assert set(answers) == {t.id for t in tasks}
    assert ad.records.checkpoints[-1] == (ad.budget.optimizer_steps, answers)
    assert [r["iteration"] for r in read_metrics(tmp_path / "run")] == [1, 2]
    assert latest_checkpoint(tmp_path / "run").name == "iter_000002"


def test_a_run_killed_under_a_limit_resumes_to_the_same_stop(tmp_path, tasks):
    """The wall time of the killed session is in its checkpoint: the resumed run stops
    where the uninterrupted one did, with its answers."""
    full = _adapter()
    want = full.run(tasks, run_dir=tmp_path / "full")

    def stop_after_1(step, total, metrics):
        if step == 1:
            raise Stop

    with pytest.raises(Stop):
        _adapter(progress=stop_after_1).run(tasks, run_dir=tmp_path / "cut")
    resumed = _adapter()
    assert resumed.run(tasks, run_dir=tmp_path / "cut") == want
    assert resumed.step_count == full.step_count == 2 and resumed.status.startswith(STOP)
    assert resumed.budget.optimizer_steps == full.budget.optimizer_steps


def test_the_summary_says_how_the_steps_ended(tmp_path):
    """A limit no step fits in: the run answers with the starting policy (greedy, as the
    no-adaptation baseline does) and its summary says why."""
    kw = dict(benchmark="arith-shift", split="test", model="deciplane/tiny", limit=4,
              threads=1, overrides=["votes=2", "train_samples=2", "max_new_tokens=6",
                                    "prompts_per_step=2", "max_steps=1", "lora_rank=4"])
    stopped = run_adaptation("ttrl", **{**kw, "overrides": kw["overrides"] +
                                        ["max_wall_time_s=1e-9"]},
                             run_dir=tmp_path / "run")
    assert stopped["status"].startswith("stopped at the wall-time limit (0 s) after 0 steps")
    assert stopped["budget"]["optimizer_steps"] == 0
    assert {k: stopped["after"][k] for k in stopped["before"]} == stopped["before"]
    assert stopped["config"]["max_wall_time_s"] == 1e-9
