"""The run directory's rules shared by trainers and adapters: a new run never reuses a run
directory, and what a resumed run changed against what its run directory recorded."""

from __future__ import annotations

import pytest

from deciplane.engine.rundir import changed_on_resume, ensure_unused_run_dir
from deciplane.errors import CheckpointError


def test_a_used_run_dir_is_refused(tmp_path):
    ensure_unused_run_dir(tmp_path)                      # empty: a new run may start
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 1}\n')
    with pytest.raises(CheckpointError, match="already holds a run"):
        ensure_unused_run_dir(tmp_path)


def test_changed_on_resume_keeps_what_may_change():
    """The training rule: a config key that changed, unless it may change."""
    saved = {"iterations": 3, "optim.lr": 1e-3, "seed": 0, "env.kwargs.a": 1}
    given = {"iterations": 4, "optim.lr": 0.5, "seed": 0, "env.kwargs.b": 1}
    # in the saved order; a saved key the new config lacks changed too
    assert changed_on_resume(saved, given) == ["iterations", "optim.lr", "env.kwargs.a"]
    assert changed_on_resume(saved, given, frozenset({"iterations"})) == ["optim.lr",
                                                                         "env.kwargs.a"]


def test_changed_on_resume_lets_defaults_stand_for_the_recorded_value():
    """The adaptation rule: an argument left at its default means "as the run was"."""
    saved = {"method": "ttrl", "seed": 1, "limit": 4}
    defaults = {"seed": 0, "limit": None}
    assert changed_on_resume(saved, {"method": "ttrl", "seed": 0, "limit": None},
                             defaults=defaults) == []
    assert changed_on_resume(saved, {"method": "ttrl", "seed": 2, "limit": None},
                             defaults=defaults) == ["seed"]
    assert changed_on_resume(saved, {"method": "ttpo", "seed": 1, "limit": 4},
                             defaults=defaults) == ["method"]      # no default: must match


def _state(step: int):
    import torch

    from deciplane.engine.checkpoint import RunState
    from deciplane.utils import rng_state

    return RunState(step=step, params={"w": torch.full((2,), float(step))}, optimizer=None,
                    rng=rng_state())


def test_run_dir_owns_record_checkpoints_log_and_summary(tmp_path):
    import json

    from deciplane.engine.rundir import RunDir

    run = RunDir(tmp_path / "run").check(resume=False)
    run.record("config.yaml", "seed: 3\n")
    run.record("run_args.json", {"seed": 3})
    assert run.recorded("config.yaml").read_text() == "seed: 3\n"
    assert json.loads(run.recorded("run_args.json").read_text()) == {"seed": 3}
    assert run.recorded("absent.yaml") is None and run.latest_state() is None
    for step in (1, 2, 3):
        run.save_state(_state(step), keep_last=2)
    assert run.latest_state().step == 3 and run.latest_state().params["w"].tolist() == [3, 3]
    log = run.logger(total=3, start=0, progress=False)
    log.log(1, {"loss": 0.5})
    log.close()
    run.write_summary({"status": "completed"})
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == {"status": "completed"}
    with pytest.raises(CheckpointError, match="already holds a run"):
        RunDir(tmp_path / "run").check(resume=False)         # a new run: never here
    assert RunDir(tmp_path / "run").check(resume=True).latest_state().step == 3
    run.remove_state()
    assert run.latest_state() is None


def test_run_dir_reads_the_single_state_file_of_older_adaptation_runs(tmp_path):
    import torch

    from deciplane.engine.rundir import LEGACY_STATE_FILE, RunDir
    from deciplane.utils import rng_state

    old = {"step": 4, "params": {}, "optimizer": {}, "optimizer_counters": (4, 0),
           "rng": rng_state(), "extra": {}}
    torch.save(old, tmp_path / LEGACY_STATE_FILE)
    run = RunDir(tmp_path)
    assert run.latest_state_path().name == LEGACY_STATE_FILE and run.latest_state().step == 4
    run.save_state(_state(5))                               # a checkpoint wins over it
    assert run.latest_state().step == 5
    run.remove_state()
    assert run.latest_state_path() is None


def test_a_non_writer_rank_writes_nothing(tmp_path):
    from deciplane.engine.rundir import RunDir

    run = RunDir(tmp_path / "run", writer=False).check(resume=False)
    run.record("config.yaml", "x: 1\n")
    run.save_state(_state(1))
    run.logger(total=1, start=0).log(1, {"loss": 1.0})
    run.write_summary({})
    assert not (tmp_path / "run").exists()
