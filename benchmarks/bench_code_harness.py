"""Per-task cost of the hidden-test harness (``run_hidden_tests``), one label per run.

    python benchmarks/bench_code_harness.py --label before   # on the old harness
    python benchmarks/bench_code_harness.py --label after    # on the current one

Times ``run_hidden_tests`` end to end, as the caller (CodeGen-v0, the scorer's judge)
sees it, on HumanEval's canonical solutions (first ``--n`` tasks) and on right easy-funcs
programs (first ``--n`` tasks of the test split), ``--rounds`` passes each. Reports
median / p10 / p90 wall seconds per task and the load average (1, 5, 15 min) before and
after: the reference machine has 2 CPU cores shared with other jobs, so absolute numbers
move with the load; compare medians taken under similar load. Results are merged into
``benchmarks/results/code_harness_cost.json`` under the label.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from deciplane.benchmarks.data import load_labeled  # noqa: E402
from deciplane.envs.code import easy_funcs  # noqa: E402
from deciplane.envs.code.benchmarks import humaneval_rows  # noqa: E402
from deciplane.envs.code.harness import extract_program, run_hidden_tests  # noqa: E402
from deciplane.sandbox import Sandbox  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                   "code_harness_cost.json")


def cases(n: int) -> dict[str, list[tuple[str, str, str, str]]]:
    """``{suite: [(prompt, program, tests, entry_point)]}``."""
    rows, _ = humaneval_rows()
    he = [(r["prompt"], r["prompt"] + r["canonical_solution"], r["test"], r["entry_point"])
          for r in rows[:n]]
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "tests", "envs", "code"))
    from test_code_benchmarks import SOLUTIONS

    ef = []
    for t in easy_funcs.generate_splits()["test"][:n]:
        body = "    " + SOLUTIONS[t.family].format(*t.key.split("/")[1:]) + "\n"
        ef.append((t.prompt, extract_program(body, t.prompt, t.entry_point), t.tests,
                   t.entry_point))
    return {"humaneval": he, "easy-funcs": ef}


def call(sb, prompt, program, tests, entry):  # noqa: ANN001
    try:
        return run_hidden_tests(sb, program, tests, entry, prompt=prompt)
    except TypeError:  # the harness before issue 24 took no prompt
        return run_hidden_tests(sb, program, tests, entry)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", required=True)
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    sb = Sandbox()
    suites = cases(args.n)
    load0 = os.getloadavg()
    times: dict[str, list[float]] = {k: [] for k in suites}
    passed: dict[str, int] = {k: 0 for k in suites}
    for _ in range(args.rounds):
        for name, cs in suites.items():
            for c in cs:
                t0 = time.perf_counter()
                o = call(sb, *c)
                times[name].append(time.perf_counter() - t0)
                passed[name] += o.passed
    load1 = os.getloadavg()
    res = {"backend": sb.backend, "n_tasks": args.n, "rounds": args.rounds,
           "load_average_before": [round(x, 2) for x in load0],
           "load_average_after": [round(x, 2) for x in load1],
           "cpu_count": os.cpu_count(), "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "suites": {}}
    for name, ts in times.items():
        q = statistics.quantiles(ts, n=10)
        res["suites"][name] = {"median_s": round(statistics.median(ts), 4),
                               "p10_s": round(q[0], 4), "p90_s": round(q[-1], 4),
                               "mean_s": round(statistics.fmean(ts), 4),
                               "passed": passed[name], "runs": len(ts)}
    data = {}
    if os.path.exists(OUT):
        with open(OUT) as fh:
            data = json.load(fh)
    data[args.label] = res
    with open(OUT, "w") as fh:
        json.dump(data, fh, indent=1)
        fh.write("\n")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
