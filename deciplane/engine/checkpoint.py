"""Atomic checkpoints for exact resume: one format for every method.

A checkpoint is a folder ``RUN_DIR/checkpoints/iter_000012/`` holding ``state.pt`` and
``meta.json``. ``state.pt`` is one :class:`RunState` — the same fields for a trainer's
iteration and an adapter's step: the step count, the trained parameters, the optimizer
state, the python/numpy/torch RNG states, the progress counters, trainable modules outside
the model (e.g. a value head) and the method's own state (``method``: a trainer's plan and
evaluations, an adapter's budget, records and guard). :func:`run_state_from_payload` also
reads the two formats written before it (a trainer's ``trainable``/``extra`` payload, an
adapter's ``params``/``step`` state), so old run directories resume and evaluate.

A checkpoint is written into a temporary folder and renamed into place, so a run killed at
any instant (even with SIGKILL) leaves either the complete new checkpoint or none; only the
last ``keep_last`` are kept.

Exact resume also needs the rollouts to be a function of ``(seed, iteration)`` and the
model/optimizer state only — the trainer reseeds every source of randomness at the start
of each iteration (:func:`iteration_seed`), so the saved RNG states are a second line of
defence rather than the only one.

Data-parallel runs (``accelerate launch``, :mod:`deciplane.engine.distributed`): every
rank holds the same state, so rank 0 alone writes the checkpoint (the writer of
:class:`~deciplane.engine.rundir.RunDir`) and the others wait for it (a barrier in the
trainer) before going on; on resume every rank loads the same folder (the run
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


STATE_FORMAT = "deciplane-run-state/1"
"""The ``format`` of a :class:`RunState` payload (payloads without one are the older
trainer and adapter formats)."""


@dataclass
class RunState:
    """What a checkpoint holds, for every method (see the module docstring)."""

    step: int                                   # completed iterations / adaptation steps
    params: dict[str, torch.Tensor]             # trained parameters of the policy, by name
    optimizer: dict[str, Any] | None            # the optimizer's state_dict
    rng: dict[str, Any]                         # python/numpy/torch RNG states
    counters: dict[str, Any] = field(default_factory=dict)   # Counters fields (trainers)
    modules: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> state_dict
    method: dict[str, Any] = field(default_factory=dict)     # the method's own state


def run_state_payload(state: RunState) -> dict[str, Any]:
    """The dict ``state.pt`` holds for ``state``."""
    return {"format": STATE_FORMAT, **state.__dict__}


def run_state_from_payload(payload: Any, path: str | Path = "checkpoint") -> RunState:
    """The :class:`RunState` of a ``state.pt`` payload in this format or either older one:
    a trainer's (``trainable``, ``counters``, ``extra``, ``modules``) or an adapter's
    (``step``, ``params``, ``optimizer_counters``, budgets, records, ``extra``, guard)."""
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path} holds no deciplane run state; it was not written by "
                              "deciplane")
    if payload.get("format") == STATE_FORMAT:
        return RunState(**{k: payload[k] for k in RunState.__dataclass_fields__})
    if "format" in payload:
        raise CheckpointError(f"{path} has state format {payload['format']!r}, which this "
                              f"version does not read (it reads {STATE_FORMAT!r} and older); "
                              "upgrade deciplane")
    if "trainable" in payload:                  # a trainer's checkpoint, before RunState
        counters = dict(payload.get("counters") or {})
        return RunState(step=int(counters.get("iteration", 0)), params=payload["trainable"],
                        optimizer=payload.get("optimizer"), rng=payload["rng"],
                        counters=counters, modules=payload.get("modules", {}),
                        method=payload.get("extra", {}))
    if "params" in payload and "step" in payload:   # an adapter's state, before RunState
        steps, skipped = payload["optimizer_counters"]
        own = {k: v for k, v in payload.items()
               if k not in ("step", "params", "optimizer", "optimizer_counters", "rng")}
        return RunState(step=int(payload["step"]), params=payload["params"],
                        optimizer=payload["optimizer"], rng=payload["rng"],
                        counters={"optimizer_steps": steps, "skipped_steps": skipped},
                        method=own)
    raise CheckpointError(f"{path} holds no deciplane run state (neither policy parameters "
                          "nor an adapter's state); it was not written by deciplane")


def save_run_state(run_dir: str | Path, state: RunState, meta: dict[str, Any] | None = None,
                   keep_last: int = 2) -> Path:
    """Write ``state`` as ``RUN_DIR/checkpoints/iter_<state.step>/`` (atomically, keeping
    the last ``keep_last``)."""
    return write_state(run_dir, state.step, run_state_payload(state), meta, keep_last)


def load_run_state(path: str | Path, map_location: Any = "cpu") -> RunState:
    """The :class:`RunState` of a checkpoint folder (any of the three formats)."""
    return run_state_from_payload(read_state(path, map_location), path)


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


def training_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                   counters: Counters, extra: dict[str, Any] | None = None,
                   modules: dict[str, torch.nn.Module] | None = None) -> RunState:
    """A trainer's :class:`RunState`: the model's trainable parameters, the optimizer, the
    RNG states, ``counters`` (its step is ``counters.iteration``), ``modules`` — trainable
    modules outside the model (e.g. a value head), saved by name with their full
    ``state_dict`` — and ``extra`` as the method's own state."""
    return RunState(
        step=counters.iteration, params=trainable_state(model),
        optimizer=optimizer.state_dict() if optimizer is not None else None,
        rng=rng_state(), counters=counters.__dict__.copy(),
        modules={name: {k: v.detach().clone() for k, v in m.state_dict().items()}
                 for name, m in (modules or {}).items()},
        method=extra or {})


def counters_meta(counters: Counters) -> dict[str, Any]:
    """What ``meta.json`` shows of a training checkpoint besides its iteration."""
    return {"env_steps": counters.env_steps, "episodes": counters.episodes}


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
    :func:`training_state`); return the counters and extra state."""
    path = Path(path)
    if not (path / "state.pt").is_file():
        raise CheckpointError(f"{path} is not a checkpoint (no state.pt); pass a folder under "
                              f"RUN_DIR/{CKPT_DIR}/ or use --resume on the run directory")
    state = load_run_state(path)
    load_trainable_state(model, state.params)
    load_modules(modules or {}, state.modules, path)
    if optimizer is not None and state.optimizer is not None:
        optimizer.load_state_dict(state.optimizer)
    set_rng_state(state.rng)
    c = state.counters
    counters = Counters(**{k: v for k, v in c.items() if k in Counters.__dataclass_fields__})
    return counters, state.method
