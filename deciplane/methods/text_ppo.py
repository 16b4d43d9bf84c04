"""The free-text agent trained token-level (PPO, clip / clip-higher) or with TLM-DRE turn
weights (docs/methods.md, TLM-DRE: paper-inspired, parameters ours).

Trajectory-level units: every turn's response tokens are scored under their own prompt
(:func:`deciplane.engine.logprobs.sequence_logprobs`) and concatenated with a
token-to-turn id tensor, so token losses keep the turn of every token.

The method is this module: its config :class:`TextPPOConfig` (with :class:`TLMDREConfig`,
its turn-weighting section) is defined here, above the algorithm :class:`TextPPO`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch

from deciplane.agents.text import TextAgent
from deciplane.engine.episodes import collect_text_episodes
from deciplane.engine.logprobs import sequence_logprobs
from deciplane.engine.optim import MicroLoss, Normaliser, Optimizer
from deciplane.errors import ConfigError
from deciplane.objectives.advantages import is_degenerate_batch
from deciplane.objectives.policy_loss import PolicyLossConfig, policy_loss
from deciplane.objectives.tlm_dre import TLMDRELossConfig, tlm_dre_loss
from deciplane.options import option
from deciplane.trainers.algorithm import Algorithm, RolloutBatch, TextBatch
from deciplane.engine.checkpoint import iteration_seed
from deciplane.trainers.config import (BCConfig, EnvConfig, SuiteEnvConfig, TrainConfig,
                                       check_env_suite)
from deciplane.trainers.env_suite import make_suite, per_env_rollout_metrics, warm_start_envs
from deciplane.methods.rlid_ppo import gigpo_turn_advantages, group_advantages
from deciplane.trainers.rollout import trajectory_rewards
from deciplane.trainers.warm_start import (PromptRecorder, collect_bc_episodes,
                                           expert_command_ids, run_bc_epochs, text_bc_loss)
from deciplane.types import Trajectory


# ---------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TLMDREConfig(TLMDRELossConfig):
    """Turn-level multiscale density-ratio weighting (paper-inspired, parameters ours): the
    loss's options (:class:`deciplane.objectives.tlm_dre.TLMDRELossConfig`, one
    definition) plus whether the trainer uses it."""

    enabled: bool = False
    """Use the TLM-DRE token loss instead of plain token PPO."""

    def check(self, prefix: str = "") -> None:
        if self.s_min > self.s_max:
            raise ConfigError(f"{prefix}s_min ({self.s_min}) must be <= s_max ({self.s_max})")


@dataclass
class TextPPOConfig(TrainConfig):
    """Token-level PPO for the free-text agent, optionally with TLM-DRE turn weights."""

    algorithm: Literal["text_ppo"] = "text_ppo"
    """Free-text agent PPO."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """The environment; with `envs:`, what every env of the suite shares and the iteration's shape (`games_per_iteration`, `group_size`)."""
    envs: list[SuiteEnvConfig] = field(default_factory=list)
    """A suite: several environments in one run (docs/training.md "Suites of environments"), each an env section (its fields default to `env:`'s) plus `weight`, `name`, `eval_episodes` and `splits`; each group of an iteration is drawn from one env by weight, evaluations report each env and the macro average. Empty = the one `env:` section."""
    style: Literal["react", "action"] = "action"
    """Free-text agent prompt style."""
    max_new_tokens: int = option(12, gt=0)
    """Generated tokens per turn."""
    advantage: Literal["grpo", "dr_grpo", "rloo", "reinforce_pp", "gigpo"] = "grpo"
    """Episode-level group advantage estimator, or `gigpo` (GiGPO, arXiv 2505.10978): per turn, the episode's group advantage + gigpo_weight x the step advantage among the group's turns taken in the same state (the env's info["state_key"]), from the gamma-discounted return of each turn; every token of a turn gets its turn's advantage."""
    gamma: float = option(1.0, ge=0, le=1)
    """advantage=gigpo: discount per turn of the step returns (the episode advantage is of the undiscounted return); the GiGPO paper uses 0.95."""
    gigpo_weight: float = option(1.0, ge=0)
    """advantage=gigpo: weight omega of the step advantage added to the episode advantage (0 = the episode estimator alone; the paper: 1)."""
    gigpo_norm: Literal["std", "mean"] = "std"
    """advantage=gigpo: normalisation at both levels: `std` ((x - mean) / std, the paper's main setting, verl-agent mean_std_norm) or `mean` (x - mean, the paper's variant without std)."""
    reward: Literal["return", "won"] = "return"
    """Trajectory reward: summed env reward or 1/0 for won."""
    step_penalty: float = option(0.0, ge=0)
    """Subtracted per turn from the trajectory reward."""
    invalid_penalty: float = option(0.0, ge=0)
    """Subtracted per invalid (unmatched) command."""
    loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    """The token-level PPO loss (docs/methods.md, GRPO family): eps_low / eps_high (ratio clip, null = symmetric), ratio, aggregation token_mean, no KL reference (kl_beta: 0). 0.2's top-level clip_eps, clip_eps_high still load, with a warning."""
    temperature: float = 1.0
    """Sampling temperature."""
    history: int = 2
    """Observation history window."""
    tlm_dre: TLMDREConfig = field(default_factory=TLMDREConfig)
    """Turn-level weighting."""
    bc: BCConfig = field(default_factory=BCConfig)
    """Behaviour-cloning warm start: teacher forcing of the expert's command text."""

    CONFIG_ALIASES: ClassVar[dict[str, str]] = {"clip_eps": "loss.eps_low",
                                                "clip_eps_high": "loss.eps_high"}

    def check(self, prefix: str = "") -> None:
        super().check(prefix)
        check_env_suite(self)
        if self.advantage == "rloo" and self.env.group_size < 2:
            raise ConfigError("advantage=rloo needs env.group_size >= 2 (leave-one-out baseline)")
        if self.advantage == "gigpo" and self.tlm_dre.enabled:
            raise ConfigError("advantage=gigpo gives one advantage per turn, but TLM-DRE "
                              "weights one per trajectory: set tlm_dre.enabled: false or "
                              "advantage: grpo")
        if self.loss.kl_beta > 0:
            raise ConfigError("text_ppo keeps no reference model: set loss.kl_beta: 0")
        if self.loss.aggregation != "token_mean":
            raise ConfigError("text_ppo's update is a mean over response tokens (micro-batches "
                              "weighted by their token counts): set loss.aggregation: token_mean")


# ---------------------------------------------------------------------------------------
# The algorithm
# ---------------------------------------------------------------------------------------


def greedy_agent(config: TextPPOConfig, policy: Any) -> TextAgent:
    """The held-out evaluation agent of a free-text run: greedy generation with the run's
    prompt style, token limit and history (training-time evaluation and ``deciplane
    evaluate RUN_DIR`` both use it)."""
    return TextAgent(policy, style=config.style, max_new_tokens=config.max_new_tokens,
                     greedy=True, history=config.history)


class TextPPO(Algorithm):
    """Free-text agent, trajectory-level units: every turn's response tokens are scored
    under their own prompt and concatenated with a token-to-turn id tensor."""

    Config = TextPPOConfig
    config: TextPPOConfig

    def __init__(self, config: TextPPOConfig, policy: Any) -> None:
        super().__init__(config, policy)
        c = config
        self.agent = TextAgent(policy, style=c.style, max_new_tokens=c.max_new_tokens,
                               temperature=c.temperature, history=c.history)
        self.eval_agent = greedy_agent(c, policy)
        self.suite = make_suite(c, expert=c.bc.episodes > 0, workers=c.env_workers)
        self.ppo = c.loss
        self.tlm = c.tlm_dre  # the trainer's section is the loss config (+ enabled)

    def split_fingerprints(self) -> dict[str, str]:
        return self.suite.fingerprints()

    def rollout(self, iteration: int, seed: int) -> RolloutBatch[TextBatch]:
        c = self.config
        self.policy.model.eval()
        with torch.no_grad():
            trajs, stats = self.suite.play_groups(collect_text_episodes, self.agent, seed)
        self.policy.model.train()
        rewards = trajectory_rewards(trajs, c.reward, c.step_penalty, c.invalid_penalty)
        ntok = [sum(int(t.response_ids.numel()) for t in tr.turns) for tr in trajs]
        metrics = {**stats.metrics(), **per_env_rollout_metrics(trajs)}
        if c.advantage == "gigpo":
            adv, share, degenerate = gigpo_turn_advantages(
                trajs, c.reward, c.step_penalty, c.gamma, c.gigpo_weight, c.gigpo_norm,
                c.invalid_penalty)                                               # (B, M)
            metrics["rollout/step_group_share"] = share
        else:
            adv, gids = group_advantages(c.advantage, rewards, [t.group_id for t in trajs])
            degenerate = is_degenerate_batch(torch.as_tensor(rewards), gids)
        metrics["rollout/reward"] = float(rewards.mean())
        metrics["rollout/tokens_per_turn"] = sum(ntok) / max(1, stats.env_steps)
        return RolloutBatch(n_units=len(trajs), data=TextBatch(trajs, adv, ntok),
                            env_steps=stats.env_steps, episodes=stats.episodes,
                            degenerate=degenerate, metrics=metrics)

    def _token_tensors(self, trajs: list[Trajectory], model: Any | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Current (or ``model``'s) log-probs ``(B, T)``, old log-probs ``(B, T)`` and turn ids
        ``(B, T)`` (-1 on padding) of the trajectories' concatenated response tokens."""
        prompts = [t.prompt_ids for tr in trajs for t in tr.turns]
        resps = [t.response_ids for tr in trajs for t in tr.turns]
        per_turn = sequence_logprobs(self.policy, prompts, resps,
                                     temperature=self.config.temperature, model=model)
        tmax = max(1, max(sum(int(t.response_ids.numel()) for t in tr.turns) for tr in trajs))
        b = len(trajs)
        dev = per_turn[0].device if per_turn else self.policy.device   # the model's device
        old = torch.zeros(b, tmax, device=dev)
        tid = torch.full((b, tmax), -1, dtype=torch.long, device=dev)
        rows_lp: list[list[torch.Tensor]] = [[] for _ in range(b)]
        k = 0
        for i, tr in enumerate(trajs):
            pos = 0
            for j, t in enumerate(tr.turns):
                n = int(t.response_ids.numel())
                rows_lp[i].append(per_turn[k])
                old[i, pos:pos + n] = t.response_logprobs.float()
                tid[i, pos:pos + n] = j
                pos += n
                k += 1
        logp = torch.stack([torch.nn.functional.pad(torch.cat(r) if r else torch.zeros(0, device=dev),
                                                    (0, tmax - sum(x.numel() for x in r)))
                            for r in rows_lp])                                    # (B, T)
        return logp.float(), old, tid

    def normaliser(self, batch: RolloutBatch[TextBatch]) -> Normaliser:
        """TLM-DRE is a mean over trajectories, token PPO a mean over response tokens."""
        if self.config.tlm_dre.enabled:
            return Normaliser([1] * batch.n_units)
        return Normaliser(list(batch.data.n_tokens))

    def loss(self, batch: RolloutBatch[TextBatch], micro: list[int]) -> MicroLoss:
        data = batch.select(micro).data
        trajs, adv = data.trajs, data.advantages                        # (B,) or (B, M)
        logp, old, tid = self._token_tensors(trajs)
        if adv.dim() == 2:   # advantage=gigpo: each token gets its turn's advantage
            adv = adv.gather(1, tid.clamp(min=0)) * (tid >= 0).float()          # (B, T)
        if self.config.tlm_dre.enabled:
            with torch.no_grad(), self.policy.reference() as ref:
                ref_lp, _, _ = self._token_tensors(trajs, model=ref)
            out = tlm_dre_loss(self.tlm, logp, old, ref_lp, adv, tid)
        else:
            out = policy_loss(self.ppo, logp, old, adv, tid >= 0)
        return MicroLoss(task=out.loss, metrics=dict(out.metrics))

    def warm_start(self, optimizer: Optimizer) -> dict[str, Any] | None:
        """Behaviour cloning on expert episodes, if configured: token-level teacher forcing
        of the expert's command (:func:`expert_command_ids`) on the exact prompt the text
        agent sees in that state; a separate AdamW at ``bc.lr`` over the same parameters."""
        c = self.config
        if c.bc.episodes <= 0:
            return None
        seed = iteration_seed(c.seed, -1, "bc")
        trajs, stats = collect_bc_episodes(self.suite, PromptRecorder(self.agent),
                                           c.bc.episodes, c.env.max_episode_steps, seed)
        prompts = [self.policy.tokenize(t.decision) for tr in trajs for t in tr.turns]
        targets = [expert_command_ids(self.policy, t.action, c.style)
                   for tr in trajs for t in tr.turns]
        params = [p for g in optimizer.param_groups for p in g["params"]]
        mbs = c.optim.micro_batch_size

        def loss_fn(part: list[int]) -> torch.Tensor:
            return text_bc_loss(self.policy, [prompts[i] for i in part],
                                [targets[i] for i in part])

        losses = run_bc_epochs(len(prompts), loss_fn, params, lr=c.bc.lr, epochs=c.bc.epochs,
                               micro_batch_size=mbs, max_grad_norm=c.optim.max_grad_norm,
                               seed=seed, on_epoch=self.on_bc_epoch)
        return {"kind": "behaviour cloning on env expert commands (token-level teacher "
                        "forcing)", "episodes": len(trajs), "decisions": len(prompts),
                "tokens": int(sum(int(t.numel()) for t in targets)), "epochs": c.bc.epochs,
                "env_steps": stats.env_steps,
                "first_loss": losses[0] if losses else None,
                "final_loss": losses[-1] if losses else None,
                **warm_start_envs(self.suite, trajs)}

    def eval_spec(self, kind: str) -> tuple[Any, Any]:
        """``(agent, episode collector)`` of the ``trained`` evaluation (the run's greedy
        agent)."""
        if kind != "trained":
            raise ConfigError(f"unknown evaluation agent {kind!r} (trained)")
        return self.eval_agent, collect_text_episodes

    def evaluate(self, split: str) -> dict[str, float]:
        agent, collect = self.eval_spec("trained")
        return self.suite.evaluate(agent, split, self.config.eval.episodes, collect,
                                   model=self.policy.model, remote="trained")

    def close(self) -> None:
        self.suite.close()


__all__ = ["TextPPO", "greedy_agent"]
