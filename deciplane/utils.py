"""Small shared helpers: the cache home, file locks, atomic writes, hashing, seeding."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any, Iterator


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
    """The python, numpy and torch global RNG states (what an exact resume restores)."""
    import numpy as np
    import torch

    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


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
