"""The test-time adapters' compute with bf16 frozen linears (``trunk_dtype``) vs fp32.

Two settings of SmolLM2-135M-Instruct, each built twice (fp32, and with
``cast_frozen_linears``: the frozen linear layers in bf16, fp32 in and out):

* ``lora``: LoRA (rank 16, every linear of every layer) — TTRL, TTPO, Probe-ERPO;
* ``frozen``: no trainable weight in the model — TASCO (whose prefix enters the fp32
  attention) and every no-adaptation baseline.

Per round, interleaved (fp32, bf16, fp32, bf16, ...; the first round is a warm-up and
is not counted), on the adapters' default benchmark's prompts:

* ``sample``: ``prompts`` prompts x ``votes`` samples of ``max_new_tokens`` tokens
  (T = 0.7, the adapters' default), one generate call with the KV cache;
* ``update`` (``lora`` only): forward + backward of the sampled sequences' token
  log-probs, in micro-batches of 8 (what an adapter's update costs per sample).

Then both answer the first ``greedy`` tasks greedily and the held-out scorer scores them:
agreement of the extracted answers and accuracy of each.

    python benchmarks/bench_adapter_bf16.py --out benchmarks/results/adapter_bf16.json

Run it alone, one thread (CPU-second ratios are the benchmark).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

MODEL = "deciplane/smollm2-135m-instruct"


def build(setting: str, bf16: bool):
    from deciplane.agents import load_policy
    from deciplane.agents.precision import cast_frozen_linears

    torch.manual_seed(0)
    policy = load_policy(MODEL)
    if setting == "lora":
        policy.add_lora(r=16, alpha=32)
        for n, p in policy.model.named_parameters():   # a trained-looking adapter
            if "lora_B" in n:
                torch.nn.init.normal_(p, std=0.01)
    else:
        for p in policy.model.parameters():
            p.requires_grad_(False)
    cast = cast_frozen_linears(policy.model) if bf16 else 0
    return policy, cast


def sample_cost(policy, prompts, votes: int, max_new_tokens: int, seed: int):
    t = time.process_time()
    gens = policy.generate(prompts, max_new_tokens=max_new_tokens, temperature=0.7,
                           num_return_sequences=votes, seed=seed)
    return time.process_time() - t, gens


def update_cost(policy, gens) -> float:
    from deciplane.agents.policy import left_pad

    t = time.process_time()
    policy.model.zero_grad()
    for i in range(0, len(gens), 8):
        part = gens[i:i + 8]
        ids, mask = left_pad([torch.cat([g.prompt_ids, g.response_ids]) for g in part],
                             policy.tokenizer.pad_token_id)
        logits = policy.model(input_ids=ids, attention_mask=mask).logits.float()
        lp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
        (lp * mask[:, 1:]).sum().div(mask.sum()).backward()
    return time.process_time() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--benchmark", default="products-1d")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--votes", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds (after one warm-up)")
    ap.add_argument("--greedy", type=int, default=48, help="tasks answered greedily")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)

    from deciplane.adapt.base import extract
    from deciplane.agents.precision import native_bf16
    from deciplane.envs import load_benchmark

    tasks, scorer = load_benchmark(args.benchmark, "test", limit=max(args.greedy, args.prompts))
    result = {"command": " ".join([os.path.basename(sys.executable), *sys.argv]),
              "model": MODEL, "benchmark": args.benchmark, "threads": 1,
              "native_bf16": native_bf16(), "load_average_start": os.getloadavg(),
              "settings": {}}
    try:
        for setting in ("lora", "frozen"):
            pols = {False: build(setting, False), True: build(setting, True)}
            prompts = [pols[False][0].format_prompt(t.prompt) for t in tasks[:args.prompts]]
            cpu = {k: {"sample": [], "update": []} for k in ("float32", "bfloat16")}
            for r in range(args.rounds + 1):
                for bf16 in (False, True):
                    policy = pols[bf16][0]
                    s, gens = sample_cost(policy, prompts, args.votes, args.max_new_tokens, r)
                    u = update_cost(policy, gens) if setting == "lora" else None
                    if r:
                        name = "bfloat16" if bf16 else "float32"
                        cpu[name]["sample"].append(s)
                        if u is not None:
                            cpu[name]["update"].append(u)
                    print(f"{setting} round {r} {'bf16' if bf16 else 'fp32'}: sample {s:.2f}"
                          + (f" update {u:.2f}" if u is not None else "") + " CPU-s", flush=True)
            med = {k: {p: statistics.median(v) for p, v in d.items() if v} for k, d in cpu.items()}
            answers, texts = {}, {}
            for bf16 in (False, True):
                policy = pols[bf16][0]
                name = "bfloat16" if bf16 else "float32"
                gens = policy.generate([policy.format_prompt(t.prompt) for t in tasks[:args.greedy]],
                                       max_new_tokens=args.max_new_tokens, do_sample=False)
                texts[name] = [g.text for g in gens]
                answers[name] = {t.id: a or "" for t, a in zip(tasks, extract(texts[name]))}
            acc = {k: scorer.score(v).accuracy for k, v in answers.items()}
            same = sum(answers["float32"][t] == answers["bfloat16"][t] for t in answers["float32"])
            result["settings"][setting] = {
                "linears_cast": pols[True][1],
                "cpu_s": cpu, "median_cpu_s": med,
                "ratio_bf16_over_fp32": {p: med["bfloat16"][p] / med["float32"][p]
                                         for p in med["float32"]},
                "greedy_answers_agree": f"{same}/{len(answers['float32'])}",
                "greedy_texts_equal": sum(a == b for a, b in zip(texts["float32"], texts["bfloat16"])),
                "greedy_accuracy": acc,
            }
            print(json.dumps(result["settings"][setting]["ratio_bf16_over_fp32"]),
                  result["settings"][setting]["greedy_answers_agree"], acc, flush=True)
    finally:
        scorer.close()
    result["load_average_end"] = os.getloadavg()
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
