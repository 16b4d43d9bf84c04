"""Steps/s of ``deciplane/TextWorld-v0`` vs the raw TextWorld API, side by side.

Both sides play the same games with the same information requested from TextWorld
(``EnvInfos(admissible_commands, won, lost, score, max_score[, policy_commands])``) and
the same command sequence: at every step the command at index ``rng.integers(len(menu))``
of the sorted admissible commands, with one RNG seed per episode shared by both sides.
The raw side is ``textworld.start(path, infos)`` with ``env.reset()``/``env.step(cmd)``
(one started env per game, as deciplane keeps them); the deciplane side is
``gym.make("deciplane/TextWorld-v0", games=[...])`` with its default wrappers, stepping by
menu index and reading ``info["menu"]``. Rounds alternate raw/deciplane blocks so machine
load hits both alike; the ratio is total deciplane steps/s over total raw steps/s.

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
from deciplane.envs.textworld_games import make_game_suite


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--games", default="embedded", help="preset or 'embedded'")
    ap.add_argument("--split", default="test")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200, help="steps per block")
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
    # warm-up: load every game on both sides
    run_raw(raw_envs, paths, len(paths) * 2, 2, 0)
    run_deciplane(env, len(paths), len(paths) * 2, 2, 0)

    t_raw = t_dp = 0.0
    n_raw = n_dp = 0
    per_round = []
    for r in range(args.rounds):
        seed = 1000 * r
        order = (("raw", "dp") if r % 2 == 0 else ("dp", "raw"))
        for side in order:
            t0 = time.perf_counter()
            if side == "raw":
                n = run_raw(raw_envs, paths, args.steps, args.max_len, seed)
                dt = time.perf_counter() - t0
                t_raw, n_raw = t_raw + dt, n_raw + n
                raw_rate = n / dt
            else:
                n = run_deciplane(env, len(paths), args.steps, args.max_len, seed)
                dt = time.perf_counter() - t0
                t_dp, n_dp = t_dp + dt, n_dp + n
                dp_rate = n / dt
        per_round.append((raw_rate, dp_rate))
        print(f"round {r}: raw {raw_rate:7.1f} steps/s   deciplane {dp_rate:7.1f} steps/s   "
              f"ratio {dp_rate / raw_rate:.3f}")
    raw_sps, dp_sps = n_raw / t_raw, n_dp / t_dp
    ratios = sorted(d / r for r, d in per_round)
    result = {
        "games": args.games, "split": args.split, "n_games": len(paths),
        "split_fingerprint": suite.fingerprint, "expert": args.expert,
        "rounds": args.rounds, "steps_per_block": args.steps,
        "raw_steps_per_s": round(raw_sps, 1), "deciplane_steps_per_s": round(dp_sps, 1),
        "ratio": round(dp_sps / raw_sps, 3), "median_round_ratio": round(ratios[len(ratios) // 2], 3),
        "textworld": textworld.__version__, "python": platform.python_version(),
    }
    print(f"\nraw textworld {raw_sps:.1f} steps/s, deciplane/TextWorld-v0 {dp_sps:.1f} steps/s,"
          f" ratio {dp_sps / raw_sps:.3f} (median of rounds {result['median_round_ratio']})")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    env.close()
    for e in raw_envs.values():
        e.close()


if __name__ == "__main__":
    main()
