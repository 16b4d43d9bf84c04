"""Atomic checkpoints for exact resume.

A checkpoint is a folder ``RUN_DIR/checkpoints/iter_000012/`` holding ``state.pt`` (the
trainable parameters, the optimizer state, the python/numpy/torch RNG states, counters and
any extra trainer state) and ``meta.json``. It is written into a temporary folder and
renamed into place, so a run killed at any instant (even with SIGKILL) leaves either the
complete new checkpoint or none; only the last ``keep_last`` are kept.

Exact resume also needs the rollouts to be a function of ``(seed, iteration)`` and the
model/optimizer state only — the trainer reseeds every source of randomness at the start
of each iteration (:func:`iteration_seed`), so the saved RNG states are a second line of
defence rather than the only one.

Data-parallel runs (``accelerate launch``, :mod:`deciplane.engine.distributed`): every
rank holds the same state, so rank 0 alone writes the checkpoint and the others wait for
it (a barrier) before going on; on resume every rank loads the same folder (the run
directory must be on a file system all ranks see).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from deciplane.engine import distributed
from deciplane.errors import CheckpointError
from deciplane.utils import rng_state, set_rng_state  # noqa: F401  (re-exported)

CKPT_DIR = "checkpoints"
_PREFIX = "iter_"


@dataclass
class Counters:
    """Progress counters saved with every checkpoint."""

    iteration: int = 0          # completed iterations
    env_steps: int = 0          # environment steps (or generated answers) taken in training
    episodes: int = 0           # training episodes (or samples) finished
    optimizer_steps: int = 0    # optimizer steps taken (skipped steps excluded)
    skipped_steps: int = 0      # optimizer steps skipped (all-degenerate batches)
    wall_time_s: float = 0.0    # training wall time accumulated over all sessions
    cpu_time_s: float = 0.0     # process CPU time (all threads) accumulated over all sessions
    extra: dict[str, Any] = field(default_factory=dict)


def iteration_seed(seed: int, iteration: int, stream: str = "rollout") -> int:
    """A 63-bit seed derived from (seed, iteration, stream); stable across processes."""
    h = hashlib.sha256(f"{seed}/{iteration}/{stream}".encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter that requires grad (LoRA adapters, or all weights in full fine-tuning)."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def load_trainable_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    params = dict(model.named_parameters())
    missing = [n for n in state if n not in params]
    if missing:
        raise CheckpointError(
            f"checkpoint has {len(missing)} parameter(s) the model lacks (e.g. {missing[0]!r}); "
            "resume with the same model and finetune settings as the original run")
    expected = {n for n, p in params.items() if p.requires_grad}
    absent = sorted(expected - set(state))
    if absent:
        raise CheckpointError(
            f"checkpoint lacks trainable parameter {absent[0]!r} (and {len(absent) - 1} more); "
            "resume with the same model and finetune settings as the original run")
    with torch.no_grad():
        for n, t in state.items():
            params[n].copy_(t)


def save_checkpoint(run_dir: str | Path, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer | None, counters: Counters,
                    extra: dict[str, Any] | None = None, keep_last: int = 2,
                    modules: dict[str, torch.nn.Module] | None = None) -> Path:
    """Write ``checkpoints/iter_<n>/`` atomically and delete all but the last ``keep_last``.

    ``modules`` are trainable modules outside the model (e.g. a value head), saved by name
    with their full ``state_dict``. Under a process group only rank 0 writes; every rank
    returns once the checkpoint is in place.
    """
    if distributed.active():
        path = Path(run_dir) / CKPT_DIR / f"{_PREFIX}{counters.iteration:06d}"
        if distributed.is_main():
            path = _write_checkpoint(run_dir, model, optimizer, counters, extra, keep_last,
                                     modules)
        distributed.barrier()
        return path
    return _write_checkpoint(run_dir, model, optimizer, counters, extra, keep_last, modules)


def _write_checkpoint(run_dir: str | Path, model: torch.nn.Module,
                      optimizer: torch.optim.Optimizer | None, counters: Counters,
                      extra: dict[str, Any] | None, keep_last: int,
                      modules: dict[str, torch.nn.Module] | None) -> Path:
    payload = {
        "trainable": trainable_state(model),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "rng": rng_state(),
        "counters": counters.__dict__.copy(),
        "extra": extra or {},
        "modules": {name: {k: v.detach().clone() for k, v in m.state_dict().items()}
                    for name, m in (modules or {}).items()},
    }
    meta = {"iteration": counters.iteration, "env_steps": counters.env_steps,
            "episodes": counters.episodes}
    return write_state(run_dir, counters.iteration, payload, meta, keep_last)


def write_state(run_dir: str | Path, iteration: int, payload: dict[str, Any],
                meta: dict[str, Any] | None = None, keep_last: int = 2) -> Path:
    """Write ``payload`` (``torch.save``) as ``RUN_DIR/checkpoints/iter_<iteration>/``
    atomically, and delete all but the last ``keep_last`` checkpoints. What the trainer's
    checkpoints and the test-time adapters' states are written with."""
    root = Path(run_dir) / CKPT_DIR
    root.mkdir(parents=True, exist_ok=True)
    name = f"{_PREFIX}{iteration:06d}"
    final = root / name
    tmp = root / f".{name}.tmp{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    with open(tmp / "state.pt", "wb") as fh:
        torch.save(payload, fh)
        fh.flush()
        os.fsync(fh.fileno())
    with open(tmp / "meta.json", "w") as fh:
        json.dump({"iteration": iteration, **(meta or {}), "complete": True}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    if final.exists():  # re-written iteration (e.g. resumed twice): replace
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    for old in list_checkpoints(run_dir)[:-max(1, keep_last)]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def read_state(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """The payload of a checkpoint folder (or of a ``state.pt`` file), or a
    :class:`CheckpointError` that says what to do when it cannot be read."""
    path = Path(path)
    f = path / "state.pt" if path.is_dir() else path
    if not f.is_file():
        raise CheckpointError(f"{path} is not a checkpoint (no state.pt); pass a folder under "
                              f"RUN_DIR/{CKPT_DIR}/ or use --resume on the run directory")
    try:
        return torch.load(f, map_location=map_location, weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means corrupt
        raise CheckpointError(f"{f} cannot be read ({e}); delete it to resume from the "
                              "previous checkpoint") from e


def remove_checkpoints(run_dir: str | Path) -> None:
    """Delete a run's checkpoints (a finished adaptation keeps its results, not its state)."""
    shutil.rmtree(Path(run_dir) / CKPT_DIR, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first (half-written temp folders are ignored)."""
    root = Path(run_dir) / CKPT_DIR
    if not root.is_dir():
        return []
    out = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(_PREFIX)
           and (p / "meta.json").is_file() and (p / "state.pt").is_file()]
    return sorted(out, key=lambda p: int(p.name[len(_PREFIX):]))


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


def load_modules(modules: dict[str, torch.nn.Module], saved: dict[str, Any],
                 path: str | Path = "checkpoint") -> None:
    """Load each named module's saved ``state_dict``; the names must match exactly."""
    missing, extra = sorted(set(modules) - set(saved)), sorted(set(saved) - set(modules))
    if missing:
        raise CheckpointError(f"{path} lacks the state of trainable module(s) {missing} (e.g. "
                              "the value head of advantage=gae); resume with the config the "
                              "run was started with")
    if extra:
        raise CheckpointError(f"{path} holds trainable module(s) {extra} this run does not "
                              "build (e.g. the value head of advantage=gae); resume with the "
                              "config the run was started with")
    for name, m in modules.items():
        m.load_state_dict(saved[name])


def load_checkpoint(path: str | Path, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer | None,
                    modules: dict[str, torch.nn.Module] | None = None
                    ) -> tuple[Counters, dict[str, Any]]:
    """Restore parameters, optimizer and RNG states (and the named ``modules`` saved by
    :func:`save_checkpoint`); return the counters and extra state."""
    path = Path(path)
    if not (path / "state.pt").is_file():
        raise CheckpointError(f"{path} is not a checkpoint (no state.pt); pass a folder under "
                              f"RUN_DIR/{CKPT_DIR}/ or use --resume on the run directory")
    payload = read_state(path)
    load_trainable_state(model, payload["trainable"])
    load_modules(modules or {}, payload.get("modules", {}), path)
    if optimizer is not None and payload.get("optimizer") is not None:
        optimizer.load_state_dict(payload["optimizer"])
    set_rng_state(payload["rng"])
    c = payload["counters"]
    counters = Counters(**{k: v for k, v in c.items() if k in Counters.__dataclass_fields__})
    return counters, payload.get("extra", {})
