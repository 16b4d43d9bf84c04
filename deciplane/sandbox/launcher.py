"""``deciplane-launch`` (``launch.c``): joins the run's cgroups, makes its network
namespace and drops to uid 65534 in one exec, where the Python side otherwise chains
``sh`` (cgroup join) -> ``unshare --net`` -> ``setpriv``. Compiled once with the system C
compiler into a directory of its own (``deciplane-launch-<uid>`` in the default scratch
root, writable only by us; never inside the scratch base a run can reach); where no compiler works,
and by default (opt in with ``DECIPLANE_SANDBOX_LAUNCHER=1``: an intermittent 2 s stall
of a trivial run was seen twice in full sandbox-suite runs with it on and is not yet
explained), :func:`launcher_path` is None and the old chain is used — the same
containment either way."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from deciplane.sandbox import bwrap
from deciplane.sandbox.cgroups import CgroupJail
from deciplane.sandbox.limits import NOBODY
from deciplane.sandbox.scratch import default_scratch_root

SOURCE = Path(__file__).with_name("launch.c")


def launcher_path() -> str | None:
    """The compiled launcher (built on first use), or None where it cannot be built."""
    if os.environ.get("DECIPLANE_SANDBOX_LAUNCHER", "0") != "1":
        return None
    return _build()


@functools.lru_cache(maxsize=1)
def _build() -> str | None:
    try:
        src = SOURCE.read_bytes()
    except OSError:
        return None
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    base = Path(default_scratch_root()) / f"deciplane-launch-{os.getuid()}"
    out_dir = base / hashlib.sha256(src).hexdigest()[:12]
    exe = out_dir / "deciplane-launch"
    if exe.is_file() and _trusted(exe):
        return str(exe)
    try:
        for d in (base, out_dir):
            d.mkdir(mode=0o755, exist_ok=True)
            if d.lstat().st_uid != os.getuid():
                return None
            os.chmod(d, 0o755)
        fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".build-")
        os.close(fd)
        res = subprocess.run([cc, "-O2", "-o", tmp, str(SOURCE)], capture_output=True,
                             timeout=120)
        if res.returncode != 0:
            os.unlink(tmp)
            return None
        os.chmod(tmp, 0o755)
        os.replace(tmp, exe)
        # it must work here, not just compile
        ok = subprocess.run([str(exe), "--", "/bin/true"], capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return str(exe) if ok.returncode == 0 and _trusted(exe) else None


def _trusted(exe: Path) -> bool:
    """Owned by us and writable by nobody else (dir included): nothing sandboxed can
    have replaced it."""
    for p in (exe, exe.parent, exe.parent.parent):
        st = p.lstat()
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            return False
    return True


def launch_argv(exe: str, jail: CgroupJail | None, netns: bool, drop: bool) -> list[str]:
    """``[exe, -c procs..., -n, -u 65534 -g 65534, --]``."""
    argv = [exe]
    for d in (jail.dirs.values() if jail is not None else ()):
        argv += ["-c", str(d / "cgroup.procs")]
    if netns:
        argv.append("-n")
    if drop:
        argv += ["-u", str(NOBODY), "-g", str(NOBODY)]
    return argv + ["--"]


if __name__ == "__main__":  # `python -m deciplane.sandbox.launcher`: build it now
    path = _build()
    print(path or "deciplane-launch not built (no C compiler, or disabled): sandboxes use "
          "the sh/unshare/setpriv chain")


def host_chain(backend: str, jail) -> list[str] | None:  # noqa: ANN001
    """The compiled launcher's prefix for this run (cgroup join; for bwrap as root also
    the network namespace and the drop to uid 65534), or None: keep the ``sh`` /
    ``unshare`` / ``setpriv`` chain (not opted in with ``DECIPLANE_SANDBOX_LAUNCHER=1``,
    no compiler, or nothing for it to do)."""
    netns = backend == "bwrap" and bwrap.loopback_down()
    drop = backend == "bwrap" and bwrap.drops_privileges()
    if jail is None and not netns and not drop:
        return None
    exe = launcher_path()
    return launch_argv(exe, jail, netns, drop) if exe else None
