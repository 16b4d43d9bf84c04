"""The ``bwrap`` backend: bubblewrap (user, pid, net, ipc, uts, cgroup namespaces), the
host's system directories read-only, a private tmpfs ``/tmp``, the run's scratch dir as
the only writable host path, no network, uid 65534, and — when this process is root — the
bwrap process itself started as uid 65534 (so the sandboxed code is ``nobody`` on the host
too, not namespace-root mapped to host root) in a network namespace made beforehand whose
loopback stays down (:func:`loopback_down`)."""

from __future__ import annotations

import functools
import os
import subprocess

from deciplane.sandbox import seccomp
from deciplane.sandbox.host import python_ro_paths, system_ro_paths
from deciplane.sandbox.limits import NOBODY, SCRATCH, Limits, prlimit_argv, tool_path

NAME = "bwrap"


def bwrap_path() -> str | None:
    return tool_path("bwrap")


def _privilege_drop_argv() -> list[str]:
    """Run the sandbox as uid/gid 65534 on the host when we are root (``setpriv``)."""
    if os.getuid() != 0:
        return []
    setpriv = tool_path("setpriv") or "/usr/bin/setpriv"
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
            "--no-new-privs", "--"]


def drops_privileges() -> bool:
    return os.getuid() == 0 and tool_path("setpriv") is not None


def loopback_down() -> bool:
    """Whether the sandbox's loopback interface is down. bubblewrap's ``--unshare-net``
    always brings ``lo`` up in the new network namespace (a program can connect to
    itself, nothing else). As root we create the network namespace ourselves (``unshare
    --net``, before dropping to 65534) and bwrap keeps it (``--share-net``): its ``lo``
    stays down, as in the ``namespace`` backend. Unprivileged, bwrap must create it."""
    return os.getuid() == 0 and tool_path("unshare") is not None


def _netns_argv() -> list[str]:
    return [tool_path("unshare") or "unshare", "--net", "--"] if loopback_down() else []


@functools.lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """Whether bubblewrap can create its namespaces here (a real probe, not a guess)."""
    exe = bwrap_path()
    if exe is None:
        return False, ("bubblewrap is not installed; `apt-get install bubblewrap` "
                       "(Debian/Ubuntu) or `dnf install bubblewrap`")
    if tool_path("prlimit") is None:
        return False, "prlimit (util-linux) is missing; install util-linux"
    probe = _privilege_drop_argv() if drops_privileges() else []
    argv = probe + [exe, "--unshare-all", "--unshare-user", "--die-with-parent",
                    "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
                    "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
                    "--proc", "/proc", "--dev", "/dev", "/bin/true"]
    try:
        out = subprocess.run(argv, capture_output=True, timeout=20, text=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap probe failed: {exc}"
    if out.returncode != 0:
        return False, ("bwrap cannot create namespaces here: " + out.stderr.strip()[-300:]
                       + " (unprivileged user namespaces disabled? try "
                       "`sysctl kernel.unprivileged_userns_clone=1`, or use docker)")
    who = "uid 65534 on the host" if probe else f"uid {os.getuid()} on the host"
    sc_ok, sc_why = seccomp.supported()
    return True, (f"bubblewrap {_version(exe)}; sandboxed code runs as {who}; "
                  f"{sc_why if sc_ok else 'no ' + sc_why}")


def _version(exe: str) -> str:
    try:
        return subprocess.run([exe, "--version"], capture_output=True, text=True,
                              timeout=5).stdout.split()[-1]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return "?"


def seccomp_fd() -> int | None:
    """A pipe holding the compiled seccomp filter (bwrap reads it once), or None where
    the filter is not supported."""
    if not seccomp.supported()[0]:
        return None
    prog = seccomp.filter_program()
    rfd, wfd = os.pipe()
    try:
        os.write(wfd, prog)  # a few hundred bytes: far below the pipe buffer
    finally:
        os.close(wfd)
    return rfd


@functools.lru_cache(maxsize=1)
def supports_disable_userns() -> bool:
    """bubblewrap >= 0.8 can forbid nested user namespaces itself (``--disable-userns``)."""
    try:
        out = subprocess.run([bwrap_path() or "bwrap", "--help"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--disable-userns" in out.stdout + out.stderr


def options_via_fd(argv: list[str]) -> tuple[list[str], int]:
    """Move bwrap's options (mount list, host scratch path, environment) out of its
    command line into a pipe read with ``--args FD``: the sandbox can read pid 1's
    command line, which then shows only ``bwrap --args N -- <program>``."""
    exe = argv.index(bwrap_path() or "bwrap")
    sep = argv.index("--", exe + 1)
    blob = b"".join(a.encode() + b"\0" for a in argv[exe + 1:sep])
    if len(blob) >= 60_000:  # must fit the pipe buffer: we write before bwrap reads
        return argv, -1
    rfd, wfd = os.pipe()
    try:
        os.write(wfd, blob)
    finally:
        os.close(wfd)
    return argv[:exe + 1] + ["--args", str(rfd)] + argv[sep:], rfd


def build_argv(python: str, scratch: str, limits: Limits, env: dict[str, str],
               argv_prefix: list[str], status_fd: int, address_space_limit: bool,
               seccomp_fd: int | None = None, nproc_limit: bool = True,
               sh_init: bool = False, program: list[str] | None = None,
               rlimits: dict[str, int] | None = None,
               host_prefix: list[str] | None = None) -> list[str]:
    """The full command line: [setpriv ...] bwrap <mounts> -- prlimit <limits> -- <prog>.

    ``sh_init``: make ``sh`` pid 1 of the sandbox (``--as-pid-1``) instead of bwrap's own
    init, which reaps the program without passing its resource usage up; with sh as the
    program's parent ``wait4`` on bwrap reports the program's CPU time. Needed where no
    per-run cgroup accounts CPU. ``program`` replaces ``argv_prefix + [python, main.py]``
    and ``rlimits`` the limits derived from ``limits`` (the warm jail's supervisor).
    ``host_prefix`` (the compiled launcher, which makes the network namespace and drops
    privileges itself) replaces the ``unshare --net`` + ``setpriv`` prefix."""
    argv = (list(host_prefix) if host_prefix is not None
            else _netns_argv() + _privilege_drop_argv()) + [bwrap_path() or "bwrap"]
    argv += ["--unshare-all", "--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY),
             "--hostname", "sandbox", "--die-with-parent", "--new-session",
             "--cap-drop", "ALL", "--clearenv", "--json-status-fd", str(status_fd)]
    if loopback_down():  # the network namespace made by `unshare --net` above: lo down
        argv += ["--share-net"]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    if supports_disable_userns():
        argv += ["--disable-userns"]
    for path in system_ro_paths() + python_ro_paths(python):
        if os.path.islink(path):  # merged-/usr: /bin -> usr/bin etc.
            argv += ["--symlink", os.readlink(path), path]
        else:
            argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev",
             "--size", str(64 << 20), "--tmpfs", "/tmp",
             "--bind", scratch, SCRATCH, "--chdir", SCRATCH,
             "--remount-ro", "/"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    if sh_init:
        argv += ["--as-pid-1"]
    argv += ["--"] + (["/bin/sh", "-c", '"$@"', "sh"] if sh_init else [])
    argv += prlimit_argv(rlimits if rlimits is not None else
                         limits.rlimits(address_space=address_space_limit, nproc=nproc_limit))
    return argv + (program or list(argv_prefix) + [python, "main.py"])
