"""Does training on a suite help or hurt each game? One agent on the suite of
``configs/suite_twx.yaml`` against one agent per game with the same budget (issue 50).

Runs (each a ``deciplane train`` run directory ``OUT/RUN/seedN``, resumable like
``benchmarks/rl_benchmark.py``: a finished run is skipped, a started one resumed):

* ``suite``: the config as shipped: one agent, each group of an iteration drawn from one of
  the games (equal weights), the 80 expert episodes of the warm start shared between them.
* ``single-GAME`` for each game: the same config with that game alone in ``envs:``, and the
  same budget per agent: 80 expert episodes, 12 iterations x 16 episodes. So each
  specialist sees about three times the experience of its game that the suite agent does:
  the comparison asks whether what the other games teach makes up for that.

Every run is evaluated on the **valid** fold (40 games per game, the same episodes in every
run), BC-only and final. Per game, ``OUT/table.md`` / ``table.json`` give the suite agent's
and the specialist's final success (95% Wilson) and the paired difference suite -
specialist on the same 40 games (95%, McNemar p), and each run's BC-only and final -
BC-only; and the macro average. Headed by the command that produced them.

Plan (an estimate from the demo's run at 0119bf6: ~0.5 CPU-h per 12-iteration run of one
game on a 2-core machine with AVX-512 BF16): 4 runs per seed, ~2.5 CPU-h (the suite run
evaluates three games), ~1.3 h of the machine; expect 2-3x without AVX-512.

    python benchmarks/suite_transfer.py --out runs/suite_transfer                # seed 0
    python benchmarks/suite_transfer.py --out runs/suite_transfer --seeds 2      # and seed 1
    python benchmarks/suite_transfer.py --out runs/suite_transfer --table-only
    python benchmarks/suite_transfer.py --out /tmp/st --tiny --seeds 1           # smoke test
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from rl_benchmark import (cpu_hours, run_session, run_state,  # noqa: E402
                          subprocess_runner)

SUITE_CONFIG = ROOT / "configs" / "suite_twx.yaml"
SPLIT = "valid"

COMMON = {"max_wall_time_s": None,
          "eval": {"final_splits": [SPLIT], "during_split": SPLIT, "episodes": 40}}
"""Every run: no wall-time limit (the budget is the iteration count), the valid fold."""

TINY = {"iterations": 1, "model": {"name": "deciplane/tiny", "threads": 1},
        "readout_layer": 1, "env": {"games_per_iteration": 2, "group_size": 2,
                                    "max_episode_steps": 4},
        "bc": {"episodes": 3, "epochs": 1}, "progress": False,
        "eval": {"episodes": 2, "every": 0, "workers": 1, "before": False},
        "prompt_cache": {"mode": "blocks", "block_tokens": 16}}
"""``--tiny``: a smoke test's shape (deciplane/tiny, one iteration, 2 episodes a game)."""


def game_names() -> list[str]:
    from deciplane.trainers.config import load_config

    return [e.name for e in load_config(SUITE_CONFIG).envs]


def run_config(run: str, seed: int, tiny: bool) -> dict[str, Any]:
    """The config of ``suite`` or ``single-GAME`` as a plain dict (the file a run starts
    from)."""
    from deciplane.config import deep_merge, read_yaml_mapping

    data = deep_merge(read_yaml_mapping(SUITE_CONFIG), COMMON)
    if tiny:
        data = deep_merge(data, TINY)
    data["seed"] = seed
    if run != "suite":
        game = run.removeprefix("single-")
        data["envs"] = [e for e in data["envs"] if e["kwargs"]["game"] == game]
        if not data["envs"]:
            raise SystemExit(f"no game {game!r} in {SUITE_CONFIG}")
    return data


def run_one(out: Path, run: str, seed: int, tiny: bool,
            runner: Callable[[list[str]], int] = subprocess_runner) -> int:
    """Train (or resume) ``OUT/RUN/seedN``."""
    from deciplane.config import dump_yaml
    from deciplane.trainers.config import load_config

    config = out / run / f"seed{seed}.yaml"
    if run_state(out / run / f"seed{seed}") == "new":
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(dump_yaml(load_config(data=run_config(run, seed, tiny))))
    return run_session(out / run / f"seed{seed}", config, runner)


def game_rows(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Per game of a finished run: BC-only and final results on the valid fold."""
    s = json.loads((run_dir / "summary.json").read_text())
    final = s["eval"][SPLIT]["per_env"]
    bc = ((s.get("after_warm_start") or {}).get(SPLIT) or {}).get("per_env", {})
    return {g: {"final": final[g], "bc": bc.get(g), "cpu_h": cpu_hours(run_dir, s)}
            for g in final}


def compare(out: Path, games: Sequence[str], seeds: int) -> list[dict[str, Any]]:
    """Per game and seed with both runs finished: suite vs specialist, paired."""
    from deciplane.stats import paired_difference, wilson_interval

    rows = []
    for seed in range(seeds):
        suite_dir = out / "suite" / f"seed{seed}"
        if run_state(suite_dir) != "done":
            continue
        suite = game_rows(suite_dir)
        for g in games:
            single_dir = out / f"single-{g}" / f"seed{seed}"
            if run_state(single_dir) != "done" or g not in suite:
                continue
            single = game_rows(single_dir)[g]
            a, b = suite[g]["final"], single["final"]
            if a["episode_seeds"] != b["episode_seeds"]:
                raise SystemExit(f"{g}, seed {seed}: the suite and the specialist played "
                                 "different episodes; the table would pair unlike games")
            wins_a = [bool(x) for x in a["episode_wins"]]
            wins_b = [bool(x) for x in b["episode_wins"]]
            n = len(wins_a)
            row = {"game": g, "seed": seed, "episodes": n,
                   "suite": {"won": sum(wins_a), "ci95": list(wilson_interval(sum(wins_a), n))},
                   "single": {"won": sum(wins_b), "ci95": list(wilson_interval(sum(wins_b), n))},
                   "suite_minus_single": paired_difference(wins_a, wins_b).to_dict()}
            for name, res in (("suite", suite[g]), ("single", single)):
                if res["bc"]:
                    row[name]["bc_won"] = sum(bool(x) for x in res["bc"]["episode_wins"])
            rows.append(row)
    return rows


def write_table(out: Path, rows: list[dict[str, Any]], command: str) -> str:
    lines = [f"Command: `{command}`", "",
             f"Valid fold, final greedy success per game; suite - specialist paired on the "
             "same games (95%).", "",
             "| game | seed | episodes | suite BC-only -> final | specialist BC-only -> final "
             "| suite - specialist (95%) | McNemar p |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        d = r["suite_minus_single"]
        lines.append(
            f"| {r['game']} | {r['seed']} | {r['episodes']} | {r['suite'].get('bc_won', '-')} "
            f"-> {r['suite']['won']} | {r['single'].get('bc_won', '-')} -> {r['single']['won']} "
            f"| {d['difference']:+.0%} ({d['ci95'][0]:+.0%} to {d['ci95'][1]:+.0%}) "
            f"| {d['mcnemar_p']:.3g} |")
    text = "\n".join(lines) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(text)
    (out / "table.json").write_text(json.dumps({"command": command, "rows": rows}, indent=1))
    return text


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder of the run directories")
    ap.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 (default 1)")
    ap.add_argument("--tiny", action="store_true", help="a smoke test's sizes")
    ap.add_argument("--table-only", action="store_true", help="only rebuild the table")
    args = ap.parse_args(argv)
    games = game_names()
    command = "python benchmarks/suite_transfer.py " + shlex.join(
        sys.argv[1:] if argv is None else list(argv))
    if not args.table_only:
        for seed in range(args.seeds):
            for run in ["suite"] + [f"single-{g}" for g in games]:
                if run_state(args.out / run / f"seed{seed}") == "done":
                    continue
                rc = run_one(args.out, run, seed, args.tiny)
                if rc != 0:
                    print(f"{run} seed {seed} ended with exit code {rc}; the table has the "
                          "runs that finished", file=sys.stderr)
                    return rc
    print(write_table(args.out, compare(args.out, games, args.seeds), command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
