"""Typed training configs: one dataclass per algorithm, loaded from YAML with overrides.

Every option is a typed field with a docstring right below it (read by
:func:`describe_config`, shown by ``deciplane train --help-config``). Options with a fixed
set of values are ``Literal`` types; an unknown value raises
:class:`~deciplane.errors.ConfigError` that lists the allowed ones.

YAML layout: a top-level ``algorithm:`` selects the dataclass (a training method of
:mod:`deciplane.methods`); the other keys mirror its fields, nested sections included::

    algorithm: rlid_ppo
    model: {name: deciplane/smollm2-135m-instruct, finetune: lora}
    optim: {lr: 2.0e-4}

``--set optim.lr=1e-4`` style overrides use dotted keys and are coerced to the field's type
(``true``/``false``, ints, floats, ``null``, lists/dicts as YAML).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch

from deciplane.config import (coerce, deep_merge, describe_config, dump_yaml,
                              field_docs, from_dict, parse_override, read_yaml_mapping,
                              set_dotted, to_dict)
from deciplane.errors import ConfigError
from deciplane.methods import MethodTable, load_config_class
from deciplane.methods import get as get_method
from deciplane.options import check_options, learning_rate, option
from deciplane.objectives.policy_loss import PolicyLossConfig
from deciplane.objectives.rlid import RLiDLossConfig
from deciplane.objectives.tlm_dre import TLMDRELossConfig

# ---------------------------------------------------------------------------------------
# Sections shared by the algorithms
# ---------------------------------------------------------------------------------------


@dataclass
class ModelConfig:
    """Which model to train and how."""

    name: str = "deciplane/smollm2-135m-instruct"
    """Built-in name (`deciplane/tiny`, `deciplane/smollm2-135m-instruct`), a local HF folder or a GGUF file."""
    finetune: Literal["lora", "full", "head"] = "lora"
    """`lora`: train PEFT LoRA adapters only; `full`: train every weight; `head` (rlid_ppo with readout=items): only the item head trains, the model stays frozen."""
    lora_rank: int = option(16, gt=0)
    """LoRA rank r (finetune=lora)."""
    lora_alpha: int = 32
    """LoRA scaling alpha (finetune=lora)."""
    lora_targets: list[str] | None = None
    """Module names that get LoRA adapters; null = the agents package default."""
    lora_last_layers: int | None = option(None, gt=0)
    """Put LoRA adapters only in the last N transformer layers (null = all): backward then stops there, which cuts the cost of an update to little more than a forward pass. With an item head at `readout_layer` L (rlid_ppo), the last N of the L layers the policy reads (layers L-N..L-1)."""
    threads: int = option(2, gt=0)
    """torch.set_num_threads for the run."""
    trunk_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Precision of the frozen layers below the first trainable one (LoRA on the last layers): `bfloat16` runs them in bf16 weights (the trainable layers, the norm and the output layer stay fp32); `auto` = bfloat16 on a CPU with native bf16 instructions (avx512_bf16/amx_bf16; `deciplane doctor` says) or a GPU, else float32 — without them bf16 matmuls are far slower than fp32."""
    compute_dtype: Literal["float32", "bfloat16"] = "float32"
    """Precision of the trainable decoder layers' matmuls: `bfloat16` runs each of them under torch.autocast (fp32 master weights, bf16 matmuls in the forward and the backward; the residual stream, the norms and the output layer stay fp32), in the rollout and the update alike. Only on a CPU with native bf16 or a GPU. Measured for speed (benchmarks/bench_grpo_vs_trl.py), not for learning: off by default."""
    device: str = "cpu"
    """Where the model trains: `cpu`, `cuda` or `auto`; under `accelerate launch` / `torchrun` `cuda` is each process's own GPU (`cuda:LOCAL_RANK`)."""


@dataclass
class EnvConfig:
    """The environment suite that rollouts and evaluations run on."""

    id: str = "deciplane/TextWorld-v0"
    """A registered environment id (`deciplane envs` lists them)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for gym.make (e.g. games: tw-simple)."""
    train_split: str = "train"
    """Split whose games are used for training rollouts."""
    games_per_iteration: int = option(4, gt=0)
    """Distinct games (initial states) per rollout iteration; each forms one group."""
    group_size: int = option(4, gt=0)
    """Episodes per game per iteration (the group of the group baseline)."""
    max_episode_steps: int = option(12, gt=0)
    """Episode length cap (truncation) for training and evaluation."""


@dataclass
class OptimConfig:
    """Optimizer and update schedule."""

    lr: float = learning_rate(2e-4)
    """AdamW learning rate."""
    weight_decay: float = option(0.0, ge=0)
    """AdamW weight decay."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """AdamW betas."""
    max_grad_norm: float = option(1.0, ge=0)
    """Gradient-norm clip applied before every optimizer step (0 = off): over all the policy's trainable weights, and separately over each extra module (a value head)."""
    epochs: int = option(2, gt=0)
    """Passes over each rollout batch (PPO epochs)."""
    minibatches: int = option(1, gt=0)
    """Optimizer steps per epoch; the batch is split into this many parts."""
    micro_batch_size: int = option(16, gt=0)
    """Units per forward pass: menu decisions (rlid_ppo), samples (math_grpo) or whole trajectories with all their turns (text_ppo: memory grows with turns x prompt length); gradients accumulate across micro-batches, so it changes memory, not the update (a resumed run may change it)."""


@dataclass
class EvalConfig:
    """Held-out evaluation during and after training."""

    every: int = option(5, ge=0)
    """Evaluate on `during_split` every this many iterations (0 = only at the end)."""
    during_split: str = "valid"
    """Split used for evaluations during training."""
    final_splits: list[str] = field(default_factory=lambda: ["valid", "test"])
    """Splits evaluated before training and at the end (summary.json: eval.<split>.*)."""
    episodes: int | None = option(None, ge=0)
    """Episodes per evaluation; null = one per game of the split."""
    greedy: bool = True
    """Greedy (argmax) decisions during evaluation."""
    before: bool = True
    """Evaluate the untrained policy on `final_splits` first (before/after numbers)."""
    during_episodes: int | None = None
    """Episodes of each evaluation during training (`every`): null = as many as the others (after the time plan); fewer make a cheaper point of the held-out curve (the first ones of the same episodes)."""
    workers: int = option(1, gt=0)
    """Processes that play the held-out evaluation episodes (rlid_ppo, text_ppo): 1 = this one; 2 = this one and a helper process, each with one torch thread while they play (on 2 cores an evaluation then ends ~1.3x sooner than in one process with 2 threads: benchmarks/bench_eval_workers.py). A helper loads its own copy of the model and envs (~1 GB with SmolLM2-135M) when the run starts."""
    cache_baselines: bool = True
    """Keep the zero-shot evaluations (`zero_shot_labels`, `before`) in `$DECIPLANE_HOME/baselines/` and reuse them in a later run with the same weights, agent settings, prompt, env settings, split, episodes and deciplane code (rlid_ppo, text_ppo; summary.json `baseline_cache` names the ones read). A cached evaluation costs no time, and the time plan counts it as free."""
    zero_shot_labels: bool = False
    """rlid_ppo with readout=items: also evaluate the untrained model with RLiD's labels readout (same prompts, same episodes) before training — summary.json `zero_shot_labels`, paired with every later stage."""


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
class CheckpointConfig:
    """Atomic checkpoints for exact resume."""

    every: int = option(1, ge=0)
    """Write a checkpoint every this many iterations."""
    keep_last: int = option(2, gt=0)
    """How many checkpoints to keep (older ones are deleted)."""


@dataclass
class PlanConfig:
    """How a run with `max_wall_time_s` shares its time (no effect without a limit)."""

    eval_share: float | None = None
    """At most this share of max_wall_time_s for all held-out evaluations together (before training, after the warm start, during, final): after the first evaluation batch is timed, every evaluation plays the same number of episodes, cut to fit (at least one batch of 8, at most eval.episodes). null (default): evaluations come before RL: they may use everything the warm start's share leaves, and RL iterations get the rest (summary.json plan.eval_cut_reason says why episodes were cut, if they were)."""
    warm_start_share: float = 0.2
    """At most this share of max_wall_time_s for the behaviour-cloning warm start's epochs (and DAgger rounds), counted from the end of the expert collection (the bc.episodes asked for are always played): no epoch starts that would end past it (the first always runs)."""

    def check(self, prefix: str = "") -> None:
        for name in ("eval_share", "warm_start_share"):
            v = getattr(self, name)
            if v is not None and not 0.0 < v < 1.0:
                raise ConfigError(f"{prefix}{name} = {v} must be in (0, 1)")
        if self.eval_share is not None and self.eval_share + self.warm_start_share > 1.0:
            raise ConfigError(f"{prefix}eval_share + warm_start_share = "
                              f"{self.eval_share + self.warm_start_share} exceeds the budget; "
                              "lower them (or eval_share: null = all the warm start leaves)")


@dataclass
class DistillConfig:
    """RL + distillation to a teacher on the student's own states, combined by CORD."""

    enabled: bool = False
    """Add the distillation objective L2 (and combine it with the RL objective L1)."""
    teacher: Literal["expert", "policy"] = "expert"
    """`expert`: the env's expert action (info["expert_action"]) as a one-hot target; `policy`: another model."""
    teacher_model: str | None = None
    """Model name for teacher=policy."""
    lam: float = option(1.0, ge=0)
    """Weight lambda on the distillation gradient g2."""
    combine: Literal["conflict", "always", "sum"] = "conflict"
    """CORD mode: project on conflict, always project, or the plain sum g1 + lambda*g2."""
    protect: Literal["task", "teacher"] = "task"
    """The protected objective p (the other one is projected)."""

    def check(self, prefix: str = "") -> None:
        if self.enabled and self.teacher == "policy" and not self.teacher_model:
            raise ConfigError(f"{prefix}teacher=policy needs {prefix}teacher_model (a model name)")


@dataclass
class BCConfig:
    """Optional behaviour-cloning warm start on expert actions (reported as such)."""

    episodes: int = option(0, ge=0)
    """Expert episodes collected for the warm start (0 = no warm start)."""
    epochs: int = option(2, gt=0)
    """Passes over the expert decisions."""
    lr: float = learning_rate(2e-4)
    """Learning rate of the warm start."""
    valid_fraction: float = 0.0
    """Share of the expert episodes held out (whole episodes) to stop the warm start early: after each epoch the menu agent's mean negative log-likelihood of the expert's choices on them is measured; training stops once it has not improved for `patience` epochs and the best weights are kept (`epochs` is then the most it may run). 0 = no held-out slice, all `epochs` run."""
    patience: int = 3
    """Epochs without a better held-out score before the warm start stops (valid_fraction > 0)."""
    noise: float = 0.0
    """Probability that a step of an expert episode plays a uniformly random legal action instead of the expert's (the label stays the expert's): the data then holds the expert's recoveries from mistakes (DART-style). Needs an expert with an action in every state (TextWorld-Express twc's replanning expert, TextWorld's planner); with a gold path only, states off it are played at random and left out of the data."""

    dagger_rounds: int = 0
    """Rounds of DAgger after behaviour cloning (Ross et al., 2011): the agent itself (sampled, at the run's temperature) plays `dagger_episodes` training episodes, the env expert labels every state it visited, and the agent is fitted again (the same epochs, lr and early stopping) on all expert-labelled states so far — its own mistakes included, so it learns to recover from the states its errors lead to. Needs an expert with an action in every state (TextWorld-Express twc's replanning expert, TextWorld's planner). The time plan starts a round only if it fits in the warm start's share."""
    dagger_episodes: int = 16
    """Episodes the agent plays per DAgger round."""

    def check(self, prefix: str = "") -> None:
        if self.dagger_rounds < 0 or self.dagger_episodes < 1:
            raise ConfigError(f"{prefix}dagger_rounds must be >= 0 and dagger_episodes >= 1, "
                              f"got {self.dagger_rounds} and {self.dagger_episodes}")
        if not 0.0 <= self.noise < 1.0:
            raise ConfigError(f"{prefix}noise = {self.noise} must be in [0, 1)")
        if not 0.0 <= self.valid_fraction < 1.0:
            raise ConfigError(f"{prefix}valid_fraction = {self.valid_fraction} must be in [0, 1)")
        if self.patience < 1:
            raise ConfigError(f"{prefix}patience must be >= 1, got {self.patience}")


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


# ---------------------------------------------------------------------------------------
# Algorithms
# ---------------------------------------------------------------------------------------


@dataclass
class EnvWorkersConfig:
    """Where the training rollouts' sub-envs run (evaluation always runs in this process)."""

    backend: Literal["local", "ray"] = "local"
    """local: in this process (gymnasium SyncVectorEnv); ray: Ray actors (pip install 'deciplane[ray]'; joins RAY_ADDRESS, else starts a local Ray instance)."""
    num_workers: int = 2
    """Ray actors the sub-envs are spread over (backend ray); each reserves one Ray CPU."""
    on_failure: Literal["retry", "drop"] = "retry"
    """A crashed or hung worker's episodes: replayed on a fresh worker (retry), or ended truncated with info env_worker_dropped (drop); both are counted."""
    step_timeout_s: float = 60.0
    """Deadline of one reset/step call; a worker past it is hung and gets replaced."""
    max_retries: int = 3
    """Worker restarts allowed within one call before the episode is dropped (a reset raises EnvWorkerError)."""

    def check(self, prefix: str = "") -> None:
        if self.num_workers < 1 or self.max_retries < 0 or not self.step_timeout_s > 0:
            raise ConfigError(f"{prefix}env_workers needs num_workers >= 1, max_retries >= 0 "
                              f"and step_timeout_s > 0; got {self}")


@dataclass
class TrainConfig:
    """Fields every training run has."""

    algorithm: str = ""
    """Which algorithm (selects the config class)."""
    seed: int = 0
    """Master seed: rollout randomness derives from (seed, iteration), so runs are reproducible and resumable."""
    iterations: int = option(20, gt=0)
    """Rollout + update iterations."""
    max_wall_time_s: float | None = None
    """Wall-time budget of the whole run (model load, evaluations, warm start, RL); the trainer sizes evaluations and the warm start (`plan`) and starts an RL iteration only if it and the final evaluation still fit; null = no limit."""
    plan: PlanConfig = field(default_factory=PlanConfig)
    """How max_wall_time_s is shared between evaluations, the warm start and RL."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimizer."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Evaluation."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoints."""
    progress: bool = True
    """Show a rich progress bar."""
    env_workers: EnvWorkersConfig = field(default_factory=EnvWorkersConfig)
    """Where rollout envs run: in process, or as Ray actors (backend: ray, num_workers: N)."""

    def check(self, prefix: str = "") -> None:
        # without CUDA run_training says so first (the device, not the workers, is wrong)
        if str(self.model.device).startswith("cuda") and torch.cuda.is_available():
            check_eval_workers(self.eval.workers, "cuda")


def check_eval_workers(workers: int, device_type: str) -> None:
    """``eval.workers > 1`` on a GPU: refused (each helper process would load its own copy
    of the model on the same GPU, and they would queue on it anyway)."""
    if workers > 1 and device_type == "cuda":
        raise ConfigError(f"eval.workers={workers} with the model on a GPU: each helper process "
                          "would load a second copy of the model on it; set eval.workers: 1 "
                          "(batched evaluation on the GPU is the fast path)")


@dataclass
class RLiDPPOConfig(TrainConfig):
    """PPO on menu decisions (RLiD, docs/methods.md §1), optionally + CORD distillation."""

    algorithm: Literal["rlid_ppo"] = "rlid_ppo"
    """Menu-agent PPO."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """Environment suite."""
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


@dataclass
class TextPPOConfig(TrainConfig):
    """Token-level PPO for the free-text agent, optionally with TLM-DRE turn weights."""

    algorithm: Literal["text_ppo"] = "text_ppo"
    """Free-text agent PPO."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """Environment suite."""
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


CONFIGS = MethodTable("train", load_config_class)
"""algorithm name -> config dataclass: a read-only view of :mod:`deciplane.methods` (the
registry; new code calls ``load_config_class(get(name, "train"))``)."""

# ---------------------------------------------------------------------------------------
# Loading, overrides, validation
# ---------------------------------------------------------------------------------------


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                data: dict[str, Any] | None = None) -> TrainConfig:
    """Build a validated config from a YAML file (or ``data``) plus ``key=value`` overrides."""
    raw: dict[str, Any] = read_yaml_mapping(path) if path is not None else {}
    if data:
        raw = deep_merge(raw, data)
    for item in overrides or []:
        key, value = parse_override(item)
        set_dotted(raw, key, value)
    spec = get_method(str(raw.get("algorithm", "")), "train")   # before any model loads
    return from_dict(load_config_class(spec), raw)


def validate(obj: Any, prefix: str = "") -> None:
    """Range checks and the section's own rules (what :func:`from_dict` runs)."""
    check_options(obj, prefix)
    check = getattr(obj, "check", None)
    if callable(check):
        check(prefix)


def _validate_gae(obj: "RLiDPPOConfig") -> None:
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


__all__ = ["CONFIGS", "load_config", "validate", "ModelConfig", "EnvConfig", "OptimConfig",
           "EvalConfig", "PlanConfig", "CheckpointConfig", "DistillConfig", "BCConfig", "TLMDREConfig",
           "TrainConfig", "RLiDPPOConfig", "TextPPOConfig", "MathGRPOConfig",
           # re-exported from deciplane.config (their home since 0.2)
           "coerce", "from_dict", "parse_override", "to_dict", "dump_yaml", "field_docs",
           "describe_config"]
