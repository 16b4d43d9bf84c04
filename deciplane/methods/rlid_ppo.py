"""RLiD-PPO for the decision-plane menu agent (docs/methods.md, RLiD and CORD).

PPO on menu decisions with length-balanced weights and one bias control, optionally +
distillation to a teacher (the env expert one-hot, or another policy's menu
distribution) on the student's own states, combined by CORD in the engine; optional
behaviour-cloning warm start. With ``advantage: gae`` a value head
(:mod:`deciplane.trainers.critic`) gives per-decision GAE advantages instead of the
episode-level group baseline; with ``advantage: gigpo`` (GiGPO) each decision adds a
step-level advantage among the group's decisions in the same state
(:func:`gigpo_turn_advantages`). Loss formulas come from :mod:`deciplane.objectives`.

The method is this module: its config :class:`RLiDPPOConfig` (with
:class:`PromptCacheConfig`, which only the menu agent reads) is defined here, above the
algorithm :class:`RLiDPPO` and its held-out agent :func:`greedy_agent`.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from deciplane._moved import renamed_names
from deciplane.agents.loading import load_policy
from deciplane.agents.menu import MenuAgent
from deciplane.agents.policy import decoder_layers
from deciplane.engine.episodes import collect_menu_episodes
from deciplane.engine.optim import MicroLoss, Normaliser, Optimizer
from deciplane.engine.trunk import first_trainable_layer, menu_update_logits, trunk_boundary
from deciplane.errors import ConfigError
from deciplane.objectives.advantages import (ADVANTAGE_ESTIMATORS, discounted_returns,
                                             gigpo_advantages, is_degenerate_batch,
                                             step_group_ids, step_group_share,
                                             varied_group_share)
from deciplane.objectives.distill import expert_distill_loss, policy_distill_loss
from deciplane.objectives.rlid import RLiDLossConfig, length_balanced_weights, rlid_loss
from deciplane.objectives.value import value_loss
from deciplane.options import learning_rate, option
from deciplane.trainers.algorithm import Algorithm, DecisionBatch, RolloutBatch
from deciplane.engine.checkpoint import iteration_seed
from deciplane.trainers.config import (BCConfig, DistillConfig, EnvConfig, SuiteEnvConfig,
                                       TrainConfig, check_env_suite)
from deciplane.trainers.critic import (Critic, explained_variance, flat_to_turns,
                                       gae_advantages, turn_rewards)
from deciplane.trainers.env_suite import make_suite, per_env_rollout_metrics, warm_start_envs
from deciplane.trainers.rollout import trajectory_rewards
from deciplane.trainers.warm_start import collect_bc_episodes, run_bc_epochs
from deciplane.types import Decision, Trajectory


# ---------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------


@dataclass
class PromptCacheConfig:
    """How the menu agent computes its prompts (docs/speed.md "Reuse per row")."""

    mode: Literal["batch", "blocks"] = "batch"
    """`batch`: one left-padded forward per batch, the prefix shared by the whole batch computed once (suits a GPU). `blocks`: in fixed blocks of `block_tokens` tokens counted from the prompt's start (the rows that need the same block index share one forward); a block met before (an earlier step of the episode, another episode of the group, another evaluation of the same game, with weights the block depends on unchanged) is read from a cache instead of computed. Results are bitwise the same whatever the cache held (resume stays exact); they differ from `batch` by float rounding."""
    block_tokens: int = option(32, gt=0)
    """mode=blocks: tokens per block (a changed token recomputes its block and every later one)."""
    max_gib: float = option(2.0, ge=0)
    """mode=blocks: memory ceiling of the cache per process in GiB (least-recently-used blocks are evicted; 0 = reuse nothing). A block of SmolLM2-135M read at layer 18 holds ~30 KB per token in fp32."""

    def make(self):
        """The process's :class:`~deciplane.agents.prompt_cache.BlockCache` (None for `batch`)."""
        if self.mode != "blocks":
            return None
        from deciplane.agents.prompt_cache import BlockCache

        return BlockCache(self.block_tokens, int(self.max_gib * 2 ** 30))


@dataclass
class RLiDPPOConfig(TrainConfig):
    """PPO on menu decisions (RLiD, docs/methods.md §1), optionally + CORD distillation."""

    algorithm: Literal["rlid_ppo"] = "rlid_ppo"
    """Menu-agent PPO."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """The environment; with `envs:`, what every env of the suite shares and the iteration's shape (`games_per_iteration`, `group_size`)."""
    envs: list[SuiteEnvConfig] = field(default_factory=list)
    """A suite: several environments in one run (docs/training.md "Suites of environments"), each an env section (its fields default to `env:`'s) plus `weight`, `name`, `eval_episodes` and `splits`; each group of an iteration is drawn from one env by weight, evaluations report each env and the macro average. Empty = the one `env:` section."""
    advantage: Literal["grpo", "dr_grpo", "rloo", "reinforce_pp", "gae", "gigpo"] = "grpo"
    """Episode-level group advantage estimator (groups = episodes of the same game), or `gae`: per-decision GAE(gamma, gae_lambda) with a learned value head (critic) on the policy's last hidden state at the end of each prompt, or `gigpo` (GiGPO, arXiv 2505.10978): per decision, the episode's group advantage + gigpo_weight x the step advantage among the group's decisions taken in the same state (the env's info["state_key"]), from the gamma-discounted return of each step."""
    gamma: float = 1.0
    """advantage=gae and advantage=gigpo: discount per decision (1.0 = undiscounted; step_penalty then favours shorter wins). gigpo discounts only the step returns (the episode advantage is of the undiscounted return); the GiGPO paper uses 0.95."""
    gigpo_weight: float = option(1.0, ge=0)
    """advantage=gigpo: weight omega of the step advantage added to the episode advantage (0 = the episode estimator alone; the paper: 1)."""
    gigpo_norm: Literal["std", "mean"] = "std"
    """advantage=gigpo: normalisation at both levels: `std` ((x - mean) / std, the paper's main setting, verl-agent mean_std_norm) or `mean` (x - mean, the paper's variant without std)."""
    gae_lambda: float = 0.95
    """advantage=gae: GAE lambda (0 = one-step TD advantages, 1 = Monte-Carlo return minus the value)."""
    value_coef: float = 0.5
    """advantage=gae: weight of the value loss added to the policy loss."""
    value_clip: float | None = 0.2
    """advantage=gae: clipped value loss, the value may move at most this far from its rollout estimate per update (null = plain squared error)."""
    value_lr: float | None = learning_rate(None)
    """advantage=gae: learning rate of the value head's parameter group in the same AdamW (null = optim.lr); an Adam step moves V by up to ~0.6-0.8 x value_lr x hidden size (the head reads RMS-normalised features): 5e-4 suits SmolLM2 (hidden 576), ~5e-3 deciplane/tiny (64)."""
    value_detach_trunk: bool = False
    """advantage=gae: true = the value loss trains only the value head; false = its gradient also reaches the policy's trainable weights (shared trunk)."""
    gae_normalize: bool = True
    """advantage=gae: standardise the per-decision advantages over the rollout batch (mean 0, std 1); the value targets are not normalised."""
    reward: Literal["return", "won"] = "return"
    """Trajectory reward: the episode's summed env reward, or 1/0 for won."""
    step_penalty: float = option(0.0, ge=0)
    """Subtracted per decision from the trajectory reward (favours shorter wins)."""
    rlid: RLiDLossConfig = field(default_factory=RLiDLossConfig)
    """The RLiD loss (docs/methods.md §1): eps_low / eps_high (PPO clip, null = symmetric), length_balance, bias_control (menu_kl | entropy | none), beta_menu, entropy_coef, min_group_size. 0.1's top-level clip_eps, clip_eps_high, length_balanced, bias_control, beta_menu, entropy_coef still load, with a warning."""
    temperature: float = 1.0
    """Sampling temperature of menu decisions during rollouts."""
    history: int = 2
    """Observation history window (last k turns) in the prompt."""
    readout: Literal["labels", "items"] = "labels"
    """How the menu agent scores its menu: `labels` (RLiD: the next-token logits of the menu letters) or `items` (ours: a learned rank-`readout_rank` pointer score between the prompt's last hidden state and each entry's mean token state, read at `readout_layer` of the same forward; docs/methods.md §1)."""
    readout_layer: int | None = None
    """readout=items: the decoder layer whose input the head reads (null = the final, normed output). Forwards stop there (the layers above it are never used) and model.lora_last_layers counts the layers below it. With model.finetune=head (or a head below every adapter) only the head learns, and its update runs the head alone on states kept by the rollout."""
    readout_rank: int = 16
    """readout=items: rank of the head's bilinear score."""
    readout_head: Literal["bilinear", "mlp"] = "bilinear"
    """readout=items: the head's form. `bilinear`: the rank-`readout_rank` score alone (SmolLM2 at rank 16: 18k parameters). `mlp`: more capacity with the trunk still frozen: a residual MLP (width `readout_mlp_hidden`, GELU, its output layer zero at init, so the untrained head is the bilinear one) on the normed decision state and one on the normed entry states before the same score (SmolLM2, width 256: +591k parameters). It reads the same states, so it disables nothing: the prompt cache stays valid across updates and a head below the trainable layers still updates alone; a decision costs ~2 x hidden x width multiply-adds per state more (docs/training.md "Capacity during RL")."""
    readout_mlp_hidden: int = option(256, gt=0)
    """readout_head=mlp: width of each MLP's hidden layer."""
    readout_mlp_warm_start: bool = False
    """readout_head=mlp: also train the MLPs in the behaviour-cloning warm start. false: the warm start trains the bilinear score alone (the MLPs are the identity until RL, so BC-only equals that of readout_head=bilinear with the same seed) and the MLPs start learning in RL."""
    prompt_cache: PromptCacheConfig = field(default_factory=PromptCacheConfig)
    """How the menu agent computes its prompts: one batched forward, or in fixed token blocks with a cache of the blocks met before (`mode: blocks`)."""
    frozen_trunk: Literal["auto", "recompute", "full_forward"] = "auto"
    """When only the top layers train (model.lora_last_layers, or a partial fine-tune), the update runs only those layers from the hidden states entering them (exact: the same loss and gradients): `auto` keeps those states from the rollout (~prompt tokens x hidden size x 4 bytes per decision) and is off when the whole model trains; `recompute` recomputes them in the update without a graph (no memory held between rollout and update); `full_forward` = the full forward in every update (the 0.2 path; no prompt deduplication in the rollout either)."""
    distill: DistillConfig = field(default_factory=DistillConfig)
    """RL + distillation with CORD."""
    bc: BCConfig = field(default_factory=BCConfig)
    """Behaviour-cloning warm start."""

    CONFIG_ALIASES: ClassVar[dict[str, str]] = {
        "clip_eps": "rlid.eps_low", "clip_eps_high": "rlid.eps_high",
        "length_balanced": "rlid.length_balance", "bias_control": "rlid.bias_control",
        "beta_menu": "rlid.beta_menu", "entropy_coef": "rlid.entropy_coef"}

    def check(self, prefix: str = "") -> None:
        super().check(prefix)
        check_env_suite(self)
        if self.advantage == "rloo" and self.env.group_size < 2:
            raise ConfigError("advantage=rloo needs env.group_size >= 2 (leave-one-out baseline)")
        if self.bc.noise:
            raise ConfigError("bc.noise is for the menu agent (algorithm: rlid_ppo): the text "
                              "agent's warm start clones the command played, so set bc.noise: 0")
        if self.model.finetune == "head" and self.readout != "items":
            raise ConfigError("model.finetune=head trains only the item head: set readout: items")
        if self.readout_rank < 1:
            raise ConfigError(f"readout_rank must be >= 1, got {self.readout_rank}")
        if self.readout_head != "bilinear" and self.readout != "items":
            raise ConfigError(f"readout_head={self.readout_head} is the item head's form: set "
                              "readout: items, or leave readout_head: bilinear")
        if self.readout_layer is not None and self.readout_layer < 1:
            raise ConfigError(f"readout_layer must be >= 1 (a decoder layer) or null (the final "
                              f"output), got {self.readout_layer}")
        _validate_gae(self)


def _validate_gae(obj: RLiDPPOConfig) -> None:
    """Ranges of the critic options (checked whatever the estimator, so a typo is caught
    before a run switches to advantage=gae)."""
    for name in ("gamma", "gae_lambda"):
        v = getattr(obj, name)
        if not 0.0 <= v <= 1.0:
            raise ConfigError(f"{name} = {v} must be in [0, 1] (1.0 = no discounting / "
                              "Monte-Carlo); e.g. --set gamma=0.99")
    if obj.value_coef < 0:
        raise ConfigError(f"value_coef = {obj.value_coef} must be >= 0")
    if obj.advantage == "gae" and obj.value_coef == 0:
        raise ConfigError("advantage=gae with value_coef = 0: the value head would never "
                          "learn; set value_coef > 0 (e.g. 0.5) or use advantage=grpo")
    if obj.value_clip is not None and obj.value_clip <= 0:
        raise ConfigError(f"value_clip = {obj.value_clip} must be > 0, or null for an "
                          "unclipped value loss")


# ---------------------------------------------------------------------------------------
# The algorithm
# ---------------------------------------------------------------------------------------


def group_advantages(estimator: str, rewards: np.ndarray, group_keys: list[str]
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-trajectory advantages from the chosen estimator; returns ``(adv, group_ids)``."""
    keys = {k: i for i, k in enumerate(dict.fromkeys(group_keys))}
    gids = torch.tensor([keys[k] for k in group_keys], dtype=torch.long)          # (N,)
    r = torch.as_tensor(rewards, dtype=torch.float32)                            # (N,)
    return ADVANTAGE_ESTIMATORS[estimator](r, gids), gids


def anchor_ids(trajs: list[Trajectory]) -> torch.Tensor:
    """``(E, T)`` integer id of the state each turn was taken in (``turn.info["state_key"]``,
    :meth:`deciplane.envs.menu.base.MenuTextEnv.state_key`; equal keys, equal ids), -1 on
    padding. Raises ConfigError if a turn has no key."""
    t_max = max([len(tr) for tr in trajs] + [1])
    out = torch.full((len(trajs), t_max), -1, dtype=torch.long)                  # (E, T)
    index: dict[str, int] = {}
    for e, tr in enumerate(trajs):
        for j, t in enumerate(tr.turns):
            key = t.info.get("state_key")
            if key is None:
                raise ConfigError("advantage=gigpo groups decisions by the env's "
                                  "info['state_key'], but this env gives none (TextWorld-v0 "
                                  "only with observation: state; an env of your own: "
                                  "implement MenuTextEnv._anchor_state or return "
                                  "info['state_key']); use advantage: grpo otherwise")
            out[e, j] = index.setdefault(str(key), len(index))
    return out


def gigpo_turn_advantages(trajs: list[Trajectory], reward: str, step_penalty: float,
                          gamma: float, weight: float, norm: str,
                          invalid_penalty: float = 0.0) -> tuple[torch.Tensor, float, bool]:
    """advantage=gigpo: per-turn advantages ``(E, T)`` (right padded,
    :func:`deciplane.objectives.advantages.gigpo_advantages`) from the per-turn rewards
    (their row sums are the trajectory rewards), the share of turns whose state recurs in
    their group (``rollout/step_group_share``) and whether the batch is degenerate (every
    episode group and every step group with all-equal returns: zero advantage, the
    trainer skips the step)."""
    rewards, mask = turn_rewards(trajs, reward, step_penalty, invalid_penalty)  # (E, T)
    keys = {k: i for i, k in enumerate(dict.fromkeys(t.group_id for t in trajs))}
    gids = torch.tensor([keys[t.group_id] for t in trajs], dtype=torch.long)     # (E,)
    anchors = anchor_ids(trajs)                                                  # (E, T)
    adv = gigpo_advantages(rewards, mask, gids, anchors, gamma=gamma, weight=weight,
                           norm=norm)                                            # (E, T)
    steps = discounted_returns(rewards, mask, gamma)[mask]                      # (N,)
    degenerate = (is_degenerate_batch(rewards.sum(dim=1), gids)
                  and (weight == 0 or is_degenerate_batch(
                      steps, step_group_ids(gids, anchors, mask))))
    return adv, step_group_share(gids, anchors, mask), degenerate


def greedy_agent(config: RLiDPPOConfig, policy: Any, block_cache: Any = None,
                 readout: str | None = None) -> MenuAgent:
    """The held-out evaluation agent of a menu run with the run's prompt settings
    (training-time evaluation and ``deciplane evaluate RUN_DIR`` both use it): greedy
    decisions, or with ``eval.greedy: false`` sampled at the run's temperature (seeded by
    the episode loop); ``readout`` another than the run's (the labels zero-shot);
    ``block_cache`` the process's (``prompt_cache.mode: blocks``), else a new one."""
    if block_cache is None:
        block_cache = config.prompt_cache.make()
    return MenuAgent(policy, greedy=config.eval.greedy, temperature=config.temperature,
                     history=config.history, dedup=config.frozen_trunk != "full_forward",
                     readout=readout or config.readout, block_cache=block_cache)


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
    mask = torch.stack([torch.arange(kmax, device=r.device) < r.shape[0] for r in rows])  # (N, K)
    return lp, mask


def menu_ids(keys: list[tuple[str, ...]]) -> torch.Tensor:
    index = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    return torch.tensor([index[k] for k in keys], dtype=torch.long)


def bc_valid_episodes(episodes: int, fraction: float) -> int:
    """Expert episodes held out for the warm start's early stopping: ``ceil(fraction x
    episodes)``, at least one when ``fraction > 0``, never all of them."""
    if fraction <= 0 or episodes < 2:
        return 0
    return min(episodes - 1, max(1, math.ceil(fraction * episodes)))


@torch.no_grad()
def expert_fit(agent: MenuAgent, decisions: list[Decision], targets: list[int],
               batch: int) -> tuple[float, float]:
    """Mean negative log-likelihood of the expert's choices and the greedy agreement with
    them, ``(nll, agreement)``, under the agent's current weights (no grad)."""
    nll, hits = 0.0, 0
    for s in range(0, len(decisions), max(1, batch)):
        for lp, t in zip(agent.menu_log_probs(decisions[s:s + batch]), targets[s:s + batch]):
            nll -= float(lp[t])
            hits += int(int(lp.argmax()) == t)
    n = max(1, len(decisions))
    return nll / n, hits / n


def bc_parameters(optimizer: Optimizer, head: Any, mlp: bool) -> list[torch.nn.Parameter]:
    """What the warm start trains: the optimizer's parameters, less an MLP item head's MLPs
    unless ``mlp`` (``readout_mlp_warm_start``; they stay the identity until RL)."""
    skip = set() if mlp or head is None else {id(p) for p in head.mlp_parameters()}
    return [p for g in optimizer.param_groups for p in g["params"] if id(p) not in skip]


class RLiDPPO(Algorithm):
    """RLiD-PPO for the decision-plane menu agent (docs/methods.md §1, §3)."""

    Config = RLiDPPOConfig
    config: RLiDPPOConfig

    def __init__(self, config: RLiDPPOConfig, policy: Any) -> None:
        super().__init__(config, policy)
        c = config
        self.block_cache = c.prompt_cache.make()   # one per process: every agent reuses it
        self.agent = MenuAgent(policy, temperature=c.temperature, history=c.history,
                               dedup=c.frozen_trunk != "full_forward", readout=c.readout,
                               block_cache=self.block_cache)
        self.trunk_boundary = None if c.frozen_trunk == "full_forward" else trunk_boundary(policy.model)
        head = policy.item_head
        # a head reading a frozen layer: the rollout keeps its states, the update is the head's
        frozen = first_trainable_layer(policy.model)
        if head is not None and head.layer <= frozen:
            self.agent.keep_readout = True
            self.trunk_boundary = None   # the update runs no layer at all
        if self.trunk_boundary is not None:
            # only the top layers train: the update runs them from the boundary states
            if c.frozen_trunk == "auto":
                self.agent.keep_boundary = self.trunk_boundary
            self.agent.update_logits = functools.partial(
                menu_update_logits, policy.model, boundary=self.trunk_boundary,
                pad_id=policy.tokenizer.pad_token_id, device=policy.device)
        self.eval_agent = greedy_agent(c, policy, self.block_cache)
        self._labels_agent: MenuAgent | None = None   # the zero-shot labels readout's
        self.suite = make_suite(c, expert=c.distill.enabled or c.bc.episodes > 0,
                                workers=c.env_workers)
        self.rlid: RLiDLossConfig = c.rlid   # the config's section is the loss config
        self.critic = None
        if c.advantage == "gae":
            self.critic = Critic(policy, detach_trunk=c.value_detach_trunk, readout=c.readout)
        self.teacher = None
        if c.distill.enabled and c.distill.teacher == "policy":
            tp = load_policy(c.distill.teacher_model, device=str(policy.device))  # beside the student
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
        self.policy.model.eval()
        with torch.no_grad():
            trajs, stats = self.suite.play_groups(collect_menu_episodes, self.agent, seed)
        self.policy.model.train()
        rewards = trajectory_rewards(trajs, c.reward, c.step_penalty)
        metrics = {**stats.metrics(), **per_env_rollout_metrics(trajs)}
        metrics["rollout/reward"] = float(rewards.mean())
        if self.critic is not None:
            data, m = self.gae_batch(trajs)
            metrics.update(m)
            # even with all-equal rewards the critic's errors give non-zero advantages and
            # the value head has targets: never a skipped step
            degenerate = not data.decisions
        elif c.advantage == "gigpo":
            adv, share, degenerate = gigpo_turn_advantages(
                trajs, c.reward, c.step_penalty, c.gamma, c.gigpo_weight,
                c.gigpo_norm)                                                    # (E, T)
            data = flatten_decisions(trajs, adv, c.rlid.length_balance)
            metrics["rollout/adv_abs"] = (float(data.advantages.abs().mean())
                                          if data.decisions else 0.0)
            metrics["rollout/step_group_share"] = share
        else:
            adv, gids = group_advantages(c.advantage, rewards, [t.group_id for t in trajs])
            data = flatten_decisions(trajs, adv, c.rlid.length_balance)
            metrics["rollout/adv_abs"] = float(adv.abs().mean())
            degenerate = is_degenerate_batch(torch.as_tensor(rewards), gids)
        # the groups whose returns differ: where a group baseline has anything to learn
        keys = {k: i for i, k in enumerate(dict.fromkeys(t.group_id for t in trajs))}
        metrics["rollout/groups_with_signal"] = varied_group_share(
            torch.as_tensor(rewards, dtype=torch.float32),
            torch.tensor([keys[t.group_id] for t in trajs], dtype=torch.long))
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
        d = batch.select(micro).data
        decs = d.decisions
        values = None
        if self.critic is None:
            log_probs = self.agent.menu_log_probs(decs)
        else:  # the same forward pass gives the values
            log_probs, values = self.critic.score(self.agent, decs)              # (n,)
        lp, mask = pad_menu_log_probs(log_probs)                                 # (n, K)
        out = rlid_loss(self.rlid, lp, d.actions, d.old_logp, d.advantages, d.episode_ids,
                        mask, menu_ids(d.menu_keys), weights=d.weights)
        metrics = dict(out.metrics)
        task = out.loss
        if values is not None:
            vl = value_loss(values, d.old_values, d.returns, self.config.value_clip)
            task = task + self.config.value_coef * vl
            metrics["loss/value"] = float(vl.detach())
        distill = None
        if self.config.distill.enabled:
            distill, m = self._distill(lp.float(), mask, d)
            metrics.update(m)
        return MicroLoss(task=task, distill=distill, metrics=metrics)

    def _distill(self, lp: torch.Tensor, mask: torch.Tensor, d: DecisionBatch
                 ) -> tuple[torch.Tensor, dict[str, float]]:
        """Distillation on the student's own visited states (``d``: the micro-batch): the
        sum over the micro-batch (the engine divides by the batch's count,
        :meth:`distill_normaliser`)."""
        if self.config.distill.teacher == "expert":
            s, _ = expert_distill_loss(lp, d.expert)
            agree = [int(lp[j].argmax()) == e for j, e in enumerate(d.expert) if e is not None]
            return s, {"distill/expert_agreement": float(np.mean(agree)) if agree else 0.0}
        with torch.no_grad():
            t_lp, _ = pad_menu_log_probs(self.teacher.menu_log_probs(d.decisions))
        return policy_distill_loss(lp, t_lp.float(), mask), {}

    def warm_start(self, optimizer: Optimizer) -> dict[str, Any] | None:
        """Behaviour cloning on expert episodes (the env's expert actions), if configured,
        then ``bc.dagger_rounds`` rounds of DAgger (:meth:`_dagger_round`)."""
        c = self.config
        if c.bc.episodes <= 0:
            return None
        seed = iteration_seed(c.seed, -1, "bc")
        self.policy.model.eval()
        trajs, stats = collect_bc_episodes(self.suite, self.agent, c.bc.episodes,
                                           c.env.max_episode_steps, seed, noise=c.bc.noise)
        self.policy.model.train()
        n_valid = bc_valid_episodes(len(trajs), c.bc.valid_fraction)
        labelled = [[t for t in tr.turns if t.expert_index is not None] for tr in trajs]
        fit, held = labelled[:len(trajs) - n_valid], labelled[len(trajs) - n_valid:]
        decs = [t.decision for turns in fit for t in turns]
        targets = [t.expert_index for turns in fit for t in turns]
        held_decs = [t.decision for turns in held for t in turns]
        held_targets = [t.expert_index for turns in held for t in turns]
        params = bc_parameters(optimizer, self.policy.item_head, c.readout_mlp_warm_start)

        def fit_all(fit_seed: int) -> tuple[list[float], list[dict[str, float]], list[float]]:
            """Epochs over every labelled state so far (early stopping on the held-out
            expert episodes): ``(losses, curve, held-out agreement per curve row)``."""

            def loss_fn(part: list[int]) -> torch.Tensor:
                lp, _ = pad_menu_log_probs(self.agent.menu_log_probs([decs[i] for i in part]))
                loss, n = expert_distill_loss(lp.float(), [targets[i] for i in part])
                return loss / max(n, 1)

            def validate() -> float:
                """Minus the mean NLL of the expert's choices on the held-out episodes."""
                nll, agree = expert_fit(self.agent, held_decs, held_targets,
                                        c.optim.micro_batch_size)
                scores.append(agree)
                return -nll

            scores: list[float] = []
            curve: list[dict[str, float]] = []
            losses = run_bc_epochs(len(decs), loss_fn, params, lr=c.bc.lr, epochs=c.bc.epochs,
                                   micro_batch_size=c.optim.micro_batch_size,
                                   max_grad_norm=c.optim.max_grad_norm, seed=fit_seed,
                                   on_epoch=self.on_bc_epoch,
                                   validate=validate if held_decs else None,
                                   patience=c.bc.patience, curve=curve)
            return losses, curve, scores

        losses, curve, scores = fit_all(seed)
        out = {"kind": "behaviour cloning on env expert actions", "episodes": len(trajs),
               "decisions": len(decs), "epochs": c.bc.epochs, "env_steps": stats.env_steps,
               "final_loss": losses[-1] if losses else None,
               **warm_start_envs(self.suite, trajs)}
        if held_decs:
            for row, agree in zip(curve, scores):
                row["valid_agreement"] = agree
            best = max(curve, key=lambda r: r["valid"])
            out.update(valid_episodes=len(held), valid_decisions=len(held_decs),
                       valid_curve=curve, best_epoch=int(best["epoch"]),
                       valid_agreement=best["valid_agreement"])
        rounds: list[dict[str, Any]] = []
        last_s = 0.0
        for r in range(c.bc.dagger_rounds):
            if self.warm_start_fits is not None and not self.warm_start_fits(last_s):
                break
            t0 = time.perf_counter()
            new_decs, new_targets, row = self._dagger_round(iteration_seed(c.seed, r, "dagger"))
            decs += new_decs
            targets += new_targets
            out["env_steps"] += row.pop("env_steps")
            _, curve, scores = fit_all(iteration_seed(c.seed, r, "dagger_fit"))
            if held_decs and curve:
                best = max(range(len(curve)), key=lambda i: curve[i]["valid"])
                row.update(best_epoch=int(curve[best]["epoch"]), valid_agreement=scores[best])
            row["decisions_total"] = len(decs)
            rounds.append(row)
            last_s = time.perf_counter() - t0
        if c.bc.dagger_rounds:
            out["dagger"] = rounds
            out["kind"] += f", then {len(rounds)} DAgger rounds"
            if rounds and "valid_agreement" in rounds[-1]:
                out["valid_agreement"] = rounds[-1]["valid_agreement"]
        return out

    def _dagger_round(self, seed: int) -> tuple[list[Decision], list[int], dict[str, Any]]:
        """One DAgger round: the agent (sampled) plays ``bc.dagger_episodes`` training
        episodes; every visited state the expert has an action for becomes a labelled
        decision. Returns ``(decisions, expert actions, round metrics)``."""
        c = self.config
        trajs: list[Trajectory] = []
        steps = 0
        self.policy.model.eval()
        while len(trajs) < c.bc.dagger_episodes:
            vec, seeds = self.suite.train_batch(seed + len(trajs), episodes="rollout")
            with torch.no_grad():
                part, st = collect_menu_episodes(self.agent, vec, seeds, 1,
                                                 c.env.max_episode_steps, seed + len(trajs))
            trajs += part[:c.bc.dagger_episodes - len(trajs)]
            steps += st.env_steps
        self.policy.model.train()
        turns = [t for tr in trajs for t in tr.turns if t.expert_index is not None]
        agree = [int(t.decision.index == t.expert_index) for t in turns]
        return ([t.decision for t in turns], [int(t.expert_index) for t in turns],
                {"episodes": len(trajs), "won": sum(int(tr.won) for tr in trajs),
                 "states": len(turns), "env_steps": steps,
                 "on_policy_agreement": float(np.mean(agree)) if agree else 0.0})

    def eval_spec(self, kind: str) -> tuple[Any, Any]:
        """``(agent, episode collector)`` of an evaluation: ``trained`` (the run's greedy
        agent) or ``labels`` (RLiD's labels readout on the same weights)."""
        if kind == "labels":
            if self._labels_agent is None:
                self._labels_agent = greedy_agent(self.config, self.policy, self.block_cache,
                                                  readout="labels")
            return self._labels_agent, collect_menu_episodes
        if kind != "trained":
            raise ConfigError(f"unknown evaluation agent {kind!r} (trained, labels)")
        return self.eval_agent, collect_menu_episodes

    def evaluate(self, split: str) -> dict[str, float]:
        agent, collect = self.eval_spec("trained")
        return self.suite.evaluate(agent, split, self.config.eval.episodes, collect,
                                   model=self.policy.model, remote="trained")

    def decision_counts(self) -> dict[str, int]:
        """This process's menu decisions so far (rollouts, warm start, evaluations): how
        many, their prompt tokens and the tokens run through the model."""
        agents = [a for a in (self.agent, self.eval_agent, self._labels_agent) if a is not None]
        return {k: sum(getattr(a, k) for a in agents)
                for k in ("decisions", "tokens_prompted", "tokens_computed")}

    def eval_costs(self) -> dict[str, float]:
        """With the labels zero-shot timed first (a full forward per decision): the items
        agent's forward stops at its head's layer (cost ~ layer / layers), and the
        untrained head needs none."""
        head = self.policy.item_head
        if head is None or not self.config.eval.zero_shot_labels:
            return {}
        ratio = head.layer / len(decoder_layers(self.policy.model))
        return {"before": 0.0 if head.is_constant() else ratio, "trained": ratio}

    def evaluate_labels(self, split: str) -> dict[str, float]:
        """The same evaluation with RLiD's labels readout (the run's prompts) on the
        current weights: before training, the untrained model's zero-shot menu choice."""
        agent, collect = self.eval_spec("labels")
        return self.suite.evaluate(agent, split, self.config.eval.episodes, collect,
                                   model=self.policy.model, remote="labels")

    def close(self) -> None:
        self.suite.close()


__getattr__ = renamed_names(__name__)   # MenuPPO, its name until 0.3

__all__ = ["RLiDPPO", "anchor_ids", "bc_parameters", "bc_valid_episodes", "gigpo_turn_advantages", "expert_fit", "flatten_decisions", "greedy_agent", "group_advantages", "menu_ids",
           "pad_menu_log_probs"]
