"""Steps/s of ``deciplane/TextWorld-v0`` vs the raw TextWorld API, side by side.

Both sides play the same games with the same information requested from TextWorld
(``EnvInfos(admissible_commands, won, lost, score, max_score[, policy_commands])``) and
the same command sequence: at every step the command at index ``rng.integers(len(menu))``
of the sorted admissible commands, with one RNG seed per episode shared by both sides.
The raw side is ``textworld.start(path, infos)`` with ``env.reset()``/``env.step(cmd)``
(one started env per game, as deciplane keeps them); the deciplane side is
``gym.make("deciplane/TextWorld-v0", games=[...])`` with its default wrappers, stepping by
menu index and reading ``info["menu"]``. Rounds alternate raw/deciplane blocks (and which
goes first) so machine load hits both alike; the ratio is total deciplane steps/s over
total raw steps/s, by wall clock and by this process's CPU time (steadier on a shared
machine, since both sides run in this one process).

    python benchmarks/bench_textworld.py                 # embedded test suite
    python benchmarks/bench_textworld.py --expert --rounds 6 --steps 300
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import textworld

import deciplane  # noqa: F401  (registers the environments)
from deciplane.envs.textworld.games import make_game_suite


def run_raw(envs: dict, paths: list[Path], steps: int, max_len: int, seed: int) -> int:
    """``steps`` random steps with the raw TextWorld API; returns the steps done."""
    done_steps, episode = 0, 0
    while done_steps < steps:
        env = envs[paths[episode % len(paths)]]
        rng = np.random.default_rng(seed + episode)
        state = env.reset()
        for _ in range(max_len):
            commands = state["admissible_commands"]
            state, _, done = env.step(commands[rng.integers(len(commands))])
            done_steps += 1
            if done or done_steps >= steps:
                break
        episode += 1
    return done_steps


def run_deciplane(env: gym.Env, n_games: int, steps: int, max_len: int, seed: int) -> int:
    """The same steps through ``deciplane/TextWorld-v0``."""
    done_steps, episode = 0, 0
    while done_steps < steps:
        rng = np.random.default_rng(seed + episode)
        _, info = env.reset(options={"game": episode % n_games})
        for _ in range(max_len):
            _, _, term, trunc, info = env.step(int(rng.integers(len(info["menu"]))))
            done_steps += 1
            if term or trunc or done_steps >= steps:
                break
        episode += 1
    return done_steps


def wrapper_overhead(env: gym.Env, n_games: int, steps: int, max_len: int, seed: int
                     ) -> tuple[float, float]:
    """``(CPU us per step outside TextWorld's own step, that share of the step)``, over one
    more block of deciplane steps (resets untimed), each timed whole and around the
    TextWorld ``step`` inside it: the wrapper's own cost (Gymnasium's wrappers, menu, mask,
    info, checks). Steady on a loaded machine, where the two sides' ratio scatters by
    several percent; not part of the ratios. The inner clock reads (~2 us a step on the
    reference machine) count as overhead."""
    clock = time.process_time_ns
    inner = [0]
    games = env.unwrapped._games  # path -> started TextWorld env (all loaded by now)

    def timed(raw_step):
        def step(command):
            t0 = clock()
            out = raw_step(command)
            inner[0] += clock() - t0
            return out
        return step

    for game in games.values():
        game.step = timed(game.step)
    total = n = episode = 0
    try:
        while n < steps:
            rng = np.random.default_rng(seed + episode)
            _, info = env.reset(options={"game": episode % n_games})
            for _ in range(max_len):
                action = int(rng.integers(len(info["menu"])))
                t0 = clock()
                _, _, term, trunc, info = env.step(action)
                total += clock() - t0
                n += 1
                if term or trunc or n >= steps:
                    break
            episode += 1
    finally:
        for game in games.values():
            del game.step  # back to the class's method
    return (total - inner[0]) / n / 1e3, (total - inner[0]) / total


def check_same_trajectories(raw_envs: dict, env: gym.Env, paths: list[Path],
                            expert: bool) -> None:
    """Both sides must see the same text and menus for the same choices (else the
    comparison would be meaningless)."""
    from deciplane.envs.textworld.env import strip_banner

    for i, path in enumerate(paths):
        rng_raw, rng_dp = np.random.default_rng(i), np.random.default_rng(i)
        state = raw_envs[path].reset()
        obs, info = env.reset(options={"game": i})
        assert strip_banner(state.feedback) == obs
        for _ in range(20):
            assert list(info["menu"]) == state["admissible_commands"]
            if expert:
                assert info.get("expert_command") == (state["policy_commands"] or [None])[0]
            commands = state["admissible_commands"]
            state, _, done = raw_envs[path].step(commands[rng_raw.integers(len(commands))])
            obs, _, term, trunc, info = env.step(int(rng_dp.integers(len(info["menu"]))))
            assert state.feedback == obs and done == term
            if done:
                break
    print(f"same trajectories on both sides for {len(paths)} games")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--games", default="embedded", help="preset or 'embedded'")
    ap.add_argument("--split", default="test")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--steps", type=int, default=60, help="steps per block (short blocks, "
                    "many rounds: load drift on a shared machine averages out)")
    ap.add_argument("--max-len", type=int, default=50, help="steps per episode at most")
    ap.add_argument("--expert", action="store_true", help="also request policy_commands")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()

    suite = make_game_suite(args.games, args.split, progress=True)
    paths = list(suite.paths)
    infos = textworld.EnvInfos(admissible_commands=True, won=True, lost=True, score=True,
                               max_score=True, policy_commands=args.expert)
    raw_envs = {p: textworld.start(str(p), infos) for p in paths}
    env = gym.make("deciplane/TextWorld-v0", games=paths, expert=args.expert,
                   max_episode_steps=args.max_len + 1)
    check_same_trajectories(raw_envs, env, paths, args.expert)  # also warms both sides up

    wall = {"raw": 0.0, "dp": 0.0}
    cpu = {"raw": 0.0, "dp": 0.0}
    steps = {"raw": 0, "dp": 0}
    per_round = []
    for r in range(args.rounds):
        seed = 1000 * r
        rate = {}
        for side in (("raw", "dp") if r % 2 == 0 else ("dp", "raw")):
            t0, c0 = time.perf_counter(), time.process_time()
            if side == "raw":
                n = run_raw(raw_envs, paths, args.steps, args.max_len, seed)
            else:
                n = run_deciplane(env, len(paths), args.steps, args.max_len, seed)
            dt = time.perf_counter() - t0
            wall[side] += dt
            cpu[side] += time.process_time() - c0
            steps[side] += n
            rate[side] = n / dt
        per_round.append(rate["dp"] / rate["raw"])
        print(f"round {r}: raw {rate['raw']:7.1f} steps/s   deciplane {rate['dp']:7.1f} steps/s"
              f"   ratio {per_round[-1]:.3f}")
    over_us, over_share = wrapper_overhead(env, len(paths), 10 * args.steps, args.max_len,
                                           seed=10**6)
    raw_sps, dp_sps = steps["raw"] / wall["raw"], steps["dp"] / wall["dp"]
    raw_cpu, dp_cpu = steps["raw"] / cpu["raw"], steps["dp"] / cpu["dp"]
    result = {
        "games": args.games, "split": args.split, "n_games": len(paths),
        "split_fingerprint": suite.fingerprint, "expert": args.expert,
        "rounds": args.rounds, "steps_per_block": args.steps,
        "raw_steps_per_s": round(raw_sps, 1), "deciplane_steps_per_s": round(dp_sps, 1),
        "ratio_wall": round(dp_sps / raw_sps, 3),
        "median_round_ratio": round(sorted(per_round)[len(per_round) // 2], 3),
        "raw_steps_per_cpu_s": round(raw_cpu, 1), "deciplane_steps_per_cpu_s": round(dp_cpu, 1),
        "ratio_cpu": round(dp_cpu / raw_cpu, 3),
        "overhead_cpu_us_per_step": round(over_us, 1),
        "overhead_share": round(over_share, 4),
        "textworld": textworld.__version__, "python": platform.python_version(),
    }
    print(f"\nwall: raw textworld {raw_sps:.1f} steps/s, deciplane/TextWorld-v0 {dp_sps:.1f} "
          f"steps/s, ratio {result['ratio_wall']:.3f} (median of rounds "
          f"{result['median_round_ratio']})")
    print(f"cpu:  raw textworld {raw_cpu:.1f} steps/cpu-s, deciplane/TextWorld-v0 {dp_cpu:.1f} "
          f"steps/cpu-s, ratio {result['ratio_cpu']:.3f}")
    print(f"deciplane's own CPU per step (outside TextWorld's step): {over_us:.1f} us, "
          f"{100 * over_share:.2f}% of the step")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    env.close()
    for e in raw_envs.values():
        e.close()


if __name__ == "__main__":
    main()
