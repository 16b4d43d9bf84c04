"""TTRL: test-time reinforcement learning with majority-vote rewards (docs/methods.md §5.1, exact).

Per step, for each prompt of the batch:

1. sample ``votes`` (N) responses;
2. extract answers by the allowed rules only (last ``\\boxed{}``, "the answer is", last
   number), normalised; empty/``None`` answers are dropped before voting;
3. majority = the largest equivalence cluster among the predictions (math equivalence
   between predictions only, never against gold); ties go to the cluster that appeared
   first and are logged; a prompt with no valid answer is skipped (no update);
4. reward ``r_i = 1[ans_i == majority]`` (invalid -> 0);
5. GRPO on the first ``train_samples`` (k) of the N samples: token-mean aggregation,
   clip 0.2, k3 KL 0.001 to the initial model (``policy.reference()``).

Reference (paper): Qwen2.5-Math-7B AIME24 pass@1 12.9 -> 40.2, MATH-500 46.7 -> 83.4.
Unlike the paper's code, whose reward path receives gold for logging, nothing here can:
label and reward accuracy are computed by the held-out scorer after the run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from deciplane.adapt.base import AdaptConfig, BaseAdapter, extract, vote
from deciplane.errors import ConfigError
from deciplane.options import option
from deciplane.engine.grpo import GRPOConfig, GRPOUpdate
from deciplane.objectives.policy_loss import PolicyLossConfig
from deciplane.types import UnlabeledTask

log = logging.getLogger(__name__)


@dataclass
class TTRLConfig(AdaptConfig):
    """TTRL options. Defaults are CPU-sized; ``TTRLConfig.paper()`` gives the paper's."""

    votes: int = option(8, ge=1)
    """N: responses sampled per prompt for the majority vote (paper: 64)."""
    train_samples: int = 4
    """k: the first k of the N samples are trained on (paper: 32)."""
    advantage: Literal["grpo", "dr_grpo", "rloo", "reinforce_pp"] = "grpo"
    """Group advantage estimator (paper: grpo)."""
    loss: PolicyLossConfig = field(default_factory=lambda: PolicyLossConfig(kl_beta=0.001))
    """The GRPO loss, used as it is (default: eps_low 0.2, token_mean, k3 KL to the initial model with kl_beta 0.001: the paper's values). 0.2's clip_eps, kl_coef, aggregation still load, with a warning."""

    PAPER: ClassVar[dict[str, Any]] = {"votes": 64, "train_samples": 32, "loss.eps_low": 0.2,
                                       "loss.kl_beta": 0.001, "loss.aggregation": "token_mean",
                                       "advantage": "grpo", "finetune": "full"}
    CONFIG_ALIASES: ClassVar[dict[str, str]] = {
        "clip_eps": "loss.eps_low", "kl_coef": "loss.kl_beta", "aggregation": "loss.aggregation"}

    def validate(self) -> None:
        super().validate()
        if not 1 <= self.train_samples <= self.votes:
            raise ConfigError(f"TTRLConfig.train_samples = {self.train_samples} must be in "
                              f"[1, votes={self.votes}] (it trains on the first k of the N votes)")
        if self.advantage == "rloo" and self.train_samples < 2:
            raise ConfigError("advantage='rloo' needs train_samples >= 2 (leave-one-out baseline)")

    def grpo(self) -> GRPOConfig:
        return GRPOConfig(advantage=self.advantage, loss=self.loss, temperature=self.temperature,
                          micro_batch_size=self.micro_batch_size,
                          max_grad_norm=self.max_grad_norm)


class TTRL(BaseAdapter):
    """Test-time RL with majority-vote pseudo-rewards. ``TTRL(policy, TTRLConfig()).run(tasks)``."""

    Config = TTRLConfig

    def __init__(self, policy, config: TTRLConfig | None = None, progress=None):
        super().__init__(policy, config, progress)
        self.update = GRPOUpdate(policy, self.config.grpo(), budget=self.budget,
                                 lr=self.config.lr, weight_decay=self.config.weight_decay)

    def samples_per_prompt(self) -> int:
        return self.config.votes

    def resume_optimizer(self):
        return self.update.optimizer

    def adapt_step(self, tasks: list[UnlabeledTask], step: int) -> dict[str, float]:
        cfg = self.config
        groups = self.sample_task_groups(tasks, step, cfg.votes)
        train, shares = [], []
        for task, group in zip(tasks, groups):
            answers = extract([tr.turns[0].action for tr in group])
            v = vote(answers)
            agree = v.agree if v.answer is not None else [False] * len(group)
            rewards = [1.0 if a else 0.0 for a in agree]
            self._record_vote(step, task, answers, v, rewards)
            if v.answer is None:          # every answer invalid: skip the prompt
                continue
            if v.tie:
                log.info("TTRL step %d task %s: tie between %s; kept %r (first to appear)",
                         step, task.id, [v.answer, *v.tied], v.answer)
            for tr, r in zip(group, rewards):
                tr.turns[0].reward = r
            train.append(group[:cfg.train_samples])
            shares.append(v.count / len(group))
        stats = self.update.step(train)   # skips the optimizer when nothing can be learnt
        m = dict(stats.metrics)
        m.update({"vote/valid_prompts": float(len(train)), "vote/prompts": float(len(tasks)),
                  "vote/majority_share": sum(shares) / len(shares) if shares else 0.0,
                  "update/skipped": float(stats.skipped)})
        return m


__all__ = ["TTRL", "TTRLConfig"]
