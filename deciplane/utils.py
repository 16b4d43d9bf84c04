"""Small shared helpers: the cache home, file locks, atomic writes, hashing, seeding."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator


def deciplane_home() -> Path:
    """``$DECIPLANE_HOME`` or ``~/.cache/deciplane``; created on first use."""
    home = Path(os.environ.get("DECIPLANE_HOME") or Path.home() / ".cache" / "deciplane")
    home.mkdir(parents=True, exist_ok=True)
    return home


@contextlib.contextmanager
def file_lock(path: str | os.PathLike) -> Iterator[None]:
    """An exclusive inter-process lock (``flock``) on ``path`` (created if missing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write to a temp file in the same folder, fsync, then rename: readers never see a
    half-written file, and a crash leaves the old file intact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_bytes(path, json.dumps(obj, indent=2, sort_keys=True, default=str).encode())


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fingerprint(items: dict[str, str]) -> str:
    """A short stable hash of a ``{name: file hash}`` manifest (order-independent)."""
    blob = json.dumps(sorted(items.items())).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def lazy_exports(package: str, table: dict[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of a package whose public names load on first use (so that
    importing it loads no torch, TextWorld or other heavy module): ``table`` maps each name
    to the module that defines it. Packages keep it as ``_LAZY``, the form
    ``tests/test_layering.py`` reads as the package's imports."""

    def __getattr__(name: str) -> Any:
        if name in table:
            return getattr(importlib.import_module(table[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def flatten_dict(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (dotted keys, as ``--set`` uses them)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten_dict(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def rng_state() -> dict[str, Any]:
    """The python, numpy and torch global RNG states (what an exact resume restores), the
    CUDA generators' too when CUDA is up."""
    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(),
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned (a checkpoint may have been read with
    ``map_location`` on a GPU: the generators take CPU byte tensors only)."""
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"].cpu())
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available() and len(cuda) <= torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])


def resolve_device(device: str | None) -> "torch.device":
    """The torch device a ``model.device`` / ``--device`` value names (``None`` and ``cpu``:
    the CPU; ``auto``: the GPU if there is one), or a :class:`ConfigError` for a device this
    machine lacks, raised before anything loads. Choosing CUDA allows TF32 matmuls (the
    one place a device is resolved)."""
    import torch

    from deciplane.errors import ConfigError

    if device in (None, "", "cpu"):
        return torch.device("cpu")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"device {device!r} is not a torch device; use cpu, cuda, cuda:N "
                          "or auto") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {device!r} was asked for but torch sees no CUDA GPU on "
                              f"this machine (torch {torch.__version__}); use --set "
                              "model.device=cpu (or --device cpu), or auto to use a GPU only "
                              "when there is one")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ConfigError(f"device {device!r} was asked for but this machine has {count} "
                              f"CUDA device(s) (cuda:0..cuda:{count - 1}); pick one of them")
        # TF32 tensor cores for float32 matmuls: ~2x faster, 10-bit mantissa inputs
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("high")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device {device!r} was asked for but MPS is not available here; "
                          "use cpu")
    elif dev.type not in ("cpu", "mps"):
        raise ConfigError(f"device {device!r} is not supported; use cpu, cuda, cuda:N or auto")
    return dev


def seed_everything(seed: int) -> None:
    """Seed python, numpy and (if imported) torch."""
    import numpy as np

    random.seed(seed)
    np.random.seed(seed % (2**32))
    try:
        import torch
    except ImportError:  # pragma: no cover
        return
    torch.manual_seed(seed)
