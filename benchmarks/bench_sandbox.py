"""Sandbox overhead, side by side: a trivial program (``pass``) through every available
backend vs a bare ``subprocess.run([python3, "main.py"])`` of the same interpreter, and
throughput with parallel workers.

    python benchmarks/bench_sandbox.py                    # every available backend
    python benchmarks/bench_sandbox.py --runs 60 --workers 1,2,4 --json out.json

Per-run numbers are interleaved (bare, then each backend, repeated) so that the load of a
shared machine hits every side alike. Reported per side: median / p10 / p90 / min wall
time as the caller sees it (``Sandbox.run`` end to end: scratch dir, cgroup, process
chain, clean-up), and the CPU time of the run's processes (bare: ``RUSAGE_CHILDREN``
delta; sandboxes: ``result.cpu_time_s``, from the run's cgroup — steadier than wall time
on a loaded machine). Goal: bwrap/namespace median wall <= 1.3x bare.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from deciplane.envs.sandbox import Sandbox, available_backends  # noqa: E402
from deciplane.envs.sandbox._common import find_python  # noqa: E402

PROGRAM = "pass\n"


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class Bare:
    """The baseline: the same interpreter on the same file, no containment at all."""

    backend = "bare"

    def __init__(self) -> None:
        self.python = find_python()

    def run(self, code: str) -> None:
        d = tempfile.mkdtemp(prefix="bench-bare-")
        try:
            with open(os.path.join(d, "main.py"), "w") as fh:
                fh.write(code)
            subprocess.run([self.python, "main.py"], cwd=d, capture_output=True,
                           stdin=subprocess.DEVNULL, timeout=30, check=True)
        finally:
            shutil.rmtree(d)


def one(side, code: str = PROGRAM) -> tuple[float, float]:
    """(wall seconds as the caller sees it, CPU seconds of the run's processes): for bare
    the RUSAGE_CHILDREN delta; for a sandbox its own ``cpu_time_s`` (the run's cgroup,
    which also counts processes that the supervisor never reaps back to us)."""
    c0, t0 = children_cpu(), time.perf_counter()
    out = side.run(code)
    wall, cpu = time.perf_counter() - t0, children_cpu() - c0
    if out is not None:
        if out.status != "ok":
            raise RuntimeError(f"{side.backend}: {out.status} {out.killed_reason} {out.stderr}")
        cpu = out.cpu_time_s
    return wall, cpu


def summarize(walls: list[float], cpus: list[float]) -> dict[str, float]:
    q = statistics.quantiles(walls, n=10)
    return {"median_ms": 1000 * statistics.median(walls), "p10_ms": 1000 * q[0],
            "p90_ms": 1000 * q[-1], "min_ms": 1000 * min(walls),
            "cpu_median_ms": 1000 * statistics.median(cpus)}


def throughput(side, n: int, workers: int) -> float:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda _: one(side), range(n)))
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=40, help="interleaved runs per side")
    ap.add_argument("--workers", default="1,2,4", help="parallel workers for throughput")
    ap.add_argument("--tp-runs", type=int, default=40, help="runs per throughput point")
    ap.add_argument("--backends", default="", help="comma list (default: all available)")
    ap.add_argument("--json", default="", help="write the raw results here")
    args = ap.parse_args()

    av = available_backends()
    names = [b for b in (args.backends.split(",") if args.backends else av) if b]
    for name in names:
        if not av[name][0]:
            print(f"# skipping {name}: {av[name][1]}")
    sides = [Bare()] + [Sandbox(n) for n in names if av[n][0]]
    print(f"# python {find_python()}, {os.cpu_count()} CPUs, load {os.getloadavg()}")
    for side in sides:       # warm-up: page cache, image checks, cgroup pool
        for _ in range(3):
            one(side)

    walls: dict[str, list[float]] = {s.backend: [] for s in sides}
    cpus: dict[str, list[float]] = {s.backend: [] for s in sides}
    for i in range(args.runs):
        order = sides if i % 2 == 0 else sides[::-1]
        for side in order:
            w, c = one(side)
            walls[side.backend].append(w)
            cpus[side.backend].append(c)
    load_end = os.getloadavg()
    stats = {k: summarize(walls[k], cpus[k]) for k in walls}
    bare = stats["bare"]
    print(f"\n## per-run wall time of `pass` ({args.runs} interleaved runs; load at end "
          f"{load_end[0]:.1f})\n")
    print("| side | median ms | p10 | p90 | min | median / bare | CPU ms (median) | CPU / bare |")
    print("|---|---|---|---|---|---|---|---|")
    for k, s in stats.items():
        cpu_ratio = (f"{s['cpu_median_ms'] / bare['cpu_median_ms']:.2f}x"
                     if bare["cpu_median_ms"] > 0 else "n/a")
        cpu_ms = f"{s['cpu_median_ms']:.1f}"
        print(f"| {k} | {s['median_ms']:.1f} | {s['p10_ms']:.1f} | {s['p90_ms']:.1f} | "
              f"{s['min_ms']:.1f} | {s['median_ms'] / bare['median_ms']:.2f}x | {cpu_ms} | "
              f"{cpu_ratio} |")

    workers = [int(w) for w in args.workers.split(",") if w]
    tp: dict[str, dict[int, float]] = {}
    for side in sides:
        n = args.tp_runs if side.backend != "docker" else max(8, args.tp_runs // 4)
        tp[side.backend] = {w: throughput(side, n, w) for w in workers}
    print(f"\n## throughput, runs/s ({args.tp_runs} runs per point; docker a quarter)\n")
    print("| side | " + " | ".join(f"{w} worker{'s' if w > 1 else ''}" for w in workers) + " |")
    print("|---|" + "---|" * len(workers))
    for k, row in tp.items():
        print(f"| {k} | " + " | ".join(f"{row[w]:.1f}" for w in workers) + " |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"per_run": stats, "throughput": tp, "walls": walls, "cpus": cpus,
                       "load_end": load_end, "backends": av}, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
