"""Held-out evaluation on one process vs shared with helper processes (``eval.workers``).

The demo's config (``configs/quickstart_twx.yaml``: SmolLM2-135M, the items readout at
layer 18, twc with 2 rooms and 2 items, 10-step cap) evaluates the first ``--episodes``
test-fold games, side by side in one run:

* ``threads=2, workers=1`` — one process with two torch threads (the demo until now);
* ``threads=1, workers=2`` — this process and one helper, one thread each;
* with ``--labels``, the same two for RLiD's labels readout (the zero-shot baseline: a
  full forward per decision).

The item head gets fixed random weights (an untrained head scores every entry 0 and needs
no forward, which would time nothing). Each setting builds its algorithm (and helper)
first and is timed on ``evaluate("test")`` alone; rounds alternate the order. Episodes
and wins must agree between the settings (the same greedy policy). Run it alone; the
load average is recorded.

``--vs-8727bf9`` instead times the evaluation of the demo's config as at 8727bf9
(``benchmarks/configs/quickstart_twx_8727bf9.yaml``: RLiD's labels readout, LoRA on the
last 6 layers, 10-step cap) as it ran then — fp32, two threads, one process — against the
fastest settings now: the trunk in bf16 weights, the LoRA layers under bf16 autocast
(``model.trunk_dtype`` / ``model.compute_dtype``), one thread in each of two processes.
The episodes played are the same; wins may differ where bf16 changes a greedy decision.

    python benchmarks/bench_eval_workers.py --episodes 16 --rounds 2
    python benchmarks/bench_eval_workers.py --vs-8727bf9 --episodes 16 --rounds 2 \
        --out benchmarks/results/eval_speed_vs_8727bf9.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


DEMO = "configs/quickstart_twx.yaml"
PINNED = "benchmarks/configs/quickstart_twx_8727bf9.yaml"
# name -> (config, threads per process, extra overrides)
SETTINGS = {
    "threads=2,workers=1": (DEMO, 2, ["eval.workers=1"]),
    "threads=1,workers=2": (DEMO, 1, ["eval.workers=2"]),
}
VS_8727BF9 = {
    "8727bf9: fp32, threads=2,workers=1": (PINNED, 2, [
        "eval.workers=1", "model.trunk_dtype=float32", "model.compute_dtype=float32"]),
    "now: bf16 trunk + autocast, threads=1,workers=2": (PINNED, 1, [
        "eval.workers=2", "model.trunk_dtype=bfloat16", "model.compute_dtype=bfloat16"]),
}


def build(config: str, threads: int, extra: list[str], episodes: int):
    from deciplane.trainers.config import load_config
    from deciplane.trainers.run import build_algorithm, build_policy

    cfg = load_config(REPO / config, [f"model.threads={threads}", f"eval.episodes={episodes}",
                                      "progress=false", *extra])
    algo = build_algorithm(cfg, build_policy(cfg))
    if cfg.readout == "items":
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in algo.policy.item_head.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return algo


def timed(algo, kind: str, threads: int) -> tuple[float, float, dict]:
    torch.set_num_threads(threads)
    fn = algo.evaluate_labels if kind == "labels" else algo.evaluate
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn("test")
    return time.perf_counter() - t0, time.process_time() - c0, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--labels", action="store_true")
    ap.add_argument("--vs-8727bf9", action="store_true",
                    help="the demo's config as at 8727bf9, then (fp32, 2 threads, 1 process) vs "
                         "now (bf16 trunk + autocast, 1 thread in each of 2 processes)")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/eval_workers.json"))
    args = ap.parse_args(argv)
    table = VS_8727BF9 if args.vs_8727bf9 else SETTINGS
    settings = list(table)
    # the pinned config's own readout (labels) is what `evaluate` plays there
    kinds = ["config"] if args.vs_8727bf9 else ["items"] + (["labels"] if args.labels else [])
    load0 = os.getloadavg()
    algos = {s: build(table[s][0], table[s][1], table[s][2], args.episodes) for s in settings}
    for s in settings:      # the helper has loaded once the first evaluation returns
        if algos[s].suite.pool is not None:
            algos[s].suite.pool.sync(algos[s].policy.model)
    rows: dict[str, dict] = {}
    try:
        for r in range(args.rounds):
            for kind in kinds:
                for s in (settings if r % 2 == 0 else settings[::-1]):
                    wall, cpu, out = timed(algos[s], kind, table[s][1])
                    key = f"{kind}/{s}"
                    row = rows.setdefault(key, {"wall_s": [], "main_cpu_s": [], "wins": None,
                                                "decisions": out["env_steps"]})
                    row["wall_s"].append(round(wall, 2))
                    row["main_cpu_s"].append(round(cpu, 2))
                    if row["wins"] is None:
                        row["wins"] = out["episode_wins"]
                    row["steps"] = out["episode_steps"]
                    print(f"round {r} {key}: {wall:.1f} s wall, {out['env_steps']} decisions, "
                          f"{out['won']}/{out['episodes']} won", flush=True)
    finally:
        for a in algos.values():
            a.close()
    result = {"command": "python benchmarks/bench_eval_workers.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "config": table[settings[0]][0], "settings": table, "episodes": args.episodes,
              "load_average_start": [round(x, 2) for x in load0],
              "load_average_end": [round(x, 2) for x in os.getloadavg()],
              "machine": {"cpu": platform.processor() or platform.machine(),
                          "cores": os.cpu_count(), "torch": torch.__version__},
              "date": time.strftime("%Y-%m-%d"), "rows": rows, "ratios": {}}
    for kind in kinds:
        one, two = (rows[f"{kind}/{s}"] for s in settings)
        result["ratios"][kind] = {
            "speedup_wall": round(sum(one["wall_s"]) / sum(two["wall_s"]), 3),
            "same_wins": one["wins"] == two["wins"], "same_steps": one["steps"] == two["steps"],
            "decisions_per_wall_s": {s: round(r["decisions"] * len(r["wall_s"]) / sum(r["wall_s"]), 3)
                                     for s, r in zip(settings, (one, two))},
            "episodes_per_wall_s": {s: round(args.episodes * len(r["wall_s"]) / sum(r["wall_s"]), 4)
                                    for s, r in zip(settings, (one, two))}}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["ratios"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
