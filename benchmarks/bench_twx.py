"""Steps/s of ``deciplane/TextWorldExpress-v0`` vs the raw ``textworld_express`` API, side
by side.

Both sides play the same games (seeds ``seed_0 + episode`` of one fold, same
``gameParams``) with the same command sequence: at every step the command at index
``rng.integers(len(menu))`` of the sorted valid actions, one RNG seed per episode shared
by both sides. The raw side is the package's documented loop
(``TextWorldExpressEnv.reset(seed, gameFold)``, ``step(command)``, reading
``infos["validActions"]``); the deciplane side is ``gym.make("deciplane/TextWorldExpress-v0",
...)`` with its default wrappers, stepping by menu index and reading ``info["menu"]``. Each
side has its own JVM. A third side, ``server``, is the floor under both: the package's
JVM object stepped directly (``server.stepJSON`` + ``orjson.loads``, one JVM call per step,
as the wrapper does; the package's ``step`` makes two: it also fetches the task
description, and keeps a run history), so deciplane/server is the wrapper's own cost.
The script first checks that both sides produce the same text and
menus, then runs rounds of short blocks alternating which side goes first; ratios are
over the totals, by wall clock and by this process's CPU time (the JVMs' CPU is not in
it: compare the wall ratio on an idle machine).

    python benchmarks/bench_twx.py                              # coin, train fold
    python benchmarks/bench_twx.py --game cookingworld --rounds 30 --steps 300
    python benchmarks/bench_twx.py --expert                     # + gold path at reset
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import deciplane  # noqa: F401  (registers the environments)
from deciplane.envs.twx.env import SPLIT_TO_FOLD, canonical_params


def run_raw(env, fold: str, seed0: int, steps: int, max_len: int, seed: int,
            expert: bool) -> int:
    """``steps`` random steps through the raw package; returns the steps done."""
    done_steps, episode = 0, 0
    while done_steps < steps:
        rng = np.random.default_rng(seed + episode)
        _, infos = env.reset(seed=seed0 + episode % 1000, gameFold=fold,
                             generateGoldPath=expert)
        for _ in range(max_len):
            actions = sorted(infos["validActions"])
            _, _, done, infos = env.step(actions[rng.integers(len(actions))])
            done_steps += 1
            if done or done_steps >= steps:
                break
        episode += 1
    return done_steps


def run_server(env, fold: str, seed0: int, steps: int, max_len: int, seed: int,
               expert: bool) -> int:
    """The same steps on the package's JVM object directly (no Python-side extras)."""
    import orjson

    server = env.server
    done_steps, episode = 0, 0
    while done_steps < steps:
        rng = np.random.default_rng(seed + episode)
        infos = orjson.loads(server.generateNewGameJSON(seed0 + episode % 1000, fold, expert))
        for _ in range(max_len):
            actions = sorted(infos["validActions"])
            infos = orjson.loads(server.stepJSON(actions[rng.integers(len(actions))]))
            done_steps += 1
            if infos["tasksuccess"] or infos["taskfailure"] or done_steps >= steps:
                break
        episode += 1
    return done_steps


def run_deciplane(env: gym.Env, steps: int, max_len: int, seed: int) -> int:
    """The same steps through ``deciplane/TextWorldExpress-v0``."""
    done_steps, episode = 0, 0
    while done_steps < steps:
        rng = np.random.default_rng(seed + episode)
        _, info = env.reset(options={"game": episode % 1000})
        for _ in range(max_len):
            _, _, term, trunc, info = env.step(int(rng.integers(len(info["menu"]))))
            done_steps += 1
            if term or trunc or done_steps >= steps:
                break
        episode += 1
    return done_steps


def check_same_trajectories(raw, env: gym.Env, fold: str, seed0: int, episodes: int) -> None:
    for ep in range(episodes):
        rng_raw, rng_dp = np.random.default_rng(ep), np.random.default_rng(ep)
        obs_raw, infos = raw.reset(seed=seed0 + ep, gameFold=fold)
        obs, info = env.reset(options={"game": ep})
        assert obs == obs_raw, (obs, obs_raw)
        for _ in range(30):
            actions = sorted(infos["validActions"])
            assert list(info["menu"]) == actions
            obs_raw, _, done, infos = raw.step(actions[rng_raw.integers(len(actions))])
            obs, _, term, trunc, info = env.step(int(rng_dp.integers(len(info["menu"]))))
            assert obs == obs_raw and bool(infos["tasksuccess"] or infos["taskfailure"]) == term
            if term:
                break
    print(f"same trajectories on both sides for {episodes} episodes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--game", default="coin")
    ap.add_argument("--game-params", default="", help="e.g. numLocations=5,includeDoors=0")
    ap.add_argument("--split", default="train", choices=list(SPLIT_TO_FOLD))
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--steps", type=int, default=200, help="steps per block")
    ap.add_argument("--max-len", type=int, default=50, help="steps per episode at most")
    ap.add_argument("--max-menu", type=int, default=128)
    ap.add_argument("--expert", action="store_true", help="both sides generate the gold path")
    ap.add_argument("--warmup", type=int, default=3000, help="untimed steps per side first "
                    "(each side has its own JVM, whose JIT needs a few thousand steps)")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()

    from textworld_express import TextWorldExpressEnv

    import textworld_express

    fold = SPLIT_TO_FOLD[args.split]
    params = canonical_params(args.game, args.game_params)
    raw = TextWorldExpressEnv(envStepLimit=args.max_len + 1)
    raw.load(args.game, params)
    srv = TextWorldExpressEnv(envStepLimit=args.max_len + 1)
    srv.load(args.game, params)
    seed0 = {"train": 0, "dev": 10000, "test": 20000}[fold]
    env = gym.make("deciplane/TextWorldExpress-v0", game=args.game, game_params=params,
                   split=args.split, expert=args.expert, max_menu=args.max_menu,
                   task_in_observation=False, max_episode_steps=args.max_len + 1)
    check_same_trajectories(raw, env, fold, seed0, 5)
    run_raw(raw, fold, seed0, args.warmup, args.max_len, 10**6, args.expert)  # JIT warm-up
    run_server(srv, fold, seed0, args.warmup, args.max_len, 10**6, args.expert)
    run_deciplane(env, args.warmup, args.max_len, 10**6)

    sides = ("raw", "srv", "dp")
    wall = dict.fromkeys(sides, 0.0)
    cpu = dict.fromkeys(sides, 0.0)
    steps = dict.fromkeys(sides, 0)
    per_round = []
    for r in range(args.rounds):
        seed = 1000 * r
        rate = {}
        order = sides[r % 3:] + sides[:r % 3]  # rotate who goes first
        for side in (order if r % 2 == 0 else order[::-1]):
            t0, c0 = time.perf_counter(), time.process_time()
            if side == "raw":
                n = run_raw(raw, fold, seed0, args.steps, args.max_len, seed, args.expert)
            elif side == "srv":
                n = run_server(srv, fold, seed0, args.steps, args.max_len, seed, args.expert)
            else:
                n = run_deciplane(env, args.steps, args.max_len, seed)
            dt = time.perf_counter() - t0
            wall[side] += dt
            cpu[side] += time.process_time() - c0
            steps[side] += n
            rate[side] = n / dt
        per_round.append(rate["dp"] / rate["raw"])
        print(f"round {r}: raw {rate['raw']:8.1f}   server {rate['srv']:8.1f}   deciplane "
              f"{rate['dp']:8.1f} steps/s   deciplane/raw {per_round[-1]:.3f}   "
              f"deciplane/server {rate['dp'] / rate['srv']:.3f}")
    raw_sps, dp_sps = steps["raw"] / wall["raw"], steps["dp"] / wall["dp"]
    srv_sps = steps["srv"] / wall["srv"]
    raw_cpu, dp_cpu = steps["raw"] / cpu["raw"], steps["dp"] / cpu["dp"]
    srv_cpu = steps["srv"] / cpu["srv"]
    result = {
        "game": args.game, "game_params": params, "split": args.split, "fold": fold,
        "split_fingerprint": env.unwrapped.split_fingerprint, "expert": args.expert,
        "rounds": args.rounds, "steps_per_block": args.steps, "max_len": args.max_len,
        "raw_steps_per_s": round(raw_sps, 1), "deciplane_steps_per_s": round(dp_sps, 1),
        "ratio_wall": round(dp_sps / raw_sps, 3),
        "median_round_ratio": round(sorted(per_round)[len(per_round) // 2], 3),
        "raw_steps_per_python_cpu_s": round(raw_cpu, 1),
        "deciplane_steps_per_python_cpu_s": round(dp_cpu, 1),
        "ratio_python_cpu": round(dp_cpu / raw_cpu, 3),
        "server_steps_per_s": round(srv_sps, 1), "ratio_wall_vs_server": round(dp_sps / srv_sps, 3),
        "server_steps_per_python_cpu_s": round(srv_cpu, 1),
        "ratio_python_cpu_vs_server": round(dp_cpu / srv_cpu, 3),
        "textworld_express": textworld_express.__version__,
        "python": platform.python_version(),
    }
    print(f"\nwall: raw textworld_express {raw_sps:.1f} steps/s, deciplane/TextWorldExpress-v0 "
          f"{dp_sps:.1f} steps/s, ratio {result['ratio_wall']:.3f} (median of rounds "
          f"{result['median_round_ratio']})")
    print(f"python cpu: raw {raw_cpu:.1f} steps/cpu-s, deciplane {dp_cpu:.1f} steps/cpu-s, "
          f"ratio {result['ratio_python_cpu']:.3f}")
    print(f"vs the JVM object alone (server): {srv_sps:.1f} steps/s, {srv_cpu:.1f} steps/cpu-s; "
          f"deciplane/server {result['ratio_wall_vs_server']:.3f} (wall), "
          f"{result['ratio_python_cpu_vs_server']:.3f} (python cpu)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    env.close()
    raw.close()
    srv.close()


if __name__ == "__main__":
    main()
