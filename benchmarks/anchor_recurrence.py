"""How often GiGPO's anchor states recur in the demo's groups (issue 48), before relying on
``advantage: gigpo``.

Plays groups of ``--group-size`` episodes from the same start (the same game and menu seed,
as the trainers' groups) on the demo's env settings (configs/quickstart_twx.yaml: twc, 2
rooms, 2 items to put away, shuffled menus, the state observation, drop_penalised, a
``--max-steps`` cap of 30) with a uniformly random policy over the menu (no model: cheap),
on the first ``--games`` games of the train fold. Prints the share of decisions whose step
group (same group, same ``info["state_key"]``) holds 2 or more decisions — the decisions
GiGPO's step advantage can be non-zero for (``rollout/step_group_share`` in a run) — and
the same share without each episode's own repeats (a state visited twice in one episode
alone forms a group too).

    python benchmarks/anchor_recurrence.py --games 20 --group-size 4
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from deciplane.envs.twx import TextWorldExpressEnv
from deciplane.objectives.advantages import step_group_share


def play_group(env: TextWorldExpressEnv, game: int, size: int, max_steps: int,
               rng: np.random.Generator) -> list[list[str]]:
    """``size`` random episodes of train game ``game`` from one start: their state keys."""
    out = []
    for _ in range(size):
        _, info = env.reset(options={"game": game, "menu_seed": game})
        keys: list[str] = []
        for _ in range(max_steps):
            keys.append(info["state_key"])
            _, _, term, trunc, info = env.step(int(rng.integers(len(info["menu"]))))
            if term or trunc:
                break
        out.append(keys)
    return out


def shares(groups: list[list[list[str]]]) -> tuple[float, float, int]:
    """(share in a step group of >= 2, the same counting only groups that span two
    episodes, decisions)."""
    eps = [(g, keys) for g, group in enumerate(groups) for keys in group]
    t_max = max(len(k) for _, k in eps)
    index: dict[str, int] = {}
    anchors = torch.full((len(eps), t_max), -1, dtype=torch.long)
    mask = torch.zeros(len(eps), t_max, dtype=torch.bool)
    for e, (_, keys) in enumerate(eps):
        for t, k in enumerate(keys):
            anchors[e, t] = index.setdefault(k, len(index))
            mask[e, t] = True
    gids = torch.tensor([g for g, _ in eps])
    share = step_group_share(gids, anchors, mask)
    across = 0
    for g, group in enumerate(groups):
        for e, keys in enumerate(group):
            others = set().union(*(set(k) for j, k in enumerate(group) if j != e))
            across += sum(k in others for k in keys)
    n = int(mask.sum())
    return share, across / max(n, 1), n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--games", type=int, default=20)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    env = TextWorldExpressEnv(game="twc", game_params={"numLocations": 2,
                                                       "numItemsToPutAway": 2},
                              menu_order="shuffled", observation="state",
                              drop_penalised=True)
    rng = np.random.default_rng(args.seed)
    try:
        groups = [play_group(env, g, args.group_size, args.max_steps, rng)
                  for g in range(args.games)]
    finally:
        env.close()
    share, across, n = shares(groups)
    print(f"{args.games} train games x {args.group_size} random episodes (cap "
          f"{args.max_steps}), {n} decisions, {time.perf_counter() - t0:.0f} s")
    print(f"share of decisions in a step group of >= 2: {share:.1%}")
    print(f"share whose state another episode of the group also visited: {across:.1%}")


if __name__ == "__main__":
    main()
