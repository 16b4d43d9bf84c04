"""The run directory's rules, shared by trainers and test-time adapters.

* :func:`ensure_unused_run_dir` — a new training run never appends to an old run's metrics
  and checkpoints (its curves would mix with the old ones; a new adaptation run in a used
  directory removes the old state instead, :mod:`deciplane.adapt.runner`);
* :func:`changed_on_resume` — what a resumed run changed against what its run directory
  recorded when it started (``config.yaml`` of a training run, ``run_args.json`` of an
  adaptation run). Each side declares beside its own config what a resume may change
  (:data:`deciplane.trainers.run.RESUMABLE_CHANGES`: the budget and cosmetics; an
  adaptation run: nothing, but a resume command need not repeat the arguments it left at
  their defaults) and words its own refusal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from deciplane.engine.checkpoint import latest_checkpoint
from deciplane.engine.logger import METRICS_FILE
from deciplane.errors import CheckpointError


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


__all__ = ["changed_on_resume", "ensure_unused_run_dir"]
