"""Running a training config: the policy, the algorithm and the run directory.

``run_training(config, run_dir)`` (what ``deciplane train`` calls) loads the model as
``config.model`` says (LoRA or full fine-tuning), builds the algorithm named by
``config.algorithm`` (a training method of :mod:`deciplane.methods`) and runs the
:class:`~deciplane.trainers.trainer.Trainer`; ``resume=True`` continues the run
directory's last checkpoint with the config saved there. Started by ``accelerate launch``
or ``torchrun`` (``WORLD_SIZE > 1``), it trains data-parallel
(:mod:`deciplane.engine.distributed`).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import torch

from deciplane.agents.precision import apply_trunk_dtype, autocast_layers, resolve_trunk_dtype
from deciplane.engine import distributed
from deciplane.engine.rundir import CONFIG_FILE, changed_on_resume, ensure_unused_run_dir
from deciplane.engine.trunk import first_trainable_layer
from deciplane.errors import CheckpointError, ConfigError
from deciplane.engine import checkpoint as ckpt
from deciplane.methods import MethodTable, get, load_config_class, load_target
from deciplane.trainers.algorithm import Algorithm
from deciplane.trainers.config import (EnvConfig, TrainConfig, check_eval_workers, env_entries,
                                       load_config, to_dict)
from deciplane.trainers.env_suite import check_env_ids
from deciplane.trainers.eval_pool import serve_requests, start_eval_pool
from deciplane.trainers.trainer import Trainer
from deciplane.utils import flatten_dict, resolve_device, seed_everything


def build_policy(config: TrainConfig) -> Any:
    """Load the model and make it trainable per ``config.model`` (LoRA or full)."""
    from deciplane.agents.loading import load_policy

    m = config.model
    torch.set_num_threads(m.threads)
    seed_everything(config.seed)  # LoRA init is random: seed it
    policy = load_policy(m.name, device=distributed.local_device(m.device))
    # an item head at layer L: the policy never reads the layers above it
    used = config.readout_layer if getattr(config, "readout", "labels") == "items" else None
    if m.finetune == "lora":
        policy.add_lora(r=m.lora_rank, alpha=m.lora_alpha,
                        target_modules=lora_targets(policy, m.lora_targets, m.lora_last_layers,
                                                    used))
    else:   # full: every weight trains; head: none of them (the item head below does)
        for p in policy.model.parameters():
            p.requires_grad_(m.finetune == "full")
    if getattr(config, "readout", "labels") == "items":   # the menu agent's item head
        policy.add_item_head(layer=config.readout_layer, rank=config.readout_rank,
                             kind=config.readout_head, mlp_hidden=config.readout_mlp_hidden)
    dtype = resolve_trunk_dtype(m.trunk_dtype, policy.device)
    if dtype != torch.float32 and m.finetune != "full":   # full fine-tuning: no frozen trunk
        apply_trunk_dtype(policy.model, first_trainable_layer(policy.model), dtype)
    if m.compute_dtype != "float32":     # the layers still in fp32 (the trainable ones)
        autocast_layers(policy.model, getattr(torch, m.compute_dtype))
    policy.model.train()
    return policy


def lora_targets(policy: Any, targets: list[str] | None, last_layers: int | None,
                 used_layers: int | None = None) -> list[str] | None:
    """LoRA target module names; with ``last_layers`` only those of the last N layers
    (PEFT matches a listed name as a suffix of the module path). ``used_layers``: the
    policy reads only layers ``[0, used_layers)`` (an item head at that layer): the last N
    of those (all of them for ``last_layers=None``)."""
    if last_layers is None and used_layers is None:
        return targets
    n = int(getattr(policy.model.config, "num_hidden_layers", 0))
    if n <= 0:
        raise ConfigError("model.lora_last_layers needs a model config with "
                          "num_hidden_layers; leave it null for this model")
    top = n if used_layers is None else min(n, int(used_layers))
    base = set(targets or policy._lora_targets())
    first = 0 if last_layers is None else max(0, top - last_layers)
    found = []
    for name, _ in policy.model.named_modules():
        m = re.search(r"(?:^|\.)(layers\.(\d+)\..*)$", name)
        if m and first <= int(m.group(2)) < top and name.rsplit(".", 1)[-1] in base:
            found.append(m.group(1))
    if not found:
        raise ConfigError(f"model.lora_last_layers={last_layers}: no '<...>.layers.<i>.<target>' "
                          f"module in {policy.name!r}; leave it null for this model")
    return found


ALGORITHMS = MethodTable("train", load_target)
"""algorithm name (``config.algorithm``) -> Algorithm class: a read-only view of
:mod:`deciplane.methods` (the registry; new code calls ``load_target(get(name, "train"))``)."""


def build_algorithm(config: TrainConfig, policy: Any) -> Algorithm:
    """The algorithm of ``config`` on ``policy``; with ``eval.workers`` > 1 its env suite
    gets the helper processes of its evaluations (:mod:`deciplane.trainers.eval_pool`)."""
    algo = load_target(get(config.algorithm, "train"))(config, policy)
    suite = getattr(algo, "suite", None)
    if suite is not None and hasattr(algo, "eval_spec"):
        suite.pool = start_eval_pool(config, eval_worker_main)
    return algo


def eval_worker_main(conn: Any, config_data: dict[str, Any]) -> None:
    """An evaluation helper process: the run's policy and algorithm with one torch thread
    (and no pool of its own), then :func:`~deciplane.trainers.eval_pool.serve_requests`."""
    import traceback

    from deciplane.config import from_dict

    try:
        config = from_dict(load_config_class(get(config_data["algorithm"], "train")),
                           config_data)
        config.model.threads = 1
        config.eval.workers = 1
        policy = build_policy(config)
        policy.model.eval()
        algo = build_algorithm(config, policy)
        conn.send(("ready",))
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises
        conn.send(("error", traceback.format_exc()))
        return
    serve_requests(conn, policy, algo)


RESUMABLE_CHANGES = frozenset({"iterations", "max_wall_time_s", "plan.eval_share",
                               "plan.warm_start_share", "progress",
                               "checkpoint.keep_last", "optim.micro_batch_size",
                               "model.threads"})
"""Options a resumed run may change (:func:`deciplane.engine.rundir.changed_on_resume`): the
budget and cosmetics, never what the iterations already run depended on (shortening
``iterations`` ends the run at the next iteration boundary with the final evaluation).
``optim.micro_batch_size`` only sets how many units one forward/backward holds — gradients
are accumulated over the whole optimizer batch with its normaliser, the same up to float
rounding — so a run killed for memory resumes with a smaller one; ``model.threads`` changes
speed only (and float rounding), so a run can continue with the cores that became free."""


def run_training(config: TrainConfig | str | Path, run_dir: str | Path | None = None,
                 overrides: list[str] | None = None, resume: bool = False) -> dict[str, Any]:
    """Train from a config (object or YAML path) into ``run_dir``; returns the summary.

    ``resume=True`` continues from the run directory's last checkpoint with the config
    saved there (a different config is an error).
    """
    if run_dir is None:
        if resume:
            raise CheckpointError("--resume needs --run-dir DIR (the run to continue)")
    saved = Path(run_dir) / CONFIG_FILE if run_dir is not None else None
    if not isinstance(config, TrainConfig):
        if config is None:
            if saved is None or not saved.is_file():
                raise ConfigError("pass a config file (e.g. configs/quickstart.yaml) or --resume "
                                  "an existing --run-dir")
            config = saved
        config = load_config(config, overrides)
    if resume and saved is not None and saved.is_file() and ckpt.latest_checkpoint(run_dir):
        prev, new = flatten_dict(to_dict(load_config(saved))), flatten_dict(to_dict(config))
        diff = changed_on_resume(prev, new, RESUMABLE_CHANGES)
        if diff:
            raise CheckpointError(f"--resume: the config differs from the run's saved config "
                                  f"({', '.join(diff[:5])}); resume with {saved} or start a new "
                                  f"--run-dir (only {', '.join(sorted(RESUMABLE_CHANGES))} may "
                                  "change on resume)")
    # a GPU this machine lacks, an env id nobody registered: a ConfigError now, not a
    # traceback after the model load
    if isinstance(getattr(config, "env", None), EnvConfig):
        check_env_ids(env_entries(config))
    device = resolve_device(distributed.local_device(config.model.device))
    check_eval_workers(config.eval.workers, device.type)    # auto may have chosen the GPU
    if run_dir is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = Path("runs") / f"{config.algorithm}-{stamp}"
    if not resume:  # before the (slow) model and env set-up
        ensure_unused_run_dir(Path(run_dir))
    t0 = time.perf_counter()
    policy = build_policy(config)
    # data-parallel under `accelerate launch` / `torchrun`: join the process group after
    # the model is loaded (transformers saves files on rank 0 only once a group exists,
    # and the first load of deciplane/tiny builds it into the cache)
    distributed.init_from_env(distributed.local_device(config.model.device))
    algo = build_algorithm(config, policy)
    setup_s = time.perf_counter() - t0
    try:
        return Trainer(config, run_dir, algo, resume=resume, setup_s=setup_s).train()
    finally:
        algo.close()


__all__ = ["ALGORITHMS", "RESUMABLE_CHANGES", "build_algorithm", "build_policy",
           "eval_worker_main", "lora_targets", "run_training"]
