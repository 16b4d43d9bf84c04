"""Steps per second of a menu env in process vs through deciplane's OpenEnv server.

TextWorld-Express twc (2 rooms, 2 items, train fold), uniformly random legal actions, the
same step count per client. In process: ``gym.make`` in this process. Served: ``deciplane
serve`` in a child process on localhost, stepped by ``--clients`` OpenEnv WebSocket
sessions at once (threads of this process, one ``from_openenv`` env each; ``1,8`` by
default). Reported: steps/s (all clients together), the per-step wall time of one client,
and its overhead over the in-process step. Run it alone; the load average is recorded.

    python benchmarks/bench_openenv.py --steps 400 --out benchmarks/results/openenv.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import gymnasium as gym

import deciplane  # noqa: F401

TWX = "deciplane/TextWorldExpress-v0"
KWARGS = {"game": "twc", "game_params": {"numLocations": 2, "numItemsToPutAway": 2},
          "split": "train"}


def play(env, steps: int, seed: int) -> float:
    """Seconds for ``steps`` random legal steps (resets, when an episode ends, included)."""
    rng = random.Random(seed)
    _, info = env.reset(seed=seed, options={"game": seed % 100})
    t0 = time.perf_counter()
    for _ in range(steps):
        _, _, term, trunc, info = env.step(rng.randrange(len(info["menu"])))
        if term or trunc:
            _, info = env.reset(seed=seed, options={"game": rng.randrange(100)})
    return time.perf_counter() - t0


def served(steps: int, clients: int, port: int) -> dict:
    from deciplane.interop.openenv import from_openenv

    url = f"http://127.0.0.1:{port}"
    envs = [from_openenv(url) for _ in range(clients)]
    times = [0.0] * clients
    try:
        for e in envs:      # sessions open and the JVMs started before the clock runs
            e.reset(seed=0, options={"game": 0})

        def run(k: int) -> None:
            times[k] = play(envs[k], steps, k)

        threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
    finally:
        for e in envs:
            e.close()
    return {"clients": clients, "steps_per_s": round(clients * steps / wall, 1),
            "step_ms_per_client": round(1000 * sum(times) / (clients * steps), 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--clients", default="1,8")
    ap.add_argument("--out", default="benchmarks/results/openenv.json")
    args = ap.parse_args(argv)
    counts = [int(c) for c in args.clients.split(",")]
    load_before = os.getloadavg()
    local = gym.make(TWX, **KWARGS)
    try:
        play(local, 20, 99)                                     # warm-up
        local_s = play(local, args.steps, 0)
    finally:
        local.close()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    options = sum((["-e", f"{k}={json.dumps(v)}"] for k, v in KWARGS.items()), [])
    server = subprocess.Popen([sys.executable, "-m", "deciplane.cli", "serve", TWX, *options,
                               "--port", str(port), "--max-sessions", str(max(counts))],
                              stdout=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    raise RuntimeError("the server did not start") from None
                time.sleep(0.2)
        rows = [served(args.steps, c, port) for c in counts]
    finally:
        server.terminate()
        server.wait(30)
    in_process_ms = 1000 * local_s / args.steps
    for r in rows:
        r["overhead_ms_per_step"] = round(r["step_ms_per_client"] - in_process_ms, 3)
    result = {"env": TWX, "kwargs": KWARGS, "steps_per_client": args.steps,
              "in_process": {"steps_per_s": round(args.steps / local_s, 1),
                             "step_ms": round(in_process_ms, 3)},
              "served": rows, "command": " ".join(sys.argv),
              "load_avg_before": load_before, "load_avg_after": os.getloadavg(),
              "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
              "date": time.strftime("%Y-%m-%d %H:%M")}
    print(json.dumps(result, indent=1))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
