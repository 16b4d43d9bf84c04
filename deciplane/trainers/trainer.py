"""The training loop: the trainer owns rollouts, updates, evaluation, logging, checkpoints.

An algorithm (:class:`~deciplane.trainers.algorithm.Algorithm`) supplies only its
rollout, its loss on a micro-batch (with the normaliser it declares once per batch) and
its evaluation. Everything else is here and shared:

* deterministic seeding — every iteration reseeds python/numpy/torch from
  ``(seed, iteration)``, so a run killed at any point and resumed from its last checkpoint
  reproduces the uninterrupted run's metrics exactly;
* PPO-style epochs over minibatches; each minibatch is one optimizer step of the engine
  (:func:`deciplane.engine.optim.optimizer_step`: micro-batch accumulation, clipping per
  parameter group, skip on a non-finite norm), and the **skip-step** when every group of
  the batch is degenerate (zero advantage: AdamW's weight decay would still move the
  weights);
* RL + distillation: when the algorithm returns a distillation loss, the engine
  accumulates the two objectives' gradients over the *whole optimizer batch* in two
  buffers and combines them by CORD (``conflict`` | ``always`` projection, or the plain
  ``sum``) before the step;
* metrics.jsonl + TensorBoard + progress bar, atomic checkpoints (keep last k),
  before/after held-out evaluation and ``summary.json``;
* data-parallel under ``accelerate launch`` / ``torchrun``
  (:mod:`deciplane.engine.distributed`): every rank runs the same loop on the same batch,
  the optimizer step splits the batch's rows over the ranks and sums the gradients; rank
  0 alone logs and writes files, and the ranks agree on the wall-time stop.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from deciplane.engine import distributed
from deciplane.engine.optim import Optimizer, combine_gradients, optimizer_step
from deciplane.errors import CheckpointError, ConfigError
from deciplane.trainers import checkpoint as ckpt
from deciplane.trainers.algorithm import Algorithm, Objectives, RolloutBatch
from deciplane.trainers.config import TrainConfig, dump_yaml, to_dict
from deciplane.trainers.logger import METRICS_FILE, RunLogger
from deciplane.utils import atomic_write_json, seed_everything


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
        self.optimizer = Optimizer(groups, lr=o.lr, betas=tuple(o.betas),
                                   weight_decay=o.weight_decay, max_grad_norm=o.max_grad_norm,
                                   names=["policy", *self.modules])
        self.counters = ckpt.Counters()
        self.extra: dict[str, Any] = {}
        self.resume = resume

    # ---- public ------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """Run (or resume) training; write ``summary.json`` and return it."""
        cfg = self.config
        main = distributed.is_main()
        if not self.resume:
            ensure_unused_run_dir(self.run_dir)
        distributed.barrier()   # every rank checked the run dir before rank 0 writes to it
        if main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        start = 0
        if self.resume:
            last = ckpt.latest_checkpoint(self.run_dir)
            if last is not None:
                self.counters, self.extra = ckpt.load_checkpoint(last, self.policy.model,
                                                                 self.optimizer, self.modules)
                start = self.counters.iteration
        if main:
            (self.run_dir / "config.yaml").write_text(dump_yaml(cfg))
        logger = RunLogger(self.run_dir, total=cfg.iterations, start=start,
                           progress=cfg.progress) if main else _QuietLogger()
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
                if distributed.agree(cfg.max_wall_time_s is not None
                                     and elapsed >= cfg.max_wall_time_s):
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
        summary["data_parallel"] = distributed.describe()
        if main:
            atomic_write_json(self.run_dir / "summary.json", summary)
        distributed.barrier()
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
        """PPO epochs over minibatches, one engine optimizer step each; returns averaged
        loss metrics."""
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
        task = self.algo.normaliser(batch)            # declared once per batch
        distill = self.algo.distill_normaliser(batch)

        def loss_fn(micro: list[int]) -> Objectives:
            return self.algo.loss(batch, micro)

        gen = torch.Generator().manual_seed(seed % (2**63))
        sums: dict[str, float] = {}
        count = 0
        for _ in range(o.epochs):
            perm = torch.randperm(n, generator=gen).tolist()
            for mb in np.array_split(np.array(perm), min(o.minibatches, n)):
                mb = [int(i) for i in mb]
                if not mb:
                    continue
                before = self.optimizer.steps, self.optimizer.skipped
                m = optimizer_step(self.optimizer, mb, o.micro_batch_size, loss_fn, task,
                                   distill, cord=dcfg if distill_on else None,
                                   metric_share=self.algo.metric_share)
                self.counters.optimizer_steps += self.optimizer.steps - before[0]
                self.counters.skipped_steps += self.optimizer.skipped - before[1]
                count += 1
                for k, v in m.items():
                    sums[k] = sums.get(k, 0.0) + v
        return {k: v / max(count, 1) for k, v in sums.items()}

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


class _QuietLogger:
    """The logger of ranks other than 0 under data-parallel training: writes nothing."""

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        pass

    def print(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


def _eval_metrics(evals: dict[str, dict[str, Any]]) -> dict[str, float]:
    return {f"eval/{s}/{k}": v for s, m in evals.items() for k, v in m.items()
            if isinstance(v, (int, float))}


def _fmt(m: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in m.items())


def ensure_unused_run_dir(run_dir: Path) -> None:
    """A fresh run must not append to an old run's metrics/checkpoints (mixed curves)."""
    if (run_dir / METRICS_FILE).exists() or ckpt.latest_checkpoint(run_dir) is not None:
        raise CheckpointError(f"{run_dir} already holds a run; pass --resume to continue it, "
                              "or choose another --run-dir")


_MOVED_TO_RUN = ("build_policy", "build_algorithm", "lora_targets", "run_training",
                 "RESUMABLE_CHANGES")


def __getattr__(name: str) -> Any:
    if name in _MOVED_TO_RUN:
        raise AttributeError(f"deciplane.trainers.trainer.{name} moved to "
                             f"deciplane.trainers.run.{name} in deciplane 0.2 (also importable "
                             f"as deciplane.trainers.{name}); import it from there")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Algorithm", "Objectives", "RolloutBatch", "Trainer", "combine_gradients",
           "ensure_unused_run_dir"]
