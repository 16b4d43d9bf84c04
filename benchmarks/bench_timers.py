"""How repeatable are CodeOpt's two timers? Side by side, in one run.

For each task, the reference program runs repeatedly on its optimisation input under
both timers, in the same sandbox:

* ``cpu``: CPU seconds per run (``SandboxResult.cpu_time_s``) over ``--runs`` runs, and
  the timer's actual measurement (the median of ``repeats`` runs, what a speedup is
  computed from) over ``--measurements`` measurements. Goal: CV <= 3% on an idle machine.
* ``instructions``: callgrind instructions per run over ``--instr-runs`` runs (never
  cached here). Goal: CV exactly 0.

CV = population standard deviation / mean. The 1-minute load average and the CPU count
are printed with the results: on a shared machine the cpu CV says more about the
neighbours than about the timer.

    python benchmarks/bench_timers.py                       # fib, primes, nbody
    python benchmarks/bench_timers.py --tasks fib lis --runs 30 --json timers.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from deciplane.envs import Sandbox
from deciplane.envs.codeopt import get_task
from deciplane.envs.codeopt.timers import CpuTimer, InstructionTimer


def cv(values: list[float]) -> float:
    """Coefficient of variation: population std / mean (0 for identical values)."""
    mean = statistics.fmean(values)
    return statistics.pstdev(values) / mean if mean else 0.0


def bench_task(task_id: str, sandbox: Sandbox, runs: int, measurements: int, repeats: int,
               instr_runs: int) -> dict:
    task = get_task(task_id)
    cpu = CpuTimer(sandbox, repeats=repeats)
    cpu_input = task.perf["cpu"].input
    per_run = [cpu.run(task.reference, cpu_input, 600).cost for _ in range(runs)]
    medians = [statistics.median(cpu.run(task.reference, cpu_input, 600).cost
                                 for _ in range(repeats)) for _ in range(measurements)]
    instr = InstructionTimer(sandbox, cache_dir=None)
    instr_input = task.perf["instructions"].input
    t0 = time.perf_counter()
    counts = [instr.run(task.reference, instr_input, 600).cost for _ in range(instr_runs)]
    instr_wall = (time.perf_counter() - t0) / instr_runs
    if any(c is None for c in per_run + medians + counts):
        raise RuntimeError(f"a reference run of {task_id} failed; check `deciplane doctor`")
    return {
        "task": task_id,
        "cpu_runs": runs, "cpu_mean_s": statistics.fmean(per_run), "cpu_cv_per_run": cv(per_run),
        "cpu_measurements": measurements, "cpu_repeats": repeats,
        "cpu_cv_median_of_repeats": cv(medians),
        "instr_runs": instr_runs, "instr_count": counts[0], "instr_cv": cv(counts),
        "instr_distinct_counts": len(set(counts)), "instr_wall_s_per_run": instr_wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["fib", "primes", "nbody"])
    ap.add_argument("--runs", type=int, default=20, help="cpu: single runs per task")
    ap.add_argument("--measurements", type=int, default=5, help="cpu: medians per task")
    ap.add_argument("--repeats", type=int, default=5, help="cpu: runs per median")
    ap.add_argument("--instr-runs", type=int, default=3, help="callgrind runs per task")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()

    sandbox = Sandbox(args.backend)
    load_before = os.getloadavg()[0]
    rows = [bench_task(t, sandbox, args.runs, args.measurements, args.repeats, args.instr_runs)
            for t in args.tasks]
    load_after = os.getloadavg()[0]
    print(f"sandbox {sandbox.backend}; {os.cpu_count()} CPUs; 1-min load average "
          f"{load_before:.1f} before, {load_after:.1f} after")
    print("| task | cpu s/run | cpu CV per run | cpu CV of median-of-"
          f"{args.repeats} | instructions/run | instructions CV | callgrind s/run |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['task']} | {r['cpu_mean_s']:.3f} | {r['cpu_cv_per_run']:.2%} | "
              f"{r['cpu_cv_median_of_repeats']:.2%} | {r['instr_count']:,.0f} | "
              f"{r['instr_cv']:.2%} ({r['instr_distinct_counts']} distinct of "
              f"{r['instr_runs']}) | {r['instr_wall_s_per_run']:.1f} |")
    if args.json:
        args.json.write_text(json.dumps({"backend": sandbox.backend, "cpus": os.cpu_count(),
                                         "load_before": load_before, "load_after": load_after,
                                         "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
