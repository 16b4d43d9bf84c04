"""RLiD-PPO throughput on the quickstart's env and prompt: today's path vs the cached path.

Two RLiDPPO instances are built from the same config (default ``configs/quickstart.yaml``:
SmolLM2-135M-Instruct, LoRA on the last 6 of 30 layers, TextWorld embedded suite,
history 0), differing only in ``frozen_trunk``:

* ``today``  (``frozen_trunk=full_forward``): the rollout runs each prompt once (the prefix shared by
  the batch from a KV cache), the update reruns the full 30-layer forward with a graph and
  backpropagates through the top 6;
* ``cached`` (``frozen_trunk=auto``): the rollout also computes identical prompts once and
  keeps the hidden states entering layer 24; the update runs only the top 6 layers from them.

They run in interleaved rounds (``today, cached, cached, today, ...``), each round one
iteration (rollout + update with the config's optim settings; optionally a behaviour-cloning
pass over the expert's decisions, ``--bc-epochs``). Reported per path, over all rounds:
CPU-s per decision for rollout and update (``time.process_time`` of this process, so run
it with ``--threads 1`` alone on the machine), tokens computed per decision (prompt tokens
run through the model in the rollout; token x layers forwarded in the update), achieved
GFLOP/s (a FLOP model, below) against a bare forward of one prompt, and env steps per
CPU-second and per wall-second of rollout + update (with ``--threads 2`` the wall clock is
what a run feels; CPU-s then count both threads). The ratio cached/today of env steps per
CPU-second is the headline.
``--compare trunk_dtype`` instead compares the cached path with ``model.trunk_dtype``
float32 and bfloat16 (the frozen layers in bf16 weights; the trainable ones in fp32);
``--compare compute_dtype`` fp32 everywhere with bf16 everywhere (the trunk in bf16
weights and the trainable layers under autocast, ``model.compute_dtype``).

FLOP model (per sequence of ``T`` tokens through ``l`` decoder layers): ``l * (2 * P_layer *
T + 2 * T^2 * H)`` (matmuls, causal attention scores and values) plus ``2 * H * V`` for each
last-position logit; a backward through ``l`` layers counts ``2x`` its forward (full
fine-tuning) or ``1x`` (LoRA: activation gradients only; the adapters' weight gradients
are negligible). It is the same model for both paths and the bare forward, so the
GFLOP/s are comparable with each other, not with a hardware peak.

    # the measurement (alone on an idle machine, one thread):
    python benchmarks/bench_rlid_throughput.py --rounds 4 --threads 1 \\
        --out benchmarks/results/rlid_throughput.json
    # fp32 vs bf16 trunk (--compare trunk_dtype) on the demo's config as at 8727bf9:
    python benchmarks/bench_rlid_throughput.py --compare trunk_dtype \\
        --config benchmarks/configs/quickstart_twx_8727bf9.yaml --rounds 4 --threads 1 \\
        --out benchmarks/results/rlid_throughput_bf16.json
    # fp32 everywhere vs bf16 everywhere (trunk + autocast of the trainable layers):
    python benchmarks/bench_rlid_throughput.py --compare compute_dtype \
        --config benchmarks/configs/quickstart_twx_8727bf9.yaml --rounds 1 --threads 1 \
        --out benchmarks/results/rlid_throughput_compute_bf16.json
    # the same on two threads, as the demo runs its rollouts and updates (per wall-second):
    python benchmarks/bench_rlid_throughput.py --compare compute_dtype \
        --config benchmarks/configs/quickstart_twx_8727bf9.yaml --rounds 1 --threads 2 \
        --out benchmarks/results/rlid_throughput_compute_bf16_2threads.json
    # a smoke run (tiny model, one round):
    python benchmarks/bench_rlid_throughput.py --model deciplane/tiny --lora-last-layers 1 \\
        --rounds 1 --set env.games_per_iteration=1 --set env.max_episode_steps=3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from deciplane.engine.trunk import first_trainable_layer
from deciplane.trainers.config import load_config
from deciplane.trainers.run import build_algorithm, build_policy
from deciplane.trainers.trainer import Trainer

COMPARISONS = {
    # today's path vs the frozen-trunk cache (both in the config's trunk dtype)
    "frozen_trunk": {"today": ["frozen_trunk=full_forward"], "cached": ["frozen_trunk=auto"]},
    # the cached path with an fp32 trunk vs a bf16 trunk (frozen layers in bf16 weights)
    "trunk_dtype": {"fp32": ["frozen_trunk=auto", "model.trunk_dtype=float32"],
                    "bf16": ["frozen_trunk=auto", "model.trunk_dtype=bfloat16"]},
    # fp32 everywhere vs bf16 everywhere: the trunk in bf16 weights and the trainable
    # layers under autocast (model.compute_dtype), in the rollout, the update and BC
    "compute_dtype": {"fp32": ["frozen_trunk=auto", "model.trunk_dtype=float32",
                               "model.compute_dtype=float32"],
                      "bf16": ["frozen_trunk=auto", "model.trunk_dtype=bfloat16",
                               "model.compute_dtype=bfloat16"]},
}


def shape(policy) -> dict[str, int]:
    cfg = policy.model.config
    base = policy.model.get_base_model() if hasattr(policy.model, "get_base_model") else policy.model
    layer = base.model.layers[0]
    p_layer = sum(p.numel() for n, p in layer.named_parameters() if "lora_" not in n)
    return {"layers": int(cfg.num_hidden_layers), "hidden": int(cfg.hidden_size),
            "vocab": int(cfg.vocab_size), "p_layer": int(p_layer)}


def forward_flops(s: dict[str, int], tokens: int, layers: int, logits: int = 1) -> float:
    """FLOPs of a forward of one ``tokens``-long sequence through ``layers`` layers."""
    return layers * (2 * s["p_layer"] * tokens + 2 * tokens * tokens * s["hidden"]) \
        + 2 * s["hidden"] * s["vocab"] * logits


def bare_forward(policy, ids: torch.Tensor, repeats: int) -> tuple[float, int]:
    """CPU-s of one plain no-grad forward (last-position logits) of ``ids``: the best of
    ``repeats``."""
    best = float("inf")
    with torch.no_grad():
        for _ in range(repeats):
            t = time.process_time()
            policy.model(input_ids=ids[None], use_cache=False, logits_to_keep=1)
            best = min(best, time.process_time() - t)
    return best, int(ids.numel())


def count_update_tokens(algo) -> list[int]:
    """Wrap the agent's update forward to count the tokens it runs through the top layers
    (the batch's shared prefix once, as :func:`menu_update_logits` does)."""
    from deciplane.agents.menu import _common_prefix_len
    from deciplane.engine.trunk import MIN_SHARED_PREFIX

    seen = [0]
    inner = algo.agent.update_logits
    if inner is None:
        return seen

    def counted(decisions):
        prompts = [d.prompt_ids for d in decisions]
        n = _common_prefix_len(prompts) if len(prompts) > 1 else 0
        n = min(n, min(int(p.numel()) for p in prompts) - 1)
        n = n if n >= MIN_SHARED_PREFIX else 0
        seen[0] += sum(int(p.numel()) for p in prompts) - (len(prompts) - 1) * n
        return inner(decisions)

    algo.agent.update_logits = counted
    return seen


def run_round(name: str, algo, trainer: Trainer, it: int, seed: int, bc_epochs: int,
              s: dict[str, int], lora: bool) -> dict[str, float]:
    agent = algo.agent
    counter = getattr(algo, "_bench_counter", None)
    if counter is None:
        counter = algo._bench_counter = count_update_tokens(algo)
    k = s["layers"] - (algo.trunk_boundary or 0)            # layers the update forwards
    trained = s["layers"] - first_trainable_layer(algo.policy.model)   # ... backpropagates
    tok0 = agent.tokens_computed
    t, w = time.process_time(), time.perf_counter()
    batch = algo.rollout(it, seed)
    rollout_s, rollout_w = time.process_time() - t, time.perf_counter() - w
    decs = batch.data.decisions
    rollout_tokens = agent.tokens_computed - tok0
    prompt_lens = [int(d.prompt_ids.numel()) for d in decs]
    t, w = time.process_time(), time.perf_counter()
    before = counter[0]
    trainer._update(batch, seed)
    update_s, update_w = time.process_time() - t, time.perf_counter() - w
    o = algo.config.optim
    # tokens through the update's layers: every prompt whole (today), or as counted (the
    # micro-batch's shared prefix once); its FLOPs scaled by that share
    tokens = counter[0] - before if algo.agent.update_logits is not None \
        else o.epochs * sum(prompt_lens)
    share_u = tokens / max(1, o.epochs * sum(prompt_lens))
    bwd_mult = 1.0 if lora else 2.0
    fwd_per = [share_u * forward_flops(s, n, k) for n in prompt_lens]
    bwd_per = [share_u * bwd_mult * forward_flops(s, n, trained) for n in prompt_lens]
    update_flops = o.epochs * (sum(fwd_per) + sum(bwd_per))
    # rollout: the matmuls of the tokens actually computed (prefix once, dedup); attention
    # of the full prompts scaled by the share of their tokens that was computed
    share = rollout_tokens / max(1, sum(prompt_lens))
    rollout_flops = s["layers"] * 2 * s["p_layer"] * rollout_tokens + share * sum(
        s["layers"] * 2 * n * n * s["hidden"] for n in prompt_lens) \
        + 2 * s["hidden"] * s["vocab"] * len(decs)
    out = {"decisions": len(decs), "env_steps": batch.env_steps, "rollout_cpu_s": rollout_s,
           "update_cpu_s": update_s, "rollout_wall_s": rollout_w, "update_wall_s": update_w,
           "rollout_tokens": rollout_tokens,
           "update_token_layers": tokens * k,
           "prompt_tokens": sum(prompt_lens), "rollout_gflop": rollout_flops / 1e9,
           "update_gflop": update_flops / 1e9, "bc_cpu_s": 0.0, "bc_decisions": 0}
    if bc_epochs and decs:
        expert = [(i, t_) for i, t_ in enumerate(batch.data.expert) if t_ is not None]
        if expert:
            from deciplane.objectives.distill import expert_distill_loss
            from deciplane.methods.rlid_ppo import pad_menu_log_probs
            from deciplane.trainers.warm_start import run_bc_epochs
            params = [p for p in algo.policy.model.parameters() if p.requires_grad]

            def loss_fn(part):
                lp, _ = pad_menu_log_probs(agent.menu_log_probs([decs[expert[i][0]] for i in part]))
                loss, n = expert_distill_loss(lp.float(), [expert[i][1] for i in part])
                return loss / max(n, 1)

            t = time.process_time()
            run_bc_epochs(len(expert), loss_fn, params, lr=1e-5, epochs=bc_epochs,
                          micro_batch_size=o.micro_batch_size, max_grad_norm=1.0, seed=seed)
            out["bc_cpu_s"] = time.process_time() - t
            out["bc_decisions"] = len(expert) * bc_epochs
    print(f"  {name:>6}: {len(decs)} decisions, {batch.env_steps} env steps, rollout "
          f"{rollout_s:.2f} CPU-s, update {update_s:.2f} CPU-s"
          + (f", BC {out['bc_cpu_s']:.2f} CPU-s / {out['bc_decisions']}" if bc_epochs else ""),
          flush=True)
    return out


def summarise(rows: list[dict[str, float]], bare_gflops: float) -> dict[str, float]:
    tot = {k: sum(r[k] for r in rows) for k in rows[0]}
    n = max(1, tot["decisions"])
    cpu = tot["rollout_cpu_s"] + tot["update_cpu_s"]
    return {
        "decisions": tot["decisions"], "env_steps": tot["env_steps"],
        "rollout_cpu_s_per_decision": tot["rollout_cpu_s"] / n,
        "update_cpu_s_per_decision": tot["update_cpu_s"] / n,
        "bc_cpu_s_per_decision": tot["bc_cpu_s"] / max(1, tot["bc_decisions"]),
        "rollout_tokens_per_decision": tot["rollout_tokens"] / n,
        "prompt_tokens_per_decision": tot["prompt_tokens"] / n,
        "update_token_layers_per_decision": tot["update_token_layers"] / n,
        "rollout_gflop_per_s": tot["rollout_gflop"] / max(tot["rollout_cpu_s"], 1e-9),
        "update_gflop_per_s": tot["update_gflop"] / max(tot["update_cpu_s"], 1e-9),
        "bare_forward_gflop_per_s": bare_gflops,
        "env_steps_per_cpu_s": tot["env_steps"] / max(cpu, 1e-9),
        # with --threads 2 the wall clock is what a user feels (CPU-s count both threads)
        "env_steps_per_wall_s": tot["env_steps"] / max(
            tot["rollout_wall_s"] + tot["update_wall_s"], 1e-9),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--model", default=None, help="override model.name")
    ap.add_argument("--lora-last-layers", type=int, default=None,
                    help="override model.lora_last_layers")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--bc-epochs", type=int, default=1,
                    help="behaviour-cloning epochs over each round's expert decisions (0: none)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], help="config override key=value")
    ap.add_argument("--compare", choices=sorted(COMPARISONS), default="frozen_trunk",
                    help="frozen_trunk: today's full forward vs the cached trunk; "
                         "trunk_dtype: the cached path with an fp32 vs a bf16 trunk")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    a = ap.parse_args()
    paths = COMPARISONS[a.compare]
    base, other = list(paths)
    torch.set_num_threads(a.threads)
    sets = list(a.set) + [f"model.threads={a.threads}", "progress=false", "bc.episodes=0"]
    if a.model:
        sets.append(f"model.name={a.model}")
    if a.lora_last_layers is not None:
        sets.append(f"model.lora_last_layers={a.lora_last_layers}")
    side = {}
    tmp = Path(tempfile.mkdtemp(prefix="bench_rlid_"))
    for name, extra in paths.items():
        cfg = load_config(a.config, sets + extra)
        torch.manual_seed(cfg.seed)
        policy = build_policy(cfg)
        algo = build_algorithm(cfg, policy)
        side[name] = (cfg, algo, Trainer(cfg, tmp / name, algo))
    cfg0, algo0, _ = side[base]
    s = shape(algo0.policy)
    lora = cfg0.model.finetune == "lora"
    # a bare forward of one quickstart prompt, for the GFLOP/s reference
    vec, seeds = algo0.suite.train_batch(cfg0.seed)
    group = cfg0.env.group_size
    obs, infos = vec.reset(seed=[x for x in seeds for _ in range(group)])
    prompt = algo0.agent.prompt(obs[0], infos["menu"][0])
    ids = algo0.policy.tokenize(prompt)
    bare_s, bare_t = bare_forward(algo0.policy, ids, repeats=3)
    bare_gflops = forward_flops(s, bare_t, s["layers"]) / 1e9 / bare_s
    print(f"bare forward: {bare_t} tokens, {bare_s:.3f} CPU-s, {bare_gflops:.1f} GFLOP/s "
          f"(FLOP model); model {cfg0.model.name}, {s['layers']} layers, boundary "
          f"{side[other][1].trunk_boundary}", flush=True)
    rows: dict[str, list] = {n: [] for n in paths}
    for r in range(a.rounds):
        order = list(paths) if r % 2 == 0 else list(paths)[::-1]
        print(f"round {r + 1}/{a.rounds}", flush=True)
        for name in order:
            cfg, algo, trainer = side[name]
            seed = 1000 + r                 # both paths see the same games and seeds
            rows[name].append(run_round(name, algo, trainer, r, seed, a.bc_epochs, s, lora))
    res = {n: summarise(v, bare_gflops) for n, v in rows.items()}
    ratio = res[other]["env_steps_per_cpu_s"] / max(res[base]["env_steps_per_cpu_s"], 1e-12)
    wall_ratio = res[other]["env_steps_per_wall_s"] / max(res[base]["env_steps_per_wall_s"], 1e-12)
    keys = [k for k in res[base] if k not in ("decisions", "env_steps")]
    print(f"\n{'per decision / rate':<36}{base:>12}{other:>12}{other + '/' + base:>14}")
    for k in keys:
        t_, c_ = res[base][k], res[other][k]
        print(f"{k:<36}{t_:>12.4g}{c_:>12.4g}{(c_ / t_ if t_ else float('nan')):>14.3f}")
    print(f"\nenv steps per CPU-second, {other}/{base}: {ratio:.2f}x "
          f"(model {cfg0.model.name}, lora_last_layers={cfg0.model.lora_last_layers}); "
          f"per wall-second {wall_ratio:.2f}x")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps({
            "command": " ".join(["python", *sys.argv]),
            "model": cfg0.model.name, "config": a.config, "sets": sets, "rounds": a.rounds,
            "compare": a.compare, "paths": paths,
            "threads": a.threads, "load_average": os.getloadavg(), "machine": platform.processor(),
            "bare_forward": {"tokens": bare_t, "cpu_s": bare_s, "gflop_per_s": bare_gflops},
            "results": res, "rows": rows, "env_steps_per_cpu_s_ratio": ratio,
            "env_steps_per_wall_s_ratio": wall_ratio}, indent=1))
    for _, algo, _ in side.values():
        algo.close()


if __name__ == "__main__":
    main()
