"""RLiD-PPO for the decision-plane menu agent (docs/methods.md, RLiD and CORD).

PPO on menu decisions with length-balanced weights and one bias control, optionally +
distillation to a teacher (the env expert one-hot, or another policy's menu
distribution) on the student's own states, combined by CORD in the engine; optional
behaviour-cloning warm start. With ``advantage: gae`` a value head
(:mod:`deciplane.trainers.critic`) gives per-decision GAE advantages instead of the
episode-level group baseline. Loss formulas come from :mod:`deciplane.objectives`.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from deciplane.agents.loading import load_policy
from deciplane.agents.menu import MenuAgent
from deciplane.engine.episodes import collect_menu_episodes
from deciplane.engine.optim import MicroLoss, Normaliser, Optimizer
from deciplane.engine.trunk import menu_update_logits, trunk_boundary
from deciplane.objectives.advantages import ADVANTAGE_ESTIMATORS, is_degenerate_batch
from deciplane.objectives.distill import expert_distill_loss, policy_distill_loss
from deciplane.objectives.rlid import RLiDLossConfig, length_balanced_weights, rlid_loss
from deciplane.objectives.value import value_loss
from deciplane.trainers.algorithm import Algorithm, DecisionBatch, RolloutBatch
from deciplane.trainers.checkpoint import iteration_seed
from deciplane.trainers.config import DistillConfig, RLiDPPOConfig
from deciplane.trainers.critic import (Critic, explained_variance, flat_to_turns,
                                       gae_advantages, turn_rewards)
from deciplane.trainers.envs import EnvSuite
from deciplane.trainers.rollout import trajectory_rewards
from deciplane.trainers.warm_start import collect_bc_episodes, run_bc_epochs
from deciplane.types import Decision, Trajectory


def group_advantages(estimator: str, rewards: np.ndarray, group_keys: list[str]
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-trajectory advantages from the chosen estimator; returns ``(adv, group_ids)``."""
    keys = {k: i for i, k in enumerate(dict.fromkeys(group_keys))}
    gids = torch.tensor([keys[k] for k in group_keys], dtype=torch.long)          # (N,)
    r = torch.as_tensor(rewards, dtype=torch.float32)                            # (N,)
    return ADVANTAGE_ESTIMATORS[estimator](r, gids), gids


def greedy_agent(config: RLiDPPOConfig, policy: Any) -> MenuAgent:
    """The held-out evaluation agent of a menu run: greedy decisions with the run's prompt
    settings (training-time evaluation and ``deciplane evaluate RUN_DIR`` both use it)."""
    return MenuAgent(policy, greedy=True, history=config.history,
                     dedup=config.frozen_trunk != "full_forward")


def flatten_decisions(trajs: list[Trajectory], adv: torch.Tensor, length_balanced: bool
                      ) -> DecisionBatch:
    """Decisions in episode-major order; ``adv`` is one advantage per episode ``(E,)`` or
    one per turn ``(E, T)`` (right padded, as :func:`deciplane.objectives.advantages.gae`
    returns them)."""
    decisions, acts, old, advs, eps, keys, expert = [], [], [], [], [], [], []
    for e, tr in enumerate(trajs):
        for j, t in enumerate(tr.turns):
            d = t.decision
            decisions.append(d)
            acts.append(d.index)
            old.append(float(d.log_probs[d.index]))
            advs.append(float(adv[e] if adv.dim() == 1 else adv[e, j]))
            eps.append(e)
            keys.append(tuple(d.labels))
            expert.append(t.expert_index)
    ep = torch.tensor(eps, dtype=torch.long)
    w = (length_balanced_weights(ep) if length_balanced and len(eps)
         else torch.ones(len(eps)))
    return DecisionBatch(decisions, torch.tensor(acts, dtype=torch.long),
                         torch.tensor(old, dtype=torch.float32),
                         torch.tensor(advs, dtype=torch.float32), ep, w, keys, expert)


def pad_menu_log_probs(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack ``(K_i,)`` menu log-probs into ``(N, Kmax)`` plus the menu mask."""
    kmax = max(int(r.shape[0]) for r in rows)
    lp = torch.stack([torch.nn.functional.pad(r, (0, kmax - r.shape[0]), value=-1e9)
                      for r in rows])                                             # (N, K)
    mask = torch.stack([torch.arange(kmax) < r.shape[0] for r in rows])          # (N, K)
    return lp, mask


def menu_ids(keys: list[tuple[str, ...]]) -> torch.Tensor:
    index = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    return torch.tensor([index[k] for k in keys], dtype=torch.long)


class MenuPPO(Algorithm):
    """RLiD-PPO for the decision-plane menu agent (docs/methods.md §1, §3)."""

    config: RLiDPPOConfig

    def __init__(self, config: RLiDPPOConfig, policy: Any) -> None:
        super().__init__(config, policy)
        c = config
        self.agent = MenuAgent(policy, temperature=c.temperature, history=c.history,
                               dedup=c.frozen_trunk != "full_forward")
        self.trunk_boundary = None if c.frozen_trunk == "full_forward" else trunk_boundary(policy.model)
        if self.trunk_boundary is not None:
            # only the top layers train: the update runs them from the boundary states
            if c.frozen_trunk == "auto":
                self.agent.keep_boundary = self.trunk_boundary
            self.agent.update_logits = functools.partial(
                menu_update_logits, policy.model, boundary=self.trunk_boundary,
                pad_id=policy.tokenizer.pad_token_id, device=policy.device)
        self.eval_agent = greedy_agent(c, policy)
        self.suite = EnvSuite(c.env, expert=c.distill.enabled or c.bc.episodes > 0,
                              workers=c.env_workers)
        self.rlid: RLiDLossConfig = c.rlid   # the config's section is the loss config
        self.critic = None
        if c.advantage == "gae":
            self.critic = Critic(policy, detach_trunk=c.value_detach_trunk)
        self.teacher = None
        if c.distill.enabled and c.distill.teacher == "policy":
            tp = load_policy(c.distill.teacher_model)
            tp.model.eval()
            for p in tp.model.parameters():
                p.requires_grad_(False)
            self.teacher = MenuAgent(tp, greedy=True, history=c.history)

    def distill_config(self) -> DistillConfig | None:
        return self.config.distill

    def trainable_modules(self) -> dict[str, tuple[torch.nn.Module, float | None]]:
        if self.critic is None:
            return {}
        return {"value_head": (self.critic.head, self.config.value_lr)}

    def split_fingerprints(self) -> dict[str, str]:
        return self.suite.fingerprints()

    def rollout(self, iteration: int, seed: int) -> RolloutBatch[DecisionBatch]:
        c = self.config
        vec, reset_seeds = self.suite.train_batch(seed)
        self.policy.model.eval()
        with torch.no_grad():
            trajs, stats = collect_menu_episodes(self.agent, vec, reset_seeds,
                                                 c.env.group_size, c.env.max_episode_steps,
                                                 seed)
        self.policy.model.train()
        rewards = trajectory_rewards(trajs, c.reward, c.step_penalty)
        metrics = stats.metrics()
        metrics["rollout/reward"] = float(rewards.mean())
        if self.critic is not None:
            data, m = self.gae_batch(trajs)
            metrics.update(m)
            # even with all-equal rewards the critic's errors give non-zero advantages and
            # the value head has targets: never a skipped step
            degenerate = not data.decisions
        else:
            adv, gids = group_advantages(c.advantage, rewards, [t.group_id for t in trajs])
            data = flatten_decisions(trajs, adv, c.rlid.length_balance)
            metrics["rollout/adv_abs"] = float(adv.abs().mean())
            degenerate = is_degenerate_batch(torch.as_tensor(rewards), gids)
        return RolloutBatch(n_units=len(data.decisions), data=data, env_steps=stats.env_steps,
                            episodes=stats.episodes, degenerate=degenerate, metrics=metrics)

    def gae_batch(self, trajs: list[Trajectory]) -> tuple[DecisionBatch, dict[str, float]]:
        """advantage=gae: values of every visited state from the value head (no grad, the
        current weights), per-turn rewards, GAE(gamma, gae_lambda) per turn, flattened to
        one advantage and one return per decision."""
        c = self.config
        decs = [t.decision for tr in trajs for t in tr.turns]
        values = self.critic.values(self.agent, decs, c.optim.micro_batch_size)   # (N,)
        rewards, mask = turn_rewards(trajs, c.reward, c.step_penalty)             # (B, T)
        v = flat_to_turns(values, [len(tr) for tr in trajs])                      # (B, T)
        adv, ret = gae_advantages(rewards, v, mask, c.gamma, c.gae_lambda,
                                  normalize=c.gae_normalize)                      # (B, T)
        data = flatten_decisions(trajs, adv, c.rlid.length_balance)
        data.returns = ret[mask]                                                  # (N,)
        data.old_values = values.detach().float()                                 # (N,)
        m = {"rollout/adv_abs": float(data.advantages.abs().mean()) if decs else 0.0,
             "critic/value_mean": float(values.mean()) if decs else 0.0,
             "critic/return_mean": float(data.returns.mean()) if decs else 0.0,
             "critic/explained_variance": explained_variance(values, data.returns)}
        return data, m

    def distill_normaliser(self, batch: RolloutBatch[DecisionBatch]) -> Normaliser | None:
        """Distillation is a mean over the optimizer batch's decisions that have a teacher
        target: the expert's (teacher=expert) or every decision (teacher=policy)."""
        if not self.config.distill.enabled:
            return None
        d = batch.data
        if self.config.distill.teacher == "expert":
            return Normaliser([int(e is not None) for e in d.expert], reduction="sum")
        return Normaliser([1] * batch.n_units, reduction="sum")

    def loss(self, batch: RolloutBatch[DecisionBatch], micro: list[int]) -> MicroLoss:
        """RLiD loss (a mean over the micro-batch's decisions; + the value loss with gae),
        and the summed distillation loss on the student's own states."""
        d = batch.data
        decs = [d.decisions[i] for i in micro]
        values = None
        if self.critic is None:
            log_probs = self.agent.menu_log_probs(decs)
        else:  # the same forward pass gives the values
            log_probs, values = self.critic.score(self.agent, decs)              # (n,)
        lp, mask = pad_menu_log_probs(log_probs)                                 # (n, K)
        idx = torch.tensor(micro)
        out = rlid_loss(self.rlid, lp, d.actions[idx], d.old_logp[idx], d.advantages[idx],
                        d.episode_ids[idx], mask, menu_ids([d.menu_keys[i] for i in micro]),
                        weights=d.weights[idx])
        metrics = dict(out.metrics)
        task = out.loss
        if values is not None:
            vl = value_loss(values, d.old_values[idx], d.returns[idx], self.config.value_clip)
            task = task + self.config.value_coef * vl
            metrics["loss/value"] = float(vl.detach())
        distill = None
        if self.config.distill.enabled:
            distill, m = self._distill(lp.float(), mask, decs, d, micro)
            metrics.update(m)
        return MicroLoss(task=task, distill=distill, metrics=metrics)

    def _distill(self, lp: torch.Tensor, mask: torch.Tensor, decs: list[Decision],
                 d: DecisionBatch, micro: list[int]) -> tuple[torch.Tensor, dict[str, float]]:
        """Distillation on the student's own visited states: the sum over the micro-batch
        (the engine divides by the batch's count, :meth:`distill_normaliser`)."""
        if self.config.distill.teacher == "expert":
            s, _ = expert_distill_loss(lp, [d.expert[i] for i in micro])
            agree = [int(lp[j].argmax()) == d.expert[i] for j, i in enumerate(micro)
                     if d.expert[i] is not None]
            return s, {"distill/expert_agreement": float(np.mean(agree)) if agree else 0.0}
        with torch.no_grad():
            t_lp, _ = pad_menu_log_probs(self.teacher.menu_log_probs(decs))
        return policy_distill_loss(lp, t_lp.float(), mask), {}

    def warm_start(self, optimizer: Optimizer) -> dict[str, Any] | None:
        """Behaviour cloning on expert episodes (the env's expert actions), if configured."""
        c = self.config
        if c.bc.episodes <= 0:
            return None
        seed = iteration_seed(c.seed, -1, "bc")
        self.policy.model.eval()
        trajs, stats = collect_bc_episodes(self.suite, self.agent, c.bc.episodes,
                                           c.env.max_episode_steps, seed)
        self.policy.model.train()
        decs = [t.decision for tr in trajs for t in tr.turns]
        targets = [t.expert_index for tr in trajs for t in tr.turns]
        params = [p for g in optimizer.param_groups for p in g["params"]]

        def loss_fn(part: list[int]) -> torch.Tensor:
            lp, _ = pad_menu_log_probs(self.agent.menu_log_probs([decs[i] for i in part]))
            loss, n = expert_distill_loss(lp.float(), [targets[i] for i in part])
            return loss / max(n, 1)

        losses = run_bc_epochs(len(decs), loss_fn, params, lr=c.bc.lr, epochs=c.bc.epochs,
                               micro_batch_size=c.optim.micro_batch_size,
                               max_grad_norm=c.optim.max_grad_norm, seed=seed,
                               on_epoch=self.on_bc_epoch)
        return {"kind": "behaviour cloning on env expert actions", "episodes": len(trajs),
                "decisions": len(decs), "epochs": c.bc.epochs, "env_steps": stats.env_steps,
                "final_loss": losses[-1] if losses else None}

    def evaluate(self, split: str) -> dict[str, float]:
        return self.suite.evaluate(self.eval_agent, split, self.config.eval.episodes,
                                   collect_menu_episodes, model=self.policy.model)

    def close(self) -> None:
        self.suite.close()


__all__ = ["MenuPPO", "flatten_decisions", "greedy_agent", "group_advantages", "menu_ids",
           "pad_menu_log_probs"]
