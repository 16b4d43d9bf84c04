"""deciplane/CodeOpt-v0 through Gymnasium: check_env, garbage actions, a real episode,
multi-attempt feedback, argument errors, and the CLI."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env
from typer.testing import CliRunner

import deciplane  # noqa: F401  (registers the ids)
from deciplane.cli import app
from deciplane.envs.codeopt.tasks import get_task, list_tasks
from deciplane.errors import BackendUnavailable, ConfigError, InvalidAction


def _make(**kwargs):
    try:
        return gym.make("deciplane/CodeOpt-v0", **kwargs)
    except BackendUnavailable as exc:
        pytest.skip(f"no sandbox backend here: {exc}")


@pytest.mark.parametrize("timer", ["cpu", "instructions"])
def test_check_env(timer):
    env = _make(timer=timer)
    check_env(env.unwrapped, skip_render_check=False)
    env.close()


def test_vector_envs_sync_and_async():
    """Sync and Async (shared-memory) vector envs return the real task texts, on reset
    and after a step (gymnasium 1.4 alone would freeze Text shared memory at blanks)."""
    import numpy as np

    _make().close()  # skips here when no sandbox backend exists
    fns = [lambda: gym.make("deciplane/CodeOpt-v0", split="test") for _ in range(2)]
    runs = []
    for vec in (gym.vector.SyncVectorEnv(fns), gym.vector.AsyncVectorEnv(fns)):
        obs, infos = vec.reset(seed=[0, 1])
        assert list(obs) == [get_task(t).observation() for t in infos["task_id"]]
        obs2, rew, term, trunc, infos2 = vec.step(np.array(["print(", "print(1)"], dtype=object))
        assert rew.tolist() == [0.0, 0.0] and term.all() and not trunc.any()
        assert list(infos2["verdict"]) == ["runtime_error", "wrong_answer"]
        assert list(obs2) == list(obs)  # one attempt: the observation is the task again
        runs.append((tuple(obs), tuple(infos["task_id"])))
        vec.close()
    assert runs[0] == runs[1]


def test_sampled_garbage_gets_zero_without_crashing():
    env = _make(split="all")
    env.action_space.seed(0)
    for seed in range(4):
        obs, info = env.reset(seed=seed)
        assert env.observation_space.contains(obs)
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert (reward, terminated, truncated) == (0.0, True, False)
        assert info["verdict"] in ("runtime_error", "wrong_answer", "timeout", "output_limit")
        assert info["failed_test"] == "example 1" and info["backend"] == env.unwrapped.sandbox.backend


def test_api_errors():
    env = _make(task_id="fib")
    with pytest.raises(ResetNeeded):
        env.step("print(1)")
    env.reset(seed=0)
    with pytest.raises(InvalidAction, match="str"):
        env.step(3)
    env.step("print(")
    with pytest.raises(ResetNeeded):
        env.step("print(1)")
    for bad in (dict(split="valid"), dict(timer="wall"), dict(reward="linear"), dict(cap=0),
                dict(max_attempts=0)):
        with pytest.raises(ConfigError):
            gym.make("deciplane/CodeOpt-v0", **bad)


def test_observation_is_the_task_and_nothing_hidden():
    env = _make(split="test")
    obs, info = env.reset(seed=3)
    task = get_task(info["task_id"])
    assert info["split"] == "test" and obs == task.observation()
    assert task.reference.strip() in obs
    for sol in task.solutions:
        assert sol.strip() not in obs
    obs, _ = env.reset(options={"task_id": "primes"})
    assert obs.startswith("# Task primes")
    # any task chosen at reset lies in the observation space, whatever the split
    train = _make(split="train").unwrapped
    for t in list_tasks("all"):
        assert train.observation_space.contains(train.reset(options={"task_id": t.id})[0]), t.id


def test_a_real_episode_with_the_known_faster_solution():
    env = _make(task_id="primes", repeats=3, timer_kwargs={"calibration_pairs": 3})
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(get_task("primes").solutions[0])
    assert terminated and not truncated
    assert info["verdict"] == "accepted" and info["tests_passed"] == info["tests_total"]
    assert reward == pytest.approx(min(4.0, __import__("math").log2(info["speedup"])))
    assert reward > 0.5 and info["timer"] == "cpu" and info["unit"] == "s"
    assert len(info["ref_costs"]) == len(info["cand_costs"]) == 3 and info["noise_band"] > 0


def test_multi_attempt_feedback():
    env = _make(task_id="fib", max_attempts=2, render_mode="ansi")
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step("print('nope')\n")
    assert not terminated and reward == 0.0 and info["attempt"] == 1
    assert "## Feedback" in obs and "wrong_answer" in obs and env.observation_space.contains(obs)
    assert "wrong_answer" in env.render()
    # control characters and non-ASCII in the program's stderr stay out of the observation
    obs, reward, terminated, _, info = env.step(
        "import sys\nsys.stderr.write('\\x1b[31m\\u00e9\\x00' * 50)\nraise SystemExit(1)\n")
    assert terminated and info["verdict"] == "runtime_error" and obs.count("attempt ") == 2
    assert env.observation_space.contains(obs)


def test_cli_list_and_run(tmp_path):
    runner = CliRunner()
    out = runner.invoke(app, ["codeopt", "list"])
    assert out.exit_code == 0 and "fib" in out.output and "nbody" in out.output
    wrong = tmp_path / "wrong.py"
    wrong.write_text("print(42)\n")
    out = runner.invoke(app, ["codeopt", "run", "no_such_task", str(wrong)])
    assert out.exit_code == 2 and "known tasks" in out.output
    out = runner.invoke(app, ["codeopt", "run", "fib", str(wrong), "--timer", "wall"])
    assert out.exit_code == 2 and "timer must be one of" in out.output
    out = runner.invoke(app, ["codeopt", "run", "fib", str(wrong)])
    assert out.exit_code == 1 and "wrong_answer" in out.output and "reward 0.0000" in out.output
    fast = tmp_path / "fast.py"
    fast.write_text(get_task("fib").solutions[0])
    out = runner.invoke(app, ["codeopt", "run", "fib", str(fast), "--timer", "instructions"])
    assert out.exit_code == 0, out.output
    assert "accepted" in out.output and "speedup" in out.output and "exact" in out.output
