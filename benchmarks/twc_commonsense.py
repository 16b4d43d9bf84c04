"""Does the frozen model know where twc's objects go? A cloze probe of its commonsense.

On TextWorld Commonsense (twc) a step's hard part is the *put*: which of the room's
containers and surfaces is the object's usual place (salt -> shelf, green bell pepper ->
fridge, clean strainer -> cutlery drawer). The test and valid folds hold objects the train
fold does not, so no head can memorise it: the knowledge has to come from the model.

For every ``put X in Y`` decision of the (replanning) expert on the first ``--games``
games of ``--fold``, the candidates are the ``put X in *`` entries of that state's menu;
each is scored by the frozen model's log-likelihood of the location's tokens after a
sentence about the object (several templates, summed or per token), and the argmax is
compared with the expert's target. Chance is the mean of 1 / candidates. Forward passes
only (one per candidate).

    python benchmarks/twc_commonsense.py --fold valid --games 40
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import gymnasium as gym
import torch

import deciplane  # noqa: F401  (registers the environments)
from deciplane.agents import load_policy
from deciplane.envs.twx.twc_expert import parse_put
from deciplane.objectives.common import gather_log_probs
from deciplane.stats import wilson_interval

TEMPLATES = ("The {item} usually goes in the {loc}.",
             "Q: Where should the {item} be put away? A: In the {loc}.",
             "You put the {item} in the {loc}.")


def put_decisions(game_params: str, fold: str, games: int) -> list[tuple[str, str, list[str]]]:
    """``(object, expert's target, candidate targets in the menu)`` per expert put."""
    env = gym.make("deciplane/TextWorldExpress-v0", game="twc", game_params=game_params,
                   split=fold, menu_order="sorted", expert=True)
    out = []
    try:
        for g in range(games):
            _, info = env.reset(seed=g, options={"game": g})
            done = False
            while not done and info.get("expert_action") is not None:
                put = parse_put(info["expert_command"])
                if put:
                    item, target = put
                    cands = [where for what, where in (parse_put(a, [item]) or (None, None)
                                                       for a in info["menu"].actions)
                             if what == item]
                    out.append((item, target, cands))
                _, _, term, trunc, info = env.step(info["expert_action"])
                done = term or trunc
    finally:
        env.close()
    return out


@torch.no_grad()
def continuation_log_prob(policy, context: str, continuation: str) -> tuple[float, int]:
    """Sum of the log-probabilities of ``continuation``'s tokens after ``context``, and
    their number."""
    tok = policy.tokenizer
    ctx = tok(context, add_special_tokens=False).input_ids
    ids = tok(context + continuation, add_special_tokens=False).input_ids
    x = torch.tensor([ids])
    picked = gather_log_probs(policy.model(input_ids=x).logits[:, :-1], x[:, 1:])[0, len(ctx) - 1:]
    return float(picked.sum()), int(picked.numel())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--game-params", default="numLocations=2,numItemsToPutAway=2")
    ap.add_argument("--fold", default="valid", choices=["train", "valid", "test"])
    ap.add_argument("--games", type=int, default=40)
    ap.add_argument("--model", default="deciplane/smollm2-135m-instruct")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="benchmarks/results/twc_commonsense.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    cases = put_decisions(args.game_params, args.fold, args.games)
    policy = load_policy(args.model)
    policy.model.eval()
    chance = sum(1 / len(c) for _, _, c in cases) / len(cases)
    rows = {}
    for tpl in TEMPLATES:
        scores = []
        for item, _, cands in cases:
            ctx = tpl.split("{loc}")[0].format(item=item)
            scores.append([continuation_log_prob(policy, ctx,
                                                 tpl.format(item=item, loc=loc)[len(ctx):])
                           for loc in cands])
        for norm in ("sum", "per_token"):
            hits = 0
            for (item, gold, cands), sc in zip(cases, scores):
                val = [s if norm == "sum" else s / n for s, n in sc]
                hits += cands[max(range(len(cands)), key=val.__getitem__)] == gold
            lo, hi = wilson_interval(hits, len(cases))
            rows[f"{tpl} [{norm}]"] = {"hits": hits, "decisions": len(cases),
                                       "accuracy": round(hits / len(cases), 4),
                                       "ci95": [round(lo, 4), round(hi, 4)]}
            print(f"{tpl!r} {norm}: {hits}/{len(cases)} ({hits / len(cases):.0%}, "
                  f"95% {lo:.0%}-{hi:.0%}); chance {chance:.0%}", flush=True)
    result = {"game": "twc", "game_params": args.game_params, "fold": args.fold,
              "games": args.games, "model": args.model, "put_decisions": len(cases),
              "mean_candidates": round(sum(len(c) for _, _, c in cases) / len(cases), 2),
              "chance": round(chance, 4), "templates": rows,
              "command": " ".join(sys.argv), "load_avg": os.getloadavg(),
              "wall_s": round(time.perf_counter() - t0, 1), "date": time.strftime("%Y-%m-%d %H:%M")}
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.is_file() else {}
    results[f"twc[{args.game_params}]/{args.fold}/{args.games}"] = result
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
