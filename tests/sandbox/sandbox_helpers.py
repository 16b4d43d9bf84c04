"""Shared helpers of the sandbox tests: one Sandbox per backend (skipped with the reason
when the backend cannot run here), and host-side probes for leaked processes and fds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deciplane.sandbox import BACKENDS, Sandbox, available_backends

_CACHE: dict[str, Sandbox] = {}


def sandbox_or_skip(name: str) -> Sandbox:
    """The backend's Sandbox, or ``pytest.skip`` with the reason it cannot run here (the
    reason shows in the ``-ra`` summary: never a silent pass)."""
    if name.endswith("-warm"):
        return WarmRunner(sandbox_or_skip(name[:-len("-warm")]))
    if name.endswith("-program"):
        return ProgramRunner(sandbox_or_skip(name[:-len("-program")]))
    if name not in _CACHE:
        ok, why = available_backends()[name]
        if not ok:
            pytest.skip(f"sandbox backend {name!r} unavailable here: {why}")
        _CACHE[name] = Sandbox(name)
    return _CACHE[name]


def scratch_holding(name: str, worker, content: str | None = None,
                    timeout_s: float = 30.0) -> Path | None:
    """The host-side scratch dir of the running run that wrote file ``name`` (with text
    ``content`` when given); polled until it appears, ``worker`` (the thread running that
    run) ends, or ``timeout_s`` passes (then None)."""
    import time

    from deciplane.sandbox.scratch import scratch_base

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        for f in scratch_base().glob(f"*/{name}"):
            try:
                if content is None or f.read_text() == content:
                    return f.parent
            except OSError:
                continue
        if not worker.is_alive():
            return None
        time.sleep(0.01)
    return None


def backend_params(warm: bool = False) -> list:
    """One param per backend; ``warm``: also ``<backend>-warm`` and ``<backend>-program``
    for the local backends (the same checks through :meth:`Sandbox.run_many`'s warm jail
    and through the warm jail for new programs, ``run(warm=True)``; see
    :func:`sandbox_or_skip`)."""
    names = list(BACKENDS) + ([f"{n}-{kind}" for kind in ("warm", "program")
                               for n in WARM_BACKENDS] if warm else [])
    return [pytest.param(name, id=name) for name in names]


def fresh_sandbox(name: str):
    """A new ``Sandbox`` (or warm runner around one) for a param of
    :func:`backend_params` (after the environment changed, e.g. cgroups off)."""
    for suffix, runner in (("-warm", WarmRunner), ("-program", ProgramRunner)):
        if name.endswith(suffix):
            return runner(Sandbox(name[:-len(suffix)]))
    return Sandbox(name)


WARM_BACKENDS = ("bwrap", "namespace")


class WarmRunner:
    """A Sandbox look-alike whose ``run`` goes through ``run_many`` (one input, a warm
    jail): the adversarial suite then checks the forked-probe path the same way. It
    checks nothing itself: a probe that breaks its jail (e.g. ``kill(-1)``) is
    re-run through ``run()`` by design, and is judged by the test like any other."""

    def __init__(self, box: Sandbox) -> None:
        self.box = box

    def __getattr__(self, name: str):  # backend, loopback, ...
        return getattr(self.box, name)

    def run(self, code: str, stdin: str = "", collect_files=None, **kw):  # noqa: ANN001
        if collect_files:
            pytest.skip("run_many has no collect_files (run() covers it)")
        (res,) = self.box.run_many(code, [stdin], **kw)
        return res


class ProgramRunner(WarmRunner):
    """A Sandbox look-alike whose ``run`` is ``run(warm=True)``: every run a new program
    in a kept warm jail (the jail persists across the runs of a test; the suites'
    fixtures close it at the end, :func:`close_warm`). A run that breaks its jail is
    re-run cold by design, judged by the test like any other."""

    def run(self, code: str, stdin: str = "", collect_files=None, **kw):  # noqa: ANN001
        if collect_files:
            pytest.skip("run(warm=True) collects no files (it runs cold then; run() covers it)")
        return self.box.run(code, stdin=stdin, warm=True, **kw)


def close_warm() -> None:
    """Close this process's kept warm jails (so that a fixture's leak checks see none)."""
    from deciplane.sandbox import warm
    warm.close_program_jails()


def host_pids_with(token: str) -> list[int]:
    """Host processes whose command line contains ``token``."""
    hits = []
    needle = token.encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if needle in (d / "cmdline").read_bytes():
                hits.append(int(d.name))
        except OSError:
            continue
    return hits


def my_children() -> list[tuple[int, str]]:
    """Processes (alive or zombie) whose parent is this test process: ``(pid, state)``."""
    out = []
    me = os.getpid()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2:].split()
        if int(rest[1]) == me:
            out.append((int(d.name), rest[0]))
    return out


def open_fds() -> set[str]:
    """This process's open file descriptors, as ``fd -> target`` strings."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(f"{fd}->{os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:
            continue
    return out


@pytest.fixture(scope="module")
def sandbox():
    """The ``auto`` backend's Sandbox for one test module (skipped, with the reason, where
    no backend can run)."""
    from deciplane.errors import BackendUnavailable

    try:
        return Sandbox("auto")
    except BackendUnavailable as exc:
        pytest.skip(f"no sandbox backend here: {exc}")


@pytest.fixture(scope="module")
def sandbox_tmp():
    """A private scratch root for one test module, on the same filesystem the sandbox
    uses by default (not pytest's tmp dirs: mode 0700, the sandbox's uid 65534 could not
    traverse them)."""
    import shutil
    import tempfile

    from deciplane.sandbox.scratch import default_scratch_root
    d = tempfile.mkdtemp(prefix="deciplane-test-sbx-", dir=default_scratch_root())
    os.chmod(d, 0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)
