"""Issue 25 item 3: Probe-ERPO on easy-funcs test — the default 12 steps (48 prompt visits)
against one full pass (25 steps x 4 prompts = 100 visits), negative-only and with the
positive side (``reinforce_top``), for every seed that has run. Writes table.md next to
this file from the summaries that exist.

    python benchmarks/results/probe_erpo_regime/table.py
"""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEEDS = (0, 1, 2)
VARIANTS = {
    "12 steps, negative-only (default; earlier code)":
        lambda s: HERE.parent / f"probe_erpo_easy_funcs/s{s}.summary.json",
    "12 steps, negative-only (default; today's code, the one table)":
        lambda s: HERE.parent / f"tta/easy-funcs-probe-erpo-s{s}.summary.json",
    "25 steps, negative-only": lambda s: HERE / f"steps25-s{s}.summary.json",
    "25 steps, + positive side (reinforce_top)": lambda s: HERE / f"steps25_top-s{s}.summary.json",
}


def pair(p: dict) -> str:
    lo, hi = p["ci95"]
    return f"{p['difference']:+.2f} ({lo:+.2f}, {hi:+.2f}), McNemar p {p['mcnemar_p']:.2f}"


def row(name: str, seed: int, s: dict) -> str:
    pv = s["paired_vs_baselines"]
    cons = s["baselines"]["consensus_selection_equal_budget"]
    return (f"| {name} | {seed} | {s['torch_threads']} | {s['before']['accuracy']:.2f} "
            f"| {s['after']['accuracy']:.2f} | {pair(pv['no_adaptation_greedy'])} "
            f"| {cons['accuracy']:.2f} ({cons['votes_per_task']} per task) "
            f"| {pair(pv['consensus_selection_equal_budget'])} "
            f"| {s['diagnostics']['reward_accuracy']:.2f} | {s['budget']['optimizer_steps']} "
            f"| {s['cpu_time_s']:.0f} |")


def main() -> None:
    rows, missing = [], []
    for name, path in VARIANTS.items():
        for seed in SEEDS:
            f = path(seed)
            if f.is_file():
                rows.append(row(name, seed, json.loads(f.read_text())))
            else:
                missing.append(f"{name}, seed {seed}")
    head = ("| run | seed | threads | greedy before | after | after − greedy (95% CI) | "
            "consensus selection, equal samples | after − consensus (95% CI) | top-cluster "
            "= passes (scorer) | optimizer steps | CPU-s |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|")
    text = head + "\n" + "\n".join(rows) + "\n"
    if missing:
        text += "\nNot run: " + "; ".join(missing) + ".\n"
    (HERE / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
