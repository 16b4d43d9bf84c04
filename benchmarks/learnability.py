"""Which menu-agent settings can *learn* the demo's game: BC on expert decisions, side by side.

For each configuration (observation view x readout x LoRA placement) on TextWorld-Express
(default: twc, 2 rooms, 2 items, the demo's setting): the expert plays ``--train-episodes``
games of the train fold and ``--eval-episodes`` of the evaluation fold (menus shuffled, the
task in every observation; one turn of history with the feedback view, none with the state
view, which already holds the last reply). The menu agent is fitted by
behaviour cloning on the train decisions (AdamW, early stopping on a held-out tenth of
them), then scored by

* **agreement**: greedy choice == the expert's, on the evaluation fold's expert states
  (forward passes only; 95% Wilson interval), and
* **success**: greedy (or, ``--success-decode sample``, sampled) episodes on the first
  ``--success-games`` games of the evaluation fold (``--success-steps``, default the
  ``--max-steps`` cap of 10), with a 95% interval.

``--action-log K`` appends the episode's last K actions and the reward each got to every
observation (a memory of what was tried: on twc a wrong put costs points, and without it
the state after taking the object back is the state before the wrong put).

Also the ambiguity of each view: the share of expert decisions whose (observation, sorted
menu) equals another's with a different expert action (``deciplane.envs.menu.text
.ambiguous_share``).

Choose configurations on ``--fold valid``; report the chosen one on ``--fold test``.
Resumable: each configuration's result is written to ``--out`` (JSON, one entry per
configuration key) as soon as it is done, and configurations already there are skipped.

    python benchmarks/learnability.py --fold valid --configs feedback:labels:6,state:items@24:6,state:items:6
    python benchmarks/learnability.py --game simonsays --game-params "" --configs feedback:items@24:6

``--probe-layers 12,15,18,21,24,30`` instead fits a fresh item head on *frozen* features of
each listed layer (one feature pass per view, full-batch AdamW, the step with the lowest
NLL on the early-stopping slice kept): which layer to read, cheaply (entries ``probe/...``).

A configuration is ``VIEW:READOUT:LORA`` — VIEW ``feedback`` | ``state``; READOUT
``labels`` | ``items`` (the head reads the final output) | ``items@L`` (the input of decoder
layer L); LORA the number of last layers with adapters (``0``: none, only an item head
learns; ``all``) — with ``items@L``, the last ones below layer L (the policy never reads the
layers above its head; forwards stop there).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import random
import sys
import time
from pathlib import Path

import gymnasium as gym
import torch

import deciplane  # noqa: F401  (registers the environments)
from deciplane.agents import MenuAgent, load_policy
from deciplane.engine.trunk import menu_update_logits, trunk_boundary
from deciplane.envs.menu.text import ambiguous_share
from deciplane.objectives.distill import expert_distill_loss
from deciplane.stats import wilson_interval
from deciplane.methods.rlid_ppo import expert_fit, pad_menu_log_probs
from deciplane.trainers.run import lora_targets
from deciplane.trainers.warm_start import run_bc_epochs

TWX = "deciplane/TextWorldExpress-v0"


def make_env(args, split: str, view: str, expert: bool, max_steps: int | None = None) -> gym.Env:
    return gym.make(TWX, game=args.game, game_params=args.game_params or None, split=split,
                    menu_order="shuffled", task_in_observation=True, expert=expert,
                    observation=view, max_episode_steps=max_steps or args.max_steps)


def with_action_log(obs: str, log: list[tuple[str, float]], k: int) -> str:
    """``obs`` and, with ``k > 0``, the episode's last ``k`` actions with the reward each
    got (``--action-log``: a memory of what was tried, e.g. a put that lost points)."""
    if k <= 0 or not log:
        return obs
    return obs + "\nActions so far: " + "; ".join(f"{a} ({r:+g})" for a, r in log[-k:])


def expert_states(args, split: str, view: str, episodes: int, first_game: int,
                  noise: float = 0.0):
    """``(observation, menu, history, expert index)`` of every state the expert visits;
    with ``noise``, each step plays a random legal action with that probability (the label
    stays the expert's: the trainer's ``bc.noise``)."""
    env = make_env(args, split, view, expert=True)
    rng = random.Random(first_game + 7919 * episodes)
    out = []
    try:
        for g in range(first_game, first_game + episodes):
            obs, info = env.reset(seed=g, options={"game": g})
            hist: list[tuple[str, str]] = []
            log: list[tuple[str, float]] = []
            done = False
            while not done and info.get("expert_action") is not None:
                k = int(info["expert_action"])
                shown = with_action_log(obs, log, args.action_log)
                out.append((shown, info["menu"], list(hist), k))
                if rng.random() < noise:
                    k = rng.randrange(len(info["menu"]))
                hist.append((shown, info["menu"][k]))
                obs, reward, term, trunc, info = env.step(k)
                log.append((hist[-1][1], round(float(reward), 3)))
                done = term or trunc
    finally:
        env.close()
    return out


HISTORY = {"feedback": 1, "state": 0}
"""Turns of history in the prompt per view: the state view already says where the agent is,
what it holds and what the game last replied (the demo's feedback prompt shows one turn)."""


def build(args, view: str, readout: str, layer: int | None, lora: str, seed: int):
    torch.manual_seed(seed)
    policy = load_policy(args.model)
    if lora != "0":
        last = None if lora == "all" else int(lora)
        policy.add_lora(r=16, alpha=32, target_modules=lora_targets(policy, None, last, layer))
    else:
        for p in policy.model.parameters():
            p.requires_grad_(False)
    if readout == "items":
        policy.add_item_head(layer=layer)
    frozen_head = readout == "items" and (lora == "0" or (layer is not None and last_frozen(policy) >= layer))
    agent = MenuAgent(policy, history=HISTORY[view], readout=readout, keep_readout=frozen_head,
                      greedy=True)
    boundary = trunk_boundary(policy.model)
    if boundary is not None and not frozen_head:   # LoRA on the top layers: as the trainer
        agent.keep_boundary = boundary             # does, the update runs only those layers
        agent.update_logits = functools.partial(menu_update_logits, policy.model,
                                                boundary=boundary,
                                                pad_id=policy.tokenizer.pad_token_id)
    return policy, agent


def last_frozen(policy) -> int:
    from deciplane.engine.trunk import first_trainable_layer

    return first_trainable_layer(policy.model)


def decide(agent, states, batch: int = 8):
    decs = []
    for s in range(0, len(states), batch):
        part = states[s:s + batch]
        with torch.no_grad():
            decs += agent.act([p[0] for p in part], [p[1] for p in part], [p[2] for p in part])
    return decs


def agreement(agent, decs, targets, batch: int = 16) -> float:
    """Greedy agreement with the expert (the trainer's own measure)."""
    return expert_fit(agent, decs, targets, batch)[1]


def success(args, agent, view: str, split: str, games: int) -> tuple[int, int]:
    """Episodes on the first ``games`` games of ``split`` (greedy, or sampled at temperature
    1 with ``--success-decode sample``; ``--success-steps`` per episode); (won, played)."""
    env = make_env(args, split, view, expert=False, max_steps=args.success_steps)
    agent.greedy, agent.temperature = args.success_decode == "greedy", 1.0
    torch.manual_seed(args.seed)
    won = 0
    try:
        for g in range(games):
            obs, info = env.reset(seed=g, options={"game": g})
            hist: list[tuple[str, str]] = []
            log: list[tuple[str, float]] = []
            done = False
            while not done:
                shown = with_action_log(obs, log, args.action_log)
                with torch.no_grad():
                    d = agent.act([shown], [info["menu"]], [hist])[0]
                hist.append((shown, d.action))
                obs, reward, term, trunc, info = env.step(d.index)
                log.append((d.action, round(float(reward), 3)))
                done = term or trunc
            won += int(info.get("won", False))
    finally:
        env.close()
    return won, games


def run_config(args, key: str) -> dict:
    view, readout_spec, lora = key.split(":")
    readout, layer = (readout_spec.split("@") + [None])[:2]
    layer = None if layer is None else int(layer)
    t0, c0 = time.perf_counter(), time.process_time()
    train = expert_states(args, "train", view, args.train_episodes, 0, args.bc_noise)
    held = expert_states(args, args.fold, view, args.eval_episodes, 0)
    policy, agent = build(args, view, readout, layer, lora, args.seed)
    dtrain, dheld = decide(agent, train), decide(agent, held)
    t_feat = time.perf_counter() - t0
    targets = [s[3] for s in train]
    held_targets = [s[3] for s in held]
    rng = random.Random(args.seed)
    order = list(range(len(dtrain)))
    rng.shuffle(order)
    n_stop = max(1, len(order) // 10)                 # early-stopping slice of the train fold
    stop_idx, fit_idx = order[:n_stop], order[n_stop:]
    fit_d, fit_t = [dtrain[i] for i in fit_idx], [targets[i] for i in fit_idx]
    stop_d, stop_t = [dtrain[i] for i in stop_idx], [targets[i] for i in stop_idx]
    params = [p for p in policy.model.parameters() if p.requires_grad]
    zero_shot = agreement(agent, dheld, held_targets)
    curve, best = [], {"epoch": 0, "stop": -expert_fit(agent, stop_d, stop_t, 16)[0], "state": None}

    def loss_fn(part):
        lp, _ = pad_menu_log_probs(agent.menu_log_probs([fit_d[i] for i in part]))
        loss, n = expert_distill_loss(lp.float(), [fit_t[i] for i in part])
        return loss / max(n, 1)

    def on_epoch(done, total, loss):
        nll, acc = expert_fit(agent, stop_d, stop_t, 16)
        curve.append({"epoch": done, "loss": round(loss, 4), "stop_nll": round(nll, 4),
                      "stop_agreement": round(acc, 4)})
        print(f"  {key} epoch {done}: loss {loss:.3f}, early-stop NLL {nll:.3f}, "
              f"agreement {acc:.3f}", flush=True)
        if -nll > best["stop"]:
            best.update(epoch=done, stop=-nll,
                        state={n: p.detach().clone() for n, p in policy.model.named_parameters()
                               if p.requires_grad})
        return done - best["epoch"] < args.patience

    model_train = policy.model.train
    model_train()
    run_bc_epochs(len(fit_d), loss_fn, params, lr=args.lr_head if lora == "0" else args.lr,
                  epochs=args.max_epochs, micro_batch_size=8, max_grad_norm=1.0,
                  seed=args.seed, on_epoch=on_epoch)
    policy.model.eval()
    if best["state"] is not None:
        with torch.no_grad():
            named = dict(policy.model.named_parameters())
            for n, t in best["state"].items():
                named[n].copy_(t)
    agree = agreement(agent, dheld, held_targets)
    by_verb: dict[str, list[int]] = {}
    for d, (_, menu, _, k) in zip(decide(agent, held), held):
        by_verb.setdefault(menu[k].split()[0], []).append(int(d.index == k))
    won, played = success(args, agent, view, args.fold, args.success_games) \
        if args.success_games else (0, 0)
    lo, hi = wilson_interval(round(agree * len(dheld)), len(dheld))
    slo, shi = wilson_interval(won, played) if played else (0.0, 0.0)
    return {"config": key, "view": view, "readout": readout,
            "readout_layer": "final" if layer is None and readout == "items" else layer,
            "lora_last_layers": lora, "history": HISTORY[view], "train_decisions": len(fit_d), "stop_decisions": len(stop_d),
            "eval_decisions": len(dheld), "zero_shot_agreement": round(zero_shot, 4),
            "agreement": round(agree, 4), "agreement_ci95": [round(lo, 4), round(hi, 4)],
            "agreement_by_verb": {v: [round(sum(x) / len(x), 3), len(x)]
                                  for v, x in sorted(by_verb.items())},
            "bc_noise": args.bc_noise, "max_steps": args.max_steps,
            "action_log": args.action_log, "success_decode": args.success_decode,
            "success_steps": args.success_steps or args.max_steps,
            "best_epoch": best["epoch"], "curve": curve,
            "success": won, "success_games": played, "success_ci95": [round(slo, 4), round(shi, 4)],
            "ambiguity_train": round(ambiguous_share([(o, m.actions, m[k]) for o, m, _, k in train]), 4),
            "chance": round(sum(1 / len(s[1]) for s in held) / max(1, len(held)), 4),
            "feature_pass_s": round(t_feat, 1), "wall_s": round(time.perf_counter() - t0, 1),
            "cpu_s": round(time.process_time() - c0, 1)}


def layer_features(args, view: str, states, layers: list[int]):
    """Per state and layer: (decision state ``(H,)``, entry states ``(K, H)``) of the frozen
    model, from one forward per state that records every layer in ``layers``."""
    from contextlib import ExitStack

    from deciplane.agents.policy import capture_hidden
    from deciplane.agents.readout import pool_spans

    policy = load_policy(args.model)
    for p in policy.model.parameters():
        p.requires_grad_(False)
    policy.add_item_head()      # only so that the agent computes the entries' token spans
    agent = MenuAgent(policy, history=HISTORY[view], readout="items")
    feats = {layer: [] for layer in layers}
    with torch.no_grad():
        for obs, menu, hist, _ in states:
            ids, spans = agent._encode(obs, menu, hist)
            with ExitStack() as stack:
                caps = {layer: stack.enter_context(capture_hidden(policy.model, layer))
                        for layer in layers}
                policy.model(input_ids=ids[None], logits_to_keep=1)
            for layer in layers:
                h = caps[layer][0][0]                                       # (T, H)
                feats[layer].append((h[-1].clone(), pool_spans(h, spans).clone()))
    return feats


def fit_head(train, targets, stop, stop_targets, layer: int, args):
    """A fresh rank-16 item head fitted full-batch (AdamW, ``--probe-steps`` steps),
    keeping the step with the lowest NLL on the early-stopping slice."""
    from deciplane.agents.readout import ItemHead

    torch.manual_seed(args.seed)
    head = ItemHead(train[0][0].shape[0], layer)
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr_head, weight_decay=0.01)

    def nll(data, tgts):
        lps = [torch.log_softmax(head(d, e), -1) for d, e in data]
        return -torch.stack([lp[t] for lp, t in zip(lps, tgts)]).mean(), lps

    best = (float("inf"), None, 0)
    for step in range(1, args.probe_steps + 1):
        loss, _ = nll(train, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            with torch.no_grad():
                v, _ = nll(stop, stop_targets)
            if float(v) < best[0]:
                best = (float(v), {k: t.clone() for k, t in head.state_dict().items()}, step)
    head.load_state_dict(best[1])
    return head, best[2]


def probe(args, view: str, layers: list[int]) -> dict:
    """Item heads on frozen features of every layer in ``layers`` (no LoRA), one shared
    feature pass; returns ``{config key: result}``."""
    t0 = time.perf_counter()
    train = expert_states(args, "train", view, args.train_episodes, 0)
    held = expert_states(args, args.fold, view, args.eval_episodes, 0)
    feats_train = layer_features(args, view, train, layers)
    feats_held = layer_features(args, view, held, layers)
    t_feat = time.perf_counter() - t0
    rng = random.Random(args.seed)
    order = list(range(len(train)))
    rng.shuffle(order)
    n_stop = max(1, len(order) // 10)
    targets = [s[3] for s in train]
    held_targets = [s[3] for s in held]
    out = {}
    for layer in layers:
        fit = [feats_train[layer][i] for i in order[n_stop:]]
        stop = [feats_train[layer][i] for i in order[:n_stop]]
        head, best_step = fit_head(fit, [targets[i] for i in order[n_stop:]], stop,
                                   [targets[i] for i in order[:n_stop]], layer, args)
        with torch.no_grad():
            hits = sum(int(head(d, e).argmax()) == t for (d, e), t in zip(feats_held[layer], held_targets))
        lo, hi = wilson_interval(hits, len(held))
        key = f"{view}:items@{layer}:0"
        out[key] = {"config": key, "view": view, "readout": "items", "readout_layer": layer,
                    "lora_last_layers": "0", "history": HISTORY[view], "mode": "probe (frozen features, full-batch AdamW)",
                    "train_decisions": len(fit), "stop_decisions": len(stop),
                    "eval_decisions": len(held), "agreement": round(hits / len(held), 4),
                    "agreement_ci95": [round(lo, 4), round(hi, 4)], "best_step": best_step,
                    "chance": round(sum(1 / len(s[1]) for s in held) / max(1, len(held)), 4),
                    "ambiguity_train": round(ambiguous_share([(o, m.actions, m[k]) for o, m, _, k in train]), 4),
                    "feature_pass_s": round(t_feat, 1)}
        print(json.dumps(out[key]), flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="feedback:labels:6,feedback:items@24:0,state:items@24:0,state:items:6")
    ap.add_argument("--game", default="twc")
    ap.add_argument("--game-params", default="numLocations=2,numItemsToPutAway=2")
    ap.add_argument("--model", default="deciplane/smollm2-135m-instruct")
    ap.add_argument("--fold", default="valid", choices=["valid", "test"])
    ap.add_argument("--train-episodes", type=int, default=40)
    ap.add_argument("--eval-episodes", type=int, default=20)
    ap.add_argument("--success-games", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=10)
    ap.add_argument("--max-epochs", type=int, default=30)
    ap.add_argument("--patience", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--lr-head", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bc-noise", type=float, default=0.0,
                    help="probability of a random action in the train fold's expert episodes")
    ap.add_argument("--variant", default="",
                    help="a tag appended to the result keys (e.g. what changed in the env)")
    ap.add_argument("--action-log", type=int, default=0,
                    help="append the episode's last K actions and their rewards to every "
                         "observation (BC data and success episodes alike)")
    ap.add_argument("--success-steps", type=int, default=None,
                    help="step cap of the success episodes (default: --max-steps)")
    ap.add_argument("--success-decode", default="greedy", choices=["greedy", "sample"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="benchmarks/results/learnability.json")
    ap.add_argument("--probe-layers", default="",
                    help="comma-separated layers: fit frozen-feature item heads at each of "
                         "them (one feature pass per view in --probe-views) instead of --configs")
    ap.add_argument("--probe-views", default="feedback,state")
    ap.add_argument("--probe-steps", type=int, default=300)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.is_file() else {}
    if args.probe_layers:
        layers = [int(x) for x in args.probe_layers.split(",")]
        for view in args.probe_views.split(","):
            prefix = f"probe/{args.game}[{args.game_params}]/{args.fold}/"
            if all(f"{prefix}{view}:items@{layer}:0" in results for layer in layers):
                continue
            for key, r in probe(args, view, layers).items():
                r.update(command=" ".join(sys.argv), load_avg=os.getloadavg(),
                         date=time.strftime("%Y-%m-%d %H:%M"))
                results[prefix + key] = r
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(results, indent=1))
        return 0
    for key in args.configs.split(","):
        rkey = f"{args.game}[{args.game_params}]/{args.fold}/{key}"
        if args.variant:
            rkey += f"/{args.variant}"
        if rkey in results:
            print(f"{rkey}: done already, skipped")
            continue
        r = run_config(args, key)
        r.update(command=" ".join(sys.argv), load_avg=os.getloadavg(),
                 machine=platform.processor() or platform.machine(),
                 date=time.strftime("%Y-%m-%d %H:%M"))
        results[rkey] = r
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1))
        print(json.dumps({k: v for k, v in r.items() if k != "curve"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
