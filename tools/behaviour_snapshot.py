"""Behaviour snapshot: tiny-model runs of every shipped config and every adapter.

Used around a refactoring that must not change behaviour: record the snapshot at the commit
before the first change, commit it, and compare after. Each training config in
``configs/*.yaml`` runs with ``deciplane/tiny`` on a tiny budget (2 iterations, 2 games,
short episodes, a short warm start, 2 evaluation episodes, no wall-time budget, one thread,
no helper processes); the two text-PPO configs also on ``tests/CoinFlip-v0`` (on the games
a tiny model scores 0 everywhere, so their update has no gradient); each adapter runs on
3 tasks. Recorded per case: every metric that
is not a timing, the summary's non-timing numbers and the SHA-256 of the trained
parameters.

Float results depend on the CPU's instruction set and on torch's version, so the snapshot
records the machine's fingerprint; comparing two snapshots is meaningful only where the
fingerprints agree. One case can differ between two runs on one machine:
``config:suite_twx.yaml``'s warm start plays a coin episode along TextWorld-Express's own
gold path, which is not the same in every JVM (docs/training.md, suites).

    python tools/behaviour_snapshot.py --out tests/data/behaviour_snapshot.json
    python tools/behaviour_snapshot.py --compare tests/data/behaviour_snapshot.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

TINY_TRAIN: dict[str, Any] = {
    "seed": 0, "iterations": 2, "max_wall_time_s": None, "progress": False,
    "model": {"name": "deciplane/tiny", "threads": 1, "trunk_dtype": "float32",
              "compute_dtype": "float32", "lora_rank": 4, "lora_alpha": 8},
    "eval": {"workers": 1, "episodes": 2, "during_episodes": 2, "every": 1,
             "cache_baselines": False},
    "checkpoint": {"every": 1, "keep_last": 1},
    "optim": {"micro_batch_size": 4},
}
TINY_ENV = {"games_per_iteration": 2, "group_size": 2, "max_episode_steps": 4}
TINY_BC = {"episodes": 2, "epochs": 2, "dagger_episodes": 2}
TINY_MATH = {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 6,
             "eval_problems": 2, "eval_max_new_tokens": 6}

TIMING_WORDS = ("time", "_s", "sec", "wall", "speed", "per_s", "throughput", "eta",
                "duration", "elapsed", "load", "cpu", "rss", "memory", "date", "host",
                "version", "path", "dir", "commit")


SUMMARY_SETTINGS = ("config", "machine", "provenance", "plan", "decision_cost")
"""Summary keys that describe the settings and the machine, or what the run cost
(``decision_cost``: tokens computed per decision, which a cache changes without changing
what the run did), not what the run did."""


def machine_fingerprint() -> dict[str, str]:
    """What float results depend on: the CPU's model and SIMD flags, torch's version."""
    import torch

    flags, model = "", platform.processor()
    try:
        info = Path("/proc/cpuinfo").read_text()
        for line in info.splitlines():      # the first processor's block
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                flags = " ".join(sorted(f for f in have if f.startswith(("avx", "fma", "amx"))))
                break
    except OSError:
        pass
    return {"cpu": model, "simd": flags, "torch": torch.__version__,
            "python": platform.python_version()}


def is_timing(key: str) -> bool:
    k = key.lower()
    return any(w in k for w in TIMING_WORDS)


def numbers(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Flatten a JSON value to ``{dotted.key: number/str/bool}``, timings dropped."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if not is_timing(str(k)):
                out.update(numbers(v, key))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.update(numbers(v, f"{prefix}[{i}]"))
    elif isinstance(obj, float):
        out[prefix] = float(repr(obj)) if obj == obj else "nan"
    elif isinstance(obj, (int, bool, str)) or obj is None:
        out[prefix] = obj
    return out


def params_sha256(model: Any) -> str:
    """SHA-256 over every parameter and buffer, by name (float32 bytes)."""
    import torch

    h = hashlib.sha256()
    state = model.state_dict()
    for name in sorted(state):
        t = state[name].detach().to("cpu")
        if t.is_floating_point():
            t = t.to(torch.float32)
        h.update(name.encode())
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def deep_merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def coinflip_env_id() -> str:
    """tests/trainers/coinflip_env.py: reward variance even from an untrained tiny model, so
    that a text-PPO update has a gradient (on the games every tiny episode scores 0)."""
    sys.path.insert(0, str(ROOT))
    from tests.trainers.coinflip_env import register

    return register()


def tiny_train_data(path: Path, variant: str = "") -> dict[str, Any]:
    import yaml

    raw = yaml.safe_load(path.read_text())
    data = deep_merge(raw, TINY_TRAIN)
    algo = raw["algorithm"]
    if algo in ("rlid_ppo", "text_ppo"):
        data["env"] = deep_merge(raw.get("env", {}), TINY_ENV)
        if (raw.get("bc") or {}).get("episodes"):
            data["bc"] = deep_merge(raw.get("bc") or {}, TINY_BC)
        if variant == "coinflip":
            data["env"] = {"id": coinflip_env_id(), "games_per_iteration": 3, "group_size": 4,
                           "max_episode_steps": 2}
            data["bc"] = {"episodes": 0}
            data["eval"] = deep_merge(data["eval"], {"every": 0, "final_splits": ["test"],
                                                     "before": False})
        if algo == "text_ppo":
            data["max_new_tokens"] = 6
        if raw.get("readout") == "items":
            data["readout_layer"] = 1          # the tiny model has 2 layers
            data["readout_rank"] = 4
    else:
        data = deep_merge(data, TINY_MATH)
    return data


def run_config(path: Path, variant: str = "") -> dict[str, Any]:
    import torch

    from deciplane.trainers.config import load_config
    from deciplane.trainers.run import build_algorithm, build_policy
    from deciplane.trainers.trainer import Trainer

    torch.set_num_threads(1)
    cfg = load_config(data=tiny_train_data(path, variant))
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        policy = build_policy(cfg)
        algo = build_algorithm(cfg, policy)
        try:
            summary = Trainer(cfg, run_dir, algo).train()
        finally:
            algo.close()
        metrics = [numbers(json.loads(line))
                   for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    kept = {k: v for k, v in summary.items() if k not in SUMMARY_SETTINGS}
    return {"params_sha256": params_sha256(policy.model), "metrics": metrics,
            "summary": numbers(kept)}


ADAPTERS: dict[str, dict[str, Any]] = {
    "ttrl": dict(votes=4, train_samples=3, max_new_tokens=6, prompts_per_step=2,
                 max_steps=2, lr=1e-2, temperature=1.5, lora_rank=4, lora_alpha=8,
                 answer_batch=8, checkpoints=1),
    "ttpo": dict(votes=4, train_samples=3, max_new_tokens=6, prompts_per_step=2,
                 max_steps=2, lr=1e-2, temperature=1.5, lora_rank=4, lora_alpha=8,
                 answer_batch=8, checkpoints=1),
    "tasco": dict(max_new_tokens=6, prompts_per_step=2, max_steps=2, answer_batch=8,
                  micro_batch_size=4, samples=2, lr=0.1, trunk_dtype="float32"),
    "probe_erpo": dict(votes=6, max_new_tokens=12, prompts_per_step=3, max_steps=1, lr=1e-2,
                       temperature=1.5, lora_rank=4, lora_alpha=8, model_probe_samples=1,
                       probe_max_new_tokens=12, probe_timeout_s=0.5,
                       penalize_invalid=False),
}


def run_adapter(name: str) -> dict[str, Any]:
    import torch

    from deciplane.agents import load_policy
    from deciplane.envs import load_benchmark
    from deciplane.methods import get, load_config_class, load_target
    from deciplane.utils import seed_everything

    torch.set_num_threads(1)
    spec = get({"probe_erpo": "probe-erpo"}.get(name, name), "adapt")
    cls, cfg_cls = load_target(spec), load_config_class(spec)
    bench = "easy-funcs" if name == "probe_erpo" else "arith-shift"
    tasks, scorer = load_benchmark(bench, "test", limit=3)
    scorer.close()
    seed_everything(0)
    policy = load_policy("deciplane/tiny")
    ad = cls(policy, cfg_cls(**ADAPTERS[name]))
    answers = ad.run(tasks)
    b = ad.budget
    budget = {k: getattr(b, k) for k in ("samples", "optimizer_steps", "skipped_steps",
                                         "forward_tokens", "backward_tokens",
                                         "generated_tokens")}
    return {"params_sha256": params_sha256(policy.model), "answers": answers,
            "history": [numbers(h) for h in ad.records.history], "budget": budget}


def cases() -> list[str]:
    return [f"config:{p.name}" for p in sorted((ROOT / "configs").glob("*.yaml"))] + \
        [f"config:{n}+coinflip" for n in ("text_ppo.yaml", "text_ppo_tlm_dre.yaml")] + \
        [f"adapter:{n}" for n in ADAPTERS]


def run_case(case: str) -> dict[str, Any]:
    kind, name = case.split(":", 1)
    t0 = time.perf_counter()
    try:
        if kind == "config":
            file, _, variant = name.partition("+")
            out = run_config(ROOT / "configs" / file, variant)
        else:
            out = run_adapter(name)
    except Exception as e:  # noqa: BLE001 - recorded: a case that cannot run here
        out = {"error": f"{type(e).__name__}: {e}"[:400]}
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def snapshot(selected: list[str]) -> dict[str, Any]:
    """Each case in a fresh interpreter (no state shared between cases)."""
    results = {}
    for case in selected:
        proc = subprocess.run([sys.executable, __file__, "--one", case], cwd=ROOT,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            results[case] = {"error": f"exit {proc.returncode}: {proc.stderr[-400:]}"}
        else:
            results[case] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{case}: {results[case].get('error') or results[case]['params_sha256'][:16]} "
              f"({results[case].get('seconds', '?')} s)", file=sys.stderr, flush=True)
    return results


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Cases whose recorded values differ (timings excluded)."""
    out = []
    for case, b in before.items():
        a = after.get(case)
        if a is None:
            out.append(f"{case}: missing after")
            continue
        b = {k: v for k, v in b.items() if k != "seconds"}
        a = {k: v for k, v in a.items() if k != "seconds"}
        if a != b:
            keys = [k for k in set(a) | set(b) if a.get(k) != b.get(k)]
            out.append(f"{case}: {', '.join(sorted(keys))} differ")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the snapshot here")
    ap.add_argument("--compare", type=Path, help="run and compare with this snapshot")
    ap.add_argument("--only", help="comma-separated case names (see --list)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_case(args.one)))
        return
    if args.list:
        print("\n".join(cases()))
        return
    selected = args.only.split(",") if args.only else cases()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    snap = {"commit": commit, "machine": machine_fingerprint(), "cases": snapshot(selected)}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(snap, indent=1, sort_keys=True) + "\n")
    if args.compare:
        before = json.loads(args.compare.read_text())
        if before["machine"] != snap["machine"]:
            print(f"machines differ: {before['machine']} vs {snap['machine']}")
        diff = differences({k: v for k, v in before["cases"].items() if k in selected},
                           snap["cases"])
        print("\n".join(diff) if diff else f"identical: {len(selected)} cases")
        sys.exit(1 if diff else 0)


if __name__ == "__main__":
    main()
