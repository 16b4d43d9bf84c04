"""Running one command with caps on wall time and output: every backend builds an argv
and calls :func:`execute`."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from typing import Sequence

from deciplane.sandbox.cgroups import CgroupJail
from deciplane.sandbox.host import BASE_ENV
from deciplane.sandbox.limits import Limits
from deciplane.sandbox.results import RawRun

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
