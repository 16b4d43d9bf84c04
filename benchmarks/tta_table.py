"""One table for the four test-time adapters: TTRL, TTPO and TASCO on ``products-1d``,
Probe-ERPO on ``easy-funcs``, 3 seeds each, against greedy, sampled pass@1, the
equal-budget majority vote (consensus selection for code) and best-of-N, with paired 95%
intervals and the budget (samples, forward-token equivalents, optimizer steps, CPU-s).

Resumable, run by run: each run is ``deciplane adapt METHOD --benchmark B --seed S
--threads 1 --run-dir RUNS/B-METHOD-sS --baseline-cache RUNS/cache`` (the baselines are
computed once per benchmark and seed and shared); a run whose ``summary.json`` exists is
not run again. A finished run is copied to ``benchmarks/results/tta/`` with
``NAME.meta.json`` (the command, the commit, a digest of the adapter code and the config):
a later session reuses a committed run only if its code digest and config are those of
the current code (else it runs again). ``--max-runs N`` stops after N new runs (a
session's share); the table is rewritten after every run, partial or not, as
``benchmarks/results/tta_table.md``. Run alone on the machine (CPU seconds are compared).

    python benchmarks/tta_table.py --max-runs 3          # the next three missing runs
    python benchmarks/tta_table.py --table-only          # rebuild the table from what exists
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import summarize_adapt  # noqa: E402
from deciplane.provenance import git_commit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "benchmarks" / "results" / "tta"
TABLE = ROOT / "benchmarks" / "results" / "tta_table.md"
EQUIVALENT = COMMITTED / "same_behaviour.json"

PLAN = [("ttrl", "products-1d"), ("ttpo", "products-1d"), ("tasco", "products-1d"),
        ("probe-erpo", "easy-funcs")]
"""(adapter, benchmark): each adapter on the benchmark it applies to, with its defaults."""

CODE = ("adapt", "objectives", "engine", "agents", "benchmarks")
"""Sources (under the package) whose digest decides whether a committed run still holds."""

TABLE_SEEDS = (0, 1, 2)


def code_digest() -> str:
    h = hashlib.blake2b(digest_size=12)
    pkg = ROOT / "deciplane"
    for part in CODE:
        for f in sorted((pkg / part).rglob("*.py")):
            h.update(str(f.relative_to(pkg)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def default_config(method: str) -> dict:
    """The adapter's default options as its summary records them (``config``)."""
    from deciplane.methods import get, load_config_class

    cls = load_config_class(get(method, "adapt"))
    return json.loads(json.dumps(dataclasses.asdict(cls()), default=str))


def is_default_config(method: str, config: dict | None) -> bool:
    """Whether a recorded ``config`` reads (through the one config loader, old option names
    included) as the adapter's defaults today."""
    import warnings

    from deciplane.config import from_dict
    from deciplane.errors import ConfigError
    from deciplane.methods import get, load_config_class

    if not isinstance(config, dict):
        return False
    cls = load_config_class(get(method, "adapt"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)   # old names, as recorded
            return from_dict(cls, config) == cls()
    except ConfigError:
        return False


def same_behaviour_digests(digest: str) -> set[str]:
    """``digest`` and the earlier digests whose code behaves the same: a refactoring that
    changed the sources but not one metric or parameter hash of the behaviour snapshot
    (tools/behaviour_snapshot.py) records the pair in ``EQUIVALENT`` with its evidence."""
    same = {digest}
    entries = json.loads(EQUIVALENT.read_text()) if EQUIVALENT.is_file() else []
    while True:          # follow chains: a -> b -> c
        more = {e["same_behaviour_as"] for e in entries if e["digest"] in same} - same
        if not more:
            return same
        same |= more


def committed_run(name: str, method: str, digest: str) -> dict | None:
    """The committed summary of ``name`` if it was made by this code (or code that behaves
    the same) with these defaults."""
    s, m = COMMITTED / f"{name}.summary.json", COMMITTED / f"{name}.meta.json"
    if not (s.is_file() and m.is_file()):
        return None
    meta = json.loads(m.read_text())
    if meta.get("code_digest") not in same_behaviour_digests(digest) \
            or not is_default_config(method, meta.get("config")):
        return None
    return json.loads(s.read_text())


def run_one(method: str, bench: str, seed: int, runs: Path, threads: int) -> tuple[dict, list[str]]:
    run_dir = runs / f"{bench}-{method}-s{seed}"
    cmd = [sys.executable, "-m", "deciplane.cli", "adapt", method, "--benchmark", bench,
           "--seed", str(seed), "--threads", str(threads), "--run-dir", str(run_dir),
           "--baseline-cache", str(runs / "cache")]
    if run_dir.exists() and not (run_dir / "summary.json").is_file():
        cmd.append("--resume")          # a run cut off earlier goes on from its last step
    print("running:", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    return json.loads((run_dir / "summary.json").read_text()), cmd


def existing_run(method: str, bench: str, seed: int, runs: Path, digest: str) -> dict | None:
    """A finished run of this code with the adapter's defaults: committed, else local."""
    name = f"{bench}-{method}-s{seed}"
    s = committed_run(name, method, digest)
    local = runs / name / "summary.json"
    if s is None and local.is_file():
        s = json.loads(local.read_text())
        if not is_default_config(method, s.get("config")):
            s = None                                      # made with other options
    return s


def collect(runs: Path, seeds: list[int], digest: str) -> dict[str, list[dict]]:
    """Every existing run of the plan, by benchmark (whichever process made it)."""
    out: dict[str, list[dict]] = {}
    for method, bench in PLAN:
        for seed in seeds:
            s = existing_run(method, bench, seed, runs, digest)
            if s is not None:
                out.setdefault(bench, []).append(s)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2", help="seeds to run (the table shows 0, 1, 2 "
                    "and these)")
    ap.add_argument("--only", default="", help="comma-separated adapters to run (default: all "
                    "four); the table always shows every run that exists")
    ap.add_argument("--runs", default="runs/tta", help="where the runs and the baseline cache go")
    ap.add_argument("--max-runs", type=int, default=None, help="stop after this many new runs")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--table-only", action="store_true")
    a = ap.parse_args(argv)
    runs = Path(a.runs)
    seeds = [int(s) for s in a.seeds.split(",")]
    table_seeds = sorted(set(TABLE_SEEDS) | set(seeds))
    only = {m for m in a.only.split(",") if m}
    digest = code_digest()
    COMMITTED.mkdir(parents=True, exist_ok=True)
    todo = [] if a.table_only else [
        (method, bench, seed) for method, bench in PLAN if not only or method in only
        for seed in seeds if existing_run(method, bench, seed, runs, digest) is None]
    for method, bench, seed in todo[:a.max_runs]:
        name = f"{bench}-{method}-s{seed}"
        load0 = os.getloadavg()
        t0 = time.time()
        _, cmd = run_one(method, bench, seed, runs, a.threads)
        shutil.copy(runs / name / "summary.json", COMMITTED / f"{name}.summary.json")
        (COMMITTED / f"{name}.meta.json").write_text(json.dumps({
            "command": " ".join(["deciplane"] + cmd[3:]), "commit": git_commit(ROOT),
            "code_digest": digest, "config": default_config(method),
            "load_avg_before": load0, "load_avg_after": os.getloadavg(),
            "wall_s": round(time.time() - t0, 1),
            "date": time.strftime("%Y-%m-%d %H:%M")}, indent=1) + "\n")
        write_table(collect(runs, table_seeds, digest), table_seeds)
    summaries = collect(runs, table_seeds, digest)
    write_table(summaries, table_seeds)
    have = sum(len(v) for v in summaries.values())
    print(f"{TABLE}: {have} runs, {len(PLAN) * len(table_seeds) - have} "
          "still to run")
    return 0


def write_table(summaries: dict[str, list[dict]], seeds: list[int]) -> None:
    parts = ["# Test-time adapters, one table (`benchmarks/tta_table.py`)", "",
             "Each column: the adapter with its defaults, mean over the seeds that have run "
             "(per-seed values in brackets). Runs and their commands: "
             "`benchmarks/results/tta/*.meta.json`.", ""]
    for bench, runs in summaries.items():
        done = sorted({s["seed"] for s in runs})
        parts += [f"## {bench} (seeds run: {done} of {seeds})", "", summarize_adapt.table(runs), ""]
    TABLE.write_text("\n".join(parts) + "\n")


if __name__ == "__main__":
    sys.exit(main())
