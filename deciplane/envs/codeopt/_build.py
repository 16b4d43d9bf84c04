"""Regenerate ``data/*/task.json`` from the task specs below and the reference programs.

    python -m deciplane.envs.codeopt._build [--time]

Inputs are produced by seeded generators; expected outputs by running each task's
reference program (trusted code, plain subprocess). ``--time`` also prints how long the
reference takes on each optimisation input, to size them: the ``cpu`` input should run
~0.2-0.4 s natively, the ``instructions`` input ~10-60 M instructions (callgrind runs
~50x slower than native).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

from deciplane.envs.codeopt.tasks import reference_program

DATA = Path(__file__).parent / "data"


def _ints(n: int, lo: int, hi: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(lo, hi) for _ in range(n)]


def _array(n: int, lo: int, hi: int, seed: int) -> str:
    return f"{n}\n{' '.join(map(str, _ints(n, lo, hi, seed)))}\n"


def _fib(qs: list[int]) -> str:
    return f"{len(qs)}\n{' '.join(map(str, qs))}\n"


def _range_sum(n: int, q: int, seed: int) -> str:
    rng = random.Random(seed)
    a = [rng.randint(-1000, 1000) for _ in range(n)]
    lines = [f"{n} {q}", " ".join(map(str, a))]
    for _ in range(q):
        lo = rng.randrange(n)
        hi = rng.randrange(lo, n)
        lines.append(f"{lo} {hi}")
    return "\n".join(lines) + "\n"


def _pairs(n: int, target: int, seed: int) -> str:
    return f"{n} {target}\n{' '.join(map(str, _ints(n, 0, 200, seed)))}\n"


def _hexiom_level(level: int) -> str:
    """A board of pyperformance's hexiom LEVELS, read from the installed benchmark."""
    from deciplane.envs.codeopt.tasks import extract_pyperformance_source, pyperformance_benchmark_path

    src = extract_pyperformance_source(pyperformance_benchmark_path("hexiom").read_text())
    ns: dict = {"__name__": "hexiom_levels"}
    exec(compile(src, "hexiom", "exec"), ns)  # trusted: the installed benchmark's own code
    return ns["LEVELS"][level][0].strip() + "\n"


ARRAY_IO = ("stdin: n on the first line, then n integers separated by spaces on the second.")

SPECS: list[dict] = [
    # ---------------- project-written tasks ----------------
    dict(id="fib", title="Fibonacci numbers", origin="project", split="train",
         statement="For each query n, print the n-th Fibonacci number F(n) "
                   "(F(0) = 0, F(1) = 1, F(n) = F(n-1) + F(n-2)).",
         io_format="stdin: q, then q integers 0 <= n <= 32. stdout: q lines, F(n) for each "
                   "query in order.",
         examples=[_fib([0, 1, 10])], tests=[_fib([5]), _fib([2, 3, 4, 20, 1]), _fib([]),
                                             _fib([15, 0, 22, 7])],
         perf={"cpu": _fib([27, 26, 25]), "instructions": _fib([20, 19])}),
    dict(id="dedup", title="Distinct values in order", origin="project", split="train",
         statement="Print how many distinct values the array holds, then the distinct values "
                   "in the order of their first appearance.",
         io_format=ARRAY_IO + " stdout: the count on one line, then the values separated by "
                              "spaces on the next line (empty if n = 0).",
         examples=["6\n3 1 3 2 1 5\n"],
         tests=["1\n7\n", "0\n\n", _array(50, -5, 5, 1), _array(300, -1000, 1000, 2)],
         perf={"cpu": _array(5500, 0, 10 ** 9, 3), "instructions": _array(1500, 0, 10 ** 9, 4)}),
    dict(id="bubble_sort", title="Sort integers", origin="project", split="train",
         statement="Sort the integers in non-decreasing order.",
         io_format=ARRAY_IO + " stdout: the sorted integers separated by spaces.",
         examples=["5\n4 -2 9 0 4\n"],
         tests=["1\n3\n", "4\n1 2 3 4\n", _array(60, -50, 50, 5), _array(200, -10 ** 6, 10 ** 6, 6)],
         perf={"cpu": _array(1400, -10 ** 6, 10 ** 6, 7),
               "instructions": _array(300, -10 ** 6, 10 ** 6, 8)}),
    dict(id="primes", title="Count and sum primes", origin="project", split="train",
         statement="Print the number of primes p <= N and their sum.",
         io_format="stdin: one integer 0 <= N <= 10^6. stdout: the count and the sum, "
                   "separated by a space.",
         examples=["10\n"], tests=["0\n", "1\n", "2\n", "97\n", "1000\n", "30030\n"],
         perf={"cpu": "100000\n", "instructions": "12000\n"}),
    dict(id="lis", title="Longest increasing subsequence", origin="project", split="train",
         statement="Print the length of the longest strictly increasing subsequence of the array.",
         io_format=ARRAY_IO + " stdout: one integer.",
         examples=["8\n10 9 2 5 3 7 101 18\n"],
         tests=["0\n\n", "1\n5\n", "5\n5 4 3 2 1\n", "6\n1 1 1 2 2 3\n",
                _array(100, 0, 50, 9), _array(400, -10 ** 6, 10 ** 6, 10)],
         perf={"cpu": _array(2800, 0, 10 ** 6, 11), "instructions": _array(400, 0, 10 ** 6, 12)}),
    dict(id="range_sum", title="Range sums", origin="project", split="train",
         statement="Answer q queries: each query (l, r) asks for a[l] + a[l+1] + ... + a[r] "
                   "(0-based, inclusive).",
         io_format="stdin: n and q on the first line, the n integers on the second line, then "
                   "q lines 'l r' with 0 <= l <= r < n. stdout: q lines, one sum per query.",
         examples=["5 3\n1 2 3 4 5\n0 4\n1 1\n2 3\n"],
         tests=["1 1\n-7\n0 0\n", _range_sum(30, 20, 13), _range_sum(500, 300, 14)],
         perf={"cpu": _range_sum(4000, 4000, 15), "instructions": _range_sum(600, 300, 16)}),
    dict(id="reverse_concat", title="Numbers in reverse order", origin="project", split="test",
         statement="Print the numbers (i * k) mod 1000003 for i = n, n-1, ..., 1, separated by "
                   "single spaces.",
         io_format="stdin: two integers n >= 1 and k. stdout: one line with n numbers.",
         examples=["5 3\n"], tests=["1 10\n", "7 1000003\n", "200 12345\n", "3000 999\n"],
         perf={"cpu": "16000 7919\n", "instructions": "8000 7919\n"}),
    dict(id="pair_count", title="Pairs with a given sum", origin="project", split="test",
         statement="Count the pairs of positions i < j with a[i] + a[j] = target.",
         io_format="stdin: n and target on the first line, the n integers on the second line. "
                   "stdout: one integer.",
         examples=["5 6\n1 5 3 3 2\n"],
         tests=["1 2\n1\n", "4 0\n0 0 0 0\n", _pairs(80, 100, 17), _pairs(500, 150, 18)],
         perf={"cpu": _pairs(2200, 200, 19), "instructions": _pairs(350, 200, 20)}),
    # ---------------- pyperformance benchmarks ----------------
    dict(id="nbody", title="N-body simulation", origin="pyperformance",
         benchmark="nbody", split="train", compare="float",
         statement="Simulate the Jovian planets (pyperformance's n-body benchmark): offset the "
                   "momentum of the chosen reference body, print the total energy, advance the "
                   "system by the given number of steps of dt = 0.01, print the energy again.",
         io_format="stdin: a body name (sun, jupiter, saturn, uranus, neptune) and the number "
                   "of steps. stdout: two lines, each an energy with 9 decimals.",
         examples=["sun 10\n"], tests=["sun 0\n", "jupiter 50\n", "sun 1000\n", "neptune 7\n"],
         perf={"cpu": "sun 20000\n", "instructions": "sun 800\n"}),
    dict(id="spectral_norm", title="Spectral norm",
         origin="pyperformance", benchmark="spectral_norm", split="train", compare="float",
         statement="Approximate the spectral norm of the infinite matrix A with "
                   "a(i, j) = 1 / ((i + j)(i + j + 1) / 2 + i + 1), truncated to n x n, with 10 "
                   "rounds of the power method on A^T A, exactly as the reference does.",
         io_format="stdin: n >= 1. stdout: the estimate with 9 decimals.",
         examples=["10\n"], tests=["1\n", "2\n", "37\n", "100\n"],
         perf={"cpu": "130\n", "instructions": "30\n"}),
    dict(id="fannkuch", title="Fannkuch", origin="pyperformance",
         benchmark="fannkuch", split="train",
         statement="Print the maximum number of pancake flips over all permutations of 1..n, as "
                   "the reference's fannkuch(n) computes it.",
         io_format="stdin: 1 <= n <= 10. stdout: one integer.",
         examples=["5\n"], tests=["1\n", "3\n", "6\n", "7\n"],
         perf={"cpu": "8\n", "instructions": "6\n"}),
    dict(id="richards", title="Richards scheduler",
         origin="pyperformance", benchmark="richards", split="train",
         statement="Run one round of the Richards operating-system scheduler simulation "
                   "(pyperformance's richards benchmark) with the given numbers of packets "
                   "initially queued for the work task and for the two device handlers (the "
                   "benchmark uses 2, 3, 3); print the final hold and packet counts.",
         io_format="stdin: three integers 1 <= work, dev_a, dev_b <= 50. stdout: the hold "
                   "count and the packet count, separated by a space.",
         examples=["2 3 3\n"], tests=["1 1 1\n", "5 3 3\n", "2 9 3\n", "30 30 30\n",
                                       "7 1 12\n"],
         perf={"cpu": "4 4 4\n", "instructions": "3 2 3\n"}),
    dict(id="float", title="Float points", origin="pyperformance",
         benchmark="float", split="train", compare="float",
         statement="Build n points (x = sin i, y = 3 cos i, z = x^2 / 2), normalise each to unit "
                   "length, and print the component-wise maximum over all points.",
         io_format="stdin: n >= 1. stdout: x y z with 9 decimals.",
         examples=["3\n"], tests=["1\n", "10\n", "1000\n", "12345\n"],
         perf={"cpu": "120000\n", "instructions": "6000\n"}),
    dict(id="nqueens", title="N-queens", origin="pyperformance",
         benchmark="nqueens", split="test",
         statement="Find every placement of n non-attacking queens on an n x n board (one queen "
                   "per row; a placement is the tuple of column positions by row). Print their "
                   "number, then the lexicographically smallest and largest placements.",
         io_format="stdin: 1 <= n <= 10. stdout: the count, then (if any) two lines of n "
                   "column indices.",
         examples=["4\n"], tests=["1\n", "2\n", "5\n", "6\n"],
         perf={"cpu": "8\n", "instructions": "6\n"}),
    dict(id="pidigits", title="Digits of pi", origin="pyperformance",
         benchmark="pidigits", split="test",
         statement="Print the first n decimal digits of pi (starting with the 3), without a "
                   "decimal point.",
         io_format="stdin: n >= 1. stdout: one line of n digits.",
         examples=["5\n"], tests=["1\n", "27\n", "300\n"],
         perf={"cpu": "2000\n", "instructions": "500\n"}),
    dict(id="hexiom", title="Hexiom puzzle", origin="pyperformance",
         benchmark="hexiom", split="test", drop_globals=["LEVELS"],
         statement="Solve a Hexiom board (pyperformance's hexiom solver, first-solution strategy, "
                   "descending order) and print the solved board exactly as the reference does.",
         io_format="stdin: the board (size line, then the hexagonal rows). stdout: the solved "
                   "board rows.",
         examples=[_hexiom_level(2)], tests=[_hexiom_level(10)],
         perf={"cpu": _hexiom_level(20), "instructions": _hexiom_level(25)}),
]


def _run(program: str, stdin: str) -> tuple[str, float]:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", program], input=stdin, capture_output=True,
                         text=True, timeout=600, env={"PYTHONHASHSEED": "0", "PATH": "/usr/bin"})
    dt = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"reference failed on {stdin[:60]!r}: {res.stderr[-2000:]}")
    return res.stdout, dt


def build(spec: dict, show_time: bool = False) -> None:
    folder = DATA / spec["id"]
    meta = {k: spec[k] for k in ("id", "title", "origin", "split", "statement", "io_format")}
    for key in ("benchmark", "drop_globals"):
        if key in spec:
            meta[key] = spec[key]
    meta["compare"] = spec.get("compare", "exact")
    meta["timeout_s"] = spec.get("timeout_s", 10.0)
    program = reference_program(folder, meta)
    meta["examples"] = [dict(input=i, output=_run(program, i)[0]) for i in spec["examples"]]
    meta["tests"] = [dict(input=i, output=_run(program, i)[0]) for i in spec["tests"]]
    meta["perf"] = {}
    for timer, stdin in spec["perf"].items():
        out, dt = _run(program, stdin)
        meta["perf"][timer] = dict(input=stdin, output=out)
        if show_time:
            print(f"{spec['id']:>15} {timer:>12}: {dt:.3f} s, input {len(stdin)} B, "
                  f"output {len(out)} B")
    (folder / "task.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


def main() -> None:
    only = [a for a in sys.argv[1:] if not a.startswith("--")]
    for spec in SPECS:
        if not only or spec["id"] in only:
            build(spec, show_time="--time" in sys.argv)


if __name__ == "__main__":
    main()
