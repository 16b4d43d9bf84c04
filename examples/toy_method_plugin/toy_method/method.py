"""REINFORCE with a group-mean baseline: ``loss = -mean_i A_e(i) log pi(a_i | s_i)`` over
the batch's menu decisions, ``A_e = R_e - mean of R over the episode's group`` (episodes of
the same initial state). The training loop (rollout scheduling, the optimizer step,
checkpoints and exact resume, evaluations, summary.json) is deciplane's; this module
supplies the config and the :class:`~deciplane.trainers.algorithm.Algorithm`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from deciplane.agents.menu import MenuAgent
from deciplane.engine.episodes import collect_menu_episodes
from deciplane.engine.optim import MicroLoss
from deciplane.objectives import dr_grpo_advantages, group_ids_from_keys
from deciplane.options import option
from deciplane.trainers.algorithm import Algorithm, RolloutBatch
from deciplane.trainers.config import EnvConfig, TrainConfig
from deciplane.trainers.env_suite import EnvSuite
from deciplane.types import Decision


@dataclass
class ToyReinforceConfig(TrainConfig):
    """REINFORCE on menu decisions."""

    algorithm: Literal["toy_reinforce"] = "toy_reinforce"
    """This method."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """Environment suite."""
    temperature: float = option(1.0, gt=0)
    """Sampling temperature of the rollout's decisions."""
    history: int = option(0, ge=0)
    """Observation history window (last k turns) in the prompt."""


@dataclass
class Steps:
    """The rollout's decisions with their episode's advantage."""

    decisions: list[Decision]
    advantages: torch.Tensor     # (N,)

    def select(self, rows: list[int]) -> "Steps":
        return Steps([self.decisions[i] for i in rows], self.advantages[rows])


def greedy_agent(config: ToyReinforceConfig, policy: Any) -> MenuAgent:
    """The held-out evaluation agent (training-time evaluation and ``deciplane evaluate
    RUN_DIR`` both use it)."""
    return MenuAgent(policy, greedy=True, history=config.history)


class ToyReinforce(Algorithm):
    """REINFORCE with a group-mean baseline on the menu agent."""

    config: ToyReinforceConfig

    def __init__(self, config: ToyReinforceConfig, policy: Any) -> None:
        super().__init__(config, policy)
        self.agent = MenuAgent(policy, temperature=config.temperature, history=config.history)
        self.eval_agent = greedy_agent(config, policy)
        self.suite = EnvSuite(config.env, workers=config.env_workers)
        self.rewards_seen: list[float] = []   # mean reward per iteration: its own state

    def own_state(self) -> dict[str, Any]:
        """What a resume needs besides weights, optimizer and RNG: the reward history
        behind ``rollout/reward_running_mean``."""
        return {"rewards_seen": list(self.rewards_seen)}

    def load_own_state(self, state: dict[str, Any]) -> None:
        self.rewards_seen = list(state.get("rewards_seen", []))

    def rollout(self, iteration: int, seed: int) -> RolloutBatch:
        c = self.config
        vec, reset_seeds = self.suite.train_batch(seed)
        self.policy.model.eval()
        with torch.no_grad():
            trajs, stats = collect_menu_episodes(self.agent, vec, reset_seeds,
                                                 c.env.group_size, c.env.max_episode_steps,
                                                 seed)
        self.policy.model.train()
        returns = torch.tensor([tr.total_reward for tr in trajs], dtype=torch.float32)  # (E,)
        adv = dr_grpo_advantages(returns, group_ids_from_keys([tr.group_id for tr in trajs]))
        steps = Steps([t.decision for tr in trajs for t in tr.turns],
                      torch.tensor([float(adv[e]) for e, tr in enumerate(trajs)
                                    for _ in tr.turns]))                             # (N,)
        self.rewards_seen.append(float(returns.mean()))
        metrics = {**stats.metrics(), "rollout/reward": self.rewards_seen[-1],
                   "rollout/reward_running_mean": sum(self.rewards_seen) / len(self.rewards_seen),
                   "rollout/iterations_seen": len(self.rewards_seen)}
        return RolloutBatch(n_units=len(steps.decisions), data=steps,
                            env_steps=stats.env_steps, episodes=stats.episodes,
                            degenerate=bool((adv == 0).all()), metrics=metrics)

    def loss(self, batch: RolloutBatch, micro: list[int]) -> MicroLoss:
        d = batch.select(micro).data
        log_probs = self.agent.menu_log_probs(d.decisions)             # [(K_i,)] with grad
        chosen = torch.stack([lp[dec.index] for lp, dec in zip(log_probs, d.decisions)])
        loss = -(d.advantages.to(chosen.device) * chosen).mean()
        return MicroLoss(task=loss, metrics={"loss/policy": float(loss.detach())})

    def evaluate(self, split: str) -> dict[str, float]:
        return self.suite.evaluate(self.eval_agent, split, self.config.eval.episodes,
                                   collect_menu_episodes, model=self.policy.model)

    def close(self) -> None:
        self.suite.close()
