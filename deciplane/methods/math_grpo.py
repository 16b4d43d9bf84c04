"""GRPO-family training on single-turn verifiable tasks (``deciplane/Math-v0``).

Rollouts and the update come from :mod:`deciplane.engine` (sampling and
:class:`~deciplane.engine.grpo.GRPOUpdate`, the core the test-time adapters share; the
update runs on the training loop's optimizer, which the loop checkpoints); the reward is the environment's math-verify check on the
*train* split; before/after accuracy comes from the held-out scorer on the test split
(gold in the scorer's process, greedy answers).

The method is this module: its config :class:`MathGRPOConfig`, the algorithm
:class:`MathGRPO` and its held-out answers :func:`greedy_answers`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
import torch

from deciplane.engine.budget import Budget
from deciplane.engine.generation import generate_texts, sample_groups
from deciplane.engine.grpo import GRPOConfig, GRPOUpdate
from deciplane.engine.trunk import trunk_boundary
from deciplane.engine.optim import Optimizer
from deciplane.benchmarks import load_benchmark
from deciplane.errors import ConfigError
from deciplane.objectives.policy_loss import PolicyLossConfig
from deciplane.options import option
from deciplane.trainers.algorithm import Algorithm, RolloutBatch, SampleGroups
from deciplane.trainers.config import TrainConfig


@dataclass
class MathGRPOConfig(TrainConfig):
    """GRPO-family training on single-turn verifiable tasks (Math-v0)."""

    algorithm: Literal["math_grpo"] = "math_grpo"
    """Single-turn GRPO."""
    benchmark: str = "arith"
    """Math-v0 benchmark name."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra kwargs for deciplane/Math-v0."""
    prompts_per_step: int = option(8, gt=0)
    """Prompts sampled per iteration."""
    group_size: int = option(8, gt=0)
    """Responses per prompt (the GRPO group)."""
    max_new_tokens: int = option(24, gt=0)
    """Generated tokens per response."""
    temperature: float = 0.7
    """Sampling temperature."""
    advantage: Literal["grpo", "dr_grpo", "rloo", "reinforce_pp"] = "grpo"
    """Group advantage estimator (dr_grpo also sums each sequence over the generation limit: loss.aggregation becomes seq_sum_const)."""
    loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    """The GRPO-family loss (docs/methods.md, GRPO family): eps_low, eps_high (null = symmetric; DAPO clip-higher: 0.28), ratio (token, or sequence for GSPO), aggregation (token_mean, seq_mean, seq_sum_const; max_len defaults to max_new_tokens), kl_beta (KL to the frozen reference), kl_estimator. 0.2's top-level clip, clip_eps, clip_eps_high, aggregation, kl_coef (0.1: beta) still load, with a warning."""
    eval_problems: int | None = 64
    """Test problems for before/after accuracy (null = the whole split)."""
    eval_max_new_tokens: int = option(24, gt=0)
    """Tokens generated per answer in evaluation (greedy)."""

    CONFIG_ALIASES: ClassVar[dict[str, str]] = {
        "clip_eps": "loss.eps_low", "aggregation": "loss.aggregation",
        "kl_coef": "loss.kl_beta", "beta": "loss.kl_beta"}
    VALUE_ALIASES: ClassVar[dict[str, dict[str, str]]] = {
        "aggregation": {"token": "token_mean", "sequence": "seq_mean"}}

    @staticmethod
    def legacy_options(raw: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        """0.2's ``clip`` choice (with ``clip_eps_high``, read only under clip_higher) as
        the loss's own fields: clip_higher sets ``loss.eps_high``, gspo ``loss.ratio``."""
        if "clip" not in raw and "clip_eps_high" not in raw:
            return raw
        out = dict(raw)
        clip = out.pop("clip", "symmetric")
        high = out.pop("clip_eps_high", 0.28)
        if clip not in ("symmetric", "clip_higher", "gspo"):
            raise ConfigError(f"{prefix}clip = {clip!r} is not allowed; allowed values: "
                              "'symmetric', 'clip_higher', 'gspo' (now loss.eps_high and "
                              "loss.ratio)")
        warnings.warn(f"config options {prefix}clip / {prefix}clip_eps_high are "
                      f"now {prefix}loss.eps_high and {prefix}loss.ratio (the old names go "
                      "away in the next release)", DeprecationWarning,
                      stacklevel=4)
        loss = dict(out.get("loss") or {})
        key, value = {"clip_higher": ("eps_high", high), "gspo": ("ratio", "sequence"),
                      "symmetric": (None, None)}[clip]
        if key is not None:
            if key in loss:
                raise ConfigError(f"{prefix}clip={clip} is the old form of {prefix}loss.{key}; "
                                  f"give only {prefix}loss.{key}")
            loss[key] = value
        out["loss"] = loss
        return out

    def policy_loss(self) -> PolicyLossConfig:
        """The loss as the update uses it: ``max_len`` (null) is the generation limit,
        and advantage=dr_grpo sums each sequence over it (seq_sum_const)."""
        loss = self.loss
        if loss.max_len is None:
            loss = replace(loss, max_len=self.max_new_tokens)
        if self.advantage == "dr_grpo":
            loss = replace(loss, aggregation="seq_sum_const")
        return loss

    def check(self, prefix: str = "") -> None:
        super().check(prefix)
        if self.advantage == "rloo" and self.group_size < 2:
            raise ConfigError("advantage=rloo needs group_size >= 2 (leave-one-out baseline)")
        if self.env_workers.backend != "local":
            raise ConfigError("math_grpo scores single-turn answers in this process; "
                              "env_workers.backend must be local (ray applies to rlid_ppo "
                              "and text_ppo rollouts)")


SYSTEM_PROMPT = "Solve the math problem. Give the final answer as a number."


def greedy_answers(policy: Any, problems: list[str], max_new_tokens: int) -> list[str]:
    """The held-out answers of a Math-v0 run: greedy generation on the run's prompt
    (training-time evaluation and ``deciplane evaluate RUN_DIR --benchmark`` both use it)."""
    prompts = [policy.format_prompt(p, SYSTEM_PROMPT) for p in problems]
    with torch.no_grad():
        return generate_texts(policy, prompts, max_new_tokens=max_new_tokens, greedy=True,
                              prompts_per_batch=32)


class MathGRPO(Algorithm):
    """Single-turn GRPO on Math-v0: sample groups, verify, one GRPO-family step."""

    Config = MathGRPOConfig
    config: MathGRPOConfig

    def __init__(self, config: MathGRPOConfig, policy: Any) -> None:
        super().__init__(config, policy)
        c = config
        self.env = gym.make("deciplane/Math-v0", benchmark=c.benchmark, split="train",
                            **c.env_kwargs).unwrapped
        self.n_train = len(self.env)
        self.grpo = GRPOConfig(
            advantage=c.advantage, loss=c.policy_loss(), temperature=c.temperature,
            epochs=c.optim.epochs, minibatches=c.optim.minibatches,
            micro_batch_size=c.optim.micro_batch_size, max_grad_norm=c.optim.max_grad_norm)
        self.budget = Budget()
        self._update = None
        self._fps: dict[str, str] = {"train": getattr(self.env, "split_fingerprint", "")}

    def prompt(self, problem: str) -> str:
        return self.policy.format_prompt(problem, SYSTEM_PROMPT)

    def split_fingerprints(self) -> dict[str, str]:
        return dict(self._fps)

    def rollout(self, iteration: int, seed: int) -> RolloutBatch[SampleGroups]:
        c = self.config
        rng = np.random.default_rng(seed % (2**63))
        idx = [int(i) for i in rng.choice(self.n_train, size=c.prompts_per_step, replace=False)]
        problems = []
        for i in idx:
            obs, _ = self.env.reset(seed=i, options={"index": i})
            problems.append(obs)
        self.policy.model.eval()
        groups = sample_groups(self.policy, [self.prompt(p) for p in problems],
                               group_size=c.group_size, max_new_tokens=c.max_new_tokens,
                               temperature=c.temperature, seed=seed % (2**62),
                               budget=self.budget, group_ids=[f"p{i}" for i in idx],
                               # frozen trunk: the update runs only the trained top layers
                               keep_layer=trunk_boundary(self.policy.model)
                               if self.grpo.frozen_trunk else None)
        self.policy.model.train()
        rewards = []
        for i, group in zip(idx, groups):
            for traj in group:
                self.env.reset(seed=i, options={"index": i})
                _, r, _, _, info = self.env.step(traj.turns[0].action)
                traj.turns[0].reward = float(r)
                rewards.append(float(r))
        n_tok = sum(int(t.turns[0].response_ids.numel()) for g in groups for t in g)
        r = np.array(rewards)
        solved = [any(t.turns[0].reward > 0 for t in g) for g in groups]
        metrics = {"rollout/accuracy": float(r.mean()), "rollout/reward": float(r.mean()),
                   "rollout/groups_with_signal": float(np.mean(
                       [len({t.turns[0].reward for t in g}) > 1 for g in groups])),
                   "rollout/pass_at_group": float(np.mean(solved)),
                   "rollout/tokens_per_sample": n_tok / max(1, len(rewards))}
        return RolloutBatch(n_units=len(rewards), data=SampleGroups(groups), env_steps=len(rewards),
                            episodes=len(rewards), metrics=metrics)

    def update(self, batch: RolloutBatch[SampleGroups], optimizer: Optimizer
               ) -> tuple[dict[str, float], int, int]:
        """One GRPO-family step (:class:`~deciplane.engine.grpo.GRPOUpdate`) on the loop's
        optimizer (checkpointed and resumed by the loop)."""
        if self._update is None:
            self._update = GRPOUpdate(self.policy, self.grpo, budget=self.budget,
                                      optimizer=optimizer)
        before = (optimizer.steps, optimizer.skipped)
        stats = self._update.step(batch.data.groups)
        steps = optimizer.steps - before[0]
        skipped = optimizer.skipped - before[1]
        m = dict(stats.metrics)
        m["optim/skipped"] = float(stats.skipped)
        return m, steps, skipped

    def evaluate(self, split: str) -> dict[str, float]:
        """Greedy answers on ``split`` scored by the held-out scorer (gold never here)."""
        c = self.config
        tasks, scorer = load_benchmark(c.benchmark, split, limit=c.eval_problems)
        try:
            was = self.policy.model.training
            self.policy.model.eval()
            texts = greedy_answers(self.policy, [t.prompt for t in tasks], c.eval_max_new_tokens)
            self.policy.model.train(was)
            report = scorer.score({t.id: a for t, a in zip(tasks, texts)})
        finally:
            scorer.close()
        self._fps[split] = report.split_fingerprint
        return {"accuracy": report.accuracy, "count": report.count,
                "n_correct": report.n_correct}

    def close(self) -> None:
        self.env.close()
