"""The code harness's checker, warm: a helper process of the caller (outside every
sandbox, the caller's uid, ``python -I -S``) that has loaded the codec and compiled the
checker once, and forks a fresh checker per judged run.

Same trust boundary as the cold checker (a new helper process per run): the checker runs
the dataset's own code and decides, outside the sandbox; the candidate reaches it only
through the three pipes, with plain data. The forked checker is a copy of the zygote,
which holds nothing of the candidate's (it never reads a pipe of a run) — at most the
trusted configuration (tests, statement) of earlier runs. Each forked checker gets its
run's configuration in memory, the three pipe ends and a verdict pipe by SCM_RIGHTS, and
ends itself by ``alarm`` a few seconds past the run's deadline if nothing else ended it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

#: the zygote: after the codec's source, loops on requests (a length-prefixed JSON
#: configuration + 4 descriptors), forks, and answers each with the child's pid
_ZYGOTE = r'''
import json, os, signal, socket, struct, sys
import ast, hashlib, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)     # the kernel reaps the checkers
_CTL = socket.socket(fileno=os.dup(0))
_BODY = compile(__BODY__, "checker.py", "exec")
def _recv():
    head, fds = b"", []
    while len(head) < 4:
        data, anc, flags, _ = _CTL.recvmsg(4 - len(head), socket.CMSG_SPACE(16 * 4))
        for level, kind, blob in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += list(struct.unpack("%di" % (len(blob) // 4), blob[:len(blob) // 4 * 4]))
        if not data:
            os._exit(0)
        head += data
    n = struct.unpack(">I", head)[0]
    body = b""
    while len(body) < n:
        chunk = _CTL.recv(n - len(body))
        if not chunk:
            os._exit(0)
        body += chunk
    return json.loads(body), fds
def _checker(cfg, fds):
    try:
        os.dup2(fds[3], 1)
        keep = set(fds[:3]) | {1, 2}
        for fd in os.listdir("/proc/self/fd"):
            if int(fd) not in keep:
                try:
                    os.close(int(fd))
                except OSError:
                    pass
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.alarm(int(cfg["timeout_s"]) + 5)
        cfg["fds"] = list(fds[:3])
        globals()["_cfg"] = cfg
        exec(_BODY, globals())
    finally:
        os._exit(0)
while True:
    cfg, fds = _recv()
    if len(fds) != 4:
        for fd in fds:
            os.close(fd)
        _CTL.sendall(struct.pack(">i", -1))
        continue
    pid = os.fork()
    if pid == 0:
        _checker(cfg, fds)
    for fd in fds:
        os.close(fd)
    _CTL.sendall(struct.pack(">i", pid))
'''


class _Zygote:
    """The running zygote, or None until first use (restarted if it died)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.ctl: socket.socket | None = None

    def _start(self, source: str) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", source], stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
                cwd="/", env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"})
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self.ctl = ours

    def fork_checker(self, source: str, cfg: dict, fds: list[int]) -> int | None:
        """A fresh checker for ``cfg`` on ``fds`` (request, reply, alive, verdict ends;
        not closed here); its pid, or None if the zygote cannot serve (the caller then
        starts a cold checker)."""
        data = json.dumps(cfg).encode()
        data = struct.pack(">I", len(data)) + data
        with self.lock:
            for attempt in range(2):
                if self.ctl is None or self.proc is None or self.proc.poll() is not None:
                    self.close()
                    try:
                        self._start(source)
                    except OSError:
                        return None
                try:
                    sent = self.ctl.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                      struct.pack(f"{len(fds)}i", *fds))])
                    self.ctl.sendall(data[sent:])
                    pid = _recv_pid(self.ctl, time.monotonic() + 10.0)
                except OSError:
                    pid = None
                if pid is not None and pid > 0:
                    return pid
                self.close()
            return None

    def close(self) -> None:
        if self.ctl is not None:
            self.ctl.close()
            self.ctl = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def _recv_pid(ctl: socket.socket, deadline: float) -> int | None:
    buf = b""
    while len(buf) < 4:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([ctl], [], [], left)[0]:
            return None
        chunk = ctl.recv(4 - len(buf))
        if not chunk:
            return None
        buf += chunk
    return struct.unpack(">i", buf)[0]


_ZYG = _Zygote()


def zygote_source(wire_src: str, body: str) -> str:
    return wire_src + _ZYGOTE.replace("__BODY__", repr(body))


def fork_checker(wire_src: str, body: str, cfg: dict, fds: list[int]) -> int | None:
    """Start the checker of one run (see the module doc); its pid, or None."""
    return _ZYG.fork_checker(zygote_source(wire_src, body), cfg, fds)


def read_verdict(fd: int, deadline: float) -> bytes | None:
    """Everything the checker writes on its verdict pipe, up to its end; None if it
    has not ended by ``deadline``."""
    out = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return bytes(out)
        out += chunk


def kill_checker(pid: int) -> None:
    """Stop a checker that overran (it would also end itself by ``alarm``). A pidfd, so
    that a recycled pid is never signalled once the checker is gone."""
    with contextlib.suppress(OSError, AttributeError):
        pidfd = os.pidfd_open(pid)
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        finally:
            os.close(pidfd)


def close() -> None:
    """Stop the zygote (started again on demand)."""
    with _ZYG.lock:
        _ZYG.close()


def _forget_in_child() -> None:
    """A forked child of the caller must not share the parent's zygote."""
    _ZYG.lock = threading.Lock()
    if _ZYG.ctl is not None:
        with contextlib.suppress(OSError):
            _ZYG.ctl.close()
    _ZYG.ctl = None
    _ZYG.proc = None


os.register_at_fork(after_in_child=_forget_in_child)


__all__ = ["fork_checker", "read_verdict", "kill_checker", "close"]
