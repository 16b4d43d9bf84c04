"""Per TextWorld-Express game and parameter setting: menu sizes, random-agent and expert win
rates on the test fold (correctness numbers, not timings: fine on a loaded machine).

For each setting, ``--episodes`` test-fold games (``reset(options={"game": i})``, i = 0..N-1)
are played twice through ``deciplane/TextWorldExpress-v0``: by a uniformly random legal
action (seeded per episode) for at most ``--max-steps`` steps, and by the gold-path expert.
Reported: the largest menu seen (random play visits more states than the expert), the
95th percentile of menu sizes over all random-play steps, the random win rate, the expert
win rate and its mean episode length.

    python benchmarks/twx_game_stats.py --json benchmarks/results/twx_game_stats.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
from rich.progress import Progress

import deciplane  # noqa: F401

# (game, params): every game at its defaults, plus smaller settings that a small model
# might learn (item 6 of issue 12 needs one where random play wins <= 30%).
SETTINGS = [
    ("cookingworld", ""),
    ("cookingworld", "numLocations=1,numIngredients=1,numDistractorItems=0,includeDoors=0"),
    ("cookingworld", "numLocations=2,numIngredients=2,numDistractorItems=2,includeDoors=0"),
    ("twc", ""),
    ("twc", "numLocations=1,numItemsToPutAway=1"),
    ("twc", "numLocations=1,numItemsToPutAway=2"),
    ("twc", "numLocations=2,numItemsToPutAway=2"),
    ("coin", ""),
    ("coin", "numLocations=3,includeDoors=0"),
    ("coin", "numLocations=5,includeDoors=0"),
    ("coin", "numLocations=5,includeDoors=1"),
    ("mapreader", ""),
    ("mapreader", "numLocations=5,maxDistanceApart=2,maxDistractorItemsPerLocation=1"),
    ("mapreader", "numLocations=8,maxDistanceApart=3"),
    ("arithmetic", ""),
    ("sorting", ""),
    ("simonsays", ""),
    ("simonsays", "gameLength=3,numDistractors=2"),
    ("peckingorder", ""),
]


def play(env: gym.Env, game: int, rng: np.random.Generator | None, max_steps: int,
         sizes: list[int]) -> tuple[bool, int]:
    _, info = env.reset(seed=game, options={"game": game})
    for t in range(max_steps):
        sizes.append(len(info["menu"]))
        a = int(rng.integers(len(info["menu"]))) if rng is not None else info["expert_action"]
        _, _, term, trunc, info = env.step(a)
        if term or trunc:
            return bool(info["won"]), t + 1
    return bool(info["won"]), max_steps


def stats(game: str, params: str, episodes: int, max_steps: int) -> dict:
    env = gym.make("deciplane/TextWorldExpress-v0", game=game, game_params=params,
                   split="test", expert=True, max_menu=512, max_episode_steps=max_steps)
    try:
        rand_sizes: list[int] = []
        rand = [play(env, i, np.random.default_rng(i), max_steps, rand_sizes)[0]
                for i in range(episodes)]
        exp_sizes: list[int] = []
        expert = [play(env, i, None, max_steps, exp_sizes) for i in range(episodes)]
        fp = env.unwrapped.split_fingerprint
    finally:
        env.close()
    return {
        "game": game, "game_params": params or "(defaults)", "episodes": episodes,
        "max_steps": max_steps, "split_fingerprint": fp,
        "max_menu_seen": max(rand_sizes + exp_sizes),
        "p95_menu_random": int(np.percentile(rand_sizes, 95)),
        "random_win_rate": round(float(np.mean(rand)), 3),
        "expert_win_rate": round(float(np.mean([w for w, _ in expert])), 3),
        "expert_mean_steps": round(float(np.mean([n for _, n in expert])), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--max-steps", type=int, default=100, help="gym.make's default limit")
    ap.add_argument("--only", default=None, help="one game name")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    settings = [s for s in SETTINGS if args.only in (None, s[0])]
    rows = []
    with Progress() as bar:
        task = bar.add_task("settings", total=len(settings))
        for game, params in settings:
            rows.append(stats(game, params, args.episodes, args.max_steps))
            bar.advance(task)
    print("| game | game_params | max menu | p95 menu (random) | random wins | expert wins | "
          "expert steps |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['game']} | `{r['game_params']}` | {r['max_menu_seen']} | "
              f"{r['p95_menu_random']} | {r['random_win_rate']:.0%} | {r['expert_win_rate']:.0%} "
              f"| {r['expert_mean_steps']} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
