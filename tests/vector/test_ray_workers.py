"""RayVectorEnv (env workers as Ray actors) against the in-process SyncVectorEnv, on real
envs: identical rollouts for the same seeds and actions; a worker killed mid-episode (or
hung) is replaced and its episodes replayed or dropped and counted; persistent failures
raise EnvWorkerError instead of hanging. One local Ray instance (2 CPUs) for the module.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'deciplane[ray]')")

import deciplane.envs  # noqa: E402,F401  (registers the ids)
from deciplane.vector.ray_env import (DROPPED_KEY, EnvSpec, RayVectorEnv,  # noqa: E402
                                       split_blocks)
from deciplane.errors import ConfigError, EnvWorkerError, InvalidAction  # noqa: E402

TW = "deciplane/TextWorld-v0"
MATH = "deciplane/Math-v0"


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    if ray.is_initialized():  # pragma: no cover - another module left one running
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # the wrappers below live in this test module, which workers cannot import by name
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    ray.shutdown()


# ---- helpers ---------------------------------------------------------------------------------
def assert_same(a, b, where=""):
    """Deep equality of vector-env outputs: dicts (keys and order), numpy arrays (dtype,
    shape, values), tuples/lists, Menus and scalars."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), f"{where}: {type(b)} is not an array"
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        if a.dtype == object:
            for i, (x, y) in enumerate(zip(a, b)):
                assert_same(x, y, f"{where}[{i}]")
        else:
            assert np.array_equal(a, b), f"{where}: {a} != {b}"
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), f"{where}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def legal_actions(infos, n, rng):
    """One legal menu index per sub-env (from info['action_mask']), drawn from ``rng``."""
    out = np.zeros(n, dtype=np.int64)
    for i in range(n):
        mask = infos.get("action_mask")
        legal = np.flatnonzero(mask[i]) if mask is not None and infos["_action_mask"][i] else []
        out[i] = int(rng.choice(legal)) if len(legal) else 0
    return out


def tw_fns(n, steps=6):
    return [EnvSpec(TW, {"max_episode_steps": steps})] * n


def play_pair(ref, vec, seeds, n_steps, rng_seed=0, on_step=None):
    """Reset both with ``seeds``, then step both with the same legal actions (from the
    reference's infos) ``n_steps`` times, asserting identical outputs at every call.
    Returns the number of episode ends seen."""
    n = ref.num_envs
    out_r, out_v = ref.reset(seed=seeds), vec.reset(seed=seeds)
    assert_same(out_r, out_v, "reset")
    infos = out_r[1]
    rng = np.random.default_rng(rng_seed)
    ends = 0
    for t in range(n_steps):
        if on_step is not None:
            on_step(t)
        acts = legal_actions(infos, n, rng)
        out_r, out_v = ref.step(acts), vec.step(acts)
        assert_same(out_r, out_v, f"step {t}")
        infos = out_r[4]
        ends += int(np.logical_or(out_r[2], out_r[3]).sum())
    return ends


# ---- pure pieces -----------------------------------------------------------------------------
def test_split_blocks():
    assert split_blocks(5, 2) == [[0, 1, 2], [3, 4]]
    assert split_blocks(2, 4) == [[0], [1]]          # never an empty worker
    assert split_blocks(4, 1) == [[0, 1, 2, 3]]
    with pytest.raises(ConfigError, match="num_workers"):
        split_blocks(3, 0)


def test_bad_arguments_are_config_errors():
    with pytest.raises(ConfigError, match="on_failure"):
        RayVectorEnv(tw_fns(1), 1, on_failure="ignore")
    with pytest.raises(ConfigError, match="at least one env"):
        RayVectorEnv([], 1)
    # 3 workers x 1 CPU on a 2-CPU cluster could never start: said at once, not after a wait
    with pytest.raises(ConfigError, match="need 3 CPUs but the Ray cluster has 2"):
        RayVectorEnv(tw_fns(3), 3)


# ---- same rollouts ---------------------------------------------------------------------------
def test_textworld_same_rollouts_as_sync_vector_env_across_autoresets():
    """4 TextWorld envs on 2 workers vs SyncVectorEnv: 14 steps of 6-step episodes cross
    two NEXT_STEP autoresets (seedless resets continue each env's RNG on the worker)."""
    fns = tw_fns(4)
    ref = gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP)
    vec = RayVectorEnv(fns, num_workers=2)
    try:
        assert vec.num_workers == 2 and len(set(vec.worker_pids())) == 2
        assert os.getpid() not in vec.worker_pids()
        assert vec.single_action_space == ref.single_action_space
        assert vec.single_observation_space == ref.single_observation_space
        ends = play_pair(ref, vec, [11, 12, 11, 40], 14)
        assert ends >= 8          # every sub-env crossed at least two autoresets
        assert vec.failures["restarts"] == 0
        # the vector API beyond reset/step
        assert vec.get_attr("max_menu") == ref.get_attr("max_menu")
        # reset_mask: only some sub-envs restart
        mask = np.array([True, False, False, True])
        assert_same(ref.reset(seed=[5, None, None, 6], options={"reset_mask": mask.copy()}),
                    vec.reset(seed=[5, None, None, 6], options={"reset_mask": mask.copy()}),
                    "masked reset")
    finally:
        ref.close()
        vec.close()


def test_math_same_step_autoreset_same_as_sync():
    """Math-v0 (one-step episodes) under SAME_STEP: final_obs / final_info and the next
    episode's first observation in the same step, exactly as SyncVectorEnv."""
    fns = [EnvSpec(MATH, {"split": "test"})] * 3
    ref = gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    vec = RayVectorEnv(fns, num_workers=2, autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        assert_same(ref.reset(seed=7), vec.reset(seed=7), "reset")
        for t, answers in enumerate([("3", "12", "x"), ("7", "7", "7"), ("", "1", "2")]):
            out_r, out_v = ref.step(answers), vec.step(answers)
            assert_same(out_r, out_v, f"step {t}")
            assert out_v[2].all() and "final_obs" in out_v[4]
    finally:
        ref.close()
        vec.close()


def test_env_exception_propagates_and_is_not_a_worker_failure():
    """An env's own error (an index outside Discrete(64)) reaches the caller with its
    type and message, as from SyncVectorEnv; no worker is restarted."""
    vec = RayVectorEnv(tw_fns(2), num_workers=2)
    try:
        vec.reset(seed=[1, 2])
        with pytest.raises(InvalidAction, match="outside the action space"):
            vec.step(np.array([0, 70]))
        assert vec.failures["restarts"] == 0 and vec.worker_pids() == vec.worker_pids()
    finally:
        vec.close()


# ---- worker failures -------------------------------------------------------------------------
def test_killed_worker_mid_episode_is_replaced_and_its_episodes_replayed():
    """SIGKILL worker 0's process between two steps of an episode: the next step replaces
    it, replays its two episodes (same seeds, same actions), and the rollout stays
    identical to the in-process one."""
    fns = tw_fns(4, steps=8)
    ref = gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP)
    vec = RayVectorEnv(fns, num_workers=2, step_timeout_s=60)
    old = vec.worker_pids()

    def kill(t):
        if t == 3:
            os.kill(old[0], signal.SIGKILL)
            time.sleep(0.2)

    try:
        vec.set_attr("run_tag", ["a", "b", "c", "d"])
        play_pair(ref, vec, [3, 4, 5, 6], 7, on_step=kill)
        assert vec.get_attr("run_tag") == ("a", "b", "c", "d")   # re-applied after restart
        f = vec.failures
        assert (f["crashes"], f["restarts"], f["episodes_retried"], f["episodes_dropped"]) \
            == (1, 1, 2, 0), f
        new = vec.worker_pids()
        assert new[0] != old[0] and new[1] == old[1]
    finally:
        ref.close()
        vec.close()


def test_killed_worker_in_drop_mode_ends_its_episodes_truncated_and_counts_them():
    """on_failure='drop': the killed worker's episodes end at once (truncated, reward 0,
    last observation, info flag); the others continue unchanged; the dropped sub-envs
    autoreset on the next step like any finished episode."""
    fns = tw_fns(4, steps=20)
    ref = gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP)
    vec = RayVectorEnv(fns, num_workers=2, on_failure="drop")
    try:
        seeds = [3, 4, 5, 6]
        o_ref, infos = ref.reset(seed=seeds)
        o_vec, _ = vec.reset(seed=seeds)
        rng = np.random.default_rng(1)
        acts = legal_actions(infos, 4, rng)
        r_ref, r_vec = ref.step(acts), vec.step(acts)
        assert_same(r_ref, r_vec, "step before the kill")
        os.kill(vec.worker_pids()[0], signal.SIGKILL)
        acts = legal_actions(r_ref[4], 4, rng)
        r_ref = ref.step(acts)
        obs, rew, term, trunc, info = vec.step(acts)
        lost = [i for i in range(4) if vec.worker_of(i) == 0]
        kept = [i for i in range(4) if vec.worker_of(i) == 1]
        assert lost == [0, 1]
        for i in lost:
            assert trunc[i] and not term[i] and rew[i] == 0.0
            assert info[DROPPED_KEY][i] and info["_" + DROPPED_KEY][i]
            assert obs[i] == r_vec[0][i]          # the observation before the failure
        for i in kept:
            assert obs[i] == r_ref[0][i] and rew[i] == r_ref[1][i]
            assert not info["_" + DROPPED_KEY][i]
        assert vec.failures["episodes_dropped"] == 2 and vec.failures["restarts"] == 1
        # next step: the dropped slots start a new episode (a reset observation)
        obs2, rew2, term2, trunc2, info2 = vec.step(np.zeros(4, dtype=np.int64))
        for i in lost:
            assert rew2[i] == 0.0 and not trunc2[i] and "menu" in info2 and info2["_menu"][i]
            assert "-=" in obs2[i]               # a room banner: the game's first screen
    finally:
        ref.close()
        vec.close()


class HangOnce(gym.Wrapper):
    """Sleeps ``sleep_s`` in the step after which marker file ``flag`` exists (removing it
    first, so only one call hangs) — a worker that stops answering."""

    def __init__(self, env, flag, sleep_s=60.0):
        super().__init__(env)
        self.flag, self.sleep_s = flag, sleep_s

    def step(self, action):
        try:
            os.unlink(self.flag)          # atomic: one env of one worker wins
        except FileNotFoundError:
            pass
        else:
            time.sleep(self.sleep_s)
        return self.env.step(action)


class ExitOnReset(gym.Wrapper):
    """Kills its own process on every reset — a worker that can never recover."""

    def reset(self, **kwargs):
        os._exit(3)


def test_hung_worker_times_out_is_replaced_and_replayed():
    flag = Path(tempfile.mkdtemp()) / "hang"
    fns = [EnvSpec(TW, {"max_episode_steps": 10}, wrapper=partial(HangOnce, flag=str(flag)))] * 2
    ref = gym.vector.SyncVectorEnv(tw_fns(2, steps=10), autoreset_mode=AutoresetMode.NEXT_STEP)
    vec = RayVectorEnv(fns, num_workers=2, step_timeout_s=3.0)

    def hang(t):
        if t == 2:
            flag.touch()

    try:
        t0 = time.monotonic()
        play_pair(ref, vec, [8, 9], 4, on_step=hang)
        assert time.monotonic() - t0 < 40
        f = vec.failures
        assert f["timeouts"] >= 1 and f["restarts"] >= 1 and f["episodes_dropped"] == 0, f
        assert f["episodes_retried"] >= 1
        assert not flag.exists()
    finally:
        ref.close()
        vec.close()


def test_worker_that_always_dies_raises_env_worker_error_not_a_hang():
    fns = [EnvSpec(TW, {}, wrapper=ExitOnReset)]
    vec = RayVectorEnv(fns, num_workers=1, max_retries=1, step_timeout_s=20)
    try:
        t0 = time.monotonic()
        with pytest.raises(EnvWorkerError, match="failed 2 times"):
            vec.reset(seed=0)
        assert time.monotonic() - t0 < 60
        assert vec.failures["crashes"] == 2 and vec.failures["restarts"] == 2
    finally:
        vec.close()


def test_in_flight_kill_during_a_step_is_recovered():
    """The worker dies *during* a step call (killed by another thread while the env is in
    its step): the call is retried on a fresh worker after the replay."""
    flag = Path(tempfile.mkdtemp()) / "slow"
    fns = [EnvSpec(TW, {"max_episode_steps": 10},
                   wrapper=partial(HangOnce, flag=str(flag), sleep_s=30.0))] * 2
    ref = gym.vector.SyncVectorEnv(tw_fns(2, steps=10), autoreset_mode=AutoresetMode.NEXT_STEP)
    vec = RayVectorEnv(fns, num_workers=1, step_timeout_s=45.0)
    pid = vec.worker_pids()[0]

    def kill_during(t):
        if t == 1:
            flag.touch()
            threading.Timer(1.0, os.kill, (pid, signal.SIGKILL)).start()

    try:
        t0 = time.monotonic()
        play_pair(ref, vec, [21, 22], 3, on_step=kill_during)
        assert time.monotonic() - t0 < 30          # not the 30 s sleep, nor the timeout
        f = vec.failures
        assert (f["crashes"], f["timeouts"], f["episodes_retried"]) == (1, 0, 2), f
    finally:
        ref.close()
        vec.close()


# ---- sandboxed runs as Ray tasks -------------------------------------------------------------
@pytest.fixture(scope="module")
def remote_sandbox():
    from deciplane.sandbox import available_backends
    from deciplane.sandbox.remote import RaySandbox

    if not any(ok for ok, _ in available_backends().values()):
        pytest.skip("no sandbox backend works here: " + "; ".join(
            f"{k}: {why}" for k, (_, why) in available_backends().items()))
    return RaySandbox()


def test_ray_sandbox_runs_on_a_worker_with_the_node_backend(remote_sandbox):
    from deciplane.sandbox import Sandbox

    assert remote_sandbox.backend == Sandbox().backend
    ref = remote_sandbox.submit("print(input()[::-1])", stdin="abc\n")
    assert isinstance(ref, ray.ObjectRef)                 # a Ray task, not a driver call
    res = ray.get(ref)
    assert (res.status, res.stdout, res.backend) == ("ok", "cba\n", remote_sandbox.backend)
    res = remote_sandbox.run("import time\ntime.sleep(5)", timeout_s=0.5)
    assert res.status == "timeout"                         # the node's limits apply


def test_ray_sandbox_keeps_the_containment_of_the_node(remote_sandbox):
    """The program sees neither the host checkout nor the network, exactly as in a local
    Sandbox run: the Ray worker only hosts the sandbox, it does not replace it."""
    probe = (f"import socket\n"
             f"try:\n    open({__file__!r}).read(); print('READ')\n"
             f"except OSError as e:\n    print('noread')\n"
             f"s = socket.socket()\ns.settimeout(1)\n"
             f"try:\n    s.connect(('1.1.1.1', 53)); print('NET')\n"
             f"except OSError:\n    print('nonet')\n")
    res = remote_sandbox.run(probe, timeout_s=5.0)
    assert res.status == "ok" and res.stdout.split() == ["noread", "nonet"], res


def test_ray_sandbox_run_many_in_order_and_errors_typed(remote_sandbox):
    from deciplane.errors import ConfigError as CE

    res = remote_sandbox.run_many([{"code": "print(int(input()) ** 2)", "stdin": f"{k}\n"}
                                   for k in range(5)])
    assert [r.stdout for r in res] == [f"{k * k}\n" for k in range(5)]
    with pytest.raises(CE, match="code must be str"):
        remote_sandbox.run(b"print(1)")


def test_codeopt_rewards_through_the_ray_sandbox(remote_sandbox):
    """CodeOpt-v0 takes the RaySandbox as its sandbox: tests and the reward's timed runs
    execute as Ray tasks; the verdicts match a local env."""
    from deciplane.envs.codeopt.tasks import get_task

    env = gym.make("deciplane/CodeOpt-v0", task_id="fib", sandbox=remote_sandbox, repeats=1,
                   timer_kwargs={"calibration_pairs": 1})
    env.reset(seed=0)
    _, reward, term, _, info = env.step("print(42)\n")
    assert (reward, term, info["verdict"], info["backend"]) == \
        (0.0, True, "wrong_answer", remote_sandbox.backend)
    env.reset(seed=0)
    _, reward, term, _, info = env.step(get_task("fib").solutions[0])
    assert info["verdict"] == "accepted" and info["tests_passed"] == info["tests_total"]
    env.close()


# ---- config wiring ---------------------------------------------------------------------------
def test_config_env_workers_ray_gives_the_same_training_rollouts():
    """`--set env_workers.backend=ray` makes EnvSuite.train_batch return a RayVectorEnv
    (the suite's own env factories, GameSlotEnv included, shipped to the workers) that
    plays exactly what the in-process suite plays; evaluation stays in process."""
    from deciplane.trainers.config import load_config
    from deciplane.trainers.env_suite import EnvSuite

    cfg = load_config(data={"algorithm": "rlid_ppo",
                            "env": {"games_per_iteration": 2, "group_size": 2,
                                    "max_episode_steps": 5}},
                      overrides=["env_workers.backend=ray", "env_workers.num_workers=2",
                                 "env_workers.step_timeout_s=30"])
    assert (cfg.env_workers.backend, cfg.env_workers.num_workers) == ("ray", 2)
    local, remote = EnvSuite(cfg.env), EnvSuite(cfg.env, workers=cfg.env_workers)
    try:
        vl, seeds = local.train_batch(seed=3)
        vr, seeds_r = remote.train_batch(seed=3)
        assert isinstance(vr, RayVectorEnv) and vr.num_workers == 2 and seeds == seeds_r
        assert not isinstance(remote._vector(cfg.env.train_split, 4), RayVectorEnv)
        play_pair(vl, vr, [s for s in seeds for _ in range(2)], 7)
    finally:
        local.close()
        remote.close()
    with pytest.raises(ConfigError, match="num_workers >= 1"):
        load_config(data={"algorithm": "rlid_ppo"}, overrides=["env_workers.num_workers=0"])
    with pytest.raises(ConfigError, match="backend must be local"):
        load_config(data={"algorithm": "math_grpo"}, overrides=["env_workers.backend=ray"])
    with pytest.raises(ConfigError, match="local"):
        load_config(data={"algorithm": "rlid_ppo"}, overrides=["env_workers.backend=dask"])


@pytest.mark.slow
def test_training_run_with_ray_env_workers_equals_the_local_run(tmp_path):
    """A whole (tiny-model) RLiD-PPO run with env_workers.backend=ray logs the same
    metrics as the same run in process: rollouts, losses and evaluation agree."""
    import json

    import torch

    from deciplane.trainers.config import load_config
    from deciplane.trainers.run import build_algorithm, build_policy
    from deciplane.trainers.trainer import Trainer

    def run(extra, run_dir):
        cfg = load_config(data={
            "algorithm": "rlid_ppo", "progress": False, "seed": 0, "iterations": 2,
            "history": 0, "model": {"name": "deciplane/tiny", "finetune": "full", "threads": 1},
            "eval": {"every": 0, "final_splits": ["test"]}, "optim": {"lr": 1e-3},
            "env": {"games_per_iteration": 2, "group_size": 2, "max_episode_steps": 4}},
            overrides=extra)
        torch.manual_seed(0)
        algo = build_algorithm(cfg, build_policy(cfg))
        try:
            Trainer(cfg, run_dir, algo).train()
            vec = algo.suite._vec
            kinds = sorted(type(v).__name__ for v in vec.values())
        finally:
            algo.close()
        recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if "time" not in k and not k.startswith("perf")}
                for r in recs], kinds

    local, kinds_l = run([], tmp_path / "local")
    remote, kinds_r = run(["env_workers.backend=ray", "env_workers.num_workers=2"],
                          tmp_path / "ray")
    assert "RayVectorEnv" in kinds_r and "RayVectorEnv" not in kinds_l
    assert len(local) == len(remote) == 3
    assert local == remote
