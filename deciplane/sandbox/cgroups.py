"""Per-run cgroups (v1): pids and memory limits, CPU accounting and kill-everything,
pooled because creating and removing v1 cgroups is slow."""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import secrets
import signal
import threading
import time
from pathlib import Path


CG_V1 = Path("/sys/fs/cgroup")


def _v1_dir(controller: str) -> Path | None:
    d = CG_V1 / controller
    return d if (d / "cgroup.procs").exists() and os.access(d, os.W_OK) else None


def cgroup_support() -> tuple[bool, str]:
    """Whether per-run cgroups (pids + memory + cpuacct, v1) can be created here
    (``DECIPLANE_SANDBOX_CGROUPS=0`` turns them off: the rlimit-only fallback)."""
    if os.environ.get("DECIPLANE_SANDBOX_CGROUPS", "1") == "0":
        return False, "disabled by DECIPLANE_SANDBOX_CGROUPS=0"
    if os.getuid() != 0:
        return False, "not root: per-run cgroups need write access to /sys/fs/cgroup"
    missing = [c for c in ("pids", "memory") if _v1_dir(c) is None]
    if missing:
        return False, (f"cgroup v1 controllers {missing} not writable under /sys/fs/cgroup "
                       "(cgroup v2-only hosts: limits fall back to rlimits)")
    return True, "cgroup v1 pids+memory writable"


class CgroupJail:
    """One run's cgroups (v1): a pids limit that contains fork bombs whatever the uid, a
    memory limit (counting tmpfs pages too) with OOM detection, CPU accounting that
    survives killing the tree, and a kill-everything at the end. Jails are pooled
    (:func:`acquire_jail` / :func:`release_jail`): creating and removing v1 cgroups costs
    milliseconds, resetting an empty one microseconds."""

    CONTROLLERS = ("pids", "memory", "cpuacct", "freezer")

    def __init__(self, name: str) -> None:
        self.name = name
        self.dirs: dict[str, Path] = {}
        try:
            for ctl in self.CONTROLLERS:
                root = _v1_dir(ctl)
                if root is None:
                    continue
                d = root / "deciplane" / name
                d.mkdir(parents=True, exist_ok=False)
                self.dirs[ctl] = d
        except OSError:
            self.destroy()
            raise
        self._oom_base = 0
        self._mem_base = 0

    def configure(self, max_procs: int, memory_mb: int) -> None:
        """Set this run's limits and zero the counters (raises OSError if the memory
        limit cannot be lowered, e.g. charged page cache, or if processes of an earlier
        run still count against the pids limit — the kernel releases them lazily after
        they are killed and reaped: the caller makes a new jail)."""
        if "pids" in self.dirs:
            if int(self._read("pids", "pids.current") or 0) > 0:
                raise OSError("jail still charged with an earlier run's processes")
            self._write("pids", "pids.max", str(max_procs + 2))
        if "memory" in self.dirs:
            limit = str(int(memory_mb) << 20)
            memsw = self.dirs["memory"] / "memory.memsw.limit_in_bytes"
            # memsw must stay >= limit: order the two writes by direction of change
            cur = int(self._read("memory", "memory.limit_in_bytes") or 0)
            first, second = (("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")
                             if int(limit) <= cur else
                             ("memory.memsw.limit_in_bytes", "memory.limit_in_bytes"))
            for fname in (first, second):
                if fname.startswith("memory.memsw") and not memsw.exists():
                    continue
                try:
                    self._write("memory", fname, limit)
                except OSError:
                    if fname.startswith("memory.memsw"):
                        continue  # swap accounting off
                    raise
            self._write("memory", "memory.max_usage_in_bytes", "0")
            self._write("memory", "memory.failcnt", "0")
            self._mem_base = int(self._read("memory", "memory.usage_in_bytes") or 0)
            self._oom_base = self._oom_count()
        if "cpuacct" in self.dirs:
            self._write("cpuacct", "cpuacct.usage", "0")

    def mark(self) -> None:
        """Zero the counters (peak memory, OOM kills) without touching limits or processes:
        the start of one probe inside a warm jail that already holds its supervisor."""
        if "memory" in self.dirs:
            with contextlib.suppress(OSError):
                self._write("memory", "memory.max_usage_in_bytes", "0")
            self._mem_base = int(self._read("memory", "memory.usage_in_bytes") or 0)
            self._oom_base = self._oom_count()

    def _write(self, ctl: str, fname: str, value: str) -> None:
        with open(self.dirs[ctl] / fname, "w") as fh:
            fh.write(value)

    def join_argv(self) -> list[str]:
        """A ``sh`` prefix that moves itself into every cgroup, then execs the rest."""
        targets = " ".join(f"'{d / 'cgroup.procs'}'" for d in self.dirs.values())
        # unset PWD/OLDPWD: the shell would export them to bwrap, whose pid 1 inside the
        # sandbox shows its environment in /proc/1/environ (a host path)
        script = (f'unset PWD OLDPWD; for f in {targets}; do echo $$ > "$f" || exit 125; '
                  'done; exec "$@"')
        return ["/bin/sh", "-c", script, "sh"]

    def pids(self) -> list[int]:
        d = self.dirs.get("pids") or self.dirs.get("memory")
        if d is None:
            return []
        try:
            return [int(x) for x in (d / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill_all(self, deadline_s: float = 5.0) -> bool:
        """SIGKILL every process in the jail (frozen while we kill, so nothing forks in
        between) until it is empty; True if it is."""
        frz = self.dirs.get("freezer")
        end = time.monotonic() + deadline_s
        nap = 0.0002
        while True:
            pids = self.pids()
            if not pids:
                return True
            if time.monotonic() > end:
                return False
            if frz:
                with contextlib.suppress(OSError):
                    self._write("freezer", "freezer.state", "FROZEN")
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if frz:
                with contextlib.suppress(OSError):
                    self._write("freezer", "freezer.state", "THAWED")
            time.sleep(nap)
            nap = min(nap * 2, 0.01)

    def _read(self, ctl: str, fname: str) -> str:
        d = self.dirs.get(ctl)
        try:
            return (d / fname).read_text() if d else ""
        except OSError:
            return ""

    def _oom_count(self) -> int:
        m = re.search(r"oom_kill (\d+)", self._read("memory", "memory.oom_control"))
        return int(m.group(1)) if m else 0

    def oom_killed(self) -> bool:
        """Did the kernel's OOM killer act in this jail during the run?"""
        return self._oom_count() > self._oom_base

    def peak_memory_mb(self) -> float | None:
        """Peak memory charged during the run, above what the jail held at its start."""
        v = self._read("memory", "memory.max_usage_in_bytes").strip()
        return max(0, int(v) - self._mem_base) / (1 << 20) if v else None

    def cpu_time_s(self) -> float | None:
        v = self._read("cpuacct", "cpuacct.usage").strip()
        return int(v) / 1e9 if v else None

    def destroy(self) -> None:
        self.kill_all()
        for d in self.dirs.values():
            for _ in range(400):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)


_POOL: list[CgroupJail] = []
_POOL_LOCK = threading.Lock()
_POOL_MAX = 16


def _forget_parent_jails() -> None:
    """In a forked child (e.g. an ``AsyncVectorEnv`` worker), drop the parent's pooled
    jails: parent and children would otherwise run in the same cgroups at once, and the
    end-of-run kill of one run would SIGKILL the others' programs."""
    global _POOL_LOCK
    _POOL_LOCK = threading.Lock()
    _POOL.clear()


os.register_at_fork(after_in_child=_forget_parent_jails)


_SWEPT = False


def sweep_stale_jails() -> int:
    """Remove empty jails left by processes that died without cleaning up (their names
    carry the creator's pid); returns how many were removed."""
    removed = 0
    for ctl in CgroupJail.CONTROLLERS:
        root = _v1_dir(ctl)
        parent = root / "deciplane" if root else None
        if parent is None or not parent.is_dir():
            continue
        for d in parent.iterdir():
            m = re.fullmatch(r"run-(\d+)-[0-9a-f]+", d.name)
            if not m or os.path.exists(f"/proc/{m.group(1)}"):
                continue
            try:
                if not (d / "cgroup.procs").read_text().strip():
                    d.rmdir()
                    removed += 1
            except OSError:
                continue
    return removed


def acquire_jail(max_procs: int, memory_mb: int) -> CgroupJail:
    """An empty jail configured with these limits (reused from the pool when possible)."""
    global _SWEPT
    if not _SWEPT:
        _SWEPT = True
        sweep_stale_jails()
    while True:
        with _POOL_LOCK:
            jail = _POOL.pop() if _POOL else None
        if jail is None:
            jail = CgroupJail(f"run-{os.getpid()}-{secrets.token_hex(6)}")
        try:
            jail.configure(max_procs, memory_mb)
            return jail
        except OSError:
            jail.destroy()
            if not jail.dirs:
                raise


def release_jail(jail: CgroupJail) -> None:
    """Kill whatever is left in the jail, then keep it for the next run (or remove it)."""
    if jail.kill_all():
        with _POOL_LOCK:
            if len(_POOL) < _POOL_MAX:
                _POOL.append(jail)
                return
    jail.destroy()


@atexit.register
def _destroy_pool() -> None:
    with _POOL_LOCK:
        jails, _POOL[:] = list(_POOL), []
    for jail in jails:
        jail.destroy()
