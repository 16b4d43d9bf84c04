"""CPU cost of one RLiD act step and one update micro-batch (4 decisions, TextWorld train
games, history 0) with SmolLM2: LoRA in all layers vs the last 6 (`model.lora_last_layers`).

    .venv/bin/python benchmarks/rlid_update_cost.py   # -> benchmarks/results/rlid_update_cost.json
"""
import time, json, torch
torch.set_num_threads(1)
import gymnasium as gym
from deciplane.trainers.config import load_config
from deciplane.trainers.run import build_policy
from deciplane.agents import MenuAgent
env = gym.make("deciplane/TextWorld-v0", games="embedded", split="train")
obs, menus = [], []
for g in range(4):
    o, i = env.reset(seed=g, options={"game": g}); obs.append(o); menus.append(i["menu"])
out = {}
for last in [None, 6]:
    cfg = load_config("configs/quickstart.yaml", [f"model.lora_last_layers={'null' if last is None else last}", "model.threads=1"])
    pol = build_policy(cfg)
    agent = MenuAgent(pol, history=0)
    t = time.process_time(); w = time.perf_counter()
    with torch.no_grad():
        ds = agent.act(obs, menus, seed=0)
    fwd = time.process_time() - t
    toks = [int(d.prompt_ids.numel()) for d in ds]
    t = time.process_time()
    lps = agent.menu_log_probs(ds)
    loss = -sum(lp[0] for lp in lps)
    loss.backward()
    upd = time.process_time() - t
    out[str(last)] = {"act_cpu_s": fwd, "update_cpu_s": upd, "prompt_tokens": toks}
    print(last, out[str(last)], flush=True)
json.dump(out, open("benchmarks/results/rlid_update_cost.json", "w"), indent=1)
