"""Decisions per second: the decision-plane menu agent vs the free-text agent (react, action).

Same observations, same model, same process, side by side: the states are real TextWorld
states (the embedded suite's test split, collected by playing TextWorld's winning policy),
every agent decides on all of them greedily, one at a time ("single") and in one batch
("batched"), and the configurations are interleaved round by round so that a change in
machine load hits them alike. Reports decisions/s (wall clock), process CPU seconds per
decision, generated tokens per decision, and the share of executable actions (menu: by
construction; free text: the response maps to a menu action by exact/normalised match).

    python benchmarks/bench_agents.py                                  # tiny + SmolLM2
    python benchmarks/bench_agents.py --models deciplane/tiny --rounds 3 --json out.json
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, field

import torch


@dataclass
class Config:
    """One agent configuration of the benchmark."""

    name: str
    kind: str                   # menu | text
    options: dict = field(default_factory=dict)


@dataclass
class Tally:
    """Accumulated measurements of one (model, config, mode)."""

    decisions: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    executable: int = 0
    generated_tokens: int = 0

    def row(self) -> dict:
        n = max(self.decisions, 1)
        return {"decisions": self.decisions, "decisions_per_s": self.decisions / self.wall_s if self.wall_s else 0.0,
                "cpu_s_per_decision": self.cpu_s / n, "executable_share": self.executable / n,
                "tokens_per_decision": self.generated_tokens / n}


def collect_states(n: int, seed: int = 0) -> list[tuple[str, object]]:
    """``n`` (observation, menu) pairs from expert play of the embedded test split, taken
    round-robin over the games so that every game contributes."""
    import gymnasium as gym

    import deciplane  # noqa: F401  (registers the environments)

    env = gym.make("deciplane/TextWorld-v0", games="embedded", split="test", expert=True)
    per_game: list[list[tuple[str, object]]] = []
    for g in range(env.unwrapped.num_tasks):
        obs, info = env.reset(seed=seed, options={"game": g})
        states = []
        for _ in range(n):
            states.append((obs, info["menu"]))
            obs, _, term, trunc, info = env.step(info.get("expert_action", 0))
            if term or trunc:
                break
        per_game.append(states)
    env.close()
    out = []
    for k in range(n):
        for states in per_game:
            if k < len(states) and len(out) < n:
                out.append(states[k])
    return out


def build_agent(policy, cfg: Config):
    from deciplane.agents import MenuAgent, TextAgent

    if cfg.kind == "menu":
        return MenuAgent(policy, greedy=True, history=0, **cfg.options)
    return TextAgent(policy, greedy=True, history=0, **cfg.options)


def measure(agent, cfg: Config, states, batched: bool, tally: Tally) -> None:
    """Run the agent over all states (one call, or one call per state) and add to ``tally``."""
    obs = [s[0] for s in states]
    menus = [s[1] for s in states]
    calls = [(obs, menus)] if batched else [([o], [m]) for o, m in zip(obs, menus)]
    t0, c0 = time.perf_counter(), time.process_time()
    results = []
    for o, m in calls:
        results += agent.act(o, m)
    tally.wall_s += time.perf_counter() - t0
    tally.cpu_s += time.process_time() - c0
    tally.decisions += len(results)
    for r, menu in zip(results, menus):
        if cfg.kind == "menu":
            tally.executable += int(0 <= r.index < len(menu))
        else:
            tally.executable += int(r.index is not None)
            tally.generated_tokens += int(r.response_ids.numel())


def run_model(model: str, configs: list[Config], states, rounds: int, threads: int) -> dict:
    from deciplane.agents import load_policy

    policy = load_policy(model, num_threads=threads)
    agents = {c.name: build_agent(policy, c) for c in configs}
    tallies = {(c.name, mode): Tally() for c in configs for mode in ("single", "batched")}
    # warm-up: one decision each (first-call costs: kernels, caches of the tokenizer)
    for c in configs:
        measure(agents[c.name], c, states[:1], False, Tally())
    for r in range(rounds):
        order = configs[r % len(configs):] + configs[: r % len(configs)]
        for c in order:
            for mode in (("single", "batched") if r % 2 == 0 else ("batched", "single")):
                measure(agents[c.name], c, states, mode == "batched", tallies[(c.name, mode)])
                row = tallies[(c.name, mode)].row()
                print(f"  [{model} round {r + 1}] {c.name:>14} {mode:>7}: {row['decisions_per_s']:.2f} decisions/s",
                      flush=True)
    prompt_tokens = [len(agents[configs[0].name].policy.tokenize(agents[configs[0].name].prompt(o, m))) for o, m in states]
    return {"model": model, "prompt_tokens_mean": sum(prompt_tokens) / len(prompt_tokens),
            "results": {f"{name}/{mode}": t.row() for (name, mode), t in tallies.items()}}


def ratios(res: dict) -> dict:
    """menu decisions/s over each text agent's, per mode."""
    out = {}
    r = res["results"]
    for mode in ("single", "batched"):
        if f"menu/{mode}" not in r:
            continue
        menu = r[f"menu/{mode}"]["decisions_per_s"]
        for text in ("text-react", "text-action"):
            if f"{text}/{mode}" not in r:
                continue
            other = r[f"{text}/{mode}"]["decisions_per_s"]
            out[f"menu/{text} ({mode})"] = menu / other if other else float("inf")
    return out


def markdown(all_results: list[dict]) -> str:
    lines = ["| model | agent | mode | decisions/s | CPU s/decision | tokens/decision | executable |",
             "|---|---|---|---|---|---|---|"]
    for res in all_results:
        for key, row in res["results"].items():
            name, mode = key.split("/")
            lines.append(f"| {res['model']} | {name} | {mode} | {row['decisions_per_s']:.3g} | "
                         f"{row['cpu_s_per_decision']:.3f} | {row['tokens_per_decision']:.1f} | "
                         f"{row['executable_share']:.0%} |")
    lines += ["", "| model | ratio | value |", "|---|---|---|"]
    for res in all_results:
        for k, v in res["ratios"].items():
            lines.append(f"| {res['model']} | {k} | {v:.1f}x |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="deciplane/tiny,deciplane/smollm2-135m-instruct")
    ap.add_argument("--states", type=int, default=6, help="TextWorld states (= batch size of 'batched')")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--react-tokens", type=int, default=128, help="max_new_tokens of the react agent")
    ap.add_argument("--action-tokens", type=int, default=16, help="max_new_tokens of the action agent")
    ap.add_argument("--agents", default="menu,menu-no-cache,text-action,text-react",
                    help="which configurations to run (comma-separated)")
    ap.add_argument("--json", default=None, help="write all results here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    configs = [Config("menu", "menu"), Config("menu-no-cache", "menu", {"prefix_cache": False}),
               Config("text-action", "text", {"style": "action", "max_new_tokens": args.action_tokens}),
               Config("text-react", "text", {"style": "react", "max_new_tokens": args.react_tokens})]
    wanted = args.agents.split(",")
    unknown = sorted(set(wanted) - {c.name for c in configs})
    if unknown:
        ap.error(f"unknown --agents {unknown}; choose from {[c.name for c in configs]}")
    configs = [c for c in configs if c.name in wanted]
    states = collect_states(args.states)
    print(f"{len(states)} TextWorld states, menus of {min(len(m) for _, m in states)}-"
          f"{max(len(m) for _, m in states)} actions; {args.threads} threads", flush=True)
    all_results = []
    for model in args.models.split(","):
        res = run_model(model.strip(), configs, states, args.rounds, args.threads)
        res["ratios"] = ratios(res)
        all_results.append(res)
    print(markdown(all_results))
    if args.json:
        meta = {"states": len(states), "rounds": args.rounds, "threads": args.threads,
                "react_tokens": args.react_tokens, "action_tokens": args.action_tokens,
                "configs": [asdict(c) for c in configs]}
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "results": all_results}, fh, indent=2)


if __name__ == "__main__":
    main()
