"""The one step loop (deciplane.engine.loop.run_steps): the order of its callbacks, by
hand-checked sequences of calls with plain callables."""

from __future__ import annotations

from deciplane.engine.loop import COMPLETED, StepResult, run_steps
from deciplane.engine.plan import room_for_iteration, wall_time_status


class Calls:
    """Records every callback as ``(name, step)``; ``stop_at``: the 0-based step that
    asks to stop."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.seen: list[tuple[str, int]] = []
        self.stop_at = stop_at

    def step(self, i: int) -> StepResult:
        self.seen.append(("step", i))
        return StepResult({"loss": float(i)}, "guard fired" if i == self.stop_at else None)

    def log(self, n: int, metrics: dict) -> None:
        assert metrics == {"loss": float(n - 1)}
        self.seen.append(("log", n))

    def checkpoint(self, n: int) -> None:
        self.seen.append(("checkpoint", n))

    def report(self, n: int, metrics: dict) -> None:
        self.seen.append(("report", n))

    def kwargs(self) -> dict:
        return dict(log=self.log, checkpoint=self.checkpoint, report=self.report)


def test_each_step_logs_then_checkpoints_then_reports():
    c = Calls()
    out = run_steps(c.step, start=0, total=2, **c.kwargs())
    assert c.seen == [("step", 0), ("log", 1), ("checkpoint", 1), ("report", 1),
                      ("step", 1), ("log", 2), ("checkpoint", 2), ("report", 2)]
    assert (out.status, out.steps_done) == (COMPLETED, 2)
    assert out.step_s_max is not None and out.step_s_max >= 0


def test_checkpoint_every_k_steps_and_after_the_last():
    c = Calls()
    run_steps(c.step, start=0, total=5, checkpoint_every=2, **c.kwargs())
    assert [n for name, n in c.seen if name == "checkpoint"] == [2, 4, 5]
    assert [n for name, n in c.seen if name == "log"] == [1, 2, 3, 4, 5]


def test_a_stopping_step_is_logged_checkpointed_and_reported_then_the_loop_ends():
    c = Calls(stop_at=1)
    out = run_steps(c.step, start=0, total=5, checkpoint_every=3, **c.kwargs())
    assert c.seen == [("step", 0), ("log", 1), ("report", 1),
                      ("step", 1), ("log", 2), ("checkpoint", 2), ("report", 2)]
    assert (out.status, out.steps_done) == ("guard fired", 2)


def test_room_is_asked_before_every_step_with_the_longest_step_so_far():
    c = Calls()
    asked: list[tuple[int, float | None]] = []

    def room(i: int, step_s: float | None) -> str | None:
        asked.append((i, step_s))
        return "out of time" if i == 2 else None

    out = run_steps(c.step, start=0, total=4, room=room, **c.kwargs())
    assert [i for i, _ in asked] == [0, 1, 2]
    assert asked[0][1] is None and asked[1][1] is not None and asked[2][1] >= asked[1][1]
    # stopped before step 2: nothing of it ran, no checkpoint for it
    assert c.seen[-1] == ("report", 2) and ("step", 2) not in c.seen
    assert (out.status, out.steps_done) == ("out of time", 2)


def test_resume_starts_after_the_steps_the_checkpoint_holds():
    c = Calls()
    out = run_steps(c.step, start=3, total=5, checkpoint_every=2, **c.kwargs())
    assert c.seen == [("step", 3), ("log", 4), ("checkpoint", 4), ("report", 4),
                      ("step", 4), ("log", 5), ("checkpoint", 5), ("report", 5)]
    assert (out.status, out.steps_done) == (COMPLETED, 5)
    done = run_steps(c.step, start=5, total=5)      # nothing left: no call at all
    assert (done.status, done.steps_done, done.step_s_max) == (COMPLETED, 5, None)
    assert len(c.seen) == 8


def test_left_out_callbacks_are_not_called():
    c = Calls()
    out = run_steps(c.step, start=0, total=2)
    assert c.seen == [("step", 0), ("step", 1)] and out.status == COMPLETED


def test_a_time_plan_room_with_a_fake_clock():
    """The time plan as a trainer or adapter builds it: elapsed time from a fake clock,
    each step 30 s, a 20 s reserve for the final answers, a 100 s budget: steps start at
    0, 30 and 60 s (60 + 30 + 20 = 110 > 100: the third does not)."""
    clock = {"now": 0.0}

    def step(i: int) -> StepResult:
        clock["now"] += 30.0
        return StepResult({})

    def room(i: int, step_s: float | None) -> str | None:
        if room_for_iteration(clock["now"], 100.0, step_s, 20.0):
            return None
        return wall_time_status(100.0, i, clock["now"], step_s, 20.0, step="step",
                                final="the final answers")

    out = run_steps(step, start=0, total=10, room=room, clock=lambda: clock["now"])
    assert (out.steps_done, out.step_s_max) == (2, 30.0)
    assert out.status == ("stopped at the wall-time limit (100 s) after 2 steps: 60 s used, "
                          "the next step (~30 s) and the final answers (~20 s) would not fit")
