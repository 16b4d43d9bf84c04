"""Shared sandbox logic: limits, results, scratch directories, the host paths a Python
program needs, the cgroup jail, running a command with caps on time/output, and the
classification of how a run ended. Every backend builds an argv and calls :func:`execute`.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import math
import os
import re
import secrets
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import threading
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Sequence

from deciplane.errors import ConfigError, SandboxError

Status = Literal["ok", "runtime_error", "timeout", "memory", "output_limit", "killed",
                 "sandbox_error"]
STATUSES: tuple[str, ...] = ("ok", "runtime_error", "timeout", "memory", "output_limit",
                             "killed", "sandbox_error")

NOBODY = 65534                       # the unprivileged uid/gid sandboxed code runs as
SCRATCH = "/sandbox"                 # the scratch directory as the program sees it
MAIN = "main.py"


@dataclass
class SandboxResult:
    """How one sandboxed run ended.

    ``status``: ``ok`` (exit 0), ``runtime_error`` (non-zero exit), ``timeout`` (wall or CPU
    time limit), ``memory`` (memory limit), ``output_limit`` (stdout/stderr over
    ``max_output_bytes``; the captured text is truncated there), ``killed`` (ended by a
    signal it was not sent for a limit), ``sandbox_error`` (the sandbox itself failed; the
    reason is in ``killed_reason``/``stderr``). ``exit_code`` is the program's exit status,
    ``-N`` if signal N ended it, ``None`` if the sandbox stopped it (timeout, output limit)
    or never started it. The backends' supervisors (bwrap, the namespace set-up, docker)
    report signal N as exit status 128+N, so a program that itself exits with 129-192
    reads as ``killed`` by that signal.
    """

    exit_code: int | None
    stdout: str
    stderr: str
    status: Status
    timed_out: bool
    killed_reason: str | None
    cpu_time_s: float
    wall_time_s: float
    peak_memory_mb: float
    files: dict[str, bytes] = field(default_factory=dict)
    backend: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Limits:
    """Validated resource limits of one run (see :meth:`Sandbox.run`)."""

    timeout_s: float = 2.0
    memory_mb: int = 256
    cpu_time_s: float | None = None
    max_output_bytes: int = 1 << 20
    max_file_bytes: int = 16 << 20
    max_procs: int = 32

    def __post_init__(self) -> None:
        checks = [("timeout_s", self.timeout_s, 0.01), ("memory_mb", self.memory_mb, 16),
                  ("max_output_bytes", self.max_output_bytes, 1),
                  ("max_file_bytes", self.max_file_bytes, 1), ("max_procs", self.max_procs, 1)]
        if self.cpu_time_s is not None:
            checks.append(("cpu_time_s", self.cpu_time_s, 0.01))
        for name, value, low in checks:
            if not isinstance(value, (int, float)) or not value >= low or math.isinf(value):
                raise ConfigError(f"sandbox limit {name}={value!r} is not allowed; "
                                  f"pass a finite number >= {low}")

    @property
    def cpu_limit_s(self) -> int:
        """Whole seconds for RLIMIT_CPU (the kernel's unit): the CPU budget rounded up,
        by default the wall timeout rounded up (the wall clock stops the run first)."""
        return max(1, math.ceil(self.cpu_time_s if self.cpu_time_s is not None
                                else self.timeout_s))

    def rlimits(self, address_space: bool = True, nproc: bool = True) -> dict[str, int]:
        """``prlimit``-style limits applied inside the sandbox. ``address_space`` is off
        under a tool (RLIMIT_AS also counts reserved, unused address space, which tools
        like valgrind need plenty of; the cgroup bounds memory then). ``nproc`` is off
        when a per-run pids cgroup (or container) counts processes: RLIMIT_NPROC counts
        every process of uid 65534 on the host, so a fork bomb in one run would starve
        the runs beside it."""
        lim = {"cpu": self.cpu_limit_s, "fsize": int(self.max_file_bytes),
               "nofile": 256, "core": 0, "stack": 64 << 20}
        if nproc:
            lim["nproc"] = int(self.max_procs)
        if address_space:
            lim["as"] = int(self.memory_mb) << 20
        return lim


@functools.lru_cache(maxsize=None)
def tool_path(name: str) -> str | None:
    """Absolute path of a host tool in the system directories (cached: looked up once)."""
    for d in ("/usr/bin", "/usr/sbin", "/bin", "/sbin"):
        if os.access(f"{d}/{name}", os.X_OK):
            return f"{d}/{name}"
    return shutil.which(name)


def prlimit_argv(limits: dict[str, int]) -> list[str]:
    """The ``prlimit`` (util-linux) prefix that sets ``limits`` then execs. soft = hard,
    except CPU: the soft limit sends SIGXCPU (reported as a CPU timeout), the hard one a
    second later SIGKILL for a program that ignores it."""
    exe = tool_path("prlimit") or "/usr/bin/prlimit"
    args = [f"--{k}={v}:{v + 1}" if k == "cpu" else f"--{k}={v}"
            for k, v in sorted(limits.items())]
    return [exe, *args, "--"]


#: Bump when how a run is started changes (its pid 1, environment, namespaces): that
#: shifts a program's start-up instruction count, so caches of counts key on it.
#: 2: bwrap as root in a network namespace made by ``unshare --net``; no PWD inherited.
LAUNCH_VERSION = 2

# ---------------------------------------------------------------- environment and paths

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


# ---------------------------------------------------------------- scratch directories

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


# ---------------------------------------------------------------- cgroups

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


# ---------------------------------------------------------------- running and classifying

@dataclass
class RawRun:
    """What :func:`execute` observed, before classification."""

    returncode: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    output_exceeded: bool = False
    wall_time_s: float = 0.0
    cpu_time_s: float = 0.0
    peak_memory_mb: float = 0.0
    oom: bool = False
    sandbox_failed: str | None = None


def execute(argv: list[str], stdin: bytes, limits: Limits, *, pass_fds: Sequence[int] = (),
            env: dict[str, str] | None = None, jail: CgroupJail | None = None,
            hand_over: Sequence[int] = ()) -> RawRun:
    """Run ``argv`` in a new session, feed ``stdin``, capture stdout/stderr up to
    ``limits.max_output_bytes`` each, stop it at ``limits.timeout_s`` wall time or when
    output overflows, and reap it with its resource usage. Never leaves the child, a
    zombie or a pipe behind. The child's exit is watched through a pidfd (Linux >= 5.3),
    so the run ends the moment it does; elsewhere by polling. ``hand_over``: descriptors
    among ``pass_fds`` closed here right after the child started (whether or not it
    did), so that only the child holds them."""
    raw = RawRun()
    t0 = time.monotonic()
    try:
        # cwd="/": nothing started here inherits (or names) the caller's directory
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, cwd="/",
                                close_fds=True, pass_fds=tuple(pass_fds),
                                env=env if env is not None else {"PATH": BASE_ENV["PATH"]})
    except OSError as exc:
        raw.sandbox_failed = f"could not start {argv[0]}: {exc}"
        return raw
    finally:
        for fd in hand_over:
            with contextlib.suppress(OSError):
                os.close(fd)
    cap = limits.max_output_bytes
    bufs = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    sel = selectors.DefaultSelector()
    reaped = None
    pidfd = -1
    try:
        with contextlib.suppress(AttributeError, OSError):
            pidfd = os.pidfd_open(proc.pid)
            sel.register(pidfd, selectors.EVENT_READ, "exit")
        for f in (proc.stdout, proc.stderr):
            os.set_blocking(f.fileno(), False)
            sel.register(f, selectors.EVENT_READ, "out")
        pending = memoryview(stdin)
        if pending:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin, selectors.EVENT_WRITE, "in")
        else:
            proc.stdin.close()
        deadline = t0 + limits.timeout_s
        poll_s = 0.0002
        while reaped is None and not raw.output_exceeded:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raw.timed_out = True
                break
            events = sel.select(timeout=remaining if pidfd >= 0 else min(remaining, poll_s))
            if pidfd < 0:
                poll_s = min(poll_s * 2, 0.02)
                reaped = _reap(proc, block=False)
            for key, _ in events:
                if key.data == "exit":
                    reaped = _reap(proc, block=True)
                elif key.data == "in":
                    try:
                        n = os.write(key.fd, pending[:65536])
                        pending = pending[n:]
                    except OSError:  # the program closed its stdin / exited
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(key.fileobj)
                        key.fileobj.close()
                else:
                    _read_into(key.fileobj, bufs, cap, raw, sel)
        if reaped is not None:
            # Gone: stop anything it left holding the pipes, then take what is buffered.
            if jail is not None:
                jail.kill_all()
            _drain(sel, bufs, cap, raw)
    finally:
        if reaped is None:
            _kill_tree(proc)
        if jail is not None:
            jail.kill_all()
        if reaped is None:
            reaped = _reap(proc, block=True)
        raw.wall_time_s = time.monotonic() - t0
        sel.close()
        if pidfd >= 0:
            os.close(pidfd)
        for f in (proc.stdin, proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                f.close()
    status, usage = reaped
    raw.returncode = os.waitstatus_to_exitcode(status) if status is not None else None
    raw.stdout, raw.stderr = bytes(bufs[proc.stdout]), bytes(bufs[proc.stderr])
    raw.cpu_time_s = usage.ru_utime + usage.ru_stime if usage else 0.0
    raw.peak_memory_mb = usage.ru_maxrss / 1024 if usage else 0.0
    if jail is not None:
        # cpuacct also counts what descendants used before being killed (rusage only
        # counts reaped ones). ru_maxrss is useless here: exec keeps the RSS high-water
        # mark of the forked parent; the cgroup's peak is the run's own.
        cg_cpu, cg_mem = jail.cpu_time_s(), jail.peak_memory_mb()
        if cg_cpu is not None:
            raw.cpu_time_s = max(raw.cpu_time_s, cg_cpu)
        if cg_mem is not None:
            raw.peak_memory_mb = cg_mem
        raw.oom = jail.oom_killed()
    return raw


def _read_into(f, bufs: dict, cap: int, raw: RawRun,  # noqa: ANN001
               sel: selectors.BaseSelector) -> None:
    """One read from an output pipe into its capped buffer; unregister it at EOF."""
    try:
        chunk = os.read(f.fileno(), 65536)
    except BlockingIOError:
        return
    if not chunk:
        sel.unregister(f)
        return
    buf = bufs[f]
    room = cap - len(buf)
    buf += chunk[:max(room, 0)]
    if len(chunk) > room:
        raw.output_exceeded = True


def _drain(sel: selectors.BaseSelector, bufs: dict, cap: int, raw: RawRun) -> None:
    """Read whatever is already buffered in the output pipes, without waiting."""
    for key in list(sel.get_map().values()):
        f = key.fileobj
        if f not in bufs:
            continue
        while True:
            try:
                chunk = os.read(f.fileno(), 65536)
            except (BlockingIOError, OSError):
                break
            if not chunk:
                break
            room = cap - len(bufs[f])
            bufs[f] += chunk[:max(room, 0)]
            if len(chunk) > room:
                raw.output_exceeded = True
                break


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (it leads its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def _reap(proc: subprocess.Popen, block: bool):  # noqa: ANN202
    """``wait4`` the child (its rusage includes the descendants it reaped) and tell Popen.
    Returns ``(wait status, rusage)``, or None if ``block`` is False and it still runs."""
    while True:
        try:
            pid, status, usage = os.wait4(proc.pid, 0 if block else os.WNOHANG)
        except InterruptedError:
            continue
        except ChildProcessError:  # reaped elsewhere
            return None, None
        if pid == 0:
            return None
        proc.returncode = os.waitstatus_to_exitcode(status)
        return status, usage


_MEMORY_ERR = re.compile(rb"(^|\n)(MemoryError|[\w.]*MemoryError:)[^\n]*\n?\s*$")


def classify(raw: RawRun, limits: Limits, signal_base: int | None = None
             ) -> tuple[Status, int | None, str | None]:
    """``(status, exit_code, killed_reason)`` for a finished run. ``signal_base``: a
    backend whose supervisor reports signal N as exit code ``base + N`` (bwrap, docker:
    128) gets it translated to ``-N``."""
    code = raw.returncode
    if signal_base is not None and code is not None and signal_base < code <= signal_base + 64:
        code = -(code - signal_base)
    if raw.sandbox_failed:
        return "sandbox_error", None, raw.sandbox_failed
    if raw.output_exceeded:
        return "output_limit", None, (f"output over max_output_bytes={limits.max_output_bytes}"
                                      "; captured text truncated")
    if raw.timed_out:
        return "timeout", None, f"wall time limit {limits.timeout_s:g}s"
    if code == -signal.SIGXCPU or (code == -signal.SIGKILL
                                    and raw.cpu_time_s >= limits.cpu_limit_s):
        return "timeout", code, f"CPU time limit {limits.cpu_limit_s}s"
    if raw.oom:
        return "memory", code, f"memory limit {limits.memory_mb} MB (killed by OOM)"
    if code not in (0, None) and _MEMORY_ERR.search(raw.stderr[-4096:]):
        return "memory", code, f"memory limit {limits.memory_mb} MB (MemoryError)"
    if code == 0:
        return "ok", 0, None
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return "killed", code, f"ended by {name}"
    return "runtime_error", code, None


def to_result(raw: RawRun, limits: Limits, backend: str, files: dict[str, bytes],
              signal_base: int | None = None) -> SandboxResult:
    status, code, reason = classify(raw, limits, signal_base)
    return SandboxResult(
        exit_code=code, stdout=raw.stdout.decode("utf-8", "replace"),
        stderr=raw.stderr.decode("utf-8", "replace"), status=status,
        timed_out=status == "timeout", killed_reason=reason,
        cpu_time_s=round(raw.cpu_time_s, 6), wall_time_s=round(raw.wall_time_s, 6),
        peak_memory_mb=round(raw.peak_memory_mb, 3), files=files, backend=backend)
