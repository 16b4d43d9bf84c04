"""What a sandboxed Python program needs from the host: a scrubbed environment, the
interpreter and the read-only system paths."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from deciplane.errors import ConfigError, SandboxError
from deciplane.sandbox.limits import SCRATCH

BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": SCRATCH,
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONNOUSERSITE": "1",
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def scrubbed_env(extra: dict[str, str] | None) -> dict[str, str]:
    """A minimal environment (nothing inherited from the host) plus ``extra``."""
    env = dict(BASE_ENV)
    for key, value in (extra or {}).items():
        if not _ENV_NAME.match(str(key)) or "\0" in str(value):
            raise ConfigError(f"environment variable {key!r} is not a valid name/value; "
                              "use letters, digits and '_' and no NUL bytes")
        env[str(key)] = str(value)
    return env


def find_python() -> str:
    """The interpreter sandboxed programs run with: ``$DECIPLANE_SANDBOX_PYTHON``, else the
    system ``/usr/bin/python3`` (lives under /usr, which every backend mounts read-only),
    else this process's interpreter."""
    override = os.environ.get("DECIPLANE_SANDBOX_PYTHON")
    if override:
        if not os.access(override, os.X_OK):
            raise SandboxError(f"DECIPLANE_SANDBOX_PYTHON={override!r} is not an executable; "
                               "point it at a python3 binary or unset it")
        return override
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(cand, os.X_OK):
            return cand
    return os.path.realpath(sys.executable)


def python_ro_paths(python: str) -> list[str]:
    """Host paths outside the standard system directories that ``python`` needs (its
    installation prefix, e.g. ``/root/.pyenv/versions/3.11.7``), to bind read-only at the
    same place. Only that prefix is exposed, never its parents' other contents."""
    real = os.path.realpath(python)
    if real.startswith(("/usr/", "/bin/", "/lib")):
        return []
    prefix = Path(real).parent.parent  # <prefix>/bin/python3.X -> <prefix>
    return [str(prefix)]


SYSTEM_RO = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]
ETC_RO = ["/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
          "/etc/alternatives", "/etc/mime.types"]


def system_ro_paths() -> list[str]:
    """The host system directories a dynamically linked program needs (existing only).
    /etc is NOT mounted: only the loader cache, time zone and alternatives symlinks."""
    return [p for p in SYSTEM_RO + ETC_RO if os.path.lexists(p)]
