"""Does a bf16 trunk choose what the fp32 model chooses? Greedy decisions on evaluation states.

The fp32 policy plays a run's held-out episodes greedily (the run's env, prompt, readout
and trained weights: `deciplane evaluate RUN_DIR`'s agent); at every state the same policy
rebuilt with `model.trunk_dtype: bfloat16` decides too. Reported: the share of states where
the two greedy choices agree, the largest |difference| of the menu log-probs, and the
CPU-seconds per decision of each (one thread, both run side by side on the same states).
With ``--labels-episodes N`` the untrained model's RLiD labels readout is compared the same
way (for a run that trained only the item head, the run's model is the untrained one).

    python benchmarks/bench_bf16_agreement.py RUN_DIR --episodes 20 --labels-episodes 8 \
        --out benchmarks/results/bf16_agreement.json

Run it alone (the CPU-second ratio is a benchmark).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import gymnasium as gym
import torch


def load_agents(run_dir: str, readout: str | None):
    """The run's greedy menu agent in fp32 and in bf16 (``readout='labels'``: the
    untrained model with RLiD's labels readout instead of the trained one)."""
    from deciplane.agents import MenuAgent
    from deciplane.evaluation.run_eval import load_trained_policy
    from deciplane.methods import rlid_ppo

    agents = {}
    for dtype in ("float32", "bfloat16"):
        trained = load_trained_policy(run_dir, "latest", threads=1, trunk_dtype=dtype)
        c = trained.config
        agents[dtype] = (rlid_ppo.greedy_agent(c, trained.policy) if readout is None else
                         MenuAgent(trained.policy, greedy=True, history=c.history,
                                   readout="labels"))
    return trained.config, agents


def compare(config, agents, episodes: int, split: str) -> dict:
    from deciplane.evaluation.run_eval import run_env_kwargs

    split_arg, kwargs = run_env_kwargs(config, split)
    env = gym.make(config.env.id, **({"split": split_arg} if split_arg else {}), **kwargs)
    agree = states = wins = 0
    max_diff = 0.0
    cpu = {k: 0.0 for k in agents}
    for ep in range(episodes):
        obs, info = env.reset(seed=ep)
        history: list[tuple[str, str]] = []
        done = False
        while not done:
            picks = {}
            for name, agent in agents.items():
                t = time.process_time()
                with torch.no_grad():
                    d = agent.act([obs], [info["menu"]], [history[-agent.history:]
                                                          if agent.history else []])[0]
                cpu[name] += time.process_time() - t
                picks[name] = d
            a, b = picks["float32"], picks["bfloat16"]
            agree += int(a.index == b.index)
            max_diff = max(max_diff, float((a.log_probs - b.log_probs).abs().max()))
            states += 1
            history.append((obs, a.action))
            obs, _, term, trunc, info = env.step(a.index)
            done = term or trunc
        wins += int(bool(info.get("won")))
    env.close()
    return {"states": states, "agreement": agree / max(states, 1),
            "max_abs_log_prob_diff": round(max_diff, 4), "fp32_wins": wins,
            "episodes": episodes,
            "cpu_s_per_decision": {k: round(v / max(states, 1), 4) for k, v in cpu.items()},
            "bf16_over_fp32_cpu": round(cpu["bfloat16"] / max(cpu["float32"], 1e-9), 3)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--split", default="test")
    ap.add_argument("--labels-episodes", type=int, default=0,
                    help="also compare the untrained labels readout (RLiD's zero-shot agent) "
                         "on this many episodes")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    from deciplane.agents.precision import native_bf16

    result = {"command": "python benchmarks/bench_bf16_agreement.py " + " ".join(argv or []),
              "native_bf16": native_bf16(), "load_average_start": os.getloadavg(),
              "date": time.strftime("%Y-%m-%d %H:%M")}
    config, agents = load_agents(args.run_dir, None)
    result["run_readout"] = compare(config, agents, args.episodes, args.split)
    print("run's readout", json.dumps(result["run_readout"]), flush=True)
    if args.labels_episodes:
        config, agents = load_agents(args.run_dir, "labels")
        result["labels_zero_shot"] = compare(config, agents, args.labels_episodes, args.split)
        print("labels", json.dumps(result["labels_zero_shot"]), flush=True)
    result["load_average_end"] = os.getloadavg()
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
