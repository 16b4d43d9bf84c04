"""Rollout throughput: in-process vector envs vs Ray env workers, side by side.

The same ``--envs`` copies of ``deciplane/TextWorld-v0`` (embedded suite, ``--split``)
are stepped with the same random legal actions (``info["action_mask"]``, one RNG) in:

* ``sync``  — ``gymnasium.vector.SyncVectorEnv`` (what rollouts use by default),
* ``async`` — ``gymnasium.vector.AsyncVectorEnv`` (one subprocess per env; reference),
* ``ray1`` / ``ray2`` / ``rayN`` — :class:`deciplane.vector.ray_env.RayVectorEnv` with
  that many Ray actors (contiguous blocks of envs each).

First every mode is checked against ``sync`` on a short rollout (identical observations,
rewards and flags), so the numbers compare equal work. Then ``--rounds`` rounds of
``--steps`` vector steps per mode, in a rotating order, episodes capped at
``--max-len`` steps (NEXT_STEP autoreset). Reported: env steps/s (sub-env steps per wall
second, totals over all rounds), the Ray per-call overhead (``ray1`` minus ``sync`` time
per vector step: both do the same env work serially, so the difference is
serialisation + the round trip) and a no-op actor round trip, then a projection for more
workers: with env step time ``t`` (from ``sync``), ``n`` envs, ``W`` workers on ``>= W``
free cores and overhead ``o`` per call, a vector step takes ``ceil(n/W) * t + o``.

    python benchmarks/bench_ray_rollout.py                          # 8 envs, all modes
    python benchmarks/bench_ray_rollout.py --rounds 1 --steps 20 --envs 4   # smoke run
    python benchmarks/bench_ray_rollout.py --modes sync,ray1,ray2,ray4 --cpus 4

Run it alone on the machine: the modes compete for the same cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import deciplane  # noqa: F401  (registers the environments)
from deciplane.vector.ray_env import EnvSpec, RayVectorEnv

TW = "deciplane/TextWorld-v0"


def legal_actions(infos: dict, n: int, rng: np.random.Generator) -> np.ndarray:
    out = np.zeros(n, dtype=np.int64)
    for i in range(n):
        legal = np.flatnonzero(infos["action_mask"][i]) if infos["_action_mask"][i] else []
        out[i] = int(rng.choice(legal)) if len(legal) else 0
    return out


def build(mode: str, fns: list) -> gym.vector.VectorEnv:
    auto = gym.vector.AutoresetMode.NEXT_STEP
    if mode == "sync":
        return gym.vector.SyncVectorEnv(fns, copy=False, autoreset_mode=auto)
    if mode == "async":
        return gym.vector.AsyncVectorEnv(fns, copy=False, autoreset_mode=auto)
    if mode.startswith("ray"):
        return RayVectorEnv(fns, num_workers=int(mode[3:]), copy=False, autoreset_mode=auto)
    raise SystemExit(f"unknown mode {mode!r}; use sync, async, ray<N>")


def play(vec: gym.vector.VectorEnv, steps: int, seed: int, trace: list | None = None) -> float:
    """``steps`` vector steps from a seeded reset; returns the wall seconds of the steps."""
    n = vec.num_envs
    rng = np.random.default_rng(seed)
    obs, infos = vec.reset(seed=[seed * 1000 + i for i in range(n)])
    t0 = time.perf_counter()
    for _ in range(steps):
        obs, rew, term, trunc, infos = vec.step(legal_actions(infos, n, rng))
        if trace is not None:
            trace.append((tuple(obs), rew.tolist(), term.tolist(), trunc.tolist()))
    return time.perf_counter() - t0


def noop_round_trip(n: int = 300) -> float:
    """Seconds per no-op actor call (``ray.get(actor.pid.remote())``)."""
    import ray

    from deciplane.vector.ray_env import _actor_class

    actor = _actor_class(ray).options(num_cpus=0).remote([])
    ray.get(actor.pid.remote())
    t0 = time.perf_counter()
    for _ in range(n):
        ray.get(actor.pid.remote())
    dt = (time.perf_counter() - t0) / n
    ray.kill(actor)
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default="sync,async,ray1,ray2")
    ap.add_argument("--envs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=100, help="vector steps per round and mode")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-len", type=int, default=20, help="episode cap (then autoreset)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--cpus", type=int, default=None,
                    help="CPUs of the local Ray instance (default: all); ignored with RAY_ADDRESS")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    a = ap.parse_args()
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if "sync" not in modes:
        modes.insert(0, "sync")

    import ray

    from deciplane.ray_cluster import ensure_ray

    ensure_ray(num_cpus=a.cpus, log_to_driver=False)
    fns = [EnvSpec(TW, {"split": a.split, "max_episode_steps": a.max_len})] * a.envs
    load0 = os.getloadavg()

    # same work everywhere: each mode's short rollout equals sync's. Each mode's vector env
    # exists only during its own block (Ray workers reserve CPUs; the measured mode has
    # the machine to itself); start-up is not timed.
    ref: list = []
    for m in modes:
        got: list = []
        vec = build(m, fns)
        play(vec, 12, seed=99, trace=got)
        vec.close()
        if m == "sync":
            ref = got
        elif got != ref:
            raise SystemExit(f"mode {m} does not reproduce the sync rollout; not comparable")

    from rich.progress import Progress

    total = {m: 0.0 for m in modes}
    with Progress(transient=True) as bar:
        task = bar.add_task("rounds", total=a.rounds * len(modes))
        for r in range(a.rounds):
            order = modes[r % len(modes):] + modes[:r % len(modes)]
            for m in order:
                vec = build(m, fns)
                total[m] += play(vec, a.steps, seed=r)
                vec.close()
                bar.advance(task)
    load1 = os.getloadavg()
    rtt = noop_round_trip()

    env_steps = a.rounds * a.steps * a.envs
    rate = {m: env_steps / total[m] for m in modes}
    per_call = {m: total[m] / (a.rounds * a.steps) for m in modes}
    t_env = per_call["sync"] / a.envs                        # one sub-env step, in process
    overhead = per_call["ray1"] - per_call["sync"] if "ray1" in modes else None
    cores = int(ray.cluster_resources().get("CPU", 0))

    print(f"\n{a.envs} x {TW} (embedded {a.split} split), {a.rounds} rounds x {a.steps} "
          f"vector steps, episodes <= {a.max_len} steps; Ray CPUs {cores}, "
          f"os.cpu_count() {os.cpu_count()}, load average {load0[0]:.1f} -> {load1[0]:.1f}")
    print(f"{'mode':<8}{'env steps/s':>14}{'ms / vector step':>18}{'vs sync':>10}")
    for m in modes:
        print(f"{m:<8}{rate[m]:>14.1f}{per_call[m] * 1e3:>18.2f}{rate[m] / rate['sync']:>10.2f}")
    print(f"\nsub-env step in process: {t_env * 1e3:.2f} ms;  no-op actor round trip: "
          f"{rtt * 1e3:.3f} ms")
    proj = {}
    if overhead is not None:
        print(f"Ray overhead per worker call (ray1 - sync): {overhead * 1e3:.2f} ms per vector "
              f"step = {overhead / a.envs * 1e3:.3f} ms per env step"
              + ("  (below the no-op round trip: noise; the projection uses the round trip)"
                 if overhead < rtt else ""))
        o = max(overhead, rtt)
        print("projection on >= W free cores (ceil(n/W) * t + o), n = "
              f"{a.envs}: " + ", ".join(
                  f"W={w}: {a.envs / (math.ceil(a.envs / w) * t_env + o):.0f} env steps/s"
                  for w in (1, 2, 4, 8, 16) if w <= a.envs))
        proj = {w: a.envs / (math.ceil(a.envs / w) * t_env + o) for w in (1, 2, 4, 8, 16)
                if w <= a.envs}
    if a.out:
        Path(a.out).write_text(json.dumps({
            "envs": a.envs, "steps": a.steps, "rounds": a.rounds, "max_len": a.max_len,
            "split": a.split, "ray_cpus": cores, "cpu_count": os.cpu_count(),
            "load_before": load0, "load_after": load1, "env_steps_per_s": rate,
            "s_per_vector_step": per_call, "noop_rtt_s": rtt, "overhead_s": overhead,
            "projection_env_steps_per_s": proj, "python": platform.python_version(),
            "ray": ray.__version__}, indent=2))
    ray.shutdown()


if __name__ == "__main__":
    main()
