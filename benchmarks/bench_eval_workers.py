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

    python benchmarks/bench_eval_workers.py --episodes 16 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def build(threads: int, workers: int, episodes: int):
    from deciplane.trainers.config import load_config
    from deciplane.trainers.run import build_algorithm, build_policy

    cfg = load_config(REPO / "configs" / "quickstart_twx.yaml",
                      [f"model.threads={threads}", f"eval.workers={workers}",
                       f"eval.episodes={episodes}", "progress=false"])
    algo = build_algorithm(cfg, build_policy(cfg))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in algo.policy.item_head.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return algo


def timed(algo, kind: str, threads: int) -> tuple[float, float, dict]:
    torch.set_num_threads(threads)
    fn = algo.evaluate if kind == "items" else algo.evaluate_labels
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn("test")
    return time.perf_counter() - t0, time.process_time() - c0, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--labels", action="store_true")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/eval_workers.json"))
    args = ap.parse_args(argv)
    settings = [(2, 1), (1, 2)]
    kinds = ["items"] + (["labels"] if args.labels else [])
    load0 = os.getloadavg()
    algos = {s: build(s[0], s[1], args.episodes) for s in settings}
    for s in settings:      # the helper has loaded once the first evaluation returns
        if algos[s].suite.pool is not None:
            algos[s].suite.pool.sync(algos[s].policy.model)
    rows: dict[str, dict] = {}
    try:
        for r in range(args.rounds):
            for kind in kinds:
                for s in (settings if r % 2 == 0 else settings[::-1]):
                    wall, cpu, out = timed(algos[s], kind, s[0])
                    key = f"{kind}/threads={s[0]},workers={s[1]}"
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
    result = {"command": "python benchmarks/bench_eval_workers.py " + " ".join(argv or []),
              "config": "configs/quickstart_twx.yaml", "episodes": args.episodes,
              "load_average_start": [round(x, 2) for x in load0],
              "load_average_end": [round(x, 2) for x in os.getloadavg()],
              "machine": {"cpu": platform.processor() or platform.machine(),
                          "cores": os.cpu_count(), "torch": torch.__version__},
              "date": time.strftime("%Y-%m-%d"), "rows": rows, "ratios": {}}
    for kind in kinds:
        one = rows[f"{kind}/threads=2,workers=1"]
        two = rows[f"{kind}/threads=1,workers=2"]
        result["ratios"][kind] = {
            "speedup_wall": round(sum(one["wall_s"]) / sum(two["wall_s"]), 3),
            "same_wins": one["wins"] == two["wins"], "same_steps": one["steps"] == two["steps"],
            "decisions_per_wall_s": {"threads=2,workers=1": round(one["decisions"] * len(one["wall_s"]) / sum(one["wall_s"]), 3),
                                     "threads=1,workers=2": round(two["decisions"] * len(two["wall_s"]) / sum(two["wall_s"]), 3)}}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["ratios"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
