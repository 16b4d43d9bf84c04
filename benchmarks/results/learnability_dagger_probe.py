"""Probe: does DAgger (the expert labels the states the *agent* visits) fix BC's compounding
errors on twc? BC head (layer 18, state view) on expert episodes, then ``--rounds`` rounds:
play ``--round-episodes`` train games with the current head (sampled or greedy, cap 10),
label every visited state with the replanning expert's action, refit the head on all data
so far. Success (greedy) on the first ``--games`` valid games after BC and after the last
round, at caps 10 and 20.

Run from the repository root (one thread; two variants can run side by side):
    python benchmarks/results/learnability_dagger_probe.py --rollout sample --out /tmp/dagger_sample.json
"""
import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/
import torch

torch.set_num_threads(1)
import learnability as L  # noqa: E402
from deciplane.objectives.distill import expert_distill_loss  # noqa: E402
from deciplane.methods.rlid_ppo import expert_fit, pad_menu_log_probs  # noqa: E402
from deciplane.trainers.warm_start import run_bc_epochs  # noqa: E402


ANNOTATE = False


def shown_menu(menu, last_reward: dict) -> list[str]:
    """The menu as the agent sees it: with ``--annotate``, an entry played earlier in the
    episode carries the reward it got the last time (the env steps by index, so the
    commands themselves are unchanged)."""
    if not ANNOTATE:
        return list(menu)
    return [a if a not in last_reward else f"{a} (last time: {last_reward[a]:+g})" for a in menu]


def play(args, agent, split, games, first, cap, greedy, label, expert_plays=False):
    """Episodes on games ``first..first+games-1``; returns (won, decisions, targets).
    ``expert_plays``: the expert's action is played (BC data), else the agent's."""
    env = L.make_env(args, split, "state", expert=label, max_steps=cap)
    agent.greedy, agent.temperature = greedy, 1.0
    decs, targets, won = [], [], 0
    try:
        for g in range(first, first + games):
            obs, info = env.reset(seed=g, options={"game": g})
            done, last_reward = False, {}
            while not done:
                with torch.no_grad():
                    d = agent.act([obs], [shown_menu(info["menu"], last_reward)], [[]],
                                  seed=7919 * g + len(decs))[0]
                k = d.index
                if label and info.get("expert_action") is not None:
                    decs.append(d)
                    targets.append(int(info["expert_action"]))
                    if expert_plays:
                        k = int(info["expert_action"])
                elif expert_plays:
                    break
                played = info["menu"][k]
                obs, reward, term, trunc, info = env.step(k)
                last_reward[played] = round(float(reward), 3)
                done = term or trunc
            won += int(info.get("won", False))
    finally:
        env.close()
    return won, decs, targets


def fit(args, agent, policy, decs, targets, stop_d, stop_t):
    params = [p for p in policy.model.parameters() if p.requires_grad]
    best = {"nll": expert_fit(agent, stop_d, stop_t, 16)[0], "epoch": 0,
            "state": [p.detach().clone() for p in params]}

    def loss_fn(part):
        lp, _ = pad_menu_log_probs(agent.menu_log_probs([decs[i] for i in part]))
        loss, n = expert_distill_loss(lp.float(), [targets[i] for i in part])
        return loss / max(n, 1)

    def on_epoch(done, total, loss):
        if done == 0:
            return True
        nll, acc = expert_fit(agent, stop_d, stop_t, 16)
        if nll < best["nll"]:
            best.update(nll=nll, epoch=done, state=[p.detach().clone() for p in params])
        return done - best["epoch"] < args.patience

    policy.model.train()
    run_bc_epochs(len(decs), loss_fn, params, lr=args.lr, epochs=args.max_epochs,
                  micro_batch_size=8, max_grad_norm=1.0, seed=args.seed, on_epoch=on_epoch)
    policy.model.eval()
    with torch.no_grad():
        for p, t in zip(params, best["state"]):
            p.copy_(t)
    return best["epoch"], best["nll"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bc-episodes", type=int, default=80)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--round-episodes", type=int, default=24)
    ap.add_argument("--rollout", choices=["sample", "greedy"], default="sample")
    ap.add_argument("--games", type=int, default=30)
    ap.add_argument("--caps", default="10,20")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--max-epochs", type=int, default=40)
    ap.add_argument("--patience", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-bc-eval", action="store_true",
                    help="no success evaluation right after BC (another run measures it)")
    ap.add_argument("--annotate", action="store_true",
                    help="menu entries played before in the episode show the reward they got")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    args = argparse.Namespace(game="twc", game_params="numLocations=2,numItemsToPutAway=2",
                              max_steps=10, model="deciplane/smollm2-135m-instruct",
                              action_log=0)
    caps = [int(c) for c in a.caps.split(",")]
    out = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M"), "rounds": []}
    t0 = time.time()
    policy, agent = L.build(args, "state", "items", 18, "0", a.seed)
    global ANNOTATE
    ANNOTATE = a.annotate
    _, decs, targets = play(args, agent, "train", a.bc_episodes, 0, 10, True, True,
                            expert_plays=True)
    order = list(range(len(decs)))
    random.Random(a.seed).shuffle(order)
    n_stop = max(1, len(order) // 7)
    stop_d, stop_t = [decs[i] for i in order[:n_stop]], [targets[i] for i in order[:n_stop]]
    decs, targets = [decs[i] for i in order[n_stop:]], [targets[i] for i in order[n_stop:]]
    print("BC data", len(decs), "stop", len(stop_d), round(time.time() - t0), "s", flush=True)

    def evaluate(tag):
        row = {"round": tag, "data": len(decs), "s": round(time.time() - t0)}
        for cap in caps:
            won, _, _ = play(args, agent, "valid", a.games, 0, cap, True, False)
            row[f"won@{cap}"] = won
        row["stop_agreement"] = round(expert_fit(agent, stop_d, stop_t, 16)[1], 3)
        print("EVAL", row, flush=True)
        out["rounds"].append(row)
        json.dump(out, open(a.out, "w"), indent=1)

    epoch, nll = fit(a, agent, policy, decs, targets, stop_d, stop_t)
    print("BC fit epoch", epoch, "nll", round(nll, 3), flush=True)
    if not a.skip_bc_eval:
        evaluate(0)
    first = a.bc_episodes
    for r in range(1, a.rounds + 1):
        won, d, t = play(args, agent, "train", a.round_episodes, first, 10, a.rollout == "greedy", True)
        first += a.round_episodes
        n_new_stop = len(d) // 7          # the early-stopping slice grows with on-policy states
        stop_d += d[:n_new_stop]
        stop_t += t[:n_new_stop]
        decs += d[n_new_stop:]
        targets += t[n_new_stop:]
        agree = sum(int(x.index == y) for x, y in zip(d, t)) / max(1, len(d))
        print(f"round {r}: train won {won}/{a.round_episodes}, {len(d)} new states, "
              f"on-policy agreement {agree:.2f}", flush=True)
        epoch, nll = fit(a, agent, policy, decs, targets, stop_d, stop_t)
        print("  fit epoch", epoch, "nll", round(nll, 3), flush=True)
        out.setdefault("train", []).append({"round": r, "won": won, "states": len(d),
                                            "on_policy_agreement": round(agree, 3),
                                            "fit_epoch": epoch, "stop_nll": round(nll, 3)})
        if r == a.rounds:
            evaluate(r)
    out["wall_s"] = round(time.time() - t0)
    json.dump(out, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
