"""What RL adds to the demo's warm start, per advantage estimator and capacity (issue 48).

Cells: advantage ``grpo`` (the demo's before this benchmark) vs ``gigpo`` (``gamma: 0.95``,
weight 1, std normalisation: the paper's settings; the demo's since) vs ``gae`` (a value
head on the item head's decision state, ``gamma: 1``, ``value_lr: 5e-4``), crossed with
the capacity RL trains: ``head`` (the demo's rank-16 bilinear item head alone), ``mlp``
(``readout_head: mlp``, width 256, frozen during the warm start) and ``lora`` (LoRA rank
16 on the last ``--lora-layers`` 4 of the 18 layers below the head, trained in the warm
start too). Everything else is
``configs/quickstart_twx.yaml``: its warm start (``bc`` unchanged: 80 expert episodes, 15%
held out), its RL budget as a fixed count (12 iterations x 16 episodes; no wall-time limit),
``prompt_cache.mode: blocks``; evaluations on the **valid** fold (40 games, the same for
every run: BC-only, during (20 games every 4 iterations) and final), the zero-shot rows from
the baseline cache (``eval.cache_baselines``: one labels pass per capacity and seed, shared
by the three advantages).

Each cell x seed is a ``deciplane train`` run directory ``OUT/CELL/seedN``: a finished one
(``summary.json``) is skipped, a killed one continues with ``deciplane train --resume``,
and ``OUT/table.md`` / ``OUT/table.json`` are rebuilt from whatever runs finished, headed by
the command that produced them (commit partial tables with it). Per run: final success on
valid with its 95% Wilson interval, the paired final - BC-only difference on the same 40
games with its 95% interval (:func:`deciplane.stats.paired_difference`, as ``summary.json``
``comparisons``), RL env steps and CPU hours (this script's measure of the run's process
tree, every session; ``summary.json`` ``cpu_time_s`` counts the main process only).

Plan (an ESTIMATE, scaled from the demo at a439d96 —
``benchmarks/results/demo_quickstart_twx_a439d96/summary.json``: 2 cores with AVX-512 BF16,
1,320 s wall, 1.9 cores busy on average — to 40 evaluation games and no zero-shot labels
pass after the first run of a capacity and seed):

* env steps per run: RL 12 x 16 = 192 episodes, at most 5,760 steps (the demo: 5,384);
  the warm start's 80 expert episodes (~490 steps); evaluations 40 (BC-only) + 2 x 20
  (during) + 40 (final) = 120 episodes, at most 3,600 steps.
* ``head`` and ``mlp`` runs: rollouts ~665 s, warm start ~90 s, evaluations ~465 s
  (BC-only 151, during 155, final 160), set-up ~15 s, updates ~5 s: ~1,240 s wall,
  ~0.65 CPU-h; + the labels baseline (~280 s wall) in the first run of each capacity and
  seed: ~0.7 CPU-h on average. The MLP adds ~12 MFLOP to a ~40 GFLOP decision.
* ``lora`` runs: each update runs 4 layers forward and backward over every prompt token,
  the warm start's epochs run them too, and the prompt cache reuses only within one rollout
  or evaluation: ~3x a head run (LoRA on 6 layers cost ~3x the CPU in BC, issue 48), ~2 CPU-h.
* first pass, 9 cells x 2 seeds = 18 runs: 12 x 0.7 + 6 x 2 = ~20 CPU-h (~10 h on 2 cores);
  then ``--seeds 3 --cells best``: seed 2 of the two best cells and ``grpo-head`` (the
  demo's setting before this benchmark), 3 runs, ~2-6 CPU-h. In all ~22-26 CPU-h, ~11-13 h
  of a 2-core machine like a439d96's; expect 2-3x that on a CPU without AVX-512 BF16 (fp32 trunk).

Commands::

    python benchmarks/rl_benchmark.py --out runs/rl_benchmark                 # 9 cells x seeds 0, 1
    python benchmarks/rl_benchmark.py --out runs/rl_benchmark --seeds 3 --cells best
    python benchmarks/rl_benchmark.py --out runs/rl_benchmark --table-only    # rebuild the table
    python benchmarks/rl_benchmark.py --out runs/rl_benchmark --dry-run       # what would run
    python benchmarks/rl_benchmark.py --out /tmp/rb --model deciplane/tiny --tiny --seeds 1  # smoke
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
BASE_CONFIG = ROOT / "configs" / "quickstart_twx.yaml"
SPLIT = "valid"
BASELINE_CELL = "grpo-head"  # the demo's setting when issue 48 began: plain GRPO, head only

ADVANTAGES: dict[str, list[str]] = {
    "grpo": ["advantage=grpo", "gamma=1.0"],
    "gigpo": ["advantage=gigpo", "gamma=0.95", "gigpo_weight=1.0", "gigpo_norm=std"],
    "gae": ["advantage=gae", "gamma=1.0", "value_lr=5.0e-4"],
}
"""advantage name -> its overrides of the demo's config (each sets its own ``gamma``, so a
cell does not change with the demo's advantage; ``grpo`` does not read it)."""


def capacities(lora_layers: int) -> dict[str, list[str]]:
    """capacity name -> its overrides (``lora``: LoRA on the last ``lora_layers`` layers
    below the item head)."""
    return {"head": [],
            "mlp": ["readout_head=mlp", "readout_mlp_hidden=256"],
            "lora": ["model.finetune=lora", f"model.lora_last_layers={lora_layers}",
                     "model.lora_rank=16", "model.lora_alpha=32"]}


def cells(lora_layers: int = 4) -> dict[str, list[str]]:
    """``ADVANTAGE-CAPACITY`` -> overrides, advantages first: ``grpo-head``, ``grpo-mlp``..."""
    return {f"{a}-{c}": [*ao, *co] for a, ao in ADVANTAGES.items()
            for c, co in capacities(lora_layers).items()}


COMMON = ["iterations=12", "max_wall_time_s=null",
          f"eval.final_splits=[{SPLIT}]", f"eval.during_split={SPLIT}", "eval.episodes=40",
          "eval.cache_baselines=true", "prompt_cache.mode=blocks"]
"""Every run: the demo's RL budget as a count, the valid fold, 40 games."""

TINY = ["iterations=1", "model.threads=1", "readout_layer=1", "readout_mlp_hidden=8",
        "model.lora_last_layers=1", "env.games_per_iteration=2", "env.group_size=2",
        "env.max_episode_steps=4", "bc.episodes=2", "bc.epochs=2", "eval.episodes=2",
        "eval.every=0", "eval.workers=1", "prompt_cache.block_tokens=16", "progress=false"]
"""``--tiny``: a smoke test's shape (with ``--model deciplane/tiny``: 2 layers)."""


# ---- runs ---------------------------------------------------------------------------------


def run_overrides(cell: str, seed: int, lora_layers: int, model: str | None,
                  tiny: bool) -> list[str]:
    """Every ``--set`` of one run, later ones winning."""
    out = [*COMMON, *cells(lora_layers)[cell], f"seed={seed}"]
    if model is not None:
        out.append(f"model.name={model}")
    return out + (TINY if tiny else [])


def run_state(run_dir: Path) -> str:
    """``done`` (summary.json), ``partial`` (started: config.yaml) or ``new``."""
    if (run_dir / "summary.json").is_file():
        return "done"
    return "partial" if (run_dir / "config.yaml").is_file() else "new"


def train_command(config: Path, run_dir: Path, resume: bool) -> list[str]:
    """The ``deciplane train`` command of a run (a resumed run reads its saved config)."""
    cli = [sys.executable, "-m", "deciplane.cli", "train"]
    if resume:
        return [*cli, "--run-dir", str(run_dir), "--resume"]
    return [*cli, str(config), "--run-dir", str(run_dir)]


def subprocess_runner(cmd: list[str]) -> int:
    """Run ``cmd`` with this script's environment; its exit code."""
    return subprocess.run(cmd, cwd=ROOT, check=False).returncode


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's waited-for children (and theirs)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_one(out: Path, cell: str, seed: int, overrides: list[str],
            runner: Callable[[list[str]], int] = subprocess_runner) -> int:
    """Train (or resume) ``OUT/CELL/seedN``; appends the session's wall and CPU seconds to
    its ``bench_sessions.jsonl``. Returns the command's exit code."""
    from deciplane.config import dump_yaml
    from deciplane.trainers.config import load_config

    run_dir = out / cell / f"seed{seed}"
    config = out / cell / f"seed{seed}.yaml"
    if run_state(run_dir) != "partial":
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(dump_yaml(load_config(BASE_CONFIG, overrides)))
    return run_session(run_dir, config, runner)


def run_session(run_dir: Path, config: Path,
                runner: Callable[[list[str]], int] = subprocess_runner) -> int:
    """Train ``run_dir`` from ``config`` (resume it if started); appends the session's wall
    and CPU seconds to its ``bench_sessions.jsonl``. Returns the command's exit code."""
    resume = run_state(run_dir) == "partial"
    cmd = train_command(config, run_dir, resume)
    print(("resume  " if resume else "train   ") + shlex.join(cmd), flush=True)
    t0, c0 = time.time(), children_cpu_s()
    rc = runner(cmd)
    session = {"started": t0, "wall_s": time.time() - t0, "cpu_s": children_cpu_s() - c0,
               "resume": resume, "rc": rc}
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "bench_sessions.jsonl").open("a") as f:
        f.write(json.dumps(session) + "\n")
    return rc


# ---- the table ------------------------------------------------------------------------------


def run_row(run_dir: Path) -> dict[str, Any]:
    """One finished run's numbers on the valid fold (pure reading of its files)."""
    from deciplane.stats import paired_difference, wilson_interval

    s = json.loads((run_dir / "summary.json").read_text())
    final, bc = s["eval"][SPLIT], (s.get("after_warm_start") or {}).get(SPLIT)
    n = int(final["episodes"])
    wins = _wins(final, n)
    row: dict[str, Any] = {"status": s.get("status"), "iterations": s.get("iterations"),
                           "env_steps": s.get("env_steps"), "episodes": s.get("episodes"),
                           "bc_env_steps": (s.get("warm_start") or {}).get("env_steps"),
                           "final": {"wins": wins, "n": n, "rate": wins / max(n, 1),
                                     "ci95": list(wilson_interval(wins, n))},
                           "cpu_h": cpu_hours(run_dir, s), "wall_h": s.get("wall_time_s", 0) / 3600}
    if bc and bc.get("episode_seeds") == final.get("episode_seeds") and final.get("episode_wins"):
        cmp = paired_difference([bool(x) for x in final["episode_wins"]],
                                [bool(x) for x in bc["episode_wins"]])
        row["bc_only"] = {"wins": _wins(bc, n), "n": n, "rate": cmp.rate_b}
        row["final_minus_bc"] = cmp.to_dict()
    return row


def _wins(result: dict[str, Any], n: int) -> int:
    """Episodes won: the per-episode record, else the rate times the count."""
    if result.get("episode_wins"):
        return sum(bool(x) for x in result["episode_wins"])
    return round(result["success_rate"] * n)


def cpu_hours(run_dir: Path, summary: dict[str, Any]) -> float:
    """The run's CPU hours: its sessions under this script (the whole process tree), else
    the main process's ``cpu_time_s`` (a run trained without this script)."""
    f = run_dir / "bench_sessions.jsonl"
    if f.is_file():
        return sum(json.loads(x)["cpu_s"] for x in f.read_text().splitlines() if x) / 3600
    return float(summary.get("cpu_time_s", 0.0)) / 3600


def collect(out: Path, names: Sequence[str]) -> dict[str, dict[int, dict[str, Any]]]:
    """cell -> seed -> row, for every finished run under ``out``."""
    table: dict[str, dict[int, dict[str, Any]]] = {}
    for cell in names:
        for d in sorted((out / cell).glob("seed*")) if (out / cell).is_dir() else []:
            if d.is_dir() and run_state(d) == "done":
                table.setdefault(cell, {})[int(d.name[4:])] = run_row(d)
    return table


def cell_summary(rows: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Over a cell's finished seeds: mean final success and mean final - BC-only, how many
    seeds have final > BC-only and how many have it above 0 at 95%."""
    diffs = [r["final_minus_bc"] for r in rows.values() if "final_minus_bc" in r]
    n = max(len(rows), 1)
    return {"seeds": sorted(rows),
            "final_mean": sum(r["final"]["rate"] for r in rows.values()) / n,
            "diff_mean": sum(d["difference"] for d in diffs) / len(diffs) if diffs else None,
            "seeds_positive": sum(d["difference"] > 0 for d in diffs),
            "seeds_above_0_at_95": sum(bool(d["a_better_95"]) for d in diffs),
            "env_steps_mean": sum(r["env_steps"] or 0 for r in rows.values()) / n,
            "cpu_h": sum(r["cpu_h"] for r in rows.values())}


def best_cells(table: dict[str, dict[int, dict[str, Any]]], k: int = 2,
               seeds: int = 2) -> list[str]:
    """The ``k`` cells with the highest mean final - BC-only over their first ``seeds``
    seeds (only cells with all of them), then the baseline cell (plain GRPO, head only)."""
    scored = []
    for cell, rows in table.items():
        first = {s: r for s, r in rows.items() if s < seeds}
        summ = cell_summary(first)
        if cell != BASELINE_CELL and len(first) == seeds and summ["diff_mean"] is not None:
            scored.append((summ["diff_mean"], summ["final_mean"], cell))
    top = [c for *_, c in sorted(scored, reverse=True)[:k]]
    return top + [BASELINE_CELL]


def _pct(x: float) -> str:
    return f"{100 * x:.0f}"


def _run_cells(r: dict[str, Any]) -> list[str]:
    """BC-only, final [CI], final - BC-only [CI], only final / only BC, p of one run."""
    f, d = r["final"], r.get("final_minus_bc")
    out = [f"{r['bc_only']['wins']}/{r['bc_only']['n']}" if "bc_only" in r else "-",
           f"{f['wins']}/{f['n']} [{_pct(f['ci95'][0])}, {_pct(f['ci95'][1])}]"]
    if d is None:
        return out + ["-", "-", "-"]
    return out + [f"{d['difference'] * 100:+.0f} [{_pct(d['ci95'][0])}, {_pct(d['ci95'][1])}]",
                  f"{d['only_a']} / {d['only_b']}", f"{d['mcnemar_p']:.2f}"]


def markdown(table: dict[str, dict[int, dict[str, Any]]], command: str,
             order: Sequence[str]) -> str:
    """The table: one line per run, then one per cell over its seeds."""
    lines = ["# RL benchmark (issue 48): valid fold\n", f"Command: `{command}`  ",
             f"Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; finished runs only.\n",
             "| cell | seed | RL env steps | BC-only | final (95% Wilson) | final - BC-only "
             "(95% paired) | only final / only BC | p | CPU h |",
             "|---|---|---|---|---|---|---|---|---|"]
    for cell in [c for c in order if c in table]:
        for seed, r in sorted(table[cell].items()):
            lines.append(f"| {cell} | {seed} | {r['env_steps']} | " + " | ".join(_run_cells(r))
                         + f" | {r['cpu_h']:.2f} |")
    lines += ["", "| cell | seeds | mean final | mean final - BC-only | seeds final > BC | "
              "seeds above 0 at 95% | mean RL env steps | CPU h |", "|---|---|---|---|---|---|---|---|"]
    for cell in [c for c in order if c in table]:
        s = cell_summary(table[cell])
        dm = "-" if s["diff_mean"] is None else f"{s['diff_mean'] * 100:+.1f}"
        lines.append(f"| {cell} | {len(s['seeds'])} | {s['final_mean'] * 100:.1f} | {dm} | "
                     f"{s['seeds_positive']} | {s['seeds_above_0_at_95']} | "
                     f"{s['env_steps_mean']:.0f} | {s['cpu_h']:.2f} |")
    return "\n".join(lines) + "\n"


def write_table(out: Path, command: str, order: Sequence[str]) -> dict[str, Any]:
    """Rebuild ``OUT/table.md`` and ``OUT/table.json`` from the finished runs."""
    table = collect(out, order)
    data = {"command": command, "split": SPLIT,
            "cells": {c: {"runs": {str(s): r for s, r in sorted(table[c].items())},
                          "summary": cell_summary(table[c])} for c in order if c in table}}
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.json").write_text(json.dumps(data, indent=1))
    (out / "table.md").write_text(markdown(table, command, order))
    return data


# ---- command line ---------------------------------------------------------------------------


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder of the run directories")
    ap.add_argument("--seeds", type=int, default=2, help="seeds 0..N-1 per cell (default 2)")
    ap.add_argument("--cells", default="all",
                    help="'all', 'best' (the two best by mean final - BC-only over seeds 0 "
                         "and 1, and grpo-head), or names joined by commas")
    ap.add_argument("--lora-layers", type=int, default=4,
                    help="lora cells: LoRA on the last N layers below the item head")
    ap.add_argument("--model", default=None, help="another model (smoke tests: deciplane/tiny)")
    ap.add_argument("--tiny", action="store_true", help="a smoke test's sizes (module doc)")
    ap.add_argument("--table-only", action="store_true", help="only rebuild the table")
    ap.add_argument("--dry-run", action="store_true", help="print what would run")
    return ap.parse_args(argv)


def chosen_cells(spec: str, out: Path, names: Sequence[str]) -> list[str]:
    """The cells ``--cells`` names (a ConfigError-like exit for unknown ones)."""
    if spec == "all":
        return list(names)
    if spec == "best":
        return best_cells(collect(out, names))
    chosen = [c.strip() for c in spec.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in names]
    if unknown:
        raise SystemExit(f"unknown cell(s) {unknown}; choose from {', '.join(names)}, "
                         "'all' or 'best'")
    return chosen


def main(argv: Sequence[str] | None = None,
         runner: Callable[[list[str]], int] = subprocess_runner) -> int:
    args = parse(argv)
    args.out = args.out.resolve()          # the runs start in the repository root
    names = list(cells(args.lora_layers))
    command = shlex.join(["python", "benchmarks/rl_benchmark.py",
                          *(sys.argv[1:] if argv is None else argv)])
    failed = 0
    if not args.table_only:
        todo = chosen_cells(args.cells, args.out, names)
        for seed in range(args.seeds):          # seed-major: every cell's seed 0 first
            for cell in todo:
                state = run_state(args.out / cell / f"seed{seed}")
                if state == "done":
                    continue
                if args.dry_run:
                    print(f"{state:8s}{cell} seed {seed}")
                    continue
                rc = run_one(args.out, cell, seed,
                             run_overrides(cell, seed, args.lora_layers, args.model, args.tiny),
                             runner)
                failed += rc != 0
                write_table(args.out, command, names)    # partial tables as runs finish
    if not args.dry_run:
        data = write_table(args.out, command, names)
        print((args.out / "table.md").read_text())
        print(f"{sum(len(c['runs']) for c in data['cells'].values())} finished runs; "
              f"table: {args.out / 'table.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
