"""Typed training configs: the sections every training method shares, loaded from YAML
with overrides.

Every option is a typed field with a docstring right below it (read by
:func:`describe_config`, shown by ``deciplane train --help-config``). Options with a fixed
set of values are ``Literal`` types; an unknown value raises
:class:`~deciplane.errors.ConfigError` that lists the allowed ones.

YAML layout: a top-level ``algorithm:`` selects the config dataclass of a training method of
:mod:`deciplane.methods` (the registry); each method's config class is a
:class:`TrainConfig` that lives in the method's own module
(:class:`~deciplane.methods.rlid_ppo.RLiDPPOConfig`,
:class:`~deciplane.methods.text_ppo.TextPPOConfig`,
:class:`~deciplane.methods.math_grpo.MathGRPOConfig`). The other keys mirror its fields,
nested sections included::

    algorithm: rlid_ppo
    model: {name: deciplane/smollm2-135m-instruct, finetune: lora}
    optim: {lr: 2.0e-4}

``--set optim.lr=1e-4`` style overrides use dotted keys and are coerced to the field's type
(``true``/``false``, ints, floats, ``null``, lists/dicts as YAML).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import torch

from deciplane._moved import renamed_names
from deciplane.config import (coerce, deep_merge, describe_config, dump_yaml,
                              field_docs, from_dict, parse_override, read_yaml_mapping,
                              set_dotted, to_dict)
from deciplane.errors import ConfigError
from deciplane.methods import MethodTable, load_config_class
from deciplane.methods import get as get_method
from deciplane.options import check_options, learning_rate, option

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
class SuiteEnvConfig(EnvConfig):
    """One environment of a suite (`envs:`): its own id, kwargs, splits, step cap and held-out episodes, plus its share of the training groups. Fields it leaves out are the `env:` section's (the iteration's shape, `games_per_iteration` and `group_size`, is the `env:` section's alone)."""

    name: str | None = None
    """Its row in the results (per-env metrics, summary.json `per_env`); null = its `game` kwarg when it has one (`twc`), else the id's last part (`TextWorld-v0`). Names must differ and contain no `/` or `:`."""
    weight: float = option(1.0, gt=0)
    """Share of the training groups drawn from this env: each group's env is drawn with probability weight / (sum of weights), seeded by the iteration; the warm start's expert episodes are shared in the same proportion."""
    eval_episodes: int | None = option(None, ge=0)
    """Held-out episodes of each of this env's evaluations; null = `eval.episodes`."""
    splits: dict[str, str] = field(default_factory=dict)
    """The run's split names (`eval.final_splits`, `eval.during_split`) -> this env's own (e.g. `{test: valid_unseen}` for ALFWorld); a split not named is played under its own name."""

    def split(self, name: str) -> str:
        """This env's name for the run's split ``name``."""
        return self.splits.get(name, name)


def env_entries(config: Any) -> list[SuiteEnvConfig]:
    """The environments a run trains and evaluates on: its ``envs:`` entries, or its one
    ``env:`` section as a suite of one (weight 1, the run's split names)."""
    if getattr(config, "envs", None):
        return list(config.envs)
    env = config.env
    return [SuiteEnvConfig(**{f.name: getattr(env, f.name) for f in fields(EnvConfig)},
                           name=default_env_name(env.id, env.kwargs))]


def check_env_suite(config: Any) -> None:
    """What a suite (``envs:``) cannot do yet, refused when the config is read."""
    if not getattr(config, "envs", None):
        return
    bc = getattr(config, "bc", None)
    if bc is not None and bc.dagger_rounds:
        raise ConfigError("bc.dagger_rounds with envs: DAgger plays one env; use a single env: "
                          "section or bc.dagger_rounds: 0")
    if config.env_workers.backend == "ray":
        raise ConfigError("env_workers.backend: ray with envs: a suite's env drawn for fewer "
                          "groups than its vector env holds plays on local sub-envs only; use "
                          "env_workers.backend: local with a suite")


SHAPE_FIELDS = ("games_per_iteration", "group_size")
"""The iteration's shape: fields of the `env:` section that a suite entry may not set to
another value."""


def default_env_name(env_id: str, kwargs: dict[str, Any]) -> str:
    """An env's row name: its ``game`` kwarg if it has one (``twc``), else the id's last
    part (``TextWorld-v0``)."""
    game = kwargs.get("game")
    return game if isinstance(game, str) and game else env_id.rsplit("/", 1)[-1]


def expand_env_suite(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with every ``envs:`` entry completed from the ``env:`` section, field by field
    (an entry's ``kwargs`` replace the section's as a whole; the iteration's shape,
    :data:`SHAPE_FIELDS`, is the section's alone), and named. No ``envs:``: ``raw``
    unchanged."""
    entries = raw.get("envs")
    if not entries:
        return raw
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ConfigError("envs must be a list of environment sections (mappings with an id)")
    base = dict(raw.get("env") or {})
    out = []
    for i, entry in enumerate(entries):
        # (a saved config.yaml repeats the section's shape in every entry: equal is fine)
        shape = [k for k in SHAPE_FIELDS
                 if k in entry and entry[k] != base.get(k, getattr(EnvConfig, k))]
        if shape:
            raise ConfigError(f"envs[{i}] sets {', '.join(shape)}: the iteration's shape is the "
                              f"suite's, set it in env: (env.{shape[0]})")
        full = {**base, **entry}
        if "id" not in full:
            raise ConfigError(f"envs[{i}] has no id (a registered env id, `deciplane envs`)")
        full.setdefault("name", default_env_name(str(full["id"]), dict(full.get("kwargs") or {})))
        if not isinstance(full["name"], str) or not full["name"] or set(full["name"]) & set("/:"):
            raise ConfigError(f"envs[{i}].name = {full['name']!r}: a name is a non-empty string "
                              "without '/' or ':' (it becomes part of metric names and episode ids)")
        out.append(full)
    names = [e["name"] for e in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"envs: two entries are named {dup[0]!r}; give each a distinct `name:`")
    return {**raw, "envs": out}


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


# ---------------------------------------------------------------------------------------
# The fields of every training run (each method's config extends TrainConfig)
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
    return from_dict(load_config_class(spec), expand_env_suite(raw))


def validate(obj: Any, prefix: str = "") -> None:
    """Range checks and the section's own rules (what :func:`from_dict` runs)."""
    check_options(obj, prefix)
    check = getattr(obj, "check", None)
    if callable(check):
        check(prefix)


# the method configs that lived here until 0.3 (deciplane._moved.RENAMED)
__getattr__ = renamed_names(__name__)


__all__ = ["CONFIGS", "load_config", "validate", "ModelConfig", "EnvConfig", "SuiteEnvConfig",
           "default_env_name", "env_entries", "expand_env_suite", "OptimConfig",
           "EvalConfig", "PlanConfig", "CheckpointConfig", "DistillConfig", "BCConfig",
           "TrainConfig",
           # re-exported from deciplane.config (their home since 0.2)
           "coerce", "from_dict", "parse_override", "to_dict", "dump_yaml", "field_docs",
           "describe_config"]
