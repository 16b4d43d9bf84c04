"""Calibrate the built-in math benchmarks against a model: greedy accuracy, sampled
pass@1 and majority vote (maj@N) per benchmark, all scored by the held-out scorer.

    .venv/bin/python benchmarks/calibrate_math.py --n 32 --samples 8

Answers are extracted by the TTRL rules (``deciplane.envs.math.answers.extract_answer``:
boxed > "the answer is" > last number); the vote clusters equivalent answers.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch

from deciplane.agents import load_policy
from deciplane.envs import load_benchmark
from deciplane.envs.math.answers import extract_answer, majority_vote



def run(bench: str, split: str, policy, n: int, samples: int, max_new_tokens: int,
        temperature: float, seed: int, batch: int, instruction: str = "") -> dict:
    tasks, scorer = load_benchmark(bench, split, limit=n)
    with scorer:
        suffix = f"\n{instruction}" if instruction else ""
        prompts = [policy.format_prompt(t.prompt + suffix) for t in tasks]
        t0 = time.time()
        greedy, sampled = {}, defaultdict(list)
        for i in range(0, len(tasks), batch):
            chunk = tasks[i:i + batch]
            g = policy.generate(prompts[i:i + batch], max_new_tokens=max_new_tokens,
                                do_sample=False)
            for t, gen in zip(chunk, g):
                greedy[t.id] = extract_answer(gen.text)
            s = policy.generate(prompts[i:i + batch], max_new_tokens=max_new_tokens,
                                temperature=temperature, num_return_sequences=samples,
                                seed=seed + i)
            for gen in s:
                sampled[chunk[gen.prompt_index].id].append(extract_answer(gen.text))
        wall = time.time() - t0
        votes = {tid: majority_vote(ans).answer for tid, ans in sampled.items()}
        g = scorer.score(greedy)
        s = scorer.sample_accuracy(dict(sampled))
        m = scorer.score(votes)
        lab = scorer.label_accuracy(votes)
        by_level = defaultdict(list)
        for t in tasks:
            by_level[t.meta.get("level", t.meta.get("source"))].append(s.per_task[t.id])
    return {"bench": bench, "n": len(tasks), "greedy": g.accuracy, "pass1": s.mean,
            "maj": m.accuracy, "vote_coverage": lab.coverage, "wall_s": wall,
            "fingerprint": g.split_fingerprint,
            "pass1_by_level": {k: sum(v) / len(v) for k, v in sorted(by_level.items())},
            "level_counts": {k: len(v) for k, v in sorted(by_level.items())}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="deciplane/smollm2-135m-instruct")
    ap.add_argument("--benchmarks", nargs="+", default=["arith", "arith-shift"])
    ap.add_argument("--split", default="test")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--instruction", default="",
                    help="appended to each problem (default: none, as `deciplane adapt`)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    policy = load_policy(args.model)
    print(f"| benchmark | n | greedy | sampled pass@1 | maj@{args.samples} | pass@1 by level "
          f"| wall s |\n|---|---|---|---|---|---|---|")
    for b in args.benchmarks:
        r = run(b, args.split, policy, args.n, args.samples, args.max_new_tokens,
                args.temperature, args.seed, args.batch, args.instruction)
        lv = ", ".join(f"L{k}: {v:.2f} (n={r['level_counts'][k]})"
                       for k, v in r["pass1_by_level"].items())
        print(f"| {b} {args.split} | {r['n']} | {r['greedy']:.2f} | {r['pass1']:.2f} | "
              f"{r['maj']:.2f} | {lv} | {r['wall_s']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
