"""``Sandbox.run_many``, the warm jail: every input classified exactly as ``run()`` does,
inputs independent of each other (files, globals, processes, IPC left by one input never
reach the next), adversarial inputs contained one after another in the same jail, and a
probe that breaks its jail re-run alone. The containment checks of
test_sandbox_adversarial.py also run through the warm jail (its ``*-warm`` params)."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from sandbox_helpers import WARM_BACKENDS, my_children, sandbox_or_skip, sandbox_tmp  # noqa: F401

from deciplane.sandbox import warm
from deciplane.errors import ConfigError

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(params=WARM_BACKENDS)
def sb(request, monkeypatch, sandbox_tmp):
    monkeypatch.setenv("DECIPLANE_SANDBOX_TMP", sandbox_tmp)
    box = sandbox_or_skip(request.param)
    before = set(my_children())
    yield box
    assert set(my_children()) - before == set(), "a warm jail left a child behind"
    assert os.listdir(os.path.join(sandbox_tmp, f"deciplane-sandbox-{os.getuid()}")) in (
        [], ["ns-template"]), "a scratch directory was left behind"


@pytest.fixture
def jails(monkeypatch):
    """Counts the warm jails started."""
    started = []
    real = warm.WarmJail

    class Counting(real):
        def __init__(self, *a, **k):
            started.append(1)
            super().__init__(*a, **k)

    monkeypatch.setattr(warm, "WarmJail", Counting)
    return started


FIELDS = ("status", "exit_code", "stdout", "stderr", "timed_out", "killed_reason")
PROGRAMS = {
    "echo": ("import sys\nprint(sys.stdin.read()[::-1], end='')", ["abc", "", "x" * 200000]),
    "exit3": ("import sys\nprint('out')\nsys.exit(3)", [""]),
    "exit_msg": ("import sys\nsys.exit('bad input')", [""]),
    "raise": ("def f():\n    raise ValueError('nope')\nf()", [""]),
    "sigkill": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", [""]),
    "exit130": ("import os\nos._exit(130)", [""]),
    "argv_file": ("import sys\nprint(sys.argv, __file__, __name__, sys.path[0])", [""]),
    "atexit": ("import atexit\natexit.register(print, 'bye')\nprint('hi')", [""]),
    "memory": ("x = bytearray(512 << 20)", [""]),
}


def _fields(res) -> list:
    """The classified fields; namespace's set-up ``sh`` (pid 1 of a ``run()``) adds its
    own ``Killed`` line to stderr when the program dies by SIGKILL: not the program's."""
    out = [getattr(res, f) for f in FIELDS]
    if res.backend == "namespace" and res.stderr.endswith("Killed\n"):
        out[3] = res.stderr[:-len("Killed\n")]
    return out


@pytest.mark.parametrize("fresh", [False, True], ids=["fork", "exec"])
def test_results_match_run(sb, jails, fresh):
    for name, (code, stdins) in PROGRAMS.items():
        many = sb.run_many(code, stdins, memory_mb=128, fresh_interpreter=fresh)
        for stdin, got in zip(stdins, many):
            want = sb.run(code, stdin=stdin, memory_mb=128)
            assert _fields(got) == _fields(want), (name, got, want)
            assert got.backend == sb.backend
    assert len(jails) == len(PROGRAMS), "a jail broke on an ordinary program"


STATE_PROBE = textwrap.dedent("""
    import builtins, ctypes, json, os, sys
    cmd = sys.stdin.read().strip()
    if cmd == "check":
        procs = [p for p in os.listdir("/proc") if p.isdigit()]
        rows = {}
        for kind in ("shm", "sem", "msg"):
            try:
                rows[kind] = len(open(f"/proc/sysvipc/{kind}").read().splitlines()) - 1
            except OSError:
                rows[kind] = None
        print(json.dumps({
            "files": sorted(os.listdir(".")), "main": open("main.py").read()[:40],
            "data": open("data.txt").read(), "mode": oct(os.stat(".").st_mode),
            "tmp": os.listdir("/tmp"),
            "shm": os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else None,
            "env": os.environ.get("MARK"), "json_mark": hasattr(json, "MARK"),
            "builtin": hasattr(builtins, "MARK"), "path": len(sys.path),
            "nprocs": len(procs), "ipc": rows, "cwd": os.getcwd(),
        }, sort_keys=True))
    elif cmd == "files":
        open("main.py", "w").write("print('hijacked')")
        open("data.txt", "w").write("changed")
        open("new.txt", "w").write("left behind")
        os.makedirs("deep/er", exist_ok=True)
        os.chmod("deep", 0)
        os.chmod(".", 0o500)
    elif cmd == "globals":
        os.environ["MARK"] = "1"; json.MARK = 1; builtins.MARK = 1; sys.path.append("/x")
    elif cmd == "tmp":
        open("/tmp/left", "w").write("x")
        if os.path.isdir("/dev/shm"):
            open("/dev/shm/left", "w").write("x")
    elif cmd == "daemon":
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                import time
                time.sleep(60)
            os._exit(0)
    elif cmd == "ipc":
        libc = ctypes.CDLL(None)
        assert libc.shmget(0, 4096, 0o1666) >= 0      # IPC_PRIVATE | IPC_CREAT | 0666
        assert libc.semget(0, 1, 0o1666) >= 0
        assert libc.msgget(0, 0o1666) >= 0
    elif cmd == "dev":
        try:
            open("/dev/left", "w").write("x")
        except OSError:
            pass
    print("done", cmd)
""")


def test_probes_are_independent(sb, jails):
    steps = ["files", "globals", "tmp", "daemon", "ipc", "dev"]
    stdins = ["check"] + [s for step in steps for s in (step, "check")]
    res = sb.run_many(STATE_PROBE, stdins, files={"data.txt": "original"}, timeout_s=10)
    assert all(r.status == "ok" for r in res), [(r.status, r.stderr[-500:]) for r in res]
    checks = [json.loads(r.stdout.splitlines()[0]) for r, s in zip(res, stdins) if s == "check"]
    base = checks[0]
    assert base["data"] == "original" and base["main"].startswith("\nimport builtins")
    assert base["tmp"] == [] and base["env"] is None and not base["json_mark"]
    for step, after in zip(steps, checks[1:]):
        assert after == base, f"state left by the {step!r} probe reached the next one"
    # A probe that leaves what cannot be wiped (bwrap: a new /dev entry) costs a fresh
    # jail; nothing else does.
    assert len(jails) <= 2, jails


ADVERSARY = textwrap.dedent("""
    import os, socket, sys, time
    cmd = sys.stdin.read().strip()
    if cmd == "bomb":
        while True:
            os.fork()
    elif cmd == "flood":
        while True:
            sys.stdout.write("x" * 65536)
    elif cmd == "sleep":
        time.sleep(30)
    elif cmd == "spin":
        while True:
            pass
    elif cmd == "mem":
        x = []
        while True:
            x.append(bytearray(16 << 20))
    elif cmd == "net":
        s = socket.socket(); s.settimeout(1)
        try:
            s.connect(("1.1.1.1", 53)); print("connected")
        except OSError as e:
            print("blocked", type(e).__name__)
    elif cmd == "host":
        seen = []
        for p in ("/etc/shadow", "/root", "/home", "/work", "/etc/passwd"):
            try:
                seen.append((p, len(os.listdir(p)) if os.path.isdir(p) else len(open(p).read())))
            except OSError:
                pass
        print(seen)
    else:
        print("fine", os.getuid())
""")


def test_adversarial_inputs_in_one_jail(sb, jails):
    stdins = ["bomb", "ok", "flood", "ok", "sleep", "ok", "spin", "ok", "mem", "ok",
              "net", "host", "ok"]
    res = dict(zip(range(len(stdins)), sb.run_many(
        ADVERSARY, stdins, timeout_s=3, cpu_time_s=1, memory_mb=128,
        max_output_bytes=1 << 16, max_procs=16)))
    by = [(s, res[i]) for i, s in enumerate(stdins)]
    for s, r in by:
        if s == "ok":
            assert (r.status, r.stdout) == ("ok", "fine 65534\n"), r
    got = {s: r for s, r in by if s != "ok"}
    assert got["bomb"].status != "sandbox_error" and got["bomb"].wall_time_s < 3.5
    assert got["flood"].status == "output_limit" and len(got["flood"].stdout) == 1 << 16
    assert got["sleep"].status == "timeout" and got["sleep"].timed_out
    assert got["sleep"].killed_reason == "wall time limit 3s"
    spin = got["spin"]   # CPU limit 1 s, unless a loaded machine gave it < 1 s in 3 s
    assert spin.status == "timeout" and ("CPU" in spin.killed_reason
                                         or spin.cpu_time_s < 1.0), spin
    assert got["mem"].status == "memory", got["mem"]
    assert got["net"].stdout.startswith("blocked"), got["net"]
    assert got["host"].stdout.strip() in ("[]", "[('/etc/passwd', %s)]" % "".join(
        c for c in got["host"].stdout if c.isdigit())), got["host"]
    assert "/etc/shadow" not in got["host"].stdout and "/root" not in got["host"].stdout
    assert len(jails) == 1, "an adversarial probe broke the jail"


def test_probe_that_kills_the_supervisor_is_rerun_alone(sb, jails):
    code = ("import os, signal, sys\n"
            "if sys.stdin.read() == 'kill':\n"
            "    os.kill(-1, signal.SIGKILL)\n"
            "print('alive')")
    res = sb.run_many(code, ["ok", "kill", "ok"])
    want = sb.run(code, stdin="kill")
    assert [r.stdout for r in (res[0], res[2])] == ["alive\n", "alive\n"]
    assert (res[1].status, res[1].exit_code) == (want.status, want.exit_code), res[1]
    assert len(jails) == 2          # the jail died with its supervisor: a fresh one after


def test_run_many_validates_inputs(sb):
    with pytest.raises(ConfigError, match="list of str"):
        sb.run_many("print(1)", "abc")
    with pytest.raises(ConfigError, match="list of str"):
        sb.run_many("print(1)", [b"abc"])
    assert sb.run_many("print(1)", []) == []
