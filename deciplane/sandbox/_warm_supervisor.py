"""The in-jail supervisor of :meth:`Sandbox.run_many` (the "warm jail").

This file is NOT imported on the host: its source is handed to the sandbox's own
``python3 -c`` (so it runs with the sandbox's interpreter, uid 65534, inside every
namespace, the seccomp filter and the run's cgroup). It speaks a length-prefixed JSON
protocol on fds 0 (requests) and 1 (replies) with the host, and for every request forks a
fresh child that runs one probe with its own rlimits, wall-clock deadline, capped
stdout/stderr and stdin. After each probe it kills every process left in the pid
namespace, reaps them, wipes everything writable (``/sandbox``, ``/tmp``, ``/dev/shm``),
removes SysV IPC objects and restores the scratch files, so that nothing a probe did
reaches the next one; when it cannot prove that, it says ``tainted`` and the host starts
a fresh jail. Replies are untrusted input on the host side (validated there).

Two kinds of request. A *probe* (``Sandbox.run_many``: one program, many inputs) carries
its stdin in the request and gets its output in the reply. A *program* run
(``Sandbox.run(warm=True)``: a new program each time) carries descriptors instead
(SCM_RIGHTS on fd 0, a unix socket): the ends of the run's stdin/stdout/stderr pipes and
of a pipe with its files, whose other ends the host holds, plus any channel pipes the
program inherits. The forked child reads its own files from that pipe, so no program's
source, input or output ever passes through this process — the process every later
child is a copy of.
"""

import base64
import ctypes
import json
import os
import resource
import select
import signal
import stat
import struct
import sys
import time
import socket
import types

SCRATCH = "/sandbox"
WIPE = ("/sandbox", "/tmp", "/dev/shm")
IN_FD, OUT_FD = os.dup(0), os.dup(1)      # non-inheritable: no child ever sees them
CTL = socket.socket(fileno=IN_FD)          # the host's requests (and descriptors)
MAX_FDS = 16
TEMP_FD = 3000      # a program run's descriptors are parked here before being placed
_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36
RLIM = {"cpu": resource.RLIMIT_CPU, "as": resource.RLIMIT_AS,
        "fsize": resource.RLIMIT_FSIZE, "nofile": resource.RLIMIT_NOFILE,
        "core": resource.RLIMIT_CORE, "stack": resource.RLIMIT_STACK,
        "nproc": resource.RLIMIT_NPROC, "msgqueue": resource.RLIMIT_MSGQUEUE}


def recv():
    """One request and the descriptors sent with it, or ``(None, [])`` at end of input."""
    head, fds = b"", []
    while len(head) < 4:
        data, anc, flags, _ = CTL.recvmsg(4 - len(head), socket.CMSG_SPACE(MAX_FDS * 4))
        for level, kind, blob in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                n = len(blob) // 4
                fds += list(struct.unpack("%di" % n, blob[:4 * n]))
        if not data or flags & socket.MSG_CTRUNC:
            close_all(fds)
            return None, []
        head += data
    body = _read_exact(struct.unpack(">I", head)[0])
    if body is None:
        close_all(fds)
        return None, []
    return json.loads(body), fds


def close_all(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _read_exact(n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(IN_FD, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def send(obj):
    data = json.dumps(obj).encode()
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(OUT_FD, data):]


def snapshot_files(root):
    """{relative path: (bytes, mode)} and [relative dirs] of the initial scratch."""
    files, dirs = {}, []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel != ".":
            dirs.append((rel, stat.S_IMODE(os.stat(dirpath).st_mode)))
        for n in filenames:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as fh:
                files[os.path.normpath(os.path.join(rel, n))] = (fh.read(),
                                                                stat.S_IMODE(os.stat(p).st_mode))
    return files, dirs


def wipe(root):
    """Remove everything under ``root`` (not root itself), whatever modes were left."""
    try:
        if root == SCRATCH:
            os.chmod(root, 0o700)
        names = os.listdir(root)
    except FileNotFoundError:
        return
    for n in names:
        p = os.path.join(root, n)
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            os.chmod(p, 0o700)
            wipe(p)
            os.rmdir(p)
        else:
            os.unlink(p)


def restore(files, dirs, root_mode):
    for rel, mode in dirs:
        os.mkdir(os.path.join(SCRATCH, rel), mode)
    for rel, (data, mode) in files.items():
        p = os.path.join(SCRATCH, rel)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        os.chmod(p, mode)
    os.chmod(SCRATCH, root_mode)


def remove_sysv_ipc():
    """SysV shared memory, semaphores and message queues outlive their creator: remove
    every one in this IPC namespace (they can only be the probes')."""
    for kind, fn, rmid in (("shm", _libc.shmctl, 0), ("sem", _libc.semctl, 0),
                           ("msg", _libc.msgctl, 0)):
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            ident = int(row.split()[1])
            if kind == "sem":
                fn(ident, 0, rmid)
            else:
                fn(ident, rmid, None)


def sysv_ipc_empty():
    for kind in ("shm", "sem", "msg"):
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                if len(fh.read().splitlines()) > 1:
                    return False
        except OSError:
            pass
    return True


def kill_others(usage, main_pid, main):
    """SIGKILL every process of the pid namespace we may signal (the probe's whole tree:
    kill(-1) spares only us and pid 1) and reap them (orphans come to us, the child
    subreaper) until none is left. Adds their CPU time to ``usage``; the probe's own
    process's wait status and rusage go to ``main`` when it is reaped here."""
    for _ in range(20000):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        pid = 0
        while True:
            try:
                pid, st, ru = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                pid = -1
            if pid <= 0:
                break
            if pid == main_pid:
                main["status"], main["usage"] = st, ru
            else:
                usage[0] += ru.ru_utime + ru.ru_stime
        if pid == -1:
            try:
                os.kill(-1, 0)
            except ProcessLookupError:
                return True
        time.sleep(0.0005)
    return False


def child(req, pipes):
    """In the forked child: become a fresh program run and never return."""
    try:
        in_r, out_w, err_w = pipes
        os.dup2(in_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 65536)
        become_program(req)
    except BaseException:  # noqa: BLE001 - a child must never fall back into the loop
        import traceback
        traceback.print_exc()
        os._exit(125)


def program_child(req, fds, ready_w):
    """In the forked child of a program run: place the descriptors (stdio at 0-2, channel
    pipes at the numbers the host asked for), write the program's files from the files
    pipe, set the run's limits, say so on ``ready_w`` (or why not), then become the
    program. Never returns."""
    ready = ready_w
    try:
        ready = os.dup2(ready_w, TEMP_FD - 1)
        parked = []
        for i, fd in enumerate(fds):   # above every target, so no dup2 clobbers another
            os.dup2(fd, TEMP_FD + i)
            parked.append(TEMP_FD + i)
        for std, fd in enumerate(parked[:3]):
            os.dup2(fd, std)
        targets = [int(t) for t in req["channel"]]
        for fd, target in zip(parked[4:], targets):
            os.dup2(fd, target)
        files = read_files(parked[3])
        keep = sorted(set(targets) | {ready})
        lo = 3
        for t in keep + [65536]:
            if t > lo:
                os.closerange(lo, t)
            lo = t + 1
        write_files(files)
        prepare(req)
        os.write(ready, b"\0")
        os.close(ready)
    except BaseException as exc:  # noqa: BLE001 - never fall back into the loop
        try:
            os.write(ready, ("set-up failed: %s: %s" % (type(exc).__name__, exc))
                     .encode("utf-8", "replace")[:400])
        except BaseException:  # noqa: BLE001
            pass
        os._exit(125)
    start(req)


def read_files(fd):
    """``[(relative name, bytes)]`` from the files pipe: (u32 name length, name, u32 data
    length, data) repeated, until the host closes it."""
    blob = bytearray()
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        blob += chunk
    files, at = [], 0
    while at < len(blob):
        n = struct.unpack(">I", blob[at:at + 4])[0]
        name = bytes(blob[at + 4:at + 4 + n]).decode()
        at += 4 + n
        m = struct.unpack(">I", blob[at:at + 4])[0]
        files.append((name, bytes(blob[at + 4:at + 4 + m])))
        at += 4 + m
    return files


def write_files(files):
    """The program's files under /sandbox, as the host's scratch dir would hold them
    (0644 files, 0755 directories; names checked by the host)."""
    for name, data in files:
        path = os.path.join(SCRATCH, name)
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, 0o644)
        finally:
            os.close(fd)


def become_program(req):
    prepare(req)
    start(req)


def prepare(req):
    """The rest of a child's set-up: signals, dumpable, OOM score, cwd, limits."""
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
    try:  # under memory pressure the cgroup's OOM killer picks the probe, not us
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("1000")
    except OSError:
        pass
    os.chdir(SCRATCH)
    for name, value in req["rlimits"].items():
        soft, hard = value
        resource.setrlimit(RLIM[name], (soft, hard))


def start(req):
    """Become the program: exec it, or run ``main.py`` in this interpreter."""
    argv = req.get("exec")
    if argv:
        os.execv(argv[0], argv)
    run_main()


def run_main():
    """What ``python3 main.py`` does, minus the interpreter start-up (already done)."""
    sys.argv = ["main.py"]
    sys.path[0] = SCRATCH
    path = os.path.join(SCRATCH, "main.py")
    mod = types.ModuleType("__main__")
    mod.__file__ = path
    mod.__builtins__ = __builtins__
    sys.modules["__main__"] = mod
    code = 0
    try:
        with open(path, "rb") as fh:
            src = fh.read()
        exec(compile(src, path, "exec"), mod.__dict__)  # noqa: S102 - the probe itself
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        code = 1
    try:
        import threading
        threading._shutdown()
    except BaseException:  # noqa: BLE001
        pass
    try:
        import atexit
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            code = code or 120
    os._exit(code)


def _exit_code(exc):
    c = exc.code
    if c is None:
        return 0
    if isinstance(c, int):
        return c & 0xFF
    try:
        print(c, file=sys.stderr)
    except BaseException:  # noqa: BLE001
        pass
    return 1


def probe(req):
    """One probe: fork, feed stdin, capture, time out, reap, clean. Returns the reply."""
    cap = int(req["max_output_bytes"])
    stdin = memoryview(base64.b64decode(req["stdin"]))
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        child(req, (in_r, out_w, err_w))
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    bufs = {out_r: bytearray(), err_r: bytearray()}
    reply = {"timed_out": False, "output_exceeded": False}
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = -1
    readers = [out_r, err_r] + ([pidfd] if pidfd >= 0 else [])
    writers = [in_w] if stdin else []
    if not stdin:
        os.close(in_w)
    for fd in (out_r, err_r, in_w):
        if fd in readers or fd in writers:
            os.set_blocking(fd, False)
    deadline = t0 + float(req["timeout_s"])
    status = usage = None
    while status is None and not reply["output_exceeded"]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            reply["timed_out"] = True
            break
        r, w, _ = select.select(readers, writers, [],
                                remaining if pidfd >= 0 else min(remaining, 0.002))
        for fd in w:
            try:
                n = os.write(fd, stdin[:65536])
                stdin = stdin[n:]
            except OSError:
                stdin = stdin[:0]
            if not stdin:
                writers.remove(fd)
                os.close(fd)
        for fd in r:
            if fd == pidfd:
                continue
            if _read(fd, bufs, cap, reply, readers):
                break
        got, st, ru = os.wait4(pid, os.WNOHANG)
        if got == pid:
            status, usage = st, ru
    wall = time.monotonic() - t0
    extra, main_end = [0.0], {}
    exited = status is not None
    # the probe's tree: whatever still holds the pipes goes too
    clean = kill_others(extra, pid, main_end)
    if status is None:
        status, usage = main_end.get("status"), main_end.get("usage")
    if exited:
        _drain(bufs, cap, reply, readers)
    for fd in [out_r, err_r, pidfd] + writers:
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
    reply.update(wait_status=status, wall_time_s=wall,
                 cpu_time_s=(usage.ru_utime + usage.ru_stime if usage else 0.0) + extra[0],
                 max_rss_kb=usage.ru_maxrss if usage else 0,
                 stdout=base64.b64encode(bytes(bufs[out_r])).decode(),
                 stderr=base64.b64encode(bytes(bufs[err_r])).decode())
    why = reset() if clean else "processes left after the probe"
    reply["tainted"] = why is not None
    reply["why"] = why
    return reply


def run_program(req, fds):
    """One run of a new program: fork, hand the child its descriptors (closing ours at
    once, so the host sees end-of-file when the child's side is gone), wait for it until
    its deadline or a ``stop`` from the host (output over its cap), then kill, reap and
    clean as after a probe. Returns the reply (no output: the host read it)."""
    if len(fds) != 4 + len(req["channel"]):
        close_all(fds)
        return {"error": "descriptors missing", "tainted": True, "why": "bad request"}
    ready_r, ready_w = os.pipe()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        program_child(req, fds, ready_w)
    close_all(fds + [ready_w])
    deadline = t0 + float(req["timeout_s"])
    setup_error = child_ready(ready_r, deadline)
    status, usage, timed_out = wait_program(pid, deadline)
    wall = time.monotonic() - t0
    extra, main_end = [0.0], {}
    clean = kill_others(extra, pid, main_end)
    if status is None:
        status, usage = main_end.get("status"), main_end.get("usage")
    why = reset() if clean else "processes left after the run"
    return {"wait_status": status, "wall_time_s": wall, "timed_out": timed_out,
            "cpu_time_s": (usage.ru_utime + usage.ru_stime if usage else 0.0) + extra[0],
            "max_rss_kb": usage.ru_maxrss if usage else 0,
            "setup_error": setup_error, "tainted": why is not None, "why": why}


def child_ready(fd, deadline):
    """None once the child said its set-up is done, else why it failed (the run is then
    the jail's failure, not the program's: the host re-runs it cold)."""
    try:
        r, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        msg = os.read(fd, 512) if r else b"set-up did not finish in time"
    finally:
        os.close(fd)
    if msg == b"\0":
        return None
    return msg.decode("utf-8", "replace") or "the child ended during its set-up"


def wait_program(pid, deadline):
    """``(wait status, rusage, timed out)``: the child's end, or None for the first two if
    the deadline passed or the host said ``stop`` first."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = -1
    try:
        while True:
            got, st, ru = os.wait4(pid, os.WNOHANG)
            if got == pid:
                return st, ru, False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None, None, True
            waits = [IN_FD] + ([pidfd] if pidfd >= 0 else [])
            r, _, _ = select.select(waits, [], [],
                                    remaining if pidfd >= 0 else min(remaining, 0.002))
            if IN_FD in r:
                req, fds = recv()       # only "stop" comes during a run
                close_all(fds)
                if req is None or req.get("op") == "stop":
                    return None, None, False
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def _read(fd, bufs, cap, reply, readers):
    try:
        chunk = os.read(fd, 65536)
    except BlockingIOError:
        return False
    if not chunk:
        readers.remove(fd)
        return False
    buf = bufs[fd]
    room = cap - len(buf)
    buf += chunk[:max(room, 0)]
    if len(chunk) > room:
        reply["output_exceeded"] = True
        return True
    return False


def _drain(bufs, cap, reply, readers):
    for fd in list(bufs):
        if fd not in readers:
            continue
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            room = cap - len(bufs[fd])
            bufs[fd] += chunk[:max(room, 0)]
            if len(chunk) > room:
                reply["output_exceeded"] = True
                break


STATE_FIELDS = ("/dev", "cwd", "/tmp", "rlimits", "nice", "affinity", "scheduler",
                "ioprio", "oom_score_adj")


def state():
    """What must look the same before every probe (:data:`STATE_FIELDS`): the jail's
    writable view, and what a probe could change in *this* process from outside (same
    uid: ``prlimit``, nice, CPU affinity, scheduler policy, I/O priority, OOM score) — a
    change would skew the next child, which inherits it, and carry bits to it."""
    limits = {n: resource.getrlimit(getattr(resource, n))
              for n in sorted(dir(resource)) if n.startswith("RLIMIT_")}
    try:
        with open("/proc/self/oom_score_adj") as fh:
            oom = fh.read()
    except OSError:
        oom = None
    # ioprio_get(IOPRIO_WHO_PROCESS, self): -1 until the process has done I/O, then 0
    # ("none"); anything else was set from outside
    ioprio = max(0, _libc.syscall(251, 1, 0)) if os.uname().machine == "x86_64" else None
    return (sorted(os.listdir("/dev")), os.getcwd(), sorted(os.listdir("/tmp")), limits,
            os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)),
            os.sched_getscheduler(0), ioprio, oom)


def reset():
    """Put the jail back as it was before the first probe. Returns None, or why that
    failed (the host then starts a fresh jail)."""
    try:
        for root in WIPE:
            if os.path.isdir(root):
                wipe(root)
        restore(FILES, DIRS, ROOT_MODE)
        remove_sysv_ipc()
    except OSError as exc:
        return f"clean-up failed: {exc}"
    if not sysv_ipc_empty():
        return "SysV IPC objects left"
    now = state()
    if now != INITIAL:
        changed = [f"{name}: {a!r} -> {b!r}"[:200] for name, a, b
                   in zip(STATE_FIELDS, INITIAL, now) if a != b]
        return "jail state changed: " + "; ".join(changed)
    return None


def main():
    global FILES, DIRS, ROOT_MODE, INITIAL
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)   # no probe may ptrace us or open our fds
    os.chdir(SCRATCH)
    ROOT_MODE = stat.S_IMODE(os.stat(SCRATCH).st_mode)
    FILES, DIRS = snapshot_files(SCRATCH)
    INITIAL = state()
    send({"ready": True, "pid": os.getpid()})
    while True:
        req, fds = recv()
        if req is None:
            return
        op = req.get("op")
        if op == "program":
            send(run_program(req, fds))
            continue
        close_all(fds)
        if op != "stop":        # a stop that came after its run ended: nothing to do
            send(probe(req))


FILES = DIRS = ROOT_MODE = INITIAL = None
main()
