"""Issue 25 item 3: Probe-ERPO on easy-funcs test, seed 0 — the default 12 steps (48 prompt
visits, committed in ../probe_erpo_easy_funcs/) against one full pass (25 steps x 4
prompts = 100 visits), negative-only and with the positive side (``reinforce_top``).
Writes table.md next to this file from the summaries that exist.

    python benchmarks/results/probe_erpo_regime/table.py
"""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = {"12 steps, negative-only (default)": HERE.parent / "probe_erpo_easy_funcs/s0.summary.json",
        "25 steps, negative-only": HERE / "steps25-s0.summary.json",
        "25 steps, + positive side (reinforce_top)": HERE / "steps25_top-s0.summary.json"}


def pair(p: dict) -> str:
    lo, hi = p["ci95"]
    return f"{p['difference']:+.2f} ({lo:+.2f}, {hi:+.2f}), McNemar p {p['mcnemar_p']:.2f}"


def main() -> None:
    rows = []
    for name, f in RUNS.items():
        if not f.is_file():
            rows.append(f"| {name} | not run |" + " |" * 7)
            continue
        s = json.loads(f.read_text())
        pv = s["paired_vs_baselines"]
        cons = s["baselines"]["consensus_selection_equal_budget"]
        rows.append(
            f"| {name} | {s['before']['accuracy']:.2f} | {s['after']['accuracy']:.2f} "
            f"| {pair(pv['no_adaptation_greedy'])} | {cons['accuracy']:.2f} "
            f"({cons['votes_per_task']} per task) "
            f"| {pair(pv['consensus_selection_equal_budget'])} "
            f"| {s['diagnostics']['reward_accuracy']:.2f} | {s['budget']['optimizer_steps']} "
            f"| {s['cpu_time_s']:.0f} |")
    head = ("| run (seed 0) | greedy before | after | after − greedy (95% CI) | consensus "
            "selection, equal samples | after − consensus (95% CI) | top-cluster = passes "
            "(scorer) | optimizer steps | CPU-s |\n|---|---|---|---|---|---|---|---|---|")
    (HERE / "table.md").write_text(head + "\n" + "\n".join(rows) + "\n")
    print(head + "\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
