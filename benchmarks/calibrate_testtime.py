"""Calibrate test-time benchmarks for a model: where does adaptation have a signal?

For each candidate benchmark (built-in ``arith`` variants, ``rg:<family>`` with
difficulty options) it measures, on the first ``--n`` tasks of a split, exactly what a
``deciplane adapt`` run would see with its defaults (prompt = task text, the model's chat
template, no system prompt, ``--max-new-tokens`` tokens, temperature 0.7, answers by the
TTRL extraction rules):

* ``greedy``: accuracy of one greedy answer;
* ``pass@1``: sampled accuracy averaged over the ``--samples`` samples;
* ``maj@N``: accuracy of the majority vote over the N samples (no vote = wrong);
* ``label``: majority-label accuracy over the tasks that had a valid vote (what TTRL's
  pseudo-reward rests on) and its ``coverage``;
* ``gap`` = maj@N - pass@1.

Every number is computed by the held-out scorer. A benchmark qualifies as a test-time
default when ``label >= 0.5`` and ``gap >= 0.10`` (``--votes`` = the adapter's default
number of votes, 8).

    nice -n 10 .venv/bin/python benchmarks/calibrate_testtime.py --n 32 --samples 8 \\
        --out benchmarks/results/testtime_calibration.json

Candidates are written ``NAME`` or ``NAME@key=value,key=value`` (options of the family,
values parsed as YAML), e.g. ``rg:chain_sum@min_terms=2,max_terms=2,max_digits=1``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

DEFAULT_CANDIDATES = (
    "arith",
    "arith-shift",
    "rg:chain_sum@min_terms=2,max_terms=2,min_digits=1,max_digits=1",
    "rg:chain_sum@min_terms=2,max_terms=3,min_digits=1,max_digits=1",
    "rg:chain_sum@min_terms=2,max_terms=2,min_digits=1,max_digits=2",
    "rg:basic_arithmetic@min_terms=2,max_terms=2,min_digits=1,max_digits=1,allow_parentheses=false,allow_negation=false",
    "rg:products@min_terms=2,max_terms=2,min_digits=1,max_digits=1",
    "rg:leg_counting@min_animals=1,max_animals=2,min_instances=1,max_instances=3",
    "rg:letter_counting@min_words=3,max_words=5",
    "rg:gcd@min_value=1,max_value=20",
)

GAP_MIN = 0.10
LABEL_MIN = 0.5


def parse_candidate(spec: str) -> tuple[str, dict[str, Any]]:
    """``"rg:chain_sum@max_terms=2,max_digits=1"`` -> ``("rg:chain_sum", {...})``."""
    from deciplane.config import parse_override

    name, _, rest = spec.partition("@")
    params = dict(parse_override(kv) for kv in rest.split(",") if kv.strip())
    return name, params


def qualifies(row: dict[str, Any]) -> bool:
    return row["label"] >= LABEL_MIN and row["gap"] >= GAP_MIN


def measure(policy, spec: str, *, split: str, n: int, samples: int, max_new_tokens: int,
            temperature: float, seed: int, batch: int) -> dict[str, Any]:
    from deciplane.adapt.base import extract, vote
    from deciplane.envs import load_benchmark
    from deciplane.engine.budget import Budget
    from deciplane.engine.generation import generate

    name, params = parse_candidate(spec)
    tasks, scorer = load_benchmark(name, split, limit=n, **params)
    with scorer:
        prompts = [policy.format_prompt(t.prompt) for t in tasks]
        budget = Budget()
        t0 = time.time()
        greedy_g = generate(policy, prompts, max_new_tokens=max_new_tokens, do_sample=False,
                            budget=budget, prompts_per_batch=batch * samples)
        greedy = {tasks[g.prompt_index].id: a or "" for g, a in
                  zip(greedy_g, extract([g.text for g in greedy_g]))}
        sample_g = generate(policy, prompts, max_new_tokens=max_new_tokens,
                            temperature=temperature, num_return_sequences=samples, seed=seed,
                            budget=budget, prompts_per_batch=batch)
        per: dict[str, list[str | None]] = {t.id: [] for t in tasks}
        for g, a in zip(sample_g, extract([g.text for g in sample_g])):
            per[tasks[g.prompt_index].id].append(a)
        wall = time.time() - t0
        votes = {tid: vote(a).answer for tid, a in per.items()}
        g = scorer.score(greedy)
        s = scorer.sample_accuracy(per)
        m = scorer.score({k: v for k, v in votes.items()})
        lab = scorer.label_accuracy(votes)
        mean_tokens = sum(int(x.response_ids.numel()) for x in sample_g) / max(len(sample_g), 1)
    return {"benchmark": name, "params": params, "spec": spec, "split": split,
            "n": len(tasks), "samples": samples, "greedy": g.accuracy, "pass1": s.mean,
            "maj": m.accuracy, "label": lab.accuracy, "coverage": lab.coverage,
            "gap": m.accuracy - s.mean, "pass_any": s.pass_any,
            "mean_sample_tokens": round(mean_tokens, 1), "wall_s": round(wall, 1),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "fingerprint": g.split_fingerprint}


def markdown(rows: list[dict[str, Any]], samples: int) -> str:
    head = (f"| benchmark | options | n | greedy | pass@1 | maj@{samples} | label acc (coverage) "
            f"| maj-pass@1 | tokens/sample | qualifies |\n|---|---|---|---|---|---|---|---|---|---|\n")
    body = ""
    for r in rows:
        opts = ", ".join(f"{k}={v}" for k, v in r["params"].items()) or "-"
        body += (f"| {r['benchmark']} | {opts} | {r['n']} | {r['greedy']:.3f} | {r['pass1']:.3f} | "
                 f"{r['maj']:.3f} | {r['label']:.3f} ({r['coverage']:.2f}) | {r['gap']:+.3f} | "
                 f"{r['mean_sample_tokens']} | {'yes' if qualifies(r) else 'no'} |\n")
    return head + body


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="deciplane/smollm2-135m-instruct")
    ap.add_argument("--candidates", nargs="+", default=list(DEFAULT_CANDIDATES))
    ap.add_argument("--split", default="test")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--samples", type=int, default=8, help="votes per task (the adapters' default: 8)")
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=8, help="prompts per sampling call")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="JSON file for the rows (and a .md beside it)")
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows already in --out (same settings) and measure only the missing candidates")
    args = ap.parse_args()

    import torch
    from rich.progress import Progress

    from deciplane.agents import load_policy

    torch.set_num_threads(args.threads)
    policy = load_policy(args.model)
    rows: list[dict[str, Any]] = []
    if args.resume and args.out and args.out.is_file():
        old = json.loads(args.out.read_text())
        same = all(old["meta"].get(k) == getattr(args, k) for k in
                   ("model", "split", "n", "samples", "max_new_tokens", "temperature", "seed"))
        if not same:
            raise SystemExit(f"--resume: {args.out} was measured with other settings: {old['meta']}")
        rows = list(old["rows"])
    done = {r["spec"] for r in rows}
    t0 = time.time()
    with Progress() as bar:
        todo = [c for c in args.candidates if c not in done]
        task = bar.add_task("calibrating", total=len(todo))
        for spec in todo:
            r = measure(policy, spec, split=args.split, n=args.n, samples=args.samples,
                        max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                        seed=args.seed, batch=args.batch)
            rows.append(r)
            bar.console.print(f"{spec}: greedy {r['greedy']:.3f} pass@1 {r['pass1']:.3f} "
                              f"maj@{args.samples} {r['maj']:.3f} label {r['label']:.3f} "
                              f"gap {r['gap']:+.3f} ({r['wall_s']:.0f}s, load {r['load_average'][0]})",
                              highlight=False)
            bar.advance(task)
            if args.out:   # keep partial results
                _write(args, rows, time.time() - t0)
    print(markdown(rows, args.samples))
    if args.out:
        _write(args, rows, time.time() - t0)


def _write(args, rows, wall) -> None:
    meta = {"model": args.model, "split": args.split, "n": args.n, "samples": args.samples,
            "max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
            "seed": args.seed, "threads": args.threads, "host": platform.node(),
            "wall_s": round(wall, 1), "load_average_at_write": [round(x, 2) for x in os.getloadavg()],
            "criteria": {"label_min": LABEL_MIN, "gap_min": GAP_MIN}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(rows, args.samples))


if __name__ == "__main__":
    main()
