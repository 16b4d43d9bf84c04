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

Then a Probe-ERPO step: K candidate programs x P probe inputs, every probe a sandboxed
run, as sandboxed runs per second: through ``Sandbox.run`` (one sandbox per probe), and
through ``Sandbox.run_many`` (one warm jail per candidate; each probe a fresh process
forked from a warm interpreter, or with ``fresh_interpreter=True`` a fresh
``python3 main.py`` exec'd in it), against bare ``subprocess.run`` of each probe.
Rounds are interleaved too. ``--k 0`` skips it.

    python benchmarks/bench_sandbox.py --runs 60 --k 8 --p 16 --rounds 5 --json out.json
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

from deciplane.sandbox import Sandbox, available_backends  # noqa: E402
from deciplane.sandbox.host import find_python

PROGRAM = "pass\n"
#: a candidate solution as Probe-ERPO runs them: parse the probe input, compute, print
CANDIDATE = ("import sys\n"
             "nums = [int(x) for x in sys.stdin.read().split()]\n"
             "print(sum(x * x for x in nums) % {mod})\n")


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

    def run_out(self, code: str, stdin: str) -> str:
        d = tempfile.mkdtemp(prefix="bench-bare-")
        try:
            with open(os.path.join(d, "main.py"), "w") as fh:
                fh.write(code)
            return subprocess.run([self.python, "main.py"], cwd=d, capture_output=True,
                                  input=stdin.encode(), timeout=30,
                                  check=True).stdout.decode()
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


def probe_batch(side, k: int, p: int, mode: str) -> float:
    """Seconds for one K x P step: ``mode`` is ``run`` (a sandbox per probe), ``fork`` /
    ``exec`` (``run_many``: a warm jail per candidate), or ``bare``. Every result is
    checked against the expected answer."""
    t0 = time.perf_counter()
    for c in range(k):
        code = CANDIDATE.format(mod=1000 + c)
        stdins = [" ".join(str(j * 7 + i) for j in range(50)) for i in range(p)]
        want = [f"{sum((j * 7 + i) ** 2 for j in range(50)) % (1000 + c)}\n"
                for i in range(p)]
        if mode == "bare":
            got = [side.run_out(code, s) for s in stdins]
        elif mode == "run":
            got = [side.run(code, stdin=s).stdout for s in stdins]
        else:
            got = [r.stdout for r in side.run_many(code, stdins,
                                                   fresh_interpreter=mode == "exec")]
        if got != want:
            raise RuntimeError(f"{side.backend}/{mode}: wrong probe output {got[:2]}")
    return time.perf_counter() - t0


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
    ap.add_argument("--k", type=int, default=8, help="candidates per Probe-ERPO step (0: skip)")
    ap.add_argument("--p", type=int, default=16, help="probes per candidate")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved K x P rounds")
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
    batch: dict[str, list[float]] = {}
    if args.k > 0:
        plan = [(sides[0], "bare")]
        for side in sides[1:]:
            modes = ["run"] + (["fork", "exec"] if side.backend != "docker" else [])
            plan += [(side, m) for m in modes]
        for side, mode in plan:   # warm-up
            probe_batch(side, 1, 2, mode)
        for r in range(args.rounds):
            for side, mode in (plan if r % 2 == 0 else plan[::-1]):
                key = f"{side.backend}/{mode}" if mode != "bare" else "bare"
                batch.setdefault(key, []).append(probe_batch(side, args.k, args.p, mode))
        n = args.k * args.p
        bare_rps = n / statistics.median(batch["bare"])
        print(f"\n## Probe-ERPO step: K={args.k} candidates x P={args.p} probes, one worker "
              f"({args.rounds} interleaved rounds, median; load at end "
              f"{os.getloadavg()[0]:.1f})\n")
        print("| path | sandboxed runs/s | ms per probe | vs bare runs/s |")
        print("|---|---|---|---|")
        for key, secs in batch.items():
            rps = n / statistics.median(secs)
            print(f"| {key} | {rps:.1f} | {1000 / rps:.1f} | {rps / bare_rps:.2f}x |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"per_run": stats, "throughput": tp, "walls": walls, "cpus": cpus,
                       "probe_batch_s": batch, "k": args.k, "p": args.p,
                       "load_end": load_end, "backends": av}, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
