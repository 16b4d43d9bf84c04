"""Per-task-type success (95% Wilson intervals) on deciplane/ALFWorld-v0, side by side.

    python benchmarks/alfworld_per_type.py before.json after.json
    python benchmarks/alfworld_per_type.py --tasks expert.json --split valid_unseen \\
        runs/alf-rlid/summary.json runs/alf-text/summary.json

Each argument is a `deciplane evaluate --json` report (one column) or a `deciplane train`
run's summary.json (a column for each of its evaluations of `--split`: before training,
after the warm start, after training). The trainer records episode seeds, not game names:
`--tasks` is any `deciplane evaluate --json` report on the same split from seed 0 (the
expert's takes a minute) that names the game of each seed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from deciplane.envs.alfworld.results import per_task_type_report, training_eval_report

STAGES = (("before", "before"), ("after_warm_start", "after warm start"), ("eval", "after"))


def columns(path: str, tasks: dict | None, split: str) -> list[tuple[str, dict]]:
    """``[(column title, per-type report)]`` of one report or training summary."""
    data = json.loads(Path(path).read_text())
    if "per_episode" in data:
        return [(path, per_task_type_report(data))]
    if tasks is None:
        raise SystemExit(f"{path} is a training summary: pass --tasks <evaluate report>")
    # runs/x/summary.json -> "x"; results/y/items_summary.json -> "y/items_summary"
    # (two summaries of one folder get two names)
    f = Path(path)
    name = f.parent.name if f.stem == "summary" else f"{f.parent.name}/{f.stem}"
    cols = []
    for key, title in STAGES:
        evaluation = (data.get(key) or {}).get(split)
        if evaluation:
            cols.append((f"{name} {title}",
                         per_task_type_report(training_eval_report(evaluation, tasks))))
    if not cols:
        raise SystemExit(f"{path} has no evaluation of split {split!r}")
    return cols


def cell(x: dict | None) -> str:
    if x is None:
        return "-"
    lo, hi = x["ci95"]
    return f"{x['won']}/{x['episodes']} ({x['success_rate']:.0%}, 95% CI {lo:.2f}-{hi:.2f})"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="+", help="evaluate reports or training summary.json")
    ap.add_argument("--tasks", help="evaluate report naming the game of each seed")
    ap.add_argument("--split", default="valid_unseen", help="split of training summaries")
    a = ap.parse_args(argv)
    tasks = json.loads(Path(a.tasks).read_text()) if a.tasks else None
    cols = [c for p in a.reports for c in columns(p, tasks, a.split)]
    print("| task type | " + " | ".join(t for t, _ in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for t in cols[0][1]:
        print(f"| {t} | " + " | ".join(cell(r.get(t)) for _, r in cols) + " |")


if __name__ == "__main__":
    main()
