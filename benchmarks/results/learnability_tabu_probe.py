"""Upper-bound probe: does a memory of bad actions + a longer cap make the BC head win?"""
# Run from the repository root: python benchmarks/results/learnability_tabu_probe.py
# (writes /tmp/s25/; the committed learnability_tabu_probe.json is its output).
import json, sys, time, os
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/
import torch
torch.set_num_threads(1)
import learnability as L

VARIANTS = [(10, "none"), (20, "none"), (20, "neg"), (20, "neg+zero"), (30, "neg")]
RESULTS = {}

def success(args, agent, view, split, games):
    for steps, tabu in VARIANTS:
        env = L.make_env(args, split, view, expert=False, max_steps=steps)
        agent.greedy = True
        won, steps_used = 0, 0
        t0 = time.time()
        for g in range(games):
            obs, info = env.reset(seed=g, options={"game": g})
            hist, last_r, done = [], {}, False
            while not done:
                with torch.no_grad():
                    d = agent.act([obs], [info["menu"]], [hist])[0]
                lp = d.log_probs.clone()
                for i, a in enumerate(info["menu"]):
                    r = last_r.get(a)
                    if r is None:
                        continue
                    if r < 0 or (tabu == "neg+zero" and r == 0 and not a.startswith("move")):
                        if tabu != "none":
                            lp[i] = -1e9
                k = int(lp.argmax())
                a = info["menu"][k]
                hist.append((obs, a))
                obs, reward, term, trunc, info = env.step(k)
                last_r[a] = float(reward)
                steps_used += 1
                done = term or trunc
            won += int(info.get("won", False))
        env.close()
        RESULTS[f"{steps}:{tabu}"] = {"won": won, "games": games, "steps": steps_used, "s": round(time.time() - t0)}
        print("VARIANT", steps, tabu, won, "/", games, steps_used, flush=True)
    return RESULTS["10:none"]["won"], games

L.success = success
ap_args = ["--fold", "valid", "--configs", "state:items@18:0", "--train-episodes", "80",
           "--eval-episodes", "30", "--success-games", "30", "--variant", "tabu-probe",
           "--out", "/tmp/s25/learn.json"]
L.main(ap_args)
os.makedirs("/tmp/s25", exist_ok=True)
json.dump(RESULTS, open("/tmp/s25/tabu.json", "w"), indent=1)
