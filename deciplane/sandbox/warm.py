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

import atexit
import base64
import binascii
import contextlib
import json
import os
import selectors
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from deciplane.sandbox import bwrap as _bwrap
from deciplane.sandbox.launcher import host_chain
from deciplane.sandbox.cgroups import CgroupJail, acquire_jail, release_jail
from deciplane.sandbox.host import BASE_ENV
from deciplane.sandbox.limits import MAIN, NOBODY, Limits
from deciplane.sandbox.results import RawRun, SandboxResult, to_result
from deciplane.sandbox.scratch import _check_name, make_scratch, remove_scratch, scratch_base
from deciplane.errors import WarmJailBroken

# `sb` below is the calling deciplane.sandbox.Sandbox (not imported here: the package
# imports this module, and the layering test forbids the circle)
Sandbox = Any

#: memory the supervisor itself may hold on top of a probe's ``memory_mb + 64`` MB
SUPERVISOR_MB = 48
#: seconds the supervisor gets, past a probe's ``timeout_s``, to reply
REPLY_SLACK_S = 10.0
#: the same for a program run (its output is read by the host, so the reply is only the
#: clean-up: a supervisor that takes longer was stopped or starved; the run is re-done)
PROGRAM_REPLY_SLACK_S = 3.0
NOT_STARTED = object()      # run_program: nothing ran, the caller still owns its fds
_EOF = object()
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
    return {"fsize": int(limits.max_file_bytes), "nofile": SUPERVISOR_NOFILE, "core": 0,
            "stack": 64 << 20}


#: the supervisor's open-file limit: room to park a program run's descriptors at 3000+
#: before placing them (each child sets the run's own 256)
SUPERVISOR_NOFILE = 4096


def files_blob(code: str, files) -> bytes:  # noqa: ANN001
    """A program's files (``main.py`` = ``code``, plus ``files``) as the supervisor's
    child reads them: (u32 name length, name, u32 data length, data) repeated. Names are
    checked as :meth:`Sandbox.run` checks them."""
    out = bytearray()
    for name, content in {**(files or {}), MAIN: code}.items():
        data = content.encode() if isinstance(content, str) else bytes(content)
        raw = _check_name(name).encode()
        out += struct.pack(">I", len(raw)) + raw + struct.pack(">I", len(data)) + data
    return bytes(out)


def _read_capped(fd: int, bufs: dict, cap: int, sel) -> bool:  # noqa: ANN001
    """One read of an output pipe into its capped buffer (unregistered from ``sel`` at
    EOF); True when the output went over ``cap``."""
    try:
        chunk = os.read(fd, 65536)
    except BlockingIOError:
        return False
    if not chunk:
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(fd)
        return False
    room = cap - len(bufs[fd])
    bufs[fd] += chunk[:max(room, 0)]
    return len(chunk) > room


def _drain_capped(fd: int, bufs: dict, cap: int) -> bool:
    """Read what is left in an output pipe without waiting; True if it went over cap."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return False
        if not chunk:
            return False
        room = cap - len(bufs[fd])
        bufs[fd] += chunk[:max(room, 0)]
        if len(chunk) > room:
            return True


class WarmJail:
    """One started jail. ``probe()`` returns a result, or None when the jail broke (the
    caller re-runs that input through :meth:`Sandbox.run`); ``dead`` says whether a
    fresh jail is needed for the next probe."""

    def __init__(self, sb: Sandbox, code: str | None, files, limits: Limits,  # noqa: ANN001
                 env: dict[str, str], prefix: list[str]) -> None:
        """``code=None``: a jail for new programs (``run_program``), its scratch empty."""
        self.sb, self.limits, self.prefix = sb, limits, prefix
        self.dead = True
        self.why: str | None = None   # why the supervisor asked for a fresh jail
        self.proc: subprocess.Popen | None = None
        self.jail: CgroupJail | None = None
        self._status_fd = -1
        self._err = bytearray()
        self._ctl: socket.socket | None = None
        self.runs = 0
        drop = _bwrap.drops_privileges() if sb.backend == "bwrap" else os.getuid() == 0
        self.scratch = make_scratch(code or "", files, owner=NOBODY if drop else None)
        if code is None:
            (self.scratch / "main.py").unlink()
        fds: list[int] = []
        theirs = None
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
                from deciplane.sandbox import namespace
                argv = namespace.build_argv(sb.python, str(self.scratch), limits, env, [],
                                            False, drop, program=program,
                                            rlimits=supervisor_rlimits(limits))
                if chain is not None:
                    argv = chain + argv
            if self.jail is not None and chain is None:
                argv = self.jail.join_argv() + argv
            # requests go on a unix socket: a program run's descriptors travel on it
            self._ctl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            self.proc = subprocess.Popen(argv, stdin=theirs.fileno(), stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, start_new_session=True,
                                         cwd="/", close_fds=True, pass_fds=tuple(fds),
                                         env={"PATH": BASE_ENV["PATH"]})
        except BaseException:
            for fd in fds:
                os.close(fd)
            if theirs is not None:
                theirs.close()
            self.close()
            raise
        theirs.close()
        for fd in fds:
            os.close(fd)
        self._sel = selectors.DefaultSelector()
        for f in (self.proc.stdout, self.proc.stderr):
            os.set_blocking(f.fileno(), False)
            self._sel.register(f, selectors.EVENT_READ)
        self._buf = bytearray()
        try:
            self._ctl.sendall(_SOURCE)
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

    def _send(self, obj: dict, fds: Sequence[int] = ()) -> bool:
        """One request; ``fds`` go with its first bytes (SCM_RIGHTS)."""
        data = json.dumps(obj).encode()
        data = struct.pack(">I", len(data)) + data
        try:
            if fds:
                sent = self._ctl.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                   struct.pack(f"{len(fds)}i", *fds))])
                data = data[sent:]
            self._ctl.sendall(data)
            return True
        except (OSError, ValueError):
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

    def _raw(self, reply, output: tuple[bytes, bytes] | None = None,  # noqa: ANN001
             limits: Limits | None = None) -> RawRun | None:
        """The supervisor's reply as a :class:`RawRun`, or None if it is malformed.
        ``output``: stdout and stderr as the host read them (a program run); else they
        come base64'd in the reply (a probe)."""
        if not isinstance(reply, dict):
            return None
        lim = limits or self.limits
        try:
            if output is None:
                out = base64.b64decode(reply["stdout"], validate=True)
                err = base64.b64decode(reply["stderr"], validate=True)
            else:
                out, err = output
            status = reply["wait_status"]
            raw = RawRun(stdout=out[:lim.max_output_bytes],
                         stderr=err[:lim.max_output_bytes],
                         timed_out=reply["timed_out"] is True,
                         output_exceeded=reply.get("output_exceeded") is True,
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

    # ------------------------------------------------------------ one new program

    def run_program(self, blob: bytes, stdin: bytes, limits: Limits,
                    channel: tuple[int, ...]):  # noqa: ANN201
        """Run a new program (its files as :func:`files_blob` packs them) in this jail, as
        :meth:`Sandbox.run` would. Returns its result; :data:`NOT_STARTED` if the request
        could not be sent (nothing ran, the ``channel`` descriptors are still the
        caller's); None if the jail broke during the run (its outcome is unknown; the
        descriptors were handed over). The host holds the other ends of the program's
        stdin/stdout/stderr: it feeds, reads and caps them itself."""
        if self.dead or self.proc is None or self.proc.poll() is not None:
            self.dead = True
            return NOT_STARTED
        ours: dict[str, int] = {}      # our ends, closed in `finally` unless closed before
        handed: list[int] = []
        try:
            for name, keep_read in (("in", False), ("out", True), ("err", True),
                                    ("src", False)):
                r, w = os.pipe()
                ours[name], theirs = (r, w) if keep_read else (w, r)
                handed.append(theirs)
            req = {"op": "program", "timeout_s": limits.timeout_s, "channel": list(channel),
                   "exec": None,
                   "rlimits": child_rlimits(limits, address_space=True,
                                            nproc=self.jail is None)}
            if self.jail is not None:
                self.jail.mark()
            if not self._send(req, handed + list(channel)):
                self.dead = True
                return NOT_STARTED
            for fd in handed + list(channel):   # handed over: only the child keeps them
                os.close(fd)
            handed = []
            return self._serve_program(stdin, blob, limits, ours)
        finally:
            for fd in handed + list(ours.values()):
                os.close(fd)

    def _serve_program(self, stdin: bytes, blob: bytes, limits: Limits,
                       ours: dict[str, int]) -> SandboxResult | None:
        """Feed stdin and the files, capture stdout/stderr (capped), until the
        supervisor's reply; ask it to ``stop`` the run when output overflows. Closes the
        descriptors it is done with and takes them out of ``ours``."""
        cap = limits.max_output_bytes
        out_r, err_r = ours["out"], ours["err"]
        bufs = {out_r: bytearray(), err_r: bytearray()}
        pending = {ours["in"]: memoryview(stdin), ours["src"]: memoryview(blob)}
        sel = selectors.DefaultSelector()

        names = {ours["in"]: "in", ours["src"]: "src"}

        def done_writing(fd: int) -> None:
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(fd)
            os.close(fd)
            del ours[names[fd]]

        try:
            for fd in (out_r, err_r):
                os.set_blocking(fd, False)
                sel.register(fd, selectors.EVENT_READ, "out")
            for fd, data in list(pending.items()):
                os.set_blocking(fd, False)
                if data:
                    sel.register(fd, selectors.EVENT_WRITE, "in")
                else:
                    done_writing(fd)          # EOF at once
            for f, tag in ((self.proc.stdout, "reply"), (self.proc.stderr, "err")):
                sel.register(f, selectors.EVENT_READ, tag)
            exceeded = broke = False
            reply = None
            deadline = time.monotonic() + limits.timeout_s + PROGRAM_REPLY_SLACK_S
            while reply is None and not broke:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                for key, _ in sel.select(remaining):
                    fd = key.fd
                    if key.data == "in":
                        try:
                            n = os.write(fd, pending[fd][:65536])
                            pending[fd] = pending[fd][n:]
                        except BlockingIOError:
                            continue
                        except OSError:       # the child closed it / is gone
                            pending[fd] = pending[fd][:0]
                        if not pending[fd]:
                            done_writing(fd)
                    elif key.data == "out":
                        if _read_capped(fd, bufs, cap, sel) and not exceeded:
                            exceeded = True
                            for f in (out_r, err_r):
                                with contextlib.suppress(KeyError, ValueError):
                                    sel.unregister(f)
                            self._send({"op": "stop"})
                    else:
                        got = self._read_reply(key.fileobj, key.data)
                        if got is _EOF:
                            broke = True
                        elif got is not None:
                            reply = got
            if reply is None or reply.get("setup_error") is not None:
                self.dead = True          # broke, or could not start the program
                if reply is not None:
                    self.why = str(reply["setup_error"])[:500]
                return None
            if not exceeded:      # every writer is gone: take what is buffered
                exceeded = any([_drain_capped(fd, bufs, cap) for fd in (out_r, err_r)])
        finally:
            sel.close()
        raw = self._raw(reply, (bytes(bufs[out_r]), bytes(bufs[err_r])), limits)
        if raw is None:
            self.dead = True
            return None
        raw.output_exceeded = raw.output_exceeded or exceeded
        self.dead = bool(reply.get("tainted", True))
        self.why = str(reply.get("why"))[:500] if self.dead else None
        self.runs += 1
        return to_result(raw, limits, self.sb.backend, {}, signal_base=128)

    def _read_reply(self, f, tag: str):  # noqa: ANN001, ANN202
        """Read what the supervisor wrote: a complete reply, None (not yet), or _EOF."""
        try:
            chunk = os.read(f.fileno(), 1 << 16)
        except BlockingIOError:
            return None
        if tag == "err":
            if chunk and len(self._err) < 65536:
                self._err += chunk[:65536 - len(self._err)]
            return None
        if not chunk:
            return _EOF
        self._buf += chunk
        if len(self._buf) < 4:
            return None
        n = struct.unpack(">I", self._buf[:4])[0]
        if n > 65536:
            return _EOF          # not a reply of ours: treat the jail as broken
        if len(self._buf) < 4 + n:
            return None
        data, self._buf = bytes(self._buf[4:4 + n]), self._buf[4 + n:]
        try:
            reply = json.loads(data)
        except ValueError:
            return _EOF
        return reply if isinstance(reply, dict) else _EOF

    # ------------------------------------------------------------ the end

    def close(self) -> None:
        """Stop the supervisor (EOF on its requests), then everything left; free the
        cgroup and the scratch dir."""
        proc = self.proc
        if self._ctl is not None:
            self._ctl.close()     # EOF on its requests: the supervisor returns
            self._ctl = None
        if proc is not None:
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


# ------------------------------------------------------------ warm jails for new programs
#
# Sandbox.run(warm=True): a pool of started jails per (backend, limits that shape a jail,
# environment), each serving one run at a time. A jail goes back to the pool only when
# its supervisor proved it clean after the run; otherwise it is closed and the next run
# gets a fresh one.

#: idle jails kept across all keys (each holds a supervisor: ~10 MB, a cgroup)
MAX_IDLE_PROGRAM_JAILS = 4
#: runs before a jail is replaced anyway (hygiene; a fresh one costs one cold start)
RUNS_PER_PROGRAM_JAIL = 2000
#: consecutive failed starts after which a key runs cold for the rest of the process
MAX_FAILED_STARTS = 2

#: what happened to warm program runs in this process (for tests and benchmarks):
#: ``warm`` runs served by a jail, jails ``started``, runs sent ``cold`` instead (no jail
#: could start, or it broke without channel descriptors), ``broken`` jails with
#: channel descriptors (WarmJailBroken), jails closed as ``tainted`` after a run
STATS = {"warm": 0, "started": 0, "cold": 0, "broken": 0, "tainted": 0}

_IDLE: dict[tuple, list[WarmJail]] = {}
_FAILED_STARTS: dict[tuple, int] = {}
_IDLE_LOCK = threading.Lock()


def program_jail_key(sb: Sandbox, limits: Limits, env: dict[str, str]) -> tuple:
    """What a jail is built from and cannot change per run: the backend and interpreter,
    cgroups, ``memory_mb`` (the cgroup's limit), ``max_procs`` (the pids cgroup),
    ``max_file_bytes`` (the supervisor's own limit) and the environment (the interpreter
    read it at start: ``PYTHONHASHSEED`` ...), and where scratch dirs live. Wall/CPU time
    and the output cap are per run."""
    return (sb.backend, sb.python, bool(sb._cgroups), str(scratch_base()), limits.memory_mb,
            limits.max_procs, limits.max_file_bytes, tuple(sorted(env.items())))


def _take(key: tuple) -> WarmJail | None:
    with _IDLE_LOCK:
        jails = _IDLE.get(key)
        return jails.pop() if jails else None


def _give_back(key: tuple, jail: WarmJail) -> None:
    if jail.dead:
        STATS["tainted"] += 1
    if not jail.dead and jail.runs < RUNS_PER_PROGRAM_JAIL:
        with _IDLE_LOCK:
            if sum(len(v) for v in _IDLE.values()) < MAX_IDLE_PROGRAM_JAILS:
                _IDLE.setdefault(key, []).append(jail)
                return
    jail.close()


def close_program_jails() -> None:
    """Close every idle warm jail of this process (they are started again on demand)."""
    with _IDLE_LOCK:
        jails = [j for v in _IDLE.values() for j in v]
        _IDLE.clear()
        _FAILED_STARTS.clear()
    for jail in jails:
        jail.close()


def _forget_in_child() -> None:
    """In a forked child, drop the parent's idle jails without closing them (they are
    the parent's): close only this process's copies of their descriptors."""
    global _IDLE_LOCK
    _IDLE_LOCK = threading.Lock()
    for jail in [j for v in _IDLE.values() for j in v]:
        for f in (jail._ctl, jail.proc.stdout if jail.proc else None,
                  jail.proc.stderr if jail.proc else None):
            with contextlib.suppress(OSError, AttributeError):
                f.close()
    _IDLE.clear()
    _FAILED_STARTS.clear()


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(close_program_jails)


def run_program(sb: Sandbox, code: str, stdin: bytes, files, limits: Limits,  # noqa: ANN001
                env: dict[str, str], channel: tuple[int, ...]) -> SandboxResult | None:
    """One new program through a warm jail (see :meth:`Sandbox.run`, ``warm``).
    Returns None when it must run cold instead (no jail could be started, or the jail
    broke during a run without channel descriptors: it is re-run from scratch); the
    ``channel`` descriptors are then still the caller's. Raises
    :class:`WarmJailBroken` when the jail broke during a run it had handed channel
    descriptors to (the peer saw part of it: the caller re-runs it with new ones)."""
    try:
        blob = files_blob(code, files)
    except BaseException:
        for fd in channel:      # handed over: closed whatever happens, as run() does
            with contextlib.suppress(OSError):
                os.close(fd)
        raise
    key = program_jail_key(sb, limits, env)
    jail = _take(key)
    if jail is None:
        if _FAILED_STARTS.get(key, 0) >= MAX_FAILED_STARTS:
            STATS["cold"] += 1
            return None
        jail = WarmJail(sb, None, None, limits, env, [])
        STATS["started"] += 1
        if jail.dead:
            _FAILED_STARTS[key] = _FAILED_STARTS.get(key, 0) + 1
            jail.close()
            STATS["cold"] += 1
            return None
        _FAILED_STARTS[key] = 0
    try:
        res = jail.run_program(blob, stdin, limits, channel)
    except BaseException:
        jail.close()
        raise
    if res is NOT_STARTED:
        jail.close()
        STATS["cold"] += 1
        return None
    if res is None:
        why = jail.why or jail.start_error
        jail.close()
        STATS["broken" if channel else "cold"] += 1
        if channel:
            raise WarmJailBroken("the warm jail broke during the run (its supervisor "
                                 f"was killed or stopped: {why}); re-run it with new "
                                 "channel descriptors, or with warm=False")
        return None
    STATS["warm"] += 1
    _give_back(key, jail)
    return res
