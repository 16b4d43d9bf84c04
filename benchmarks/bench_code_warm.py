"""A ``deciplane/CodeGen-v0`` step, warm vs cold vs bare, side by side.

    python benchmarks/bench_code_warm.py --tasks 10 --rounds 20 \\
        --json benchmarks/results/code_warm_jail.json

Per round, on each of ``--tasks`` easy-funcs test tasks (a right program for each), in a
rotating order so that a shared machine's load hits every side alike:

- ``warm``: ``env.step`` of a CodeGen-v0 env with ``warm=True`` (the default): the
  candidate in a kept warm jail, the checker forked from a warm helper;
- ``cold``: the same env with ``warm=False``: a sandbox and a checker process per step;
- ``bare``: ``/usr/bin/python3 -I main.py`` in a temp dir, main.py = the same candidate
  program, then the hidden tests and ``check(entry_point)`` in the same process (the
  driver and candidate with no isolation at all; the goal is warm <= 1.3x this);
- ``bare_two_process``: the harness's two processes with no sandbox: the checker as a
  new helper process and ``/usr/bin/python3 -I main.py`` (the harness's server +
  candidate.py) joined by the same three pipes.

Reports the median / p10 / p90 wall seconds per side, the ratios of the medians, and the
load average (1/5/15 min) before and after; the command line goes in the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "envs", "code"))

import gymnasium as gym  # noqa: E402

import deciplane.envs  # noqa: E402,F401  (registers the ids)
from deciplane.envs.code import easy_funcs, harness  # noqa: E402
from deciplane.sandbox import warm as warm_jails  # noqa: E402

BARE_PYTHON = "/usr/bin/python3"


def right_programs(n: int) -> list[tuple[int, str, str, str, str]]:
    """``(index, response, program, tests, entry_point)`` for the first ``n`` test tasks."""
    from test_code_benchmarks import SOLUTIONS

    out = []
    for i, t in enumerate(easy_funcs.generate_splits()["test"][:n]):
        body = "    " + SOLUTIONS[t.family].format(*t.key.split("/")[1:]) + "\n"
        prog = harness.extract_program(body, t.prompt, t.entry_point)
        out.append((i, body, prog, t.tests, t.entry_point))
    return out


def step(env, index: int, response: str) -> float:  # noqa: ANN001
    env.reset(options={"index": index})
    t0 = time.perf_counter()
    _, reward, *_ = env.step(response)
    dt = time.perf_counter() - t0
    assert reward == 1.0, "a right program failed"
    return dt


def bare(program: str, tests: str, entry: str) -> float:
    """One process, no isolation: the candidate, then the tests, in one interpreter."""
    d = tempfile.mkdtemp(prefix="bench-bare-")
    try:
        with open(os.path.join(d, "main.py"), "w") as fh:
            fh.write(program + "\n" + tests + f"\ncheck({entry})\nprint('passed')\n")
        t0 = time.perf_counter()
        out = subprocess.run([BARE_PYTHON, "-I", "main.py"], cwd=d, capture_output=True,
                             stdin=subprocess.DEVNULL, timeout=30)
        dt = time.perf_counter() - t0
        assert out.stdout.strip() == b"passed", out.stderr[-300:]
        return dt
    finally:
        shutil.rmtree(d)


def bare_two_process(program: str, tests: str, entry: str, prompt: str) -> float:
    """The harness's checker + server/candidate, joined by its pipes, unsandboxed."""
    d = tempfile.mkdtemp(prefix="bench-bare2-")
    try:
        cfg = {"mode": "check", "tests": tests, "prompt": prompt, "entry_point": entry,
               "call_timeout_s": None, "max_repr": harness.MAX_REPR}
        wire_src = harness._wire_source()
        with open(os.path.join(d, "candidate.py"), "w") as fh:
            fh.write(program)
        t0 = time.perf_counter()
        fds = [os.pipe() for _ in range(3)]
        (req_r, req_w), (resp_r, resp_w), (alive_r, alive_w) = fds
        ours, theirs = [req_w, resp_r, alive_w], [req_r, resp_w, alive_r]
        checker = harness._ColdChecker(wire_src, cfg, ours, 6.0)
        for fd in ours:
            os.close(fd)
        server = (wire_src + harness._SERVER.replace("__FDS__", repr(tuple(theirs)))
                  .replace("__ENTRY__", repr(entry)).replace("__BUDGET__", "None"))
        with open(os.path.join(d, "main.py"), "w") as fh:
            fh.write(server)
        proc = subprocess.Popen([BARE_PYTHON, "-I", "main.py"], cwd=d, pass_fds=theirs,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        for fd in theirs:
            os.close(fd)
        proc.wait(timeout=30)
        out = checker.result(time.monotonic() + 30)
        dt = time.perf_counter() - t0
        assert json.loads(out.decode().strip().splitlines()[-1])["failure"] == "passed"
        return dt
    finally:
        shutil.rmtree(d)


def summary(ts: list[float]) -> dict:
    q = statistics.quantiles(ts, n=10)
    return {"median_s": round(statistics.median(ts), 5), "p10_s": round(q[0], 5),
            "p90_s": round(q[-1], 5), "min_s": round(min(ts), 5), "runs": len(ts)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    envs = {w: gym.make("deciplane/CodeGen-v0", benchmark="easy-funcs", split="test",
                        warm=w).unwrapped for w in (True, False)}
    tasks = right_programs(args.tasks)
    prompts = {i: envs[True]._items[i].prompt for i, *_ in tasks}
    sides = {
        "warm": lambda i, r, p, t, e: step(envs[True], i, r),
        "cold": lambda i, r, p, t, e: step(envs[False], i, r),
        "bare": lambda i, r, p, t, e: bare(p, t, e),
        "bare_two_process": lambda i, r, p, t, e: bare_two_process(p, t, e, prompts[i]),
    }
    for name, fn in sides.items():       # warm-up: jails, helpers, page cache
        fn(*tasks[0])
    stats0 = dict(warm_jails.STATS)
    load0 = os.getloadavg()
    times: dict[str, list[float]] = {k: [] for k in sides}
    names = list(sides)
    for rnd in range(args.rounds):
        for j, task in enumerate(tasks):
            k = (rnd + j) % len(names)
            for name in names[k:] + names[:k]:
                times[name].append(sides[name](*task))
    load1 = os.getloadavg()
    res = {"command": "python " + " ".join(sys.argv),
           "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "backend": envs[True].sandbox.backend, "cpu_count": os.cpu_count(),
           "bare_python": BARE_PYTHON, "tasks": args.tasks, "rounds": args.rounds,
           "load_average_before": [round(x, 2) for x in load0],
           "load_average_after": [round(x, 2) for x in load1],
           "warm_stats": {k: warm_jails.STATS[k] - stats0.get(k, 0) for k in warm_jails.STATS},
           "sides": {k: summary(v) for k, v in times.items()}}
    med = {k: v["median_s"] for k, v in res["sides"].items()}
    res["ratios"] = {"warm/bare": round(med["warm"] / med["bare"], 3),
                     "cold/bare": round(med["cold"] / med["bare"], 3),
                     "warm/cold": round(med["warm"] / med["cold"], 3),
                     "warm/bare_two_process": round(med["warm"] / med["bare_two_process"], 3),
                     "cold/bare_two_process": round(med["cold"] / med["bare_two_process"], 3)}
    print(json.dumps(res, indent=1))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)
            fh.write("\n")
    for env in envs.values():
        env.close()
    warm_jails.close_program_jails()


if __name__ == "__main__":
    main()
