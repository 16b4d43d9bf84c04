"""The run directory of every method: one owner for what a run keeps on disk.

:class:`RunDir` is used alike by ``deciplane train`` (:class:`deciplane.trainers.Trainer`)
and ``deciplane adapt`` (:func:`deciplane.adapt.run_adaptation` and
:meth:`deciplane.adapt.BaseAdapter.run`):

* a **new** run never reuses a directory that holds a run (:func:`ensure_unused_run_dir`:
  its curves would mix with the old ones, or the old results be overwritten);
* the **recorded config** a run starts with (``config.yaml`` of a training run,
  ``run_args.json`` of an adaptation run), written atomically and read back on resume;
* the **checkpoints**: one :class:`~deciplane.engine.checkpoint.RunState` per saved step,
  atomic, the last ``keep_last`` kept; the latest one (or the single ``adapt_state.pt`` of
  adaptation runs written before the checkpoints folder) is what a resume restores;
* the **metrics log** (:class:`~deciplane.engine.logger.RunLogger`: lines past the
  resumed checkpoint are dropped) and the **summary** (``summary.json``);
* under data-parallel training only rank 0 writes (``writer=False`` elsewhere).

:func:`changed_on_resume` is the one rule for what a resumed run changed against what its
directory recorded. Each side declares beside its own config what a resume may change
(:data:`deciplane.trainers.run.RESUMABLE_CHANGES`: the budget and cosmetics; an
adaptation run: nothing, but a resume command need not repeat the arguments it left at
their defaults) and words its own refusal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from deciplane.engine.checkpoint import (RunState, latest_checkpoint, load_run_state,
                                         remove_checkpoints, save_run_state)
from deciplane.engine.logger import METRICS_FILE, RunLogger
from deciplane.errors import CheckpointError
from deciplane.utils import atomic_write_bytes, atomic_write_json

SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.yaml"
"""A training run's recorded config."""
ARGS_FILE = "run_args.json"
"""An adaptation run's recorded arguments."""
LEGACY_STATE_FILE = "adapt_state.pt"
"""Where adaptation runs written before the checkpoints folder kept their one state."""


def ensure_unused_run_dir(run_dir: Path) -> None:
    """A fresh run must not append to an old run's metrics/checkpoints (mixed curves)."""
    if (run_dir / METRICS_FILE).exists() or latest_checkpoint(run_dir) is not None:
        raise CheckpointError(f"{run_dir} already holds a run; pass --resume to continue it, "
                              "or choose another --run-dir")


def changed_on_resume(saved: Mapping[str, Any], given: Mapping[str, Any],
                      may_change: frozenset[str] = frozenset(),
                      defaults: Mapping[str, Any] | None = None) -> list[str]:
    """The keys of ``saved`` (flat: dotted keys, in its order) whose value in ``given``
    differs — a key ``given`` lacks counts as ``None`` — except the keys in ``may_change``
    and those ``given`` leaves at their value in ``defaults`` (a resume command need not
    repeat what it did not set)."""
    defaults = defaults or {}
    return [k for k, v in saved.items()
            if k not in may_change and given.get(k) != v
            and (k not in defaults or given.get(k) != defaults[k])]


class RunDir:
    """One run's directory (see the module docstring); ``writer=False``: a data-parallel
    rank other than 0, which reads checkpoints but writes nothing."""

    def __init__(self, path: str | Path, *, writer: bool = True) -> None:
        self.path = Path(path)
        self.writer = writer

    def check(self, *, resume: bool) -> "RunDir":
        """A new run (``resume=False``) may start here only if the directory holds no
        run. Nothing is created: the first file written creates the directory, so a run
        that fails before it (a bad argument, a missing dataset) leaves none."""
        if not resume:
            ensure_unused_run_dir(self.path)
        return self

    # ---- the recorded config -------------------------------------------------------------
    def record(self, name: str, content: str | dict[str, Any]) -> None:
        """Write the run's recorded config ``name`` (text, or a dict as JSON) atomically."""
        if not self.writer:
            return
        if isinstance(content, str):
            atomic_write_bytes(self.path / name, content.encode())
        else:
            atomic_write_json(self.path / name, content)

    def recorded(self, name: str) -> Path | None:
        """The recorded file ``name``, or None when the run has none."""
        path = self.path / name
        return path if path.is_file() else None

    # ---- checkpoints --------------------------------------------------------------------
    def latest_state_path(self) -> Path | None:
        """The checkpoint a resume restores: the last complete one, else the single state
        file of adaptation runs written before the checkpoints folder, else None."""
        legacy = self.path / LEGACY_STATE_FILE
        return latest_checkpoint(self.path) or (legacy if legacy.is_file() else None)

    def latest_state(self, map_location: Any = "cpu") -> RunState | None:
        """The :class:`RunState` of :meth:`latest_state_path` (None: nothing to resume)."""
        path = self.latest_state_path()
        return None if path is None else load_run_state(path, map_location)

    def save_state(self, state: RunState, meta: dict[str, Any] | None = None,
                   keep_last: int = 2) -> None:
        """Checkpoint ``state`` (``checkpoints/iter_<step>/``, atomically)."""
        if self.writer:
            save_run_state(self.path, state, meta, keep_last)

    def remove_state(self) -> None:
        """Delete every checkpoint (both forms): a finished adaptation keeps its results,
        not its state."""
        remove_checkpoints(self.path)
        (self.path / LEGACY_STATE_FILE).unlink(missing_ok=True)

    # ---- the metrics log and the summary --------------------------------------------------
    def logger(self, total: int, start: int, progress: bool = True) -> Any:
        """The run's metrics log from step ``start`` (a writer's :class:`RunLogger`, else
        one that writes nothing)."""
        if not self.writer:
            return QuietLogger()
        return RunLogger(self.path, total=total, start=start, progress=progress)

    def write_summary(self, summary: dict[str, Any]) -> None:
        if self.writer:
            atomic_write_json(self.path / SUMMARY_FILE, summary)


class QuietLogger:
    """The metrics log of a data-parallel rank other than 0: writes nothing."""

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        pass

    def print(self, *args: Any, **kwargs: Any) -> None:
        pass

    def event(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


__all__ = ["ARGS_FILE", "CONFIG_FILE", "LEGACY_STATE_FILE", "QuietLogger", "RunDir", "SUMMARY_FILE", "changed_on_resume",
           "ensure_unused_run_dir"]
