"""The one step loop every method runs through: trainers' iterations and adapters' steps.

:func:`run_steps` owns only the order of things, so that every method gets the same
guarantees from the same lines:

1. before step ``i`` (0-based), ``room(i, longest step so far)`` may stop the run — the
   time plan (:func:`deciplane.engine.plan.room_for_iteration`) — with a status text;
2. ``step(i)`` does the method's work and returns its metrics (and, to stop after it, a
   reason: e.g. the collapse guard fired);
3. ``log(i + 1, metrics)`` writes the metrics line *before* the checkpoint: a run killed
   between the two redoes the step and rewrites its line (the run logger drops lines past
   the checkpoint it resumes from), never a checkpoint without its line;
4. ``checkpoint(i + 1)`` after every ``checkpoint_every``-th step, after the last step and
   after a stopping step;
5. ``report(i + 1, metrics)`` last, once the step's state is safe: a progress callback may
   end the process there and the run still resumes after step ``i + 1``.

A resumed run passes ``start`` = the steps its checkpoint holds. No torch and no files:
the callbacks do the I/O; ``clock`` times the steps (a test passes a fake one).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

COMPLETED = "completed"
"""The status of a run whose every step ran."""


@dataclass
class StepResult:
    """What one step hands back to the loop."""

    metrics: dict[str, Any] = field(default_factory=dict)
    stop: str | None = None
    """Why the run stops after this step (its status), or None to go on."""


@dataclass
class LoopResult:
    """How the loop ended."""

    status: str
    """:data:`COMPLETED`, the room's text or the stopping step's reason."""
    steps_done: int
    """Steps the run holds now (``start`` included)."""
    step_s_max: float | None
    """The longest step of this session, in seconds (None: no step ran)."""


def run_steps(step: Callable[[int], StepResult], *, start: int, total: int,
              log: Callable[[int, dict[str, Any]], None] | None = None,
              checkpoint: Callable[[int], None] | None = None, checkpoint_every: int = 1,
              room: Callable[[int, float | None], str | None] | None = None,
              report: Callable[[int, dict[str, Any]], None] | None = None,
              clock: Callable[[], float] = time.perf_counter) -> LoopResult:
    """Run steps ``start .. total - 1``; see the module docstring for the order of the
    callbacks. ``log``, ``checkpoint``, ``room``, ``report``: None leaves that part out
    (e.g. a run without a run directory keeps no checkpoints)."""
    step_s_max: float | None = None
    for i in range(start, total):
        if room is not None:
            reason = room(i, step_s_max)
            if reason is not None:
                return LoopResult(reason, i, step_s_max)
        t0 = clock()
        result = step(i)
        step_s_max = max(step_s_max or 0.0, clock() - t0)
        done = i + 1
        if log is not None:
            log(done, result.metrics)
        if checkpoint is not None and (result.stop is not None or done % checkpoint_every == 0
                                       or done == total):
            checkpoint(done)
        if report is not None:
            report(done, result.metrics)
        if result.stop is not None:
            return LoopResult(result.stop, done, step_s_max)
    return LoopResult(COMPLETED, max(start, total), step_s_max)


__all__ = ["COMPLETED", "LoopResult", "StepResult", "run_steps"]
