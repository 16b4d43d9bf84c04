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
