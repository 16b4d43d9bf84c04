"""The training loop: the trainer owns rollouts, updates, evaluation, logging, checkpoints.

An algorithm (:class:`Algorithm`) supplies only three things: how to collect one
iteration's rollout batch, its loss on a micro-batch of that batch, and how to evaluate
the policy on a split. Everything else is here and shared:

* deterministic seeding — every iteration reseeds python/numpy/torch from
  ``(seed, iteration)``, so a run killed at any point and resumed from its last checkpoint
  reproduces the uninterrupted run's metrics exactly;
* PPO-style epochs over minibatches, gradient accumulation over micro-batches, AdamW,
  global gradient-norm clipping, the **skip-step** when every group of an optimizer batch
  is degenerate (zero advantage: AdamW's weight decay would still move the weights);
* RL + distillation: when the algorithm returns a distillation loss, the two objectives'
  gradients are accumulated over the *whole optimizer batch* in two buffers and combined
  by CORD (``conflict`` | ``always`` projection, or the plain ``sum``) before the step;
* metrics.jsonl + TensorBoard + progress bar, atomic checkpoints (keep last k),
  before/after held-out evaluation and ``summary.json``.
"""

from __future__ import annotations

import abc
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from deciplane.errors import CheckpointError, ConfigError
from deciplane.trainers import checkpoint as ckpt
from deciplane.trainers.config import (DistillConfig, TrainConfig, dump_yaml, load_config,
                                       to_dict)
from deciplane.trainers.logger import METRICS_FILE, RunLogger
from deciplane.utils import atomic_write_json, flatten_dict, seed_everything


@dataclass
class RolloutBatch:
    """One iteration's training data, as the algorithm collected it.

    ``n_units`` is the number of loss units (decisions, turns or sequences) the trainer
    splits into minibatches and micro-batches; ``data`` is the algorithm's own payload.
    """

    n_units: int
    data: Any
    env_steps: int = 0
    episodes: int = 0
    degenerate: bool = False
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class Objectives:
    """A micro-batch's losses, each already scaled to its share of the optimizer batch
    (so summing over micro-batches gives the full-batch loss)."""

    task: torch.Tensor
    distill: torch.Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)


class Algorithm(abc.ABC):
    """What an algorithm supplies to :class:`Trainer`."""

    def __init__(self, config: TrainConfig, policy: Any) -> None:
        self.config = config
        self.policy = policy

    @abc.abstractmethod
    def rollout(self, iteration: int, seed: int) -> RolloutBatch:
        """Collect one iteration's batch with the current policy; randomness from ``seed``."""

    @abc.abstractmethod
    def loss(self, batch: RolloutBatch, micro: list[int], optimizer_batch: list[int]
             ) -> Objectives:
        """Losses on the units ``micro`` (indices into the batch), scaled by their share of
        the optimizer batch ``optimizer_batch`` (which contains ``micro``)."""

    @abc.abstractmethod
    def evaluate(self, split: str) -> dict[str, float]:
        """Held-out metrics on ``split`` (e.g. ``success_rate``, ``episodes`` or ``accuracy``)."""

    def update(self, batch: RolloutBatch, optimizer: torch.optim.Optimizer
               ) -> tuple[dict[str, float], int, int] | None:
        """Override only to run a whole update step yourself (e.g. the single-turn GRPO
        core) with the trainer's optimizer; return ``(metrics, steps taken, steps
        skipped)``. The default ``None`` means: the trainer's generic update on :meth:`loss`."""
        return None

    def distill_config(self) -> DistillConfig | None:
        """The RL + distillation settings, if the algorithm has a distillation objective."""
        return None

    def trainable_modules(self) -> dict[str, tuple[torch.nn.Module, float | None]]:
        """Trainable modules the algorithm owns besides the policy (e.g. a value head):
        ``name -> (module, learning rate or None for optim.lr)``. The trainer puts each in
        its own parameter group of the same optimizer, clips and steps it with the policy,
        and saves/restores its state with every checkpoint."""
        return {}

    def warm_start(self, optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
        """Optional behaviour-cloning warm start before RL; returns what it did (or None)."""
        return None

    def split_fingerprints(self) -> dict[str, str]:
        return {}

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------
# RL + distillation: CORD over the whole optimizer batch
# ---------------------------------------------------------------------------------------


def combine_gradients(g_task: torch.Tensor, g_teacher: torch.Tensor, cfg: DistillConfig
                      ) -> tuple[torch.Tensor, dict[str, float]]:
    """Full-batch task and (unweighted) teacher gradients -> the update direction.

    ``combine=conflict|always`` is CORD (:func:`deciplane.objectives.cord.cord_combine`),
    ``combine=sum`` the plain ``g_task + lam * g_teacher`` baseline.
    """
    from deciplane.objectives.cord import cord_combine, cord_stats

    stats = cord_stats(g_task, g_teacher, cfg.lam)
    if cfg.combine == "sum":
        g = g_task + cfg.lam * g_teacher
    else:
        g = cord_combine(g_task, g_teacher, cfg.lam, protected=cfg.protect, mode=cfg.combine)
    stats["cord/projected"] = float(not torch.equal(g, g_task + cfg.lam * g_teacher))
    return g, stats


def zero_grad(params: list[torch.nn.Parameter]) -> None:
    for p in params:
        p.grad = None


# ---------------------------------------------------------------------------------------
# the trainer
# ---------------------------------------------------------------------------------------


class Trainer:
    """Runs an :class:`Algorithm` for ``config.iterations`` iterations in ``run_dir``."""

    def __init__(self, config: TrainConfig, run_dir: str | Path, algorithm: Algorithm,
                 resume: bool = False) -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        self.algo = algorithm
        self.policy = algorithm.policy
        self.params = list(self.policy.trainable_parameters())
        if not self.params:
            raise ConfigError("the policy has no trainable parameters; use model.finetune=full "
                              "or lora")
        o = config.optim
        extra = algorithm.trainable_modules()  # e.g. a value head: own group, same AdamW
        self.modules = {k: m for k, (m, _) in extra.items()}  # (dict order = group order)
        groups = [{"params": list(self.params)}] + [
            {"params": list(m.parameters()), "lr": o.lr if lr is None else lr}
            for m, lr in extra.values()]
        self.params += [p for g in groups[1:] for p in g["params"]]
        self.optimizer = torch.optim.AdamW(groups, lr=o.lr, betas=tuple(o.betas),
                                           weight_decay=o.weight_decay)
        self.counters = ckpt.Counters()
        self.extra: dict[str, Any] = {}
        self.resume = resume

    # ---- public ------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """Run (or resume) training; write ``summary.json`` and return it."""
        cfg = self.config
        if not self.resume:
            ensure_unused_run_dir(self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        start = 0
        if self.resume:
            last = ckpt.latest_checkpoint(self.run_dir)
            if last is not None:
                self.counters, self.extra = ckpt.load_checkpoint(last, self.policy.model,
                                                                 self.optimizer, self.modules)
                start = self.counters.iteration
        (self.run_dir / "config.yaml").write_text(dump_yaml(cfg))
        logger = RunLogger(self.run_dir, total=cfg.iterations, start=start,
                           progress=cfg.progress)
        session_t0 = time.perf_counter()
        cpu_t0 = time.process_time()
        base_wall = self.counters.wall_time_s
        base_cpu = self.counters.cpu_time_s
        status = "completed"
        try:
            if start == 0:
                self._before(logger)
            for it in range(start, cfg.iterations):
                elapsed = base_wall + time.perf_counter() - session_t0
                if cfg.max_wall_time_s is not None and elapsed >= cfg.max_wall_time_s:
                    status = f"stopped at the wall-time limit ({cfg.max_wall_time_s:.0f} s)"
                    logger.print(f"[yellow]{status} after {it} iterations[/yellow]")
                    break
                metrics = self._iteration(it, logger)
                self.counters.iteration = it + 1
                self.counters.wall_time_s = base_wall + time.perf_counter() - session_t0
                self.counters.cpu_time_s = base_cpu + time.process_time() - cpu_t0
                metrics["time/wall_s"] = self.counters.wall_time_s
                metrics["time/cpu_s"] = self.counters.cpu_time_s
                logger.log(it + 1, metrics)
                if (it + 1) % cfg.checkpoint.every == 0 or it + 1 == cfg.iterations:
                    ckpt.save_checkpoint(self.run_dir, self.policy.model, self.optimizer,
                                         self.counters, self.extra,
                                         keep_last=cfg.checkpoint.keep_last,
                                         modules=self.modules)
            final = self._final_eval(logger)
        finally:
            logger.close()
        self.counters.wall_time_s = base_wall + time.perf_counter() - session_t0
        self.counters.cpu_time_s = base_cpu + time.process_time() - cpu_t0
        summary = self._summary(final, status)
        atomic_write_json(self.run_dir / "summary.json", summary)
        return summary

    # ---- pieces --------------------------------------------------------------------------
    def _before(self, logger: RunLogger) -> None:
        """Held-out metrics of the untrained policy, then the optional warm start (and, if
        there was one, the metrics right after it: ``after_warm_start``)."""
        cfg = self.config
        if cfg.eval.before:
            self.extra["before"] = self._eval_splits(logger, "before training")
            logger.log(0, _eval_metrics(self.extra["before"]) | {"env_steps": 0})
        seed_everything(ckpt.iteration_seed(cfg.seed, -1, "warm_start"))
        warm = self.algo.warm_start(self.optimizer)
        if warm:
            self.extra["warm_start"] = warm
            # expert episodes are environment interaction too: counted in env_steps
            self.counters.env_steps += int(warm.get("env_steps", 0))
            logger.print(f"behaviour-cloning warm start: {warm}")
            if cfg.eval.before:
                self.extra["after_warm_start"] = self._eval_splits(logger, "after warm start")

    def _eval_splits(self, logger: RunLogger, when: str) -> dict[str, dict[str, float]]:
        out = {}
        for split in self.config.eval.final_splits:
            out[split] = self.algo.evaluate(split)
            logger.print(f"{when}, {split}: {_fmt(out[split])}")
        return out

    def _iteration(self, it: int, logger: RunLogger) -> dict[str, Any]:
        cfg = self.config
        seed = ckpt.iteration_seed(cfg.seed, it, "rollout")
        seed_everything(seed)
        t0 = time.perf_counter()
        batch = self.algo.rollout(it, seed)
        t1 = time.perf_counter()
        self.counters.env_steps += batch.env_steps
        self.counters.episodes += batch.episodes
        upd = self._update(batch, ckpt.iteration_seed(cfg.seed, it, "minibatch"))
        t2 = time.perf_counter()
        metrics: dict[str, Any] = dict(batch.metrics)
        metrics.update(upd)
        metrics.update({"env_steps": self.counters.env_steps,
                        "episodes": self.counters.episodes,
                        "optim/steps": self.counters.optimizer_steps,
                        "optim/skipped_steps": self.counters.skipped_steps,
                        "time/rollout_s": t1 - t0, "time/update_s": t2 - t1})
        if cfg.eval.every and (it + 1) % cfg.eval.every == 0 and it + 1 < cfg.iterations:
            ev = self.algo.evaluate(cfg.eval.during_split)
            metrics.update({f"eval/{cfg.eval.during_split}/{k}": v for k, v in ev.items()
                            if isinstance(v, (int, float))})
        return metrics

    def _update(self, batch: RolloutBatch, seed: int) -> dict[str, float]:
        """PPO epochs over minibatches; returns averaged loss metrics."""
        own = self.algo.update(batch, self.optimizer)
        if own is not None:
            metrics, steps, skipped = own
            self.counters.optimizer_steps += steps
            self.counters.skipped_steps += skipped
            return metrics
        o = self.config.optim
        dcfg = self.algo.distill_config()
        distill_on = dcfg is not None and dcfg.enabled and dcfg.lam > 0
        n = batch.n_units
        if n == 0 or (batch.degenerate and not distill_on):
            steps = o.epochs * o.minibatches if n else 0
            self.counters.skipped_steps += steps
            return {"optim/skipped": 1.0}
        gen = torch.Generator().manual_seed(seed % (2**63))
        sums: dict[str, float] = {}
        count = 0
        for _ in range(o.epochs):
            perm = torch.randperm(n, generator=gen).tolist()
            for mb in np.array_split(np.array(perm), min(o.minibatches, n)):
                mb = [int(i) for i in mb]
                if not mb:
                    continue
                m = self._optimizer_step(batch, mb, dcfg if distill_on else None)
                count += 1
                for k, v in m.items():
                    sums[k] = sums.get(k, 0.0) + v
        return {k: v / max(count, 1) for k, v in sums.items()}

    def _optimizer_step(self, batch: RolloutBatch, mb: list[int],
                        dcfg: DistillConfig | None) -> dict[str, float]:
        o = self.config.optim
        zero_grad(self.params)
        sums: dict[str, float] = {}
        bufs = None
        if dcfg is not None:
            from deciplane.objectives.cord import CordGradBuffers

            bufs = CordGradBuffers(self.params)
        for start in range(0, len(mb), o.micro_batch_size):
            micro = mb[start:start + o.micro_batch_size]
            obj = self.algo.loss(batch, micro, mb)
            for k, v in obj.metrics.items():  # metrics are per micro-batch: weight by share
                sums[k] = sums.get(k, 0.0) + v * len(micro) / len(mb)
            if bufs is None or obj.distill is None:
                loss = obj.task if obj.distill is None else obj.task + obj.distill
                if loss.requires_grad:
                    loss.backward()
                continue
            # two buffers, accumulated over the whole optimizer batch (projection is
            # non-linear: it must see full-batch gradients)
            bufs.accumulate(obj.task if obj.task.requires_grad else None,
                            obj.distill if obj.distill.requires_grad else None)
        if bufs is not None and bufs.micro_batches:
            g, cm = combine_gradients(bufs.task, bufs.teacher, dcfg)
            sums.update(cm)
            bufs.write_grads(g)
        # clipped per parameter group: the policy's, then each extra module's (a value
        # head's gradient must not shrink the policy's step under a shared clip)
        limit = o.max_grad_norm if o.max_grad_norm > 0 else float("inf")
        names = ["policy", *self.modules]
        norms = [torch.nn.utils.clip_grad_norm_(g["params"], limit)
                 for g in self.optimizer.param_groups]
        for name, norm in zip(names, norms):
            sums["optim/grad_norm" + ("" if name == "policy" else "_" + name)] = float(norm)
        gn = torch.stack([n.float() for n in norms]).sum()
        if not torch.isfinite(gn):
            zero_grad(self.params)
            self.counters.skipped_steps += 1
            sums["optim/nonfinite_grad"] = 1.0
            return sums
        self.optimizer.step()
        zero_grad(self.params)
        self.counters.optimizer_steps += 1
        return sums

    def _final_eval(self, logger: RunLogger) -> dict[str, dict[str, float]]:
        out = {}
        for split in self.config.eval.final_splits:
            out[split] = self.algo.evaluate(split)
            logger.print(f"after training, {split}: {_fmt(out[split])}")
        return out

    def _summary(self, final: dict[str, dict[str, float]], status: str) -> dict[str, Any]:
        c = self.counters
        return {
            "config": to_dict(self.config),
            "algorithm": self.config.algorithm,
            "seed": self.config.seed,
            "seeds": {"master": self.config.seed,
                      "derivation": "sha256(seed/iteration/stream) per iteration"},
            "status": status,
            "run_dir": str(self.run_dir),
            "iterations": c.iteration,
            "env_steps": c.env_steps,
            "episodes": c.episodes,
            "optimizer_steps": c.optimizer_steps,
            "skipped_steps": c.skipped_steps,
            "wall_time_s": c.wall_time_s,
            "cpu_time_s": c.cpu_time_s,
            "load_average_at_end": list(os.getloadavg()),
            "split_fingerprints": self.algo.split_fingerprints(),
            "warm_start": self.extra.get("warm_start"),
            "before": self.extra.get("before", {}),
            "after_warm_start": self.extra.get("after_warm_start"),
            "eval": final,
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                        "torch_threads": torch.get_num_threads(), "torch": torch.__version__},
        }


def _eval_metrics(evals: dict[str, dict[str, Any]]) -> dict[str, float]:
    return {f"eval/{s}/{k}": v for s, m in evals.items() for k, v in m.items()
            if isinstance(v, (int, float))}


def _fmt(m: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in m.items())


# ---------------------------------------------------------------------------------------
# entry point used by the CLI
# ---------------------------------------------------------------------------------------


def build_policy(config: TrainConfig) -> Any:
    """Load the model and make it trainable per ``config.model`` (LoRA or full)."""
    from deciplane.agents import load_policy

    m = config.model
    torch.set_num_threads(m.threads)
    seed_everything(config.seed)  # LoRA init is random: seed it
    policy = load_policy(m.name)
    if m.finetune == "lora":
        policy.add_lora(r=m.lora_rank, alpha=m.lora_alpha,
                        target_modules=lora_targets(policy, m.lora_targets, m.lora_last_layers))
    else:
        for p in policy.model.parameters():
            p.requires_grad_(True)
    policy.model.train()
    return policy


def lora_targets(policy: Any, targets: list[str] | None, last_layers: int | None
                 ) -> list[str] | None:
    """LoRA target module names; with ``last_layers`` only those of the last N layers
    (PEFT matches a listed name as a suffix of the module path)."""
    if last_layers is None:
        return targets
    n = int(getattr(policy.model.config, "num_hidden_layers", 0))
    if n <= 0:
        raise ConfigError("model.lora_last_layers needs a model config with "
                          "num_hidden_layers; leave it null for this model")
    import re

    base = set(targets or policy._lora_targets())
    first = max(0, n - last_layers)
    found = []
    for name, _ in policy.model.named_modules():
        m = re.search(r"(?:^|\.)(layers\.(\d+)\..*)$", name)
        if m and int(m.group(2)) >= first and name.rsplit(".", 1)[-1] in base:
            found.append(m.group(1))
    if not found:
        raise ConfigError(f"model.lora_last_layers={last_layers}: no '<...>.layers.<i>.<target>' "
                          f"module in {policy.name!r}; leave it null for this model")
    return found


def build_algorithm(config: TrainConfig, policy: Any) -> Algorithm:
    from deciplane.trainers.algorithms import ALGORITHMS

    return ALGORITHMS[config.algorithm](config, policy)


RESUMABLE_CHANGES = frozenset({"iterations", "max_wall_time_s", "progress",
                               "checkpoint.keep_last"})
"""Options a resumed run may change: the budget and cosmetics, never what the iterations
already run depended on (shortening ``iterations`` ends the run at the next iteration
boundary with the final evaluation)."""


def run_training(config: TrainConfig | str | Path, run_dir: str | Path | None = None,
                 overrides: list[str] | None = None, resume: bool = False) -> dict[str, Any]:
    """Train from a config (object or YAML path) into ``run_dir``; returns the summary.

    ``resume=True`` continues from the run directory's last checkpoint with the config
    saved there (a different config is an error).
    """
    if run_dir is None:
        if resume:
            raise CheckpointError("--resume needs --run-dir DIR (the run to continue)")
    saved = Path(run_dir) / "config.yaml" if run_dir is not None else None
    if not isinstance(config, TrainConfig):
        if config is None:
            if saved is None or not saved.is_file():
                raise ConfigError("pass a config file (e.g. configs/quickstart.yaml) or --resume "
                                  "an existing --run-dir")
            config = saved
        config = load_config(config, overrides)
    if resume and saved is not None and saved.is_file() and ckpt.latest_checkpoint(run_dir):
        prev, new = flatten_dict(to_dict(load_config(saved))), flatten_dict(to_dict(config))
        diff = [k for k in prev if prev[k] != new.get(k) and k not in RESUMABLE_CHANGES]
        if diff:
            raise CheckpointError(f"--resume: the config differs from the run's saved config "
                                  f"({', '.join(diff[:5])}); resume with {saved} or start a new "
                                  f"--run-dir (only {', '.join(sorted(RESUMABLE_CHANGES))} may "
                                  "change on resume)")
    if run_dir is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = Path("runs") / f"{config.algorithm}-{stamp}"
    if not resume:  # before the (slow) model and env set-up
        ensure_unused_run_dir(Path(run_dir))
    policy = build_policy(config)
    algo = build_algorithm(config, policy)
    try:
        return Trainer(config, run_dir, algo, resume=resume).train()
    finally:
        algo.close()


def ensure_unused_run_dir(run_dir: Path) -> None:
    """A fresh run must not append to an old run's metrics/checkpoints (mixed curves)."""
    if (run_dir / METRICS_FILE).exists() or ckpt.latest_checkpoint(run_dir) is not None:
        raise CheckpointError(f"{run_dir} already holds a run; pass --resume to continue it, "
                              "or choose another --run-dir")


