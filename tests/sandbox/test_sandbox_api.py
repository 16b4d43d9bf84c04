"""The Sandbox API and its pure helpers: classification, limits, names, environment,
file collection; plus the documented behaviour of a real run on the default backend."""

from __future__ import annotations

import os
import shutil
import signal
from dataclasses import fields

import pytest

from deciplane.envs import Sandbox, SandboxResult
from deciplane.sandbox import BACKENDS, available_backends, resolve_backend
from deciplane.sandbox import host, limits, results, scratch
from deciplane.errors import BackendUnavailable, ConfigError
from sandbox_helpers import backend_params, sandbox_or_skip, sandbox_tmp  # noqa: F401

LIM = limits.Limits(timeout_s=2.0, memory_mb=256)


def raw(**kw) -> results.RawRun:
    return results.RawRun(**kw)


# ---------------------------------------------------------------- classify (pure)

@pytest.mark.parametrize("run, expected", [
    (raw(returncode=0), ("ok", 0)),
    (raw(returncode=3), ("runtime_error", 3)),
    (raw(returncode=-11), ("killed", -11)),
    (raw(returncode=137), ("runtime_error", 137)),           # no signal base: a plain code
    (raw(returncode=None, timed_out=True), ("timeout", None)),
    (raw(returncode=-9, output_exceeded=True), ("output_limit", None)),
    (raw(returncode=-signal.SIGXCPU), ("timeout", -signal.SIGXCPU)),
    (raw(returncode=-9, cpu_time_s=2.5), ("timeout", -9)),   # hard CPU limit after 2 s
    (raw(returncode=-9, oom=True), ("memory", -9)),
    (raw(returncode=1, stderr=b"Traceback ...\nMemoryError\n"), ("memory", 1)),
    (raw(returncode=1, stderr=b"print('MemoryError')\nValueError: x\n"), ("runtime_error", 1)),
    (raw(sandbox_failed="bwrap: no"), ("sandbox_error", None)),
])
def test_classify_cases(run, expected):
    status, code, reason = results.classify(run, LIM)
    assert (status, code) == expected
    assert (reason is None) == (status in ("ok", "runtime_error"))


def test_classify_signal_base_translates_supervisor_codes():
    assert results.classify(raw(returncode=139), LIM, signal_base=128)[:2] == ("killed", -11)
    assert results.classify(raw(returncode=128 + signal.SIGXCPU), LIM, 128)[0] == "timeout"
    assert results.classify(raw(returncode=2), LIM, 128)[:2] == ("runtime_error", 2)


def test_classify_precedence_property():
    """A sandbox failure beats everything; output overflow beats a timeout."""
    for rc in (0, 1, -9, None):
        for t in (False, True):
            assert results.classify(raw(returncode=rc, timed_out=t, output_exceeded=True,
                                  sandbox_failed="x"), LIM)[0] == "sandbox_error"
            assert results.classify(raw(returncode=rc, timed_out=t, output_exceeded=True),
                              LIM)[0] == "output_limit"


# ---------------------------------------------------------------- limits and names

@pytest.mark.parametrize("bad", [dict(timeout_s=0), dict(memory_mb=1), dict(max_procs=0),
                                 dict(timeout_s=float("inf")), dict(cpu_time_s=-1),
                                 dict(max_output_bytes="10")])
def test_limits_reject_bad_values(bad):
    with pytest.raises(ConfigError, match="not allowed"):
        limits.Limits(**bad)


def test_cpu_limit_rounds_up_and_defaults_to_timeout():
    assert limits.Limits(timeout_s=2.2).cpu_limit_s == 3
    assert limits.Limits(timeout_s=10, cpu_time_s=0.5).cpu_limit_s == 1
    rl = limits.Limits(memory_mb=100).rlimits()
    assert rl["as"] == 100 << 20 and "as" not in limits.Limits().rlimits(address_space=False)
    argv = limits.prlimit_argv({"cpu": 2, "nproc": 8})
    assert argv[1:] == ["--cpu=2:3", "--nproc=8", "--"]   # SIGXCPU first, SIGKILL 1 s later


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a/../../b", "", ".", "a\0b"])
def test_bad_file_names_rejected(name):
    with pytest.raises(ConfigError, match="not allowed"):
        scratch._check_name(name)


def test_scrubbed_env_is_minimal_and_validated():
    env = host.scrubbed_env({"PYTHONHASHSEED": "0"})
    assert env["PYTHONHASHSEED"] == "0" and env["HOME"] == limits.SCRATCH
    assert not set(env) & {"USER", "HF_TOKEN", "DECIPLANE_HOME", "VIRTUAL_ENV"}
    with pytest.raises(ConfigError):
        host.scrubbed_env({"BAD NAME": "1"})


def test_collect_never_follows_symlinks(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_bytes(b"A")
    (tmp_path / "big.bin").write_bytes(b"x" * 100)
    secret = tmp_path.parent / f"{tmp_path.name}-secret"
    secret.write_text("host secret")
    os.symlink(secret, tmp_path / "link.txt")
    os.symlink(tmp_path.parent, tmp_path / "up")
    got = scratch.collect(tmp_path, ["sub/a.txt", "big.bin", "link.txt", f"up/{secret.name}",
                               "missing"], max_bytes=50)
    assert got == {"sub/a.txt": b"A"}


def test_seccomp_program_layout():
    from deciplane.sandbox import seccomp
    prog = seccomp.filter_program()
    n = len(seccomp.BLOCKED_X86_64)
    assert len(prog) == 8 * (13 + n + 2)                     # sizeof(struct sock_filter) = 8
    code, jt, jf, k = __import__("struct").unpack("HBBI", prog[:8])
    assert (code, k) == (seccomp.LD_W_ABS, 4)                # first: load the arch
    assert len(set(seccomp.BLOCKED_X86_64.values())) == n    # no duplicate numbers


# ---------------------------------------------------------------- backend selection

def test_available_backends_shape():
    av = available_backends()
    assert set(av) == set(BACKENDS)
    for ok, why in av.values():
        assert isinstance(ok, bool) and why


def test_unknown_backend_lists_allowed():
    with pytest.raises(ConfigError, match="allowed: auto, bwrap, docker, namespace"):
        Sandbox("chroot")


def test_unavailable_backend_says_why(monkeypatch):
    import deciplane.sandbox as S
    monkeypatch.setattr(S, "_probe", lambda name: (False, f"{name} is broken here"))
    with pytest.raises(BackendUnavailable, match="bwrap is broken here"):
        resolve_backend("bwrap")
    with pytest.raises(BackendUnavailable, match="deciplane doctor"):
        resolve_backend("auto")


def test_auto_resolves_to_an_available_backend():
    av = available_backends()
    if not any(ok for ok, _ in av.values()):
        pytest.skip(f"no sandbox backend here: {av}")
    sb = Sandbox()
    assert sb.backend in BACKENDS and av[sb.backend][0]


# ---------------------------------------------------------------- real runs, every backend

@pytest.fixture(params=backend_params())
def sb(request, monkeypatch, sandbox_tmp):
    monkeypatch.setenv("DECIPLANE_SANDBOX_TMP", sandbox_tmp)
    return sandbox_or_skip(request.param)


def test_result_fields_and_io(sb):
    data = "".join(f"{i}\n" for i in range(200_000))        # ~1.3 MB through stdin
    res = sb.run("import sys\nxs = sys.stdin.read().split()\nprint(len(xs), xs[-1])\n"
                 "print(open('data/in.txt').read(), open('blob.bin','rb').read()[:2])",
                 stdin=data, files={"data/in.txt": "hello", "blob.bin": b"\x00\xff"},
                 env={"PYTHONHASHSEED": "0"}, timeout_s=20)
    assert isinstance(res, SandboxResult)
    assert {f.name for f in fields(SandboxResult)} >= {
        "exit_code", "stdout", "stderr", "status", "timed_out", "killed_reason",
        "cpu_time_s", "wall_time_s", "peak_memory_mb", "files", "backend"}
    assert res.status == "ok" and res.exit_code == 0 and not res.timed_out, res
    assert res.stdout.split("\n")[:2] == ["200000 199999", "hello b'\\x00\\xff'"]
    assert res.backend == sb.backend and res.wall_time_s > 0 and res.killed_reason is None
    assert res.cpu_time_s > 0 or sb.backend == "docker"


def test_exit_codes_and_signals(sb):
    assert sb.run("import sys; sys.exit(7)").exit_code == 7
    res = sb.run("import os, signal; os.kill(os.getpid(), signal.SIGABRT)")
    assert (res.status, res.exit_code) == ("killed", -signal.SIGABRT)
    assert "SIGABRT" in res.killed_reason


def test_bwrap_applies_seccomp_filter(monkeypatch, sandbox_tmp):
    from deciplane.sandbox import seccomp
    if not seccomp.supported()[0]:
        pytest.skip(seccomp.supported()[1])
    monkeypatch.setenv("DECIPLANE_SANDBOX_TMP", sandbox_tmp)
    sb = sandbox_or_skip("bwrap")
    res = sb.run("import ctypes, threading, subprocess\n"
                 "libc = ctypes.CDLL('libc.so.6', use_errno=True)\n"
                 "print(libc.unshare(0x10000000), libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\n"
                 "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
                 "print(subprocess.run(['/bin/echo', 'child'], capture_output=True, text=True).stdout, end='')\n"
                 "print([l for l in open('/proc/self/status') if l.startswith('Seccomp:')][0].split()[1])")
    assert res.status == "ok", res
    assert res.stdout.split("\n")[:4] == ["-1 -1 1", "thread", "child", "2"]


def test_missing_tool_is_a_clear_error(sb):
    with pytest.raises(ConfigError, match="not installed"):
        sb.run("pass", argv_prefix=["definitely-not-a-tool"])


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")
def test_valgrind_runs_inside_the_sandbox(monkeypatch, sandbox_tmp):
    """valgrind (the instructions timer) under the default backend (each backend costs
    ~10 s of callgrind on a shared 2-core machine; the other timer tests cover the rest)."""
    monkeypatch.setenv("DECIPLANE_SANDBOX_TMP", sandbox_tmp)
    sb = sandbox_or_skip(resolve_backend("auto"))
    res = sb.run("print(sum(range(100)))", env={"PYTHONHASHSEED": "0"},
                 argv_prefix=["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                              "--log-file=cg.log"],
                 collect_files=["cg.log"], timeout_s=90, memory_mb=1024)
    assert res.status == "ok" and res.stdout == "4950\n", res
    assert b"Collected :" in res.files["cg.log"]


def test_doctor_command_lists_every_backend():
    from typer.testing import CliRunner

    from deciplane.cli import app
    out = CliRunner().invoke(app, ["doctor"])
    av = available_backends()
    assert out.exit_code == (0 if any(ok for ok, _ in av.values()) else 1), out.output
    for name in BACKENDS:
        assert name in out.output
    assert "auto ->" in out.output and "valgrind:" in out.output
    assert "java (TextWorldExpress-v0):" in out.output
    assert "ray:" in out.output and "accelerate:" in out.output


@pytest.mark.parametrize("backend", ["bwrap", "namespace"])
def test_fallback_without_cgroups(backend, monkeypatch, sandbox_tmp):
    """Hosts without writable cgroup v1 (cgroup v2-only, not root): rlimits alone must
    still contain and account — CPU time from wait4, processes from RLIMIT_NPROC."""
    monkeypatch.setenv("DECIPLANE_SANDBOX_TMP", sandbox_tmp)
    monkeypatch.setenv("DECIPLANE_SANDBOX_CGROUPS", "0")
    sandbox_or_skip(backend)
    sb = Sandbox(backend)
    spin = sb.run("x = 0\nfor i in range(2 * 10**6):\n    x += i\nprint(x > 0)")
    assert spin.status == "ok" and spin.cpu_time_s > 0.05, spin
    bomb = sb.run("import os\nwhile True:\n    os.fork()", timeout_s=5, max_procs=16)
    assert bomb.status in ("runtime_error", "killed", "timeout"), bomb
    assert bomb.wall_time_s < 6
    mem = sb.run("b = bytearray(1 << 31)", memory_mb=64)
    assert mem.status == "memory", mem
    assert sb.run("import time\ntime.sleep(10)", timeout_s=0.5).status == "timeout"


def test_stale_jails_of_dead_processes_are_swept():
    from deciplane.sandbox.cgroups import CgroupJail, cgroup_support, sweep_stale_jails
    if not cgroup_support()[0]:
        pytest.skip(cgroup_support()[1])
    pid = 2 ** 22 - 7                   # a pid no process is likely to hold
    if os.path.exists(f"/proc/{pid}"):
        pytest.skip("cannot pick a dead pid")
    jail = CgroupJail(f"run-{pid}-deadbeef0000")
    assert all(d.is_dir() for d in jail.dirs.values())
    assert sweep_stale_jails() >= len(jail.dirs)
    assert not any(d.exists() for d in jail.dirs.values())


def _run_in_forked_child(backend: str, code: str, queue) -> None:
    res = Sandbox(backend).run(code, timeout_s=20)
    queue.put((res.status, res.stdout, res.killed_reason))


def test_forked_processes_do_not_share_pooled_jails(sb):
    """AsyncVectorEnv workers are forked after the parent ran a sandbox: each must use its
    own cgroups, else the first run to end kills the other's program."""
    import multiprocessing as mp

    assert sb.run("print(1)").status == "ok"          # the parent pools a jail
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_run_in_forked_child,
                         args=(sb.backend, f"import time\ntime.sleep({s})\nprint('done')", q))
             for s in (0.2, 2.0)]
    for p in procs:
        p.start()
    results = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert [r[:2] for r in results] == [("ok", "done\n")] * 2, results


def test_channel_fds_are_handed_to_the_program_and_closed_here():
    """channel_fds: the program inherits the pipe ends at the same numbers; this process
    closes its copies once the program started, so the peer sees EOF when it is gone."""
    sb = Sandbox()
    to_prog_r, to_prog_w = os.pipe()
    from_prog_r, from_prog_w = os.pipe()
    try:
        os.write(to_prog_w, b"ping")
        os.close(to_prog_w)
        code = (f"import os\nmsg = os.read({to_prog_r}, 4)\n"
                f"os.write({from_prog_w}, msg[::-1])\n")
        res = sb.run(code, channel_fds=[to_prog_r, from_prog_w], timeout_s=5)
        assert res.status == "ok", res
        assert os.read(from_prog_r, 10) == b"gnip"
        assert os.read(from_prog_r, 10) == b""              # every writer is gone: EOF
        for fd in (to_prog_r, from_prog_w):
            with pytest.raises(OSError):
                os.fstat(fd)
    finally:
        os.close(from_prog_r)
