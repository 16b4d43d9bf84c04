"""The warm jail behind :meth:`Sandbox.run_many`: one sandbox (scratch dir, cgroup,
namespaces, seccomp filter, uid 65534) per program, inside it a Python supervisor that
forks a fresh child per input ("probe"). A probe costs a ``fork`` instead of a whole
sandbox launch plus an interpreter start-up.

Each probe gets its own rlimits (CPU, address space, file size, open files), wall-clock
deadline, stdin, and capped stdout/stderr, and is classified by the same code as
:meth:`Sandbox.run` (``status``, ``exit_code``, ``timed_out``, ``killed_reason``). Between
probes the supervisor kills and reaps every other process of the jail, wipes everything
writable (``/sandbox``, ``/tmp``, ``/dev/shm``), removes SysV IPC objects and rewrites
the scratch files; if it cannot prove the jail is back to its initial state, or the
supervisor stops answering (a probe killed it), the next probe gets a fresh jail and the
probe that broke it is re-run alone through :meth:`Sandbox.run`. So probe i never sees
state left by probe i-1.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import selectors
import struct
import subprocess
import time
from pathlib import Path
from typing import Any, Sequence

from deciplane.envs.sandbox import bwrap as _bwrap
from deciplane.envs.sandbox.launcher import host_chain
from deciplane.envs.sandbox._common import (BASE_ENV, NOBODY, CgroupJail, Limits, RawRun,
                                            SandboxResult, acquire_jail, make_scratch,
                                            release_jail, remove_scratch, to_result)

# `sb` below is the calling deciplane.envs.sandbox.Sandbox (not imported here: the package
# imports this module, and the layering test forbids the circle)
Sandbox = Any

#: memory the supervisor itself may hold on top of a probe's ``memory_mb + 64`` MB
SUPERVISOR_MB = 48
#: seconds the supervisor gets, past a probe's ``timeout_s``, to reply
REPLY_SLACK_S = 10.0
START_TIMEOUT_S = 20.0
_SOURCE = (Path(__file__).with_name("_warm_supervisor.py")).read_bytes() + b"\n#END\n"
#: ``python3 -c`` this: reads the supervisor's source from stdin (kept off the command
#: line, which every process in the sandbox can read) and runs it
BOOTSTRAP = ("import os\nb = b''\nwhile not b.endswith(b'\\n#END\\n'):\n"
             "    c = os.read(0, 65536)\n    if not c:\n        raise SystemExit(125)\n"
             "    b += c\nexec(compile(b, 'warm-supervisor', 'exec'))\n")


def child_rlimits(limits: Limits, address_space: bool, nproc: bool) -> dict[str, list[int]]:
    """``{name: [soft, hard]}`` for one probe: what ``prlimit`` sets for :meth:`run`
    (CPU soft = budget, hard = budget + 1 s) plus no POSIX message queues (they would
    outlive the probe, and no supervisor can list them to clean up)."""
    out = {}
    for name, value in limits.rlimits(address_space=address_space, nproc=nproc).items():
        out[name] = [value, value + 1] if name == "cpu" else [value, value]
    out["msgqueue"] = [0, 0]
    return out


def supervisor_rlimits(limits: Limits) -> dict[str, int]:
    """The supervisor's own limits: those a probe cannot escape from by forking
    (file size, stack, no core dumps, few files); CPU, address space and processes are
    set per probe (and bounded as a whole by the jail's cgroup)."""
    return {"fsize": int(limits.max_file_bytes), "nofile": 256, "core": 0,
            "stack": 64 << 20}


class WarmJail:
    """One started jail. ``probe()`` returns a result, or None when the jail broke (the
    caller re-runs that input through :meth:`Sandbox.run`); ``dead`` says whether a
    fresh jail is needed for the next probe."""

    def __init__(self, sb: Sandbox, code: str, files, limits: Limits,  # noqa: ANN001
                 env: dict[str, str], prefix: list[str]) -> None:
        self.sb, self.limits, self.prefix = sb, limits, prefix
        self.dead = True
        self.why: str | None = None   # why the supervisor asked for a fresh jail
        self.proc: subprocess.Popen | None = None
        self.jail: CgroupJail | None = None
        self._status_fd = -1
        self._err = bytearray()
        drop = _bwrap.drops_privileges() if sb.backend == "bwrap" else os.getuid() == 0
        self.scratch = make_scratch(code, files, owner=NOBODY if drop else None)
        fds: list[int] = []
        try:
            if sb._cgroups:
                self.jail = acquire_jail(limits.max_procs + 1,
                                         limits.memory_mb + 64 + SUPERVISOR_MB)
            program = [sb.python, "-c", BOOTSTRAP]
            chain = host_chain(sb.backend, self.jail)
            if sb.backend == "bwrap":
                self._status_fd, wfd = os.pipe()
                fds.append(wfd)
                scfd = _bwrap.seccomp_fd()
                if scfd is not None:
                    fds.append(scfd)
                argv = _bwrap.build_argv(sb.python, str(self.scratch), limits, env, [], wfd,
                                         False, seccomp_fd=scfd, nproc_limit=False,
                                         program=program,
                                         rlimits=supervisor_rlimits(limits),
                                         host_prefix=chain)
                argv, argfd = _bwrap.options_via_fd(argv)
                if argfd >= 0:
                    fds.append(argfd)
            else:
                from deciplane.envs.sandbox import namespace
                argv = namespace.build_argv(sb.python, str(self.scratch), limits, env, [],
                                            False, drop, program=program,
                                            rlimits=supervisor_rlimits(limits))
                if chain is not None:
                    argv = chain + argv
            if self.jail is not None and chain is None:
                argv = self.jail.join_argv() + argv
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, start_new_session=True,
                                         cwd="/", close_fds=True, pass_fds=tuple(fds),
                                         env={"PATH": BASE_ENV["PATH"]})
        except BaseException:
            for fd in fds:
                os.close(fd)
            self.close()
            raise
        for fd in fds:
            os.close(fd)
        self._sel = selectors.DefaultSelector()
        for f in (self.proc.stdout, self.proc.stderr):
            os.set_blocking(f.fileno(), False)
            self._sel.register(f, selectors.EVENT_READ)
        self._buf = bytearray()
        try:
            self.proc.stdin.write(_SOURCE)
            self.proc.stdin.flush()
        except OSError:
            pass  # it died at start: no "ready" below
        hello = self._recv(time.monotonic() + START_TIMEOUT_S, 4096)
        self.dead = not (isinstance(hello, dict) and hello.get("ready") is True)

    @property
    def start_error(self) -> str:
        return self._err.decode(errors="replace").strip()[-500:] or "no message"

    # ------------------------------------------------------------ protocol (host side)

    def _recv(self, deadline: float, max_bytes: int):  # noqa: ANN202
        """One reply (untrusted: a size cap, a deadline, JSON only), or None."""
        while True:
            if len(self._buf) >= 4:
                n = struct.unpack(">I", self._buf[:4])[0]
                if n > max_bytes:
                    return None
                if len(self._buf) >= 4 + n:
                    data, self._buf = bytes(self._buf[4:4 + n]), self._buf[4 + n:]
                    try:
                        return json.loads(data)
                    except ValueError:
                        return None
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._sel.get_map():
                return None
            for key, _ in self._sel.select(remaining):
                try:
                    chunk = os.read(key.fileobj.fileno(), 1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    self._sel.unregister(key.fileobj)
                    if key.fileobj is self.proc.stdout:
                        return None
                elif key.fileobj is self.proc.stdout:
                    self._buf += chunk
                elif len(self._err) < 65536:
                    self._err += chunk[:65536 - len(self._err)]

    def _send(self, obj: dict) -> bool:
        data = json.dumps(obj).encode()
        try:
            self.proc.stdin.write(struct.pack(">I", len(data)) + data)
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    # ------------------------------------------------------------ one probe

    def probe(self, stdin: bytes, fresh_interpreter: bool) -> SandboxResult | None:
        if self.dead:
            return None
        lim = self.limits
        exec_argv = None
        if fresh_interpreter or self.prefix:
            exec_argv = self.prefix + [self.sb.python, "main.py"]
            if self.prefix and "/" not in self.prefix[0]:
                exec_argv[0] = _bwrap.tool_path(self.prefix[0]) or exec_argv[0]
        req = {"stdin": base64.b64encode(stdin).decode(), "timeout_s": lim.timeout_s,
               "max_output_bytes": lim.max_output_bytes, "exec": exec_argv,
               "rlimits": child_rlimits(lim, address_space=not self.prefix,
                                        nproc=self.jail is None)}
        if self.jail is not None:
            self.jail.mark()
        if not self._send(req):
            self.dead = True
            return None
        cap = 4 * lim.max_output_bytes + 65536   # two base64'd captures and the fields
        reply = self._recv(time.monotonic() + lim.timeout_s + REPLY_SLACK_S, cap)
        raw = self._raw(reply)
        if raw is None:
            self.dead = True
            return None
        self.dead = bool(reply.get("tainted", True))
        self.why = str(reply.get("why"))[:500] if self.dead else None
        return to_result(raw, lim, self.sb.backend, {}, signal_base=128)

    def _raw(self, reply) -> RawRun | None:  # noqa: ANN001
        """The supervisor's reply as a :class:`RawRun`, or None if it is malformed."""
        if not isinstance(reply, dict):
            return None
        try:
            out = base64.b64decode(reply["stdout"], validate=True)
            err = base64.b64decode(reply["stderr"], validate=True)
            status = reply["wait_status"]
            raw = RawRun(stdout=out[:self.limits.max_output_bytes],
                         stderr=err[:self.limits.max_output_bytes],
                         timed_out=reply["timed_out"] is True,
                         output_exceeded=reply["output_exceeded"] is True,
                         wall_time_s=float(reply["wall_time_s"]),
                         cpu_time_s=float(reply["cpu_time_s"]),
                         peak_memory_mb=float(reply["max_rss_kb"]) / 1024)
            if status is not None:
                code = os.waitstatus_to_exitcode(int(status))
                # as the backends' supervisors report it: signal N -> 128 + N
                raw.returncode = 128 - code if code < 0 else code
        except (KeyError, TypeError, ValueError, binascii.Error):
            return None
        if self.jail is not None:
            peak = self.jail.peak_memory_mb()
            if peak is not None:
                raw.peak_memory_mb = peak
            raw.oom = self.jail.oom_killed()
        if (self.sb.backend == "namespace" and not (raw.timed_out or raw.output_exceeded)
                and raw.returncode == 125):
            raw.sandbox_failed = ("namespace set-up failed (exit 125): "
                                  + err.decode(errors="replace").strip()[-500:])
        return raw

    # ------------------------------------------------------------ the end

    def close(self) -> None:
        """Stop the supervisor (EOF on its requests), then everything left; free the
        cgroup and the scratch dir."""
        proc = self.proc
        if proc is not None:
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.close()
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, 9)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            if self.jail is not None:
                self.jail.kill_all()
            proc.wait()
            for f in (proc.stdout, proc.stderr):
                with contextlib.suppress(OSError):
                    f.close()
            with contextlib.suppress(AttributeError):
                self._sel.close()
            self.proc = None
        if self._status_fd >= 0:
            os.close(self._status_fd)
            self._status_fd = -1
        if self.jail is not None:
            release_jail(self.jail)
            self.jail = None
        Path(str(self.scratch) + ".fstab").unlink(missing_ok=True)
        remove_scratch(self.scratch)
        self.dead = True


def run_many(sb: Sandbox, code: str, stdins: Sequence[str], files, limits: Limits,
             env: dict[str, str], prefix: list[str], fresh_interpreter: bool,
             run_kwargs: dict) -> list[SandboxResult]:
    """Every input through warm jails (see the module doc); a probe whose jail broke is
    re-run alone with :meth:`Sandbox.run`, and after two jails in a row fail to start the
    rest go through :meth:`Sandbox.run` too."""
    results: list[SandboxResult] = []
    failed_starts = 0
    i = 0
    while i < len(stdins):
        if failed_starts >= 2:
            results.append(sb.run(code, stdin=stdins[i], files=files, **run_kwargs))
            i += 1
            continue
        jail = WarmJail(sb, code, files, limits, env, prefix)
        try:
            if jail.dead:
                failed_starts += 1
                continue
            failed_starts = 0
            while i < len(stdins):
                res = jail.probe(stdins[i].encode(), fresh_interpreter)
                if res is None:   # the jail broke during this probe: run it alone
                    res = sb.run(code, stdin=stdins[i], files=files, **run_kwargs)
                results.append(res)
                i += 1
                if jail.dead:
                    break
        finally:
            jail.close()
    return results
