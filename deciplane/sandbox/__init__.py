"""Run untrusted Python programs, contained.

```python
from deciplane.envs import Sandbox
sb = Sandbox()                  # "auto": the strongest backend available here
res = sb.run("print(input()[::-1])", stdin="abc\\n", timeout_s=2.0, memory_mb=256)
res.status, res.stdout          # ('ok', 'cba\\n')
```

Backends (``available_backends()`` says which run here and why not):

- ``bwrap``: bubblewrap namespaces (user namespace included), only the system
  directories mounted (read-only), uid 65534, no network, a seccomp filter.
- ``docker``: a container from a locally built image (no pulls), no network, read-only
  root, uid 65534, pids/memory limits, all capabilities dropped, Docker's seccomp profile.
- ``namespace``: the same containment from util-linux ``unshare`` + a minimal root built
  with bind mounts, for machines without bubblewrap (needs root or user namespaces).

Every backend enforces: wall time, CPU time, memory, number of processes, file size,
captured output size; no network; a read-only filesystem except the run's private scratch
directory; no view of the host's home, the project checkout or other runs; a scrubbed
environment; every descendant process killed when the run ends.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Sequence

from deciplane.sandbox import bwrap as _bwrap
from deciplane.sandbox.launcher import host_chain
from deciplane.sandbox.cgroups import acquire_jail, release_jail, cgroup_support
from deciplane.sandbox.execute import execute
from deciplane.sandbox.host import find_python, scrubbed_env
from deciplane.sandbox.limits import NOBODY, Limits
from deciplane.sandbox.results import STATUSES, RawRun, SandboxResult, Status, to_result
from deciplane.sandbox.scratch import collect, make_scratch, remove_scratch
from deciplane.errors import BackendUnavailable, ConfigError

# Strongest first — what "auto" tries. bwrap: user namespace (no host root even inside) +
# every other namespace + seccomp filter + per-run cgroup + uid 65534. docker: the same
# without the user namespace, behind a root daemon, ~8x slower per run. namespace: no
# seccomp filter and no user namespace (root sets it up, then drops to uid 65534).
BACKENDS = ("bwrap", "docker", "namespace")


def _probe(name: str) -> tuple[bool, str]:
    if name == "bwrap":
        return _bwrap.available()
    if name == "namespace":
        from deciplane.sandbox import namespace
        return namespace.available()
    if name == "docker":
        from deciplane.sandbox import docker_backend
        return docker_backend.available()
    raise ConfigError(f"unknown sandbox backend {name!r}; allowed: auto, {', '.join(BACKENDS)}")


def available_backends() -> dict[str, tuple[bool, str]]:
    """``{backend: (available, reason)}`` for every backend, probed for real (cached)."""
    out = {}
    for name in BACKENDS:
        try:
            out[name] = _probe(name)
        except Exception as exc:  # a probe must never take the caller down
            out[name] = (False, f"probe crashed: {type(exc).__name__}: {exc}")
    return out


def resolve_backend(backend: str = "auto") -> str:
    """The backend ``Sandbox(backend)`` would use; raises :class:`BackendUnavailable`."""
    if backend == "auto":
        forced = os.environ.get("DECIPLANE_SANDBOX_BACKEND")
        if forced and forced != "auto":
            return resolve_backend(forced)
        reasons = []
        for name in _AUTO_ORDER:
            ok, why = _probe(name)
            if ok:
                return name
            reasons.append(f"{name}: {why}")
        raise BackendUnavailable("no sandbox backend works on this machine:\n  "
                                 + "\n  ".join(reasons)
                                 + "\nInstall bubblewrap (`apt-get install bubblewrap`) — "
                                 "`deciplane doctor` shows the details.")
    if backend not in BACKENDS:
        raise ConfigError(f"unknown sandbox backend {backend!r}; allowed: auto, "
                          f"{', '.join(BACKENDS)}")
    ok, why = _probe(backend)
    if not ok:
        raise BackendUnavailable(f"sandbox backend {backend!r} is unavailable: {why}. "
                                 "Pick another (`deciplane doctor` lists them) or "
                                 "use backend='auto'.")
    return backend


_AUTO_ORDER = BACKENDS


def _run_settings(timeout_s: float, memory_mb: int, cpu_time_s: float | None,
                  max_output_bytes: int, max_file_bytes: int, max_procs: int,
                  env: dict[str, str] | None, argv_prefix: list[str] | None
                  ) -> tuple[Limits, dict[str, str], list[str]]:
    """``(limits, scrubbed environment, argv prefix)`` of a run, shared by ``run`` and
    ``run_many``; an argv prefix tool the sandbox cannot see is refused here."""
    limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb, cpu_time_s=cpu_time_s,
                    max_output_bytes=max_output_bytes, max_file_bytes=max_file_bytes,
                    max_procs=max_procs)
    envd = scrubbed_env(env)
    prefix = [str(a) for a in (argv_prefix or [])]
    if prefix and not _sandbox_visible(prefix[0]):
        raise ConfigError(f"argv_prefix tool {prefix[0]!r} is not installed under "
                          "/usr or /bin, the only programs visible in the sandbox; "
                          "install it (e.g. `apt-get install valgrind`) or fix the name")
    return limits, envd, prefix


class Sandbox:
    """Runs ``python3 main.py`` on untrusted source, contained by one backend.

    Arguments:
        backend: ``"auto"`` (the strongest available: bwrap, else docker, else
            namespace; env ``DECIPLANE_SANDBOX_BACKEND`` overrides), or one by name. ``sb.backend`` is
            the resolved name. Raises :class:`deciplane.errors.BackendUnavailable` with
            the reason when it cannot run here.
    """

    def __init__(self, backend: str = "auto") -> None:
        self.backend = resolve_backend(backend)
        self.python = find_python()
        self._cgroups, _ = cgroup_support()
        if self.backend == "docker":
            from deciplane.sandbox import docker_backend
            self._docker = docker_backend.DockerRunner()
        self._signal_base = 128 if self.backend in ("bwrap", "docker", "namespace") else None

    def __repr__(self) -> str:
        return f"Sandbox(backend={self.backend!r})"

    @property
    def loopback(self) -> str:
        """The state of the only network interface a run sees, ``lo``: ``"down"`` (no
        socket can connect anywhere, not even to itself) or ``"up"`` (a loopback private
        to the run: a program can connect to its own sockets; nothing outside the sandbox
        is reachable). ``namespace``: down. ``bwrap``: down when this process is root,
        up otherwise (bubblewrap raises ``lo`` in a network namespace it creates).
        ``docker``: up (Docker's ``network_mode="none"`` raises ``lo``)."""
        if self.backend == "bwrap":
            return "down" if _bwrap.loopback_down() else "up"
        return "up" if self.backend == "docker" else "down"

    def run(self, code: str, stdin: str = "", files: dict[str, str | bytes] | None = None,
            timeout_s: float = 2.0, memory_mb: int = 256, cpu_time_s: float | None = None,
            max_output_bytes: int = 1 << 20, max_file_bytes: int = 16 << 20,
            max_procs: int = 32, env: dict[str, str] | None = None,
            argv_prefix: list[str] | None = None,
            collect_files: list[str] | None = None,
            channel_fds: Sequence[int] = (), warm: bool = False) -> SandboxResult:
        """Run ``argv_prefix + [python3, "main.py"]`` in a fresh private scratch directory
        holding ``main.py`` (= ``code``) and ``files``.

        Arguments:
            stdin: text fed to the program's standard input.
            files: extra files ``{relative path: content}`` placed next to main.py.
            timeout_s: wall-clock limit (status ``timeout``).
            memory_mb: memory limit (status ``memory``): the program's address space
                (RLIMIT_AS; not under an ``argv_prefix`` tool) and, where per-run
                cgroups exist, ``memory_mb + 64`` MB for the whole run, files it writes
                to its scratch dir and ``/tmp`` included. ``peak_memory_mb`` is the
                cgroup's peak (without cgroups: ``wait4``'s max RSS, an upper bound).
            cpu_time_s: CPU-time limit (default: ``timeout_s``), whole seconds, rounded up.
            max_output_bytes: stdout and stderr are each captured up to this; more ends
                the run with status ``output_limit``.
            max_file_bytes: the largest file the program may write.
            max_procs: processes/threads the run may have at once (fork bombs stop here).
            env: variables added to the scrubbed environment (e.g. ``PYTHONHASHSEED``).
            argv_prefix: a tool to run python under, e.g. ``["valgrind", ...]``; it must
                live under the read-only system directories.
            collect_files: scratch-relative names of files to return in ``result.files``
                (regular files only, at most ``max_file_bytes`` each).
            channel_fds: file descriptors (pipe ends) the program inherits at the same
                numbers — a channel to a peer outside the sandbox (the code harness's
                checker). They are *handed over*: this process closes its copies as soon
                as the program has started, so the peer sees end-of-file the moment the
                program's side is gone. Not offered by the ``docker`` backend.
            warm: run in a *warm jail for new programs* (bwrap and namespace): a jail
                kept started between calls, whose in-jail supervisor forks a fresh
                process per run from a warm interpreter, then kills, wipes and checks
                the jail before the next run (docs/sandbox.md). Same limits, same
                classification, same containment; a few ms instead of a sandbox launch
                plus an interpreter start-up. Falls back to the cold path (a ``run``
                as without ``warm``) for docker, ``argv_prefix``, ``collect_files``,
                when no jail can be started or when one breaks during the run; with
                ``channel_fds`` a run whose jail broke raises
                :class:`deciplane.errors.WarmJailBroken` instead (it cannot be replayed:
                re-run with new descriptors). ``DECIPLANE_SANDBOX_WARM=0`` turns it off.
        """
        if not isinstance(code, str):
            raise ConfigError(f"code must be str (program source), got {type(code).__name__}")
        limits, envd, prefix = _run_settings(timeout_s, memory_mb, cpu_time_s, max_output_bytes,
                                             max_file_bytes, max_procs, env, argv_prefix)
        channel = tuple(int(fd) for fd in channel_fds)
        if self.backend == "docker":
            if channel:
                for fd in channel:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                raise ConfigError("channel_fds: the docker backend cannot hand descriptors "
                                  "to a container; use the bwrap or namespace backend")
            raw, got = self._docker.run(code, stdin.encode(), files, limits, envd, prefix,
                                        collect_files)
            return to_result(raw, limits, self.backend, got, signal_base=self._signal_base)
        if warm and self._warm_ok(prefix, collect_files, channel):
            from deciplane.sandbox import warm as _warm
            res = _warm.run_program(self, code, stdin.encode(), files, limits, envd, channel)
            if res is not None:
                return res
        return self._run_local(code, stdin.encode(), files, limits, envd, prefix, collect_files,
                               channel)

    def _warm_ok(self, prefix: list[str], collect_files: list[str] | None,
                 channel: tuple[int, ...]) -> bool:
        """Whether a run can go through a warm jail for new programs: a local backend,
        no tool prefix, nothing to collect, channel descriptors the child can take at
        the same numbers (3-2047, distinct), and not turned off."""
        return (self.backend in ("bwrap", "namespace") and not prefix and not collect_files
                and os.environ.get("DECIPLANE_SANDBOX_WARM", "1") != "0"
                and len(set(channel)) == len(channel) <= 8
                and all(3 <= fd < 2048 for fd in channel))

    def run_many(self, code: str, stdins: Sequence[str],
                 files: dict[str, str | bytes] | None = None, timeout_s: float = 2.0,
                 memory_mb: int = 256, cpu_time_s: float | None = None,
                 max_output_bytes: int = 1 << 20, max_file_bytes: int = 16 << 20,
                 max_procs: int = 32, env: dict[str, str] | None = None,
                 argv_prefix: list[str] | None = None,
                 fresh_interpreter: bool = False) -> list[SandboxResult]:
        """Run one program on many inputs: ``results[i]`` is what
        ``run(code, stdin=stdins[i], ...)`` returns (same limits per input, same
        classification), at a fraction of the cost — one sandbox per call (a "warm
        jail"), inside it a fresh process per input forked from a warm interpreter.

        Inputs stay independent: between two inputs every process the previous one left
        is killed, ``/sandbox`` (restored to ``main.py`` + ``files``), ``/tmp`` and
        ``/dev/shm`` are wiped and SysV IPC objects removed; globals die with the forked
        process. Where that cannot be verified (or an input kills the supervisor) the
        next input gets a fresh sandbox and the offending input is re-run alone through
        :meth:`run`.

        Arguments (as :meth:`run`, plus):
            stdins: one standard input per run.
            fresh_interpreter: exec a new ``python3 main.py`` per input instead of
                forking the warm interpreter (interpreter state exactly as in ``run``;
                costs the interpreter start-up). Implied by ``argv_prefix``.

        ``collect_files`` is not offered (use :meth:`run`). The ``docker`` backend runs
        each input through :meth:`run`.
        """
        if not isinstance(code, str):
            raise ConfigError(f"code must be str (program source), got {type(code).__name__}")
        if isinstance(stdins, str) or not all(isinstance(x, str) for x in stdins):
            raise ConfigError("stdins must be a list of str (one standard input per run)")
        kwargs = dict(timeout_s=timeout_s, memory_mb=memory_mb, cpu_time_s=cpu_time_s,
                      max_output_bytes=max_output_bytes, max_file_bytes=max_file_bytes,
                      max_procs=max_procs, env=env, argv_prefix=argv_prefix)
        if self.backend == "docker" or not stdins:
            return [self.run(code, stdin=s, files=files, **kwargs) for s in stdins]
        limits, envd, prefix = _run_settings(timeout_s, memory_mb, cpu_time_s, max_output_bytes,
                                             max_file_bytes, max_procs, env, argv_prefix)
        from deciplane.sandbox import warm
        return warm.run_many(self, code, list(stdins), files, limits, envd, prefix,
                             fresh_interpreter, kwargs)

    def _run_local(self, code: str, stdin: bytes, files, limits: Limits,  # noqa: ANN001
                   env: dict[str, str], prefix: list[str],
                   collect_files: list[str] | None,
                   channel: tuple[int, ...] = ()) -> SandboxResult:
        drop = _bwrap.drops_privileges() if self.backend == "bwrap" else os.getuid() == 0
        try:
            scratch = make_scratch(code, files, owner=NOBODY if drop else None)
        except BaseException:
            for fd in channel:  # handed over: closed whatever happens
                with contextlib.suppress(OSError):
                    os.close(fd)
            raise
        jail = None
        rfd = wfd = scfd = argfd = -1
        try:
            if self._cgroups:
                # memory: the cgroup bounds the whole tree (tmpfs included); rlimit AS
                # additionally gives python a clean MemoryError when no tool wraps it.
                jail = acquire_jail(limits.max_procs, limits.memory_mb + 64)
            address_space = not prefix
            chain = host_chain(self.backend, jail)
            if self.backend == "bwrap":
                rfd, wfd = os.pipe()
                scfd = _bwrap.seccomp_fd()
                if scfd is None:
                    scfd = -1
                argv = _bwrap.build_argv(self.python, str(scratch), limits, env, prefix,
                                         wfd, address_space,
                                         seccomp_fd=scfd if scfd >= 0 else None,
                                         nproc_limit=jail is None,
                                         sh_init=jail is None, host_prefix=chain)
                argv, argfd = _bwrap.options_via_fd(argv)
            else:
                from deciplane.sandbox import namespace
                argv = namespace.build_argv(self.python, str(scratch), limits, env, prefix,
                                            address_space, drop, nproc_limit=jail is None)
                if chain is not None:
                    argv = chain + argv
            if jail is not None and chain is None:
                argv = jail.join_argv() + argv
            raw = execute(argv, stdin, limits, jail=jail,
                          pass_fds=tuple(fd for fd in (wfd, scfd, argfd) if fd >= 0) + channel,
                          hand_over=channel)
            channel = ()
            for fd in (wfd, scfd, argfd):
                if fd >= 0:
                    os.close(fd)
            wfd = scfd = argfd = -1
            if self.backend == "bwrap":
                _check_bwrap_status(raw, _read_all(rfd))
            else:
                from deciplane.sandbox import namespace
                namespace.check_status(raw, scratch)
            got = collect(scratch, collect_files, limits.max_file_bytes)
        finally:
            for fd in (rfd, wfd, scfd, argfd, *channel):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            if jail is not None:
                release_jail(jail)
            remove_scratch(scratch)
        return to_result(raw, limits, self.backend, got, signal_base=self._signal_base)


def _sandbox_visible(tool: str) -> bool:
    """Whether ``tool`` (a name looked up on the sandbox's PATH, or an absolute path)
    exists under the read-only system directories every backend mounts."""
    import shutil
    if "/" in tool:
        return tool.startswith(("/usr/", "/bin/", "/sbin/")) and os.access(tool, os.X_OK)
    return shutil.which(tool, path="/usr/local/bin:/usr/bin:/bin") is not None


def _read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _check_bwrap_status(raw: RawRun, status: bytes) -> None:
    """bwrap writes ``{"child-pid": N}`` then ``{"exit-code": N}``; without an exit code
    (and without us having stopped it) the sandbox failed to start the program."""
    if raw.timed_out or raw.output_exceeded or raw.sandbox_failed:
        return
    docs = []
    for line in status.decode(errors="replace").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            docs.append(json.loads(line))
    if not any("exit-code" in d for d in docs):
        if raw.returncode is not None and raw.returncode < 0:
            return  # the supervisor itself was killed (e.g. by the OOM killer): classify
        tail = raw.stderr.decode(errors="replace").strip()[-500:]
        raw.sandbox_failed = (f"bubblewrap failed before the program ran (exit "
                              f"{raw.returncode}): {tail or 'no message'}")


__all__ = ["Sandbox", "SandboxResult", "Status", "STATUSES", "Limits", "BACKENDS",
           "available_backends", "resolve_backend"]
