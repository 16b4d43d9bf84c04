"""Resource limits of one sandboxed run, the constants every backend shares and the
host tools that enforce limits (``prlimit``)."""

from __future__ import annotations

import functools
import math
import os
import shutil
from dataclasses import dataclass

from deciplane.errors import ConfigError

NOBODY = 65534                       # the unprivileged uid/gid sandboxed code runs as
SCRATCH = "/sandbox"                 # the scratch directory as the program sees it
MAIN = "main.py"


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
