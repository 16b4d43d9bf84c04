"""Time per GRPO optimisation step: deciplane's single-turn core vs TRL's ``GRPOTrainer``.

Both sides, in one process, get the same model weights (a fresh copy each), the same
prompts (``arith`` train problems, chat-formatted once), the same group size, generation
length, sampling settings (T=1, top_k=0, top_p=1), the same loss (token-mean "DAPO"
aggregation, group-std advantages, clip 0.2, no KL), full fine-tuning (or, with
``--lora-last-layers K``, LoRA rank ``--lora-rank`` on every linear layer of the last K
decoder layers, through PEFT on both sides) with AdamW at the same learning rate, one forward/backward over the whole batch, one optimizer step per
generation batch, and the same reward function (last number == gold). Runs alternate
(deciplane, TRL, deciplane, TRL, ...) so machine-load drift hits both; the first step of
every run is a warm-up and is not counted.

With ``--lora-last-layers K`` deciplane's sampler keeps the hidden states entering the
first adapted layer and the update runs only the top K layers from them
(``GRPOConfig.frozen_trunk``, exact); TRL reruns the whole model in its update.

Where the time goes: ``generate`` (sampling), ``reward`` and ``update`` (everything else:
log-prob forward, loss, backward, optimizer, bookkeeping). TRL's generation time is taken
by timing ``model.generate``; its reward time inside the reward function.

TRL is a benchmark-only dependency: ``pip install --no-deps trl`` plus ``datasets`` (it
must not pull a CUDA torch). Run::

    .venv/bin/python benchmarks/bench_grpo_vs_trl.py                 # tiny model
    .venv/bin/python benchmarks/bench_grpo_vs_trl.py --model deciplane/smollm2-135m-instruct
    .venv/bin/python benchmarks/bench_grpo_vs_trl.py --model deciplane/smollm2-135m-instruct \
        --lora-last-layers 6
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from deciplane.agents import load_policy
from deciplane.agents.precision import autocast_layers
from deciplane.benchmarks import load_labeled
from deciplane.trainers.run import lora_targets
from deciplane.engine import Budget, GRPOConfig, GRPOUpdate, sample_groups
from deciplane.engine.optim import Optimizer
from deciplane.objectives import PolicyLossConfig

_NUM = re.compile(r"-?\d+")


def reward_last_number(text: str, gold: str) -> float:
    """1.0 if the last integer in ``text`` equals ``gold``, plus a small shaping term
    (0.01 per distinct word, at most 0.1) so that groups are never all-equal — otherwise
    deciplane would (correctly) skip the update of a degenerate batch and the comparison
    would time generation only. The same function runs on both sides."""
    nums = _NUM.findall(text)
    correct = float(bool(nums) and nums[-1] == str(gold).strip())
    return correct + min(len(set(text.split())), 10) * 0.01


def problems(n: int) -> tuple[list[str], list[str]]:
    items, _ = load_labeled("arith", "train", limit=n)
    return [it.prompt for it in items], [str(it.gold) for it in items]


# ---------------------------------------------------------------------------------------
# deciplane
# ---------------------------------------------------------------------------------------


def run_deciplane(policy, prompts, golds, args) -> list[dict[str, float]]:
    """``args.steps`` GRPO steps; per-step seconds split into generate/reward/update."""
    pol = copy.copy(policy)
    pol.model = copy.deepcopy(policy.model)
    pol._reference = None
    if args.lora_last_layers:
        pol.add_lora(r=args.lora_rank, alpha=2 * args.lora_rank,
                     target_modules=lora_targets(pol, None, args.lora_last_layers))
    if args.compute_dtype != "float32":      # deciplane's model.compute_dtype
        autocast_layers(pol.model, getattr(torch, args.compute_dtype))
    model = pol.model
    budget = Budget()
    opt = Optimizer([p for p in model.parameters() if p.requires_grad], lr=args.lr,
                    max_grad_norm=1.0, budget=budget)
    update = GRPOUpdate(pol, GRPOConfig(advantage="grpo", loss=PolicyLossConfig(
                                            eps_low=0.2, aggregation="token_mean", kl_beta=0.0),
                                        temperature=1.0, epochs=1, minibatches=1,
                                        micro_batch_size=args.prompts * args.group,
                                        max_grad_norm=1.0),
                        budget=budget, optimizer=opt)
    steps = []
    for s in range(args.steps + 1):
        idx = [(s * args.prompts + i) % len(prompts) for i in range(args.prompts)]
        t0 = time.perf_counter()
        model.eval()
        groups = sample_groups(pol, [prompts[i] for i in idx], group_size=args.group,
                               max_new_tokens=args.max_new_tokens, temperature=1.0,
                               seed=1000 + s, budget=budget, keep_layer=update.keep_layer)
        model.train()
        t1 = time.perf_counter()
        for i, g in zip(idx, groups):
            for traj in g:
                traj.turns[0].reward = reward_last_number(traj.turns[0].action, golds[i])
        t2 = time.perf_counter()
        update.step(groups)
        t3 = time.perf_counter()
        gen_tokens = sum(int(t.turns[0].response_ids.numel()) for g in groups for t in g)
        steps.append({"step": t3 - t0, "generate": t1 - t0, "reward": t2 - t1,
                      "update": t3 - t2, "generated_tokens": gen_tokens})
    return steps[1:]


# ---------------------------------------------------------------------------------------
# TRL
# ---------------------------------------------------------------------------------------


def run_trl(policy, prompts, golds, args) -> list[dict[str, float]]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    model = copy.deepcopy(policy.model)
    tok = policy.tokenizer
    peft_config = None
    if args.lora_last_layers:
        from peft import LoraConfig
        peft_config = LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank,
                                 lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                                 target_modules=lora_targets(policy, None, args.lora_last_layers))
    timers = {"generate": 0.0, "reward": 0.0, "tokens": 0}
    inner_generate = model.generate

    def timed_generate(*a, **kw):
        t = time.perf_counter()
        out = inner_generate(*a, **kw)
        timers["generate"] += time.perf_counter() - t
        return out

    model.generate = timed_generate

    def reward(completions, gold, **kw):
        t = time.perf_counter()
        out = [reward_last_number(c, g) for c, g in zip(completions, gold)]
        timers["reward"] += time.perf_counter() - t
        return out

    n = (args.steps + 1) * args.prompts
    ds = Dataset.from_dict({"prompt": [prompts[i % len(prompts)] for i in range(n)],
                            "gold": [golds[i % len(golds)] for i in range(n)]})
    steps: list[dict[str, float]] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            timers.update(generate=0.0, reward=0.0)
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            dt = time.perf_counter() - self.t0
            steps.append({"step": dt, "generate": timers["generate"], "reward": timers["reward"],
                          "update": dt - timers["generate"] - timers["reward"]})

    with tempfile.TemporaryDirectory() as out:
        cfg = TRLConfig(output_dir=out, use_cpu=True, bf16=args.trl_bf16, fp16=False,
                        per_device_train_batch_size=args.prompts * args.group,
                        gradient_accumulation_steps=1, num_generations=args.group,
                        max_completion_length=args.max_new_tokens, temperature=1.0, top_k=0,
                        top_p=1.0, beta=0.0, epsilon=0.2, loss_type="dapo",
                        scale_rewards="group", num_iterations=1, learning_rate=args.lr,
                        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
                        max_grad_norm=1.0, max_steps=args.steps + 1, logging_steps=1,
                        save_strategy="no", report_to=[], disable_tqdm=True, seed=0,
                        dataloader_num_workers=0, shuffle_dataset=False,
                        disable_dropout=True)
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=ds,
                              processing_class=tok, callbacks=[Clock()],
                              peft_config=peft_config)
        trainer.train()
    return steps[1:]


# ---------------------------------------------------------------------------------------


def summarise(runs: list[dict[str, float]]) -> dict[str, float]:
    keys = ("step", "generate", "reward", "update")
    return {k: statistics.median(r[k] for r in runs) for k in keys}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="deciplane/tiny")
    ap.add_argument("--prompts", type=int, default=4, help="prompts per step")
    ap.add_argument("--group", type=int, default=4, help="responses per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--steps", type=int, default=4, help="counted steps per run (+1 warm-up)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating deciplane/TRL runs")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lora-last-layers", type=int, default=0,
                    help="LoRA on the last K decoder layers on both sides (0: full fine-tuning)")
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--compute-dtype", default="float32", choices=["float32", "bfloat16"],
                    help="deciplane's model.compute_dtype (bf16 autocast per decoder layer)")
    ap.add_argument("--trl-bf16", action="store_true",
                    help="TRL with bf16=True (its mixed precision; TRL's CPU default is fp32)")
    ap.add_argument("--out", default="benchmarks/results/grpo_vs_trl.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        import trl
    except ImportError:
        sys.exit("TRL is not installed: `.venv/bin/pip install --no-deps trl datasets` "
                 "(benchmark-only; never let it pull a CUDA torch)")
    policy = load_policy(args.model)
    for p in policy.model.parameters():
        p.requires_grad_(True)
    raw, golds = problems(args.prompts * (args.steps + 1))
    prompts = [policy.format_prompt(p, "Solve the math problem. Give the final answer as a number.")
               for p in raw]
    ours, theirs = [], []
    load_start = os.getloadavg()
    for r in range(args.rounds):
        torch.manual_seed(r)
        ours += run_deciplane(policy, prompts, golds, args)
        torch.manual_seed(r)
        theirs += run_trl(policy, prompts, golds, args)
        print(f"round {r + 1}/{args.rounds}: deciplane {summarise(ours)['step']:.3f}s/step, "
              f"TRL {summarise(theirs)['step']:.3f}s/step", flush=True)
    a, b = summarise(ours), summarise(theirs)
    result = {
        "model": args.model, "finetune": (f"lora r={args.lora_rank} on the last "
                                          f"{args.lora_last_layers} layers"
                                          if args.lora_last_layers else "full"),
        "prompts_per_step": args.prompts, "group_size": args.group,
        "max_new_tokens": args.max_new_tokens, "counted_steps_per_side": len(ours),
        "rounds": args.rounds, "threads": args.threads, "trl_version": trl.__version__,
        "deciplane_compute_dtype": args.compute_dtype, "trl_bf16": args.trl_bf16,
        "command": " ".join(["python", *sys.argv]), "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
        "torch": torch.__version__, "platform": platform.platform(),
        "deciplane_median_s": a, "trl_median_s": b,
        "ratio_step_time_deciplane_over_trl": a["step"] / b["step"],
    }
    print(f"\n{'phase':<10}{'deciplane s':>14}{'TRL s':>10}")
    for k in ("step", "generate", "reward", "update"):
        print(f"{k:<10}{a[k]:>14.4f}{b[k]:>10.4f}")
    print(f"\ndeciplane / TRL step time: {result['ratio_step_time_deciplane_over_trl']:.2f}x "
          "(goal <= 0.5x)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
