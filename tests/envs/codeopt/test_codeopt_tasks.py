"""The CodeOpt task suite: data integrity, hidden parts stay hidden, references and known
faster solutions are correct (run in the sandbox)."""

from __future__ import annotations

import pytest

from deciplane.envs.codeopt.evaluate import check_correctness
from deciplane.envs.codeopt.tasks import get_task, list_tasks
from deciplane.errors import TaskError
from tests.sandbox.sandbox_helpers import sandbox  # noqa: F401  (a fixture)

ALL = list_tasks()
PROJECT = list_tasks(origin="project")


def test_suite_shape():
    assert len(PROJECT) >= 5 and len(list_tasks(origin="pyperformance")) >= 5
    assert {t.split for t in ALL} == {"train", "test"}
    assert len(list_tasks("train")) + len(list_tasks("test")) == len(ALL)
    for t in ALL:
        assert t.examples and t.tests and set(t.perf) == {"cpu", "instructions"}
    for t in PROJECT:
        assert t.solutions, f"{t.id} needs a known faster solution"


def test_unknown_task_and_bad_split():
    with pytest.raises(TaskError, match="known tasks"):
        get_task("no_such_task")
    with pytest.raises(ValueError, match="split"):
        list_tasks("validation")  # type: ignore[arg-type]


@pytest.mark.parametrize("task", ALL, ids=lambda t: t.id)
def test_observation_shows_reference_and_examples_only(task):
    obs = task.observation()
    assert task.reference.strip() in obs
    for ex in task.examples:
        assert ex.input.strip() in obs
    for sol in task.solutions:
        assert sol.strip() not in obs
    for case in [*task.tests, *task.perf.values()]:
        hidden = case.input.strip()
        if len(hidden) > 12 and hidden not in {e.input.strip() for e in task.examples}:
            assert hidden not in obs
    assert "tests" not in repr(task).split("examples=")[0]  # repr hides the hidden fields
    assert "perf=" not in repr(task) and "solutions=" not in repr(task)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("task", ALL, ids=lambda t: t.id)
def test_reference_passes_its_own_tests_in_the_sandbox(task, sandbox, warm):
    verdict, passed, failed, msg = check_correctness(task, task.reference, sandbox, warm=warm)
    assert verdict == "accepted", msg


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("task", [t for t in ALL if t.solutions], ids=lambda t: t.id)
def test_known_faster_solutions_are_correct(task, sandbox, warm):
    for sol in task.solutions:
        verdict, passed, failed, msg = check_correctness(task, sol, sandbox, warm=warm)
        assert verdict == "accepted", msg


WRONG = {"exit": "import sys\nraise SystemExit(3)\n", "raise": "1/0\n",
         "silent": "pass\n", "echo": "import sys\nprint(sys.stdin.read())\n",
         "spin": "while True:\n    pass\n"}


@pytest.mark.parametrize("task", ALL[:4], ids=lambda t: t.id)
def test_warm_and_cold_correctness_verdicts_are_identical(task, sandbox):
    import dataclasses
    quick = dataclasses.replace(task, timeout_s=1.0)
    for name, code in WRONG.items():
        got = [check_correctness(quick, code, sandbox, warm=w) for w in (True, False)]
        if name == "spin":   # CPU and wall limits are both 1 s: which trips first is a race
            assert got[0][:3] == got[1][:3] and all("time limit 1s" in g[3] for g in got), got
        else:
            assert got[0] == got[1], (name, got)
