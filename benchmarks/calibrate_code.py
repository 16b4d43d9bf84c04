"""Calibrate the code benchmarks against a model: greedy pass@1, sampled pass@1 and
pass@any over ``--samples`` samples, per difficulty level, scored by the held-out scorer
(hidden tests run in the sandbox, in the scorer's process).

    nice -n 10 .venv/bin/python benchmarks/calibrate_code.py --benchmark easy-funcs --n 30 --samples 4

Prompts: the statement + ``deciplane.envs.code.harness.INSTRUCTION``, chat template;
responses end at the first closing code fence (``harness.STOP``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict

import torch

from deciplane.agents import load_policy
from deciplane.envs import load_benchmark
from deciplane.envs.code.harness import INSTRUCTION, STOP
from deciplane.engine.generation import generate, generate_texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmark", default="easy-funcs")
    ap.add_argument("--split", default="test")
    ap.add_argument("--model", default="deciplane/smollm2-135m-instruct")
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--param", action="append", default=[],
                    help="loader parameter key=value (easy-funcs: examples=0, levels=1,2)")
    ap.add_argument("--out", default=None, help="write the result as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    params = dict(p.split("=", 1) for p in args.param)
    policy = load_policy(args.model)
    tasks, scorer = load_benchmark(args.benchmark, args.split, limit=args.n, **params)
    t0 = time.time()
    with scorer:
        prompts = [policy.format_prompt(f"{t.prompt}\n{INSTRUCTION}") for t in tasks]
        greedy = generate_texts(policy, prompts, max_new_tokens=args.max_new_tokens,
                                greedy=True, prompts_per_batch=args.batch, stop=STOP)
        gens = generate(policy, prompts, max_new_tokens=args.max_new_tokens,
                        temperature=args.temperature, num_return_sequences=args.samples,
                        seed=args.seed, prompts_per_batch=max(1, args.batch // args.samples),
                        stop=STOP)
        samples = defaultdict(list)
        for g in gens:
            samples[tasks[g.prompt_index].id].append(g.text)
        gen_s = time.time() - t0
        g_rep = scorer.score({t.id: a for t, a in zip(tasks, greedy)})
        s_rep = scorer.sample_accuracy(dict(samples))
    by_level: dict[str, list[float]] = defaultdict(list)
    for t in tasks:
        by_level[str(t.meta.get("level", "all"))].append(s_rep.per_task[t.id])
    out = {"benchmark": args.benchmark, "split": args.split, "n": len(tasks),
           "params": params, "model": args.model, "samples": args.samples,
           "temperature": args.temperature, "max_new_tokens": args.max_new_tokens,
           "greedy_pass@1": g_rep.accuracy, "sampled_pass@1": s_rep.mean,
           "pass@any": s_rep.pass_any,
           "sampled_pass@1_by_level": {k: round(sum(v) / len(v), 3) for k, v in sorted(by_level.items())},
           "tasks_by_level": {k: len(v) for k, v in sorted(by_level.items())},
           "generation_s": round(gen_s, 1), "wall_s": round(time.time() - t0, 1),
           "load_average": [round(x, 2) for x in os.getloadavg()],
           "fingerprint": s_rep.split_fingerprint}
    print(json.dumps(out, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
