"""deciplane/Math-v0: Gymnasium contract, rewards, invalid answers."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env

import deciplane  # noqa: F401  (registers ids)
from deciplane.benchmarks import load_labeled
from deciplane.errors import ConfigError, InvalidAnswer, UnknownBenchmark


@pytest.mark.parametrize("benchmark,split", [("arith", "train"), ("arith-shift", "valid"),
                                             ("mmath-en", "aime2025")])
def test_check_env(benchmark, split):
    env = gym.make("deciplane/Math-v0", benchmark=benchmark, split=split)
    check_env(env.unwrapped, skip_render_check=False)
    env.close()


@pytest.fixture(scope="module")
def env():
    e = gym.make("deciplane/Math-v0", benchmark="arith", split="valid", limit=20)
    yield e
    e.close()


def test_right_and_wrong_answers(env):
    items, _ = load_labeled("arith", "valid", limit=20)  # the training env holds gold too
    obs, info = env.reset(seed=0, options={"index": 3})
    assert obs == items[3].prompt and info["task_id"] == items[3].id
    obs2, reward, terminated, truncated, info = env.step(f"So the answer is {items[3].gold}.")
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["correct"] and info["extracted"] == items[3].gold and obs2 == obs
    env.reset(options={"index": 3})
    _, reward, *_ = env.step(f"\\boxed{{{int(items[3].gold) + 1}}}")
    assert reward == 0.0


def test_equivalent_forms_are_rewarded():
    env = gym.make("deciplane/Math-v0", benchmark="mmath-en", split="test")
    items = env.unwrapped._items
    found = [(k, m) for k, it in enumerate(items)
             if (m := re.fullmatch(r"\$?\\frac\{(\d+)\}\{(\d+)\}\$?", it.gold))]
    assert found, "mmath-en has plain fraction golds such as $\\frac{3}{4}$"
    for k, m in found[:2]:  # a fraction gold answered as a decimal
        env.reset(options={"index": k})
        assert env.step(f"The answer is {int(m[1]) / int(m[2]):.6f}")[1] == 1.0
        env.reset(options={"index": k})  # a bare LaTeX answer is used whole
        assert env.step(f"\\dfrac{{{m[1]}}}{{{m[2]}}}")[1] == 1.0


def test_reset_is_deterministic_by_seed(env):
    assert env.reset(seed=5)[0] == env.reset(seed=5)[0]
    prompts = {env.reset(seed=s)[0] for s in range(10)}
    assert len(prompts) > 1


def test_empty_and_unextractable_answers_get_zero_with_flags(env):
    env.reset(seed=1)
    *_, info = env.step("   ")
    assert info["empty_answer"] and info["no_answer"] and not info["correct"]
    env.reset(seed=1)
    _, reward, _, _, info = env.step("I do not know")
    assert reward == 0.0 and info["no_answer"] and not info["empty_answer"]


def test_invalid_actions_raise_clear_errors(env):
    env.reset(seed=0)
    with pytest.raises(InvalidAnswer, match="must be text"):
        env.step(12)
    with pytest.raises(InvalidAnswer, match="not valid UTF-8"):
        env.step(b"12\xff")


def test_bad_text_is_an_invalid_answer_never_verified(env):
    """Content that cannot be graded is a defined invalid move (reward 0, flagged), not a
    crash: a training run must survive a bad token."""
    for bad, why in [("12\udcff", "lone surrogate U+DCFF at position 2"),
                     ("1\x002", "control character U+0000 at position 1"),
                     ("\x1b[31m12", "control character U+001B at position 0"),
                     ("1" * 1_000_001, "1000001 characters; the limit is 1000000")]:
        env.reset(seed=0)
        _, reward, terminated, _, info = env.step(bad)
        assert (reward, terminated, info["invalid_action"]) == (0.0, True, True)
        assert info["action_rejected"] == why and info["extracted"] is None
    env.reset(seed=0)
    *_, info = env.step("12\n\t")
    assert info["invalid_action"] is False and "action_rejected" not in info


def test_step_needs_reset():
    e = gym.make("deciplane/Math-v0", benchmark="arith", split="test", limit=5,
                 disable_env_checker=True)
    with pytest.raises(ResetNeeded):
        e.step("1")
    e.reset(seed=0)
    e.step("1")
    with pytest.raises(ResetNeeded):
        e.step("1")


def test_unknown_benchmark_and_split():
    with pytest.raises(UnknownBenchmark, match="available: arith, arith-shift, easy-funcs, humaneval, mmath-en"):
        gym.make("deciplane/Math-v0", benchmark="gsm9k")
    with pytest.raises(UnknownBenchmark, match="splits: test, math500"):
        gym.make("deciplane/Math-v0", benchmark="mmath-en", split="train")


@pytest.mark.parametrize("benchmark", ["easy-funcs", "humaneval"])
def test_code_benchmarks_are_refused(benchmark):
    """Math-v0's math-verify reward is not how the scorer grades code: refused, naming
    the env that does grade it."""
    with pytest.raises(ConfigError, match="deciplane/CodeGen-v0"):
        gym.make("deciplane/Math-v0", benchmark=benchmark, split="test")


@pytest.mark.parametrize("vector", ["sync", "async"])
def test_vector_envs(vector):
    from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

    items, _ = load_labeled("arith", "valid", limit=10)
    prompts = {it.prompt: it.gold for it in items}

    def make():
        return gym.make("deciplane/Math-v0", benchmark="arith", split="valid", limit=10)

    # Default AsyncVectorEnv (shared memory): ObservationText keeps the texts live.
    venv = (SyncVectorEnv([make, make]) if vector == "sync"
            else AsyncVectorEnv([make, make]))
    try:
        first, _ = venv.reset(seed=1)
        obs, info = venv.reset(seed=0)
        assert all(o in prompts for o in first)
        assert all(o in prompts for o in obs)  # text survives shared memory intact
        _, reward, terminated, _, info = venv.step((prompts[obs[0]], "-1"))
        assert list(reward) == [1.0, 0.0] and all(terminated)
    finally:
        venv.close()


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), float("inf")])
def test_bad_verify_timeout_is_a_config_error_at_construction(timeout):
    from deciplane.errors import ConfigError

    with pytest.raises(ConfigError, match="timeout_s must be a finite number"):
        gym.make("deciplane/Math-v0", benchmark="arith", split="test", limit=2,
                 verify_timeout_s=timeout)
