"""Behaviour-cloning warm start of the free-text agent (TextPPO): teacher forcing of the env
expert's command on the prompt the text agent sees, with the real deciplane/tiny model and
the real embedded TextWorld suite."""

from __future__ import annotations

import torch

from deciplane.agents.text import extract_command, normalise
from deciplane.methods.text_ppo import TextPPO
from deciplane.trainers.warm_start import (PromptRecorder, collect_bc_episodes,
                                           expert_command_ids, text_bc_loss)
from deciplane.engine.checkpoint import iteration_seed
from deciplane.trainers.config import load_config
from deciplane.trainers.run import build_policy

CFG = {"algorithm": "text_ppo", "progress": False, "seed": 0, "style": "action",
       "max_new_tokens": 8, "history": 0,
       "model": {"name": "deciplane/tiny", "finetune": "full", "threads": 1},
       "env": {"games_per_iteration": 2, "group_size": 2, "max_episode_steps": 4},
       "bc": {"episodes": 4, "epochs": 25, "lr": 3e-3},
       "optim": {"lr": 1e-3, "micro_batch_size": 2}}


def _greedy_matches(algo: TextPPO, prompts: list[str], commands: list[str]) -> int:
    """How many greedy responses to ``prompts`` give the expert's command."""
    algo.policy.model.eval()
    gens = algo.policy.generate(prompts, max_new_tokens=8, do_sample=False, seed=0,
                                stop=algo.agent.stop)
    algo.policy.model.train()
    return sum(normalise(extract_command(g.text, "action") or "") == normalise(c)
               for g, c in zip(gens, commands))


def test_expert_command_ids_is_the_command_then_eos():
    policy = build_policy(load_config(data=CFG))
    ids = expert_command_ids(policy, "go north", "action")
    assert int(ids[-1]) == policy.tokenizer.eos_token_id
    assert policy.tokenizer.decode(ids[:-1]).strip() == "go north"
    react = expert_command_ids(policy, "go north", "react")
    assert policy.tokenizer.decode(react[:-1]).replace(" ", "") == "<action>gonorth</action>"


def test_text_bc_warm_start_lowers_loss_and_copies_the_expert():
    """After the warm start the expert commands' NLL on the training states drops and the
    greedy command matches the expert on more of those states than before."""
    cfg = load_config(data=CFG)
    policy = build_policy(cfg)
    algo = TextPPO(cfg, policy)
    try:
        # the very states the warm start trains on (same seed)
        trajs, stats = collect_bc_episodes(algo.suite, PromptRecorder(algo.agent),
                                           cfg.bc.episodes, cfg.env.max_episode_steps,
                                           iteration_seed(cfg.seed, -1, "bc"))
        prompts = [t.decision for tr in trajs for t in tr.turns]
        commands = [t.action for tr in trajs for t in tr.turns]
        assert len(trajs) == 4 and stats.env_steps == len(prompts) > 0
        # the recorded prompt is exactly the text agent's prompt (history 0: obs + menu)
        assert all(c in p for p, c in zip(prompts, commands))
        p_ids = [policy.tokenize(p) for p in prompts]
        t_ids = [expert_command_ids(policy, c, "action") for c in commands]
        with torch.no_grad():
            nll_before = float(text_bc_loss(policy, p_ids, t_ids))
        hits_before = _greedy_matches(algo, prompts, commands)

        opt = torch.optim.AdamW(policy.trainable_parameters(), lr=cfg.optim.lr)
        record = algo.warm_start(opt)

        with torch.no_grad():
            nll_after = float(text_bc_loss(policy, p_ids, t_ids))
        hits_after = _greedy_matches(algo, prompts, commands)
    finally:
        algo.close()
    assert record["kind"].startswith("behaviour cloning")
    assert record["episodes"] == 4 and record["env_steps"] > 0 and record["epochs"] == 25
    assert record["final_loss"] < record["first_loss"]
    assert nll_after < 0.5 * nll_before, (nll_before, nll_after)
    assert hits_after >= hits_before + 3, (hits_before, hits_after, len(prompts))
    assert all(p.grad is None for p in policy.trainable_parameters())
