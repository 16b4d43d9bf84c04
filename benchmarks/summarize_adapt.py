"""Markdown table of `deciplane adapt` runs: mean over seeds with the per-seed values.

    python benchmarks/summarize_adapt.py runs/i6/s*-ttrl runs/i6/s*-ttpo

Reads each RUN_DIR/summary.json; groups by method; prints accuracy before / after /
baselines, the scorer's diagnostics and the cost (samples, CPU and wall seconds).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def _get(d: dict, dotted: str):
    for k in dotted.split("."):
        d = d.get(k, {}) if isinstance(d, dict) else {}
    return d if d != {} else None


ROWS = [
    ("before = no adaptation, greedy", "before.accuracy"),
    ("no adaptation, sampled pass@1", "baselines.no_adaptation_sampled.accuracy"),
    ("majority vote at the adapter's budget", "baselines.majority_vote_equal_budget.accuracy"),
    ("best-of-N (mean log-prob) at the adapter's compute", "baselines.best_of_n_equal_budget.accuracy"),
    ("after adaptation", "after.accuracy"),
    ("after - majority (paired, same tasks)", "paired_vs_baselines.majority_vote_equal_budget.difference"),
    ("after beats majority at 95% (1 = yes, per seed)", "paired_vs_baselines.majority_vote_equal_budget.a_better_95"),
    ("after - best-of-N (paired)", "paired_vs_baselines.best_of_n_equal_budget.difference"),
    # code (Probe-ERPO): the selection baseline is consensus over behaviour clusters
    ("consensus selection at the adapter's budget", "baselines.consensus_selection_equal_budget.accuracy"),
    ("after - consensus selection (paired, same tasks)", "paired_vs_baselines.consensus_selection_equal_budget.difference"),
    ("after beats consensus selection at 95% (1 = yes, per seed)", "paired_vs_baselines.consensus_selection_equal_budget.a_better_95"),
    ("after - greedy (paired)", "paired_vs_baselines.no_adaptation_greedy.difference"),
    ("samples per task of the consensus baseline", "baselines.consensus_selection_equal_budget.votes_per_task"),
    ("probes per task (mean)", "probes.per_task_mean"),
    ("mean output tokens of the final answers", "mean_output_tokens"),
    ("majority pseudo-label correct, all votes (scorer)", "diagnostics.pseudo_label_accuracy_all_votes"),
    ("pseudo-reward accuracy (scorer)", "diagnostics.reward_accuracy"),
    ("adapter samples", "budget.samples"),
    ("adapter forward-token equivalents", "forward_token_equivalents"),
    ("votes per task of the majority baseline", "baselines.majority_vote_equal_budget.votes_per_task"),
    ("optimizer steps", "budget.optimizer_steps"),
    ("CPU seconds (whole run, 1 process)", "cpu_time_s"),
    ("wall seconds (whole run)", "wall_time_s"),
]


def _label(s: dict) -> str:
    """The column of a run: the method, and its variant where it has one (TASCO)."""
    return s["method"].upper() + (f" ({s['variant']})" if s.get("variant") else "")


def table(summaries: list[dict]) -> str:
    methods = sorted({_label(s) for s in summaries})
    lines = ["| | " + " | ".join(methods) + " |",
             "|---|" + "---|" * len(methods)]
    for label, key in ROWS:
        cells = []
        for m in methods:
            runs = sorted((s for s in summaries if _label(s) == m), key=lambda s: s["seed"])
            vals = [_get(s, key) for s in runs]
            vals = [v for v in vals if v is not None]
            if not vals:
                cells.append("-")
                continue
            fmt = (lambda v: f"{v:+.3f}" if v < 0 else f"{v:.3f}") if isinstance(vals[0], float) and abs(vals[0]) <= 1 else \
                  (lambda v: f"{v:.0f}")
            per = " / ".join(fmt(v) for v in vals)
            cells.append(f"{fmt(statistics.mean(vals))} ({per})" if len(vals) > 1 else per)
        if any(c != "-" for c in cells):  # rows of another method's baselines are left out
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    seeds = sorted({s["seed"] for s in summaries})
    fps = sorted({s.get("split_fingerprint") for s in summaries})
    lines.append("")
    lines.append(f"seeds {seeds}; {summaries[0]['benchmark']}/{summaries[0]['split']}, "
                 f"{summaries[0]['n_tasks']} tasks, split fingerprint {', '.join(map(str, fps))}")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit(__doc__)
    summaries = []
    for d in argv:
        f = Path(d) / "summary.json"
        if not f.is_file():
            print(f"skipping {d}: no summary.json (run not finished?)", file=sys.stderr)
            continue
        summaries.append(json.loads(f.read_text()))
    if not summaries:
        sys.exit("no finished runs")
    print(table(summaries))


if __name__ == "__main__":
    main(sys.argv[1:])
