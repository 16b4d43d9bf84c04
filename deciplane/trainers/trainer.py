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
* the iterations run through the one step loop (:func:`deciplane.engine.loop.run_steps`;
  an iteration is its step): the wall-time plan before each, metrics.jsonl + TensorBoard
  + progress bar, atomic checkpoints every ``checkpoint.every`` iterations (keep last k);
  before/after held-out evaluation and ``summary.json``;
* data-parallel under ``accelerate launch`` / ``torchrun``
  (:mod:`deciplane.engine.distributed`): every rank runs the same loop on the same batch,
  the optimizer step splits the batch's rows over the ranks and sums the gradients; rank
  0 alone logs and writes files, and the ranks agree on the wall-time stop.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from pathlib import Path
from typing import Any, Iterator

import torch

from deciplane._moved import renamed_names
from deciplane.engine import distributed
from deciplane.engine.compare import paired_comparisons, per_env_comparisons
from deciplane.engine.loop import COMPLETED, StepResult, run_steps
from deciplane.engine.optim import Optimizer, combine_gradients, minibatches, optimizer_step
from deciplane.engine.plan import (PLAN_AFTER_EPISODES, continue_epochs, decision_cost_summary,
                                   eval_cut_reason, eval_episodes_that_fit, eval_share_of,
                                   room_for_iteration, time_breakdown, wall_time_status)
from deciplane.engine.rundir import CONFIG_FILE, RunDir
from deciplane.errors import ConfigError
from deciplane.provenance import provenance
from deciplane.engine import checkpoint as ckpt
from deciplane.trainers.algorithm import Algorithm, Objectives, RolloutBatch
from deciplane.trainers.config import TrainConfig, dump_yaml, to_dict
from deciplane.engine.logger import RunLogger
from deciplane.utils import seed_everything


OWN_STATE = "own_state"
"""The key of the algorithm's :meth:`~deciplane.engine.method.Method.own_state` in the
checkpoint's method state."""


class Trainer:
    """Runs an :class:`Algorithm` for ``config.iterations`` iterations in ``run_dir``."""

    def __init__(self, config: TrainConfig, run_dir: str | Path, algorithm: Algorithm,
                 resume: bool = False, setup_s: float = 0.0) -> None:
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
        self.setup_s = float(setup_s)   # model load etc. before train(): in the budget
        self.phases: dict[str, float] = {}
        self._eval_probe: dict[str, float] = {}
        self._ws_box: dict[str, float] = {}

    # ---- public ------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """Run (or resume) training; write ``summary.json`` and return it."""
        cfg = self.config
        rundir = self.rundir = RunDir(self.run_dir, writer=distributed.is_main())
        rundir.check(resume=self.resume)
        distributed.barrier()   # every rank checked the run dir before rank 0 writes to it
        start = 0
        if self.resume:
            last = rundir.latest_state_path()
            if last is not None:
                self.counters, self.extra = ckpt.load_checkpoint(last, self.policy.model,
                                                                 self.optimizer, self.modules)
                self.algo.load_own_state(self.extra.get(OWN_STATE, {}))
                start = self.counters.iteration
        self.phases = dict(self.extra.get("phases", {}))
        self._add_phase("model_load", self.setup_s)
        rundir.record(CONFIG_FILE, dump_yaml(cfg))
        logger = rundir.logger(total=cfg.iterations, start=start, progress=cfg.progress)
        self._hook_progress(logger)
        # the budget covers the whole run: the model load before train() counts too
        self._session_t0 = time.perf_counter() - self.setup_s
        self._cpu_t0 = time.process_time()
        self._base_wall = self.counters.wall_time_s
        self._base_cpu = self.counters.cpu_time_s
        plan = self.extra.setdefault("plan", self._initial_plan())
        if plan.get("eval_episodes") is not None:   # resumed: the same episodes as before
            self._set_eval_limit(plan["eval_episodes"])
        try:
            if start == 0 and not self.extra.get("pre_rl_done"):
                self._before(logger)
                self.extra["pre_rl_done"] = True
                self._checkpoint()           # the warm-started weights survive any stop
            loop = run_steps(self._iteration, start=start, total=cfg.iterations,
                             log=logger.log, checkpoint=lambda _: self._checkpoint(),
                             checkpoint_every=cfg.checkpoint.every, room=self._room)
            if loop.status != COMPLETED:
                logger.print(f"[yellow]{loop.status}[/yellow]")
            plan["iteration_s_max"] = loop.step_s_max
            with self._phase("eval_final"):
                final = self._final_eval(logger)
        finally:
            logger.close()
        self._count_time()
        summary = self._summary(final, loop.status)
        summary["data_parallel"] = distributed.describe()
        rundir.write_summary(summary)
        distributed.barrier()
        return summary

    def _room(self, it: int, iter_s: float | None) -> str | None:
        """The time plan before iteration ``it`` (the loop's ``room``): None to go on, or
        the run's status when the iteration and the final evaluation would not fit."""
        cfg = self.config
        elapsed = self._elapsed()
        reserve = self._final_eval_reserve()
        # rank 0's decision on every rank (data-parallel runs stop together)
        if not distributed.agree(not room_for_iteration(elapsed, cfg.max_wall_time_s, iter_s,
                                                        reserve)):
            return None
        return wall_time_status(cfg.max_wall_time_s, it, elapsed, iter_s, reserve)

    # ---- time plan and phases ----------------------------------------------------------------
    def _initial_plan(self) -> dict[str, Any]:
        cfg = self.config
        return {"max_wall_time_s": cfg.max_wall_time_s,
                "eval_share": self._eval_share(),
                "warm_start_share": cfg.plan.warm_start_share,
                "eval_episodes_requested": getattr(cfg.eval, "episodes", None),
                "eval_episodes": None}

    def _eval_share(self) -> float:
        return eval_share_of(self.config.plan.eval_share, self.config.plan.warm_start_share)

    def _plan_evaluations(self, per_ep: float, requested: int, minimum: int) -> int:
        """Episodes per evaluation from a timed (or cached) per-episode cost; the plan
        records the numbers and, when episodes were cut, why."""
        cfg, plan = self.config, self.extra["plan"]
        evaluations = self._evaluations_planned()
        n = eval_episodes_that_fit(cfg.max_wall_time_s, self._eval_share(), per_ep,
                                   evaluations, requested, minimum=minimum)
        if distributed.active():    # rank 0's number on every rank: the same episodes
            n = distributed.sum_int(n if distributed.is_main() else 0)
        plan.update({"eval_episodes": n, "eval_probe_s_per_episode": per_ep,
                     "evaluations": evaluations,
                     "eval_cut_reason": eval_cut_reason(n, requested, per_ep, evaluations,
                                                        cfg.max_wall_time_s,
                                                        self._eval_share())})
        self._set_eval_limit(n)
        return n

    def _elapsed(self) -> float:
        return self._base_wall + time.perf_counter() - self._session_t0

    def _count_time(self) -> None:
        """The counters' wall and CPU seconds of the whole run (every session) up to now."""
        self.counters.wall_time_s = self._elapsed()
        self.counters.cpu_time_s = self._base_cpu + time.process_time() - self._cpu_t0

    def _add_phase(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + float(seconds)
        self.extra["phases"] = self.phases

    @contextlib.contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        """Time a phase; the suite's game generation / env building inside it is booked as
        ``game_generation`` instead."""
        suite = getattr(self.algo, "suite", None)
        setup0 = getattr(suite, "setup_s", 0.0)
        cost0 = self._decision_cost()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            setup = getattr(suite, "setup_s", 0.0) - setup0
            self._add_phase(name, time.perf_counter() - t0 - setup)
            if setup:
                self._add_phase("game_generation", setup)
            self._add_decision_cost(name, cost0)

    def _decision_cost(self) -> dict[str, float] | None:
        """This process's decisions, prompt tokens, tokens computed and CPU-s so far (an
        algorithm with ``decision_counts``: the menu agent's), else None."""
        counts = getattr(self.algo, "decision_counts", None)
        if counts is None:
            return None
        c = counts()
        return {"decisions": c["decisions"], "prompt_tokens": c["tokens_prompted"],
                "computed_tokens": c["tokens_computed"], "cpu_s": time.process_time()}

    def _add_decision_cost(self, phase: str, before: dict[str, float] | None) -> None:
        now = self._decision_cost()
        if before is None or now is None or now["decisions"] == before["decisions"]:
            return
        costs = self.extra.setdefault("decision_cost", {})
        row = costs.setdefault(phase, {k: 0.0 for k in now})
        for k in now:
            row[k] += now[k] - before[k]

    def _set_eval_limit(self, n: int | None) -> None:
        suite = getattr(self.algo, "suite", None)
        if suite is not None:
            suite.episode_limit = n

    def _evaluations_planned(self) -> float:
        """Held-out evaluations of one split in this run: before (and the labels readout's
        zero-shot), after the warm start, final, and the ones during training (counted by
        their share of episodes)."""
        cfg = self.config
        warm = int(getattr(getattr(cfg, "bc", None), "episodes", 0) or 0) > 0
        cost = self.algo.eval_costs()     # per episode, relative to the timed evaluation
        before, trained = cost.get("before", 1.0), cost.get("trained", 1.0)
        cached = {kind for kind, _ in getattr(self, "_cached", {})}
        before *= int("trained" not in cached)    # a cached evaluation is free
        labels = int(self._labels_baseline() and "labels" not in cached)
        n = (before + trained * int(warm) + labels) * int(cfg.eval.before)
        n += trained
        if cfg.eval.every:
            during = (cfg.iterations - 1) // cfg.eval.every
            requested = cfg.eval.episodes or 1
            n += trained * during * min(1.0, (cfg.eval.during_episodes or requested) / requested)
        return n

    def _labels_baseline(self) -> bool:
        return bool(getattr(self.config.eval, "zero_shot_labels", False)) and \
            hasattr(self.algo, "evaluate_labels")

    def _hook_progress(self, logger: RunLogger) -> None:
        """Progress events of long phases (evaluation batches, warm-start epochs) as log
        lines, and the time plan's decisions taken at those events."""
        cfg = self.config
        suite = getattr(self.algo, "suite", None)
        plan_box: dict[str, float] = {}

        def on_eval(phase: str, done: int, total: int, metrics: dict[str, Any]) -> None:
            logger.event(phase, done, total, metrics)
            plan = self.extra["plan"]
            if cfg.max_wall_time_s is None or plan.get("eval_episodes") is not None:
                return
            if "t0" not in plan_box or done < min(PLAN_AFTER_EPISODES, total):
                return
            # env building (JVM starts) is paid once, not per episode: left out
            setup = getattr(suite, "setup_s", 0.0) - plan_box.get("setup0", 0.0)
            per_ep = max(0.0, time.perf_counter() - plan_box["t0"] - setup) / max(done, 1)
            n = self._plan_evaluations(per_ep, total, minimum=done)
            if n < total:
                logger.print(f"time plan: {n} of {total} evaluation episodes per evaluation "
                             f"fit in {self._eval_share():.0%} of {cfg.max_wall_time_s:.0f} s "
                             f"({per_ep:.1f} s per episode)")

        self._eval_probe = plan_box
        if suite is not None:
            suite.progress = on_eval
        ws: dict[str, float] = {}
        self._ws_box = ws

        def on_bc_epoch(done: int, total: int, loss: float) -> bool:
            now = time.perf_counter()
            if done == 0:
                # the epochs start: an epoch's time excludes the expert collection, and the
                # warm start's share bounds what follows it (the episodes asked for all play)
                ws["t_last"] = now
                if cfg.max_wall_time_s is not None:
                    ws["deadline"] = now + cfg.plan.warm_start_share * cfg.max_wall_time_s
                return True
            last = now - ws.get("t_last", ws.get("t0", now))
            ws["t_last"] = now
            ws["epochs"] = done
            logger.event("warm start epoch", done, total, {"loss": loss})
            deadline = ws.get("deadline")
            go = not distributed.agree(not continue_epochs(now, deadline, last))  # rank 0's
            if not go and done < total:
                logger.print(f"time plan: warm start stopped after {done} of {total} epochs "
                             f"({cfg.plan.warm_start_share:.0%} of the budget)")
            return go

        self.algo.on_bc_epoch = on_bc_epoch
        self.algo.warm_start_fits = lambda seconds: distributed.agree(
            continue_epochs(time.perf_counter(), ws.get("deadline"), seconds))

    def _final_eval_reserve(self) -> float:
        """Seconds kept for the final evaluation: the longest evaluation so far."""
        return float(self.extra.get("plan", {}).get("eval_s_max", 0.0) or 0.0)

    def _checkpoint(self) -> None:
        cfg = self.config
        with self._phase("checkpoints"):
            self.counters.wall_time_s = self._elapsed()
            self.extra[OWN_STATE] = self.algo.own_state()
            if self.rundir.writer:
                self.rundir.save_state(
                    ckpt.training_state(self.policy.model, self.optimizer, self.counters,
                                        self.extra, self.modules),
                    ckpt.counters_meta(self.counters), keep_last=cfg.checkpoint.keep_last)
            distributed.barrier()   # the other ranks go on once the checkpoint is in place

    # ---- pieces --------------------------------------------------------------------------
    def _before(self, logger: RunLogger) -> None:
        """Held-out metrics of the untrained policy, then the optional warm start (and, if
        there was one, the metrics right after it: ``after_warm_start``)."""
        cfg = self.config
        if cfg.eval.before:
            self._find_cached_baselines()
        if cfg.eval.before and self._labels_baseline():   # first: the time plan times it
            with self._phase("eval_zero_shot_labels"):
                self.extra["zero_shot_labels"] = self._eval_splits(
                    logger, "zero-shot, labels readout", self.algo.evaluate_labels,
                    baseline="labels")
        if cfg.eval.before:
            with self._phase("eval_before"):
                self.extra["before"] = self._eval_splits(logger, "before training",
                                                         baseline="trained")
            logger.log(0, _eval_metrics(self.extra["before"]) | {"env_steps": 0})
        seed_everything(ckpt.iteration_seed(cfg.seed, -1, "warm_start"))
        now = time.perf_counter()
        self._ws_box["t0"] = now
        if cfg.max_wall_time_s is not None:   # the deadline starts with the epochs
            self.extra["plan"]["warm_start_budget_s"] = (cfg.plan.warm_start_share
                                                         * cfg.max_wall_time_s)
        with self._phase("warm_start"):
            warm = self.algo.warm_start(self.optimizer)
        if warm:
            if "epochs" in self._ws_box:
                warm["epochs_run"] = int(self._ws_box["epochs"])
            self.extra["warm_start"] = warm
            # expert episodes are environment interaction too: counted in env_steps
            self.counters.env_steps += int(warm.get("env_steps", 0))
            logger.print(f"behaviour-cloning warm start: {warm}")
            if cfg.eval.before:
                with self._phase("eval_after_warm_start"):
                    self.extra["after_warm_start"] = self._eval_splits(logger,
                                                                       "after warm start")

    def _find_cached_baselines(self) -> None:
        """Look up the zero-shot evaluations of this run in the baseline cache
        (:mod:`deciplane.engine.baselines`) before any is played, so that the time
        plan counts a cached one as free."""
        self._baseline_keys: dict[tuple[str, str], str] = {}
        self._cached: dict[tuple[str, str], dict[str, Any]] = {}
        key_of = getattr(self.algo, "baseline_key", None)
        if not self.config.eval.cache_baselines or key_of is None:
            return
        from deciplane.engine.baselines import load_baseline, weights_fingerprint

        weights = weights_fingerprint(self.policy.model)   # once: every lookup shares them
        kinds = ["trained"] + (["labels"] if self._labels_baseline() else [])
        for kind in kinds:
            for split in self.config.eval.final_splits:
                key = key_of(kind, split, weights)
                if key is None:
                    continue
                self._baseline_keys[(kind, split)] = key
                entry = load_baseline(key)
                if entry is not None:
                    self._cached[(kind, split)] = entry

    def _from_cache(self, logger: RunLogger, when: str, kind: str, split: str
                    ) -> dict[str, Any] | None:
        """The cached result of the ``kind`` evaluation on ``split``, cut to the run's
        episode limit, or None when the cache has fewer episodes than this run plays. The
        first evaluation of a run with a budget plans the others from its cached time."""
        from deciplane.engine.baselines import cut_evaluation

        entry = self._cached.get((kind, split))
        if entry is None:
            return None
        cfg, plan = self.config, self.extra["plan"]
        res = entry["result"]
        suite = getattr(self.algo, "suite", None)
        requested = len(suite.eval_seeds(split, cfg.eval.episodes)) if suite else res["episodes"]
        if cfg.max_wall_time_s is not None and plan.get("eval_episodes") is None:
            per_ep = float(entry["s_per_episode"])
            n = self._plan_evaluations(per_ep, requested,
                                       minimum=min(PLAN_AFTER_EPISODES, requested))
            plan["eval_probe"] = "baseline cache"
            if n < requested:
                logger.print(f"time plan: {n} of {requested} evaluation episodes per "
                             f"evaluation fit (cached {per_ep:.1f} s per episode)")
        limit = getattr(suite, "episode_limit", None)
        need = requested if limit is None else min(limit, requested)
        if res["episodes"] < need:
            return None
        self.extra.setdefault("baseline_cache", {})[f"{kind}/{split}"] = \
            self._baseline_keys[(kind, split)]
        res = cut_evaluation(res, need)
        logger.print(f"{when}, {split}: from the baseline cache "
                     f"({self._baseline_keys[(kind, split)]}): {_fmt(res)}")
        return res

    def _eval_splits(self, logger: RunLogger, when: str, evaluate: Any = None,
                     baseline: str | None = None) -> dict[str, dict[str, Any]]:
        """Evaluate every final split; ``baseline`` (``labels``, ``trained``): a zero-shot
        evaluation, read from and written to the baseline cache."""
        out = {}
        for split in self.config.eval.final_splits:
            if baseline is not None:
                cached = self._from_cache(logger, when, baseline, split)
                if cached is not None:
                    out[split] = cached
                    continue
            t0 = time.perf_counter()
            self._eval_probe["t0"] = t0
            self._eval_probe["setup0"] = getattr(getattr(self.algo, "suite", None),
                                                 "setup_s", 0.0)
            out[split] = (evaluate or self.algo.evaluate)(split)
            took = time.perf_counter() - t0
            plan = self.extra["plan"]
            plan["eval_s_max"] = max(float(plan.get("eval_s_max") or 0.0), took)
            logger.print(f"{when}, {split}: {_fmt(out[split])}")
            key = getattr(self, "_baseline_keys", {}).get((baseline, split)) if baseline else None
            if key is not None and distributed.is_main():
                from deciplane.engine.baselines import store_baseline

                store_baseline(key, out[split], took, eval_workers=self.config.eval.workers,
                               threads=self.config.model.threads)
        return out

    def _iteration(self, it: int) -> StepResult:
        """Iteration ``it`` (the loop's step): rollout, update, the evaluation during
        training when due; its metrics carry the run's counters and clocks."""
        cfg = self.config
        seed = ckpt.iteration_seed(cfg.seed, it, "rollout")
        seed_everything(seed)
        t0 = time.perf_counter()
        with self._phase("rollouts"):
            batch = self.algo.rollout(it, seed)
        t1 = time.perf_counter()
        self.counters.env_steps += batch.env_steps
        self.counters.episodes += batch.episodes
        with self._phase("updates"):
            upd = self._update(batch, ckpt.iteration_seed(cfg.seed, it, "minibatch"))
        t2 = time.perf_counter()
        metrics: dict[str, Any] = dict(batch.metrics)
        metrics.update(upd)
        if "rollout/groups_with_signal" in metrics:   # where a group baseline can learn
            self.extra.setdefault("groups_with_signal", []).append(
                round(float(metrics["rollout/groups_with_signal"]), 4))
        if "rollout/step_group_share" in metrics:   # advantage=gigpo: recurring states
            self.extra.setdefault("step_group_share", []).append(
                round(float(metrics["rollout/step_group_share"]), 4))
        metrics.update({"env_steps": self.counters.env_steps,
                        "episodes": self.counters.episodes,
                        "optim/steps": self.counters.optimizer_steps,
                        "optim/skipped_steps": self.counters.skipped_steps,
                        "time/rollout_s": t1 - t0, "time/update_s": t2 - t1})
        if cfg.eval.every and (it + 1) % cfg.eval.every == 0 and it + 1 < cfg.iterations:
            limit = self.extra["plan"].get("eval_episodes")
            if cfg.eval.during_episodes:   # the first episodes of the same evaluation
                self._set_eval_limit(min(limit or cfg.eval.during_episodes,
                                         cfg.eval.during_episodes))
            try:
                with self._phase("eval_during"):
                    ev = self.algo.evaluate(cfg.eval.during_split)
            finally:
                self._set_eval_limit(limit)
            metrics.update(_eval_metrics({cfg.eval.during_split: ev}))
            self.extra.setdefault("during", []).append(
                {"iteration": it + 1, "env_steps": self.counters.env_steps,
                 "split": cfg.eval.during_split, **_during_record(ev)})
        self.counters.iteration = it + 1
        self._count_time()
        metrics["time/wall_s"] = self.counters.wall_time_s
        metrics["time/cpu_s"] = self.counters.cpu_time_s
        return StepResult(metrics)

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
            for mb in minibatches(perm, min(o.minibatches, n)):
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

    def _final_eval(self, logger: RunLogger) -> dict[str, dict[str, Any]]:
        return self._eval_splits(logger, "after training")

    def _summary(self, final: dict[str, dict[str, float]], status: str) -> dict[str, Any]:
        c = self.counters
        stages = {"zero_shot_labels": self.extra.get("zero_shot_labels") or {},
                  "zero_shot": self.extra.get("before") or {},
                  "warm_start_only": self.extra.get("after_warm_start") or {},
                  "final": final}
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
            "zero_shot_labels": self.extra.get("zero_shot_labels"),
            **({"baseline_cache": self.extra["baseline_cache"]}
               if self.extra.get("baseline_cache") else {}),
            "during": self.extra.get("during", []),
            "groups_with_signal": self.extra.get("groups_with_signal", []),
            **({"step_group_share": self.extra["step_group_share"]}
               if self.extra.get("step_group_share") else {}),
            "eval": final,
            "comparisons": paired_comparisons(stages),
            **({"comparisons_per_env": per_env} if (per_env := per_env_comparisons(stages))
               else {}),
            "plan": self.extra.get("plan"),
            "time": time_breakdown(self.phases, c.wall_time_s),
            **({"decision_cost": decision_cost_summary(self.extra["decision_cost"],
                                                       getattr(self.algo, "block_cache", None))}
               if self.extra.get("decision_cost") else {}),
            "provenance": provenance(),
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                        "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                        **_precision(getattr(self.algo, "policy", None))},
        }


def _precision(policy: Any) -> dict[str, Any]:
    """What ``model.trunk_dtype`` resolved to on this machine: whether the CPU has native
    bf16, and the dtype and number of the decoder layers cast (``None``: all fp32)."""
    from deciplane.agents.precision import native_bf16, trunk_dtype_of

    cast = trunk_dtype_of(policy.model) if policy is not None else None
    return {"native_bf16": native_bf16(),
            "trunk": None if cast is None else {"dtype": str(cast[0]).removeprefix("torch."),
                                                "layers": cast[1]}}


def _eval_metrics(evals: dict[str, dict[str, Any]]) -> dict[str, float]:
    """``eval/SPLIT/NAME`` of every number of each split's result; a suite's envs as
    ``eval/SPLIT/ENV/NAME``."""
    out = {}
    for split, m in evals.items():
        out.update({f"eval/{split}/{k}": v for k, v in m.items() if isinstance(v, (int, float))})
        for env, r in m.get("per_env", {}).items():
            out.update({f"eval/{split}/{env}/{k}": v for k, v in r.items()
                        if isinstance(v, (int, float))})
    return out


DURING_KEYS = ("success_rate", "success_ci95", "episodes", "mean_return")


def _during_record(ev: dict[str, Any]) -> dict[str, Any]:
    """What summary.json ``during`` keeps of an evaluation during training (a suite's
    macro average and each env's too)."""
    out = {k: ev[k] for k in DURING_KEYS if k in ev}
    if "per_env" in ev:
        out["macro_success_rate"] = ev["macro_success_rate"]
        out["per_env"] = {env: {k: r[k] for k in DURING_KEYS if k in r}
                          for env, r in ev["per_env"].items()}
    return out


def _fmt(m: dict[str, Any]) -> str:
    parts = []
    for k, v in m.items():
        if k.startswith("episode_"):     # per-episode lists: in summary.json, not the log
            continue
        if k == "per_env":               # a suite: each env's wins, the rest in summary.json
            parts.append("per env: " + ", ".join(f"{env} {r['won']}/{r['episodes']}"
                                                 for env, r in v.items()))
        elif k == "success_ci95" and isinstance(v, (list, tuple)):
            parts.append(f"ci95=[{v[0]:.3f}, {v[1]:.3f}]")
        else:
            parts.append(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}")
    return ", ".join(parts)


__getattr__ = renamed_names(__name__)


__all__ = ["Algorithm", "Objectives", "RolloutBatch", "Trainer", "combine_gradients"]
