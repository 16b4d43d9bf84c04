"""Scratch directories: the per-run working folder a program writes in, its files
collected afterwards and removed whatever modes the program left."""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Sequence

from deciplane.errors import ConfigError, SandboxError
from deciplane.sandbox.cgroups import cgroup_support
from deciplane.sandbox.limits import MAIN, NOBODY

@functools.lru_cache(maxsize=1)
def default_scratch_root() -> str:
    """``/dev/shm`` when it is a tmpfs of at least 1 GiB and per-run memory cgroups are
    available — tmpfs pages are charged to the writer's memory cgroup, so everything a run
    writes counts against its ``memory_mb`` and the scratch space is bounded as a whole —
    else the system temp dir (where only each file's size is capped)."""
    if cgroup_support()[0]:
        try:
            with open("/proc/self/mounts") as fh:
                shm_tmpfs = any(ln.split()[1:3] == ["/dev/shm", "tmpfs"] for ln in fh)
            st = os.statvfs("/dev/shm")
            if shm_tmpfs and st.f_blocks * st.f_frsize >= 1 << 30 and os.access("/dev/shm", os.W_OK):
                return "/dev/shm"
        except OSError:
            pass
    return tempfile.gettempdir()


def scratch_base() -> Path:
    """Where per-run scratch directories are created: ``$DECIPLANE_SANDBOX_TMP``, else
    :func:`default_scratch_root`, in a ``deciplane-sandbox-<uid>`` folder searchable but
    not listable by others (mode 0711), so one run cannot enumerate another's directory."""
    root = Path(os.environ.get("DECIPLANE_SANDBOX_TMP") or default_scratch_root())
    base = root / f"deciplane-sandbox-{os.getuid()}"
    if os.getuid() == 0:  # the sandbox runs as uid 65534: it must be able to reach /base
        closed = [str(p) for p in [root, *root.parents] if p.exists()
                  and not os.stat(p).st_mode & stat.S_IXOTH]
        if closed:
            raise SandboxError(f"scratch root {root} is not reachable by uid {NOBODY} "
                               f"({', '.join(closed)} not searchable by others); set "
                               "DECIPLANE_SANDBOX_TMP to a directory under /tmp")
    base.mkdir(mode=0o711, parents=True, exist_ok=True)
    st = base.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise SandboxError(f"{base} is not a directory owned by uid {os.getuid()}; remove it "
                           "or set DECIPLANE_SANDBOX_TMP to a private directory")
    os.chmod(base, 0o711)
    return base


def _check_name(name: str) -> str:
    parts = Path(name).parts
    if (not name or not parts or name.startswith("/") or "\0" in name
            or any(p in ("..", ".", "") for p in parts)):
        raise ConfigError(f"file name {name!r} is not allowed in the sandbox; use a relative "
                          "path without '..' (e.g. 'data/input.txt')")
    return name


def make_scratch(code: str, files: dict[str, str | bytes] | None, owner: int | None) -> Path:
    """A fresh private directory holding ``main.py`` and ``files``, owned by ``owner``
    (the sandbox uid) when this process may chown."""
    scratch = Path(tempfile.mkdtemp(prefix=f"run-{secrets.token_hex(4)}-", dir=scratch_base()))
    all_files: dict[str, str | bytes] = {**(files or {}), MAIN: code}
    for name, content in all_files.items():
        path = scratch / _check_name(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else bytes(content))
    if owner is not None and os.getuid() == 0:
        for dirpath, dirnames, filenames in os.walk(scratch):
            for n in [dirpath, *(os.path.join(dirpath, x) for x in dirnames + filenames)]:
                os.lchown(n, owner, owner)
    os.chmod(scratch, 0o700)
    return scratch


def collect(scratch: Path, names: Sequence[str] | None, max_bytes: int) -> dict[str, bytes]:
    """Read the requested regular files back from the scratch dir. Symbolic links are
    never followed (a program could point one at a host file); missing, non-regular and
    oversized files are left out."""
    out: dict[str, bytes] = {}
    for name in names or []:
        parts = Path(_check_name(name)).parts
        fd = os.open(scratch, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for part in parts[:-1]:
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nfd
            ffd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        except OSError:
            continue
        finally:
            os.close(fd)
        try:
            st = os.fstat(ffd)
            if stat.S_ISREG(st.st_mode) and st.st_size <= max_bytes:
                with os.fdopen(ffd, "rb", closefd=False) as fh:
                    out[name] = fh.read(max_bytes + 1)[:max_bytes]
        finally:
            os.close(ffd)
    return out


def remove_scratch(scratch: Path) -> None:
    """Delete a scratch dir, whatever modes the program left on its files (rmtree never
    follows symlinks)."""
    def onerror(func, path, exc_info):  # noqa: ANN001
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
            func(path)
    shutil.rmtree(scratch, onerror=onerror)
