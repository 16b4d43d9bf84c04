"""How a sandboxed run ended: :class:`SandboxResult` (what callers get), :class:`RawRun`
(what :func:`~deciplane.sandbox.execute.execute` observed) and the classification of one
into the other."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field
from typing import Literal

from deciplane.sandbox.limits import Limits

Status = Literal["ok", "runtime_error", "timeout", "memory", "output_limit", "killed",
                 "sandbox_error"]
STATUSES: tuple[str, ...] = ("ok", "runtime_error", "timeout", "memory", "output_limit",
                             "killed", "sandbox_error")


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
