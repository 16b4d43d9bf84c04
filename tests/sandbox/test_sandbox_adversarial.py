"""Adversarial programs against every sandbox backend: each must be contained (nothing
escapes, nothing outlives the run) and classified correctly. A backend that cannot run on
this machine is skipped with its reason (see the -ra summary), never passed silently."""

from __future__ import annotations

import json
import os
import secrets
import textwrap
import threading
import time

import pytest

from sandbox_helpers import (backend_params, close_warm, host_pids_with, my_children,
                             sandbox_or_skip, sandbox_tmp,  # noqa: F401 - a fixture
                             scratch_holding)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=backend_params(warm=True))
def sb(request, monkeypatch, sandbox_tmp):
    monkeypatch.setenv("DECIPLANE_SANDBOX_TMP", sandbox_tmp)
    box = sandbox_or_skip(request.param)
    # Other suites' long-lived workers (math-verify pool, game generators) are children
    # of this process too: only what appeared during the test counts.
    before = set(my_children())
    yield box
    close_warm()        # a kept warm jail (the -program params) is no leak
    assert set(my_children()) - before == set(), \
        "the sandbox left a child/zombie of the test process"
    assert os.listdir(os.path.join(sandbox_tmp, f"deciplane-sandbox-{os.getuid()}")) in (
        [], ["ns-template"]), "a scratch directory was left behind"


def run_json(sb, code: str, **kw):
    """Run a probe that prints one JSON object as its last line; return (result, obj)."""
    res = sb.run(textwrap.dedent(code), **kw)
    assert res.status == "ok", (res.status, res.killed_reason, res.stderr[-2000:])
    return res, json.loads(res.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- network

def test_no_network_tcp(sb):
    _, obs = run_json(sb, """
        import json, socket
        out = {}
        for host, port in [("1.1.1.1", 53), ("8.8.8.8", 443), ("172.17.0.1", 2375)]:
            s = socket.socket(); s.settimeout(1)
            try:
                s.connect((host, port)); out[host] = "connected"
            except OSError as e:
                out[host] = type(e).__name__
        out["ifaces"] = [n for _, n in socket.if_nameindex()]
        print(json.dumps(out))
    """)
    assert "connected" not in obs.values()
    assert set(obs["ifaces"]) <= {"lo"}, obs["ifaces"]


def test_no_dns(sb):
    _, obs = run_json(sb, """
        import json, socket
        try:
            socket.getaddrinfo("pypi.org", 443); r = "resolved"
        except OSError as e:
            r = type(e).__name__
        print(json.dumps({"dns": r}))
    """)
    assert obs["dns"] != "resolved"


def test_no_docker_or_host_sockets(sb):
    _, obs = run_json(sb, """
        import json, os, glob
        seen = [p for p in ["/var/run/docker.sock", "/run/docker.sock",
                            "/tmp/deciplane-ci-docker.sock", "/tmp/deciplane-docker.sock"]
                if os.path.exists(p)]
        print(json.dumps({"seen": seen + glob.glob("/run/*") + glob.glob("/var/run/*")}))
    """)
    assert obs["seen"] == []


# ---------------------------------------------------------------- filesystem

def test_writes_outside_scratch_fail(sb):
    token = secrets.token_hex(8)
    _, obs = run_json(sb, f"""
        import json
        out = {{}}
        for p in ["/usr/{token}", "/etc/{token}", "/{token}", "/bin/{token}",
                  "/proc/sys/kernel/hostname", "/sys/{token}"]:
            try:
                open(p, "w").write("x"); out[p] = "written"
            except OSError as e:
                out[p] = type(e).__name__
        open("/tmp/{token}", "w").write("private tmp is fine")
        open("ok.txt", "w").write("scratch is writable")
        print(json.dumps(out))
    """)
    assert "written" not in obs.values(), obs
    for p in (f"/usr/{token}", f"/etc/{token}", f"/{token}", f"/tmp/{token}"):
        assert not os.path.exists(p), f"{p} escaped to the host"


def test_cannot_read_root_home_or_shadow(sb):
    _, obs = run_json(sb, """
        import json, os
        out = {}
        for p in ["/root", "/home", "/etc/shadow", "/etc/passwd-", "/root/.bashrc",
                  "/root/.pyenv", "/etc/ssh"]:
            try:
                out[p] = sorted(os.listdir(p)) if os.path.isdir(p) else open(p).read()[:50]
            except OSError as e:
                out[p] = type(e).__name__
        print(json.dumps(out))
    """)
    for p, v in obs.items():
        assert not v or isinstance(v, str) and v.endswith("Error"), (p, v)


# The read-only system directories are the host's own (nothing of a run can be in them);
# every other path the program can reach is searched.
WALK_PRELUDE = """
        import json, os
        SYSTEM = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/proc",
                  "/sys", "/dev", "/etc/alternatives")
"""


def test_cannot_see_project_checkout_or_gold(sb, tmp_path):
    gold = tmp_path / "gold_answers.json"
    secret = secrets.token_hex(16)
    gold.write_text(json.dumps({"task-1": secret}))
    here = os.path.abspath(__file__)
    _, obs = run_json(sb, WALK_PRELUDE + f"""
        out = {{}}
        for p in [{str(gold)!r}, {here!r}, "/work", "/work/main", "/work/shared",
                  {os.getcwd()!r}, "/farm", "/mnt", "/opt"]:
            out[p] = os.path.exists(p)
        hits = []
        for root, dirs, files in os.walk("/"):
            if root.startswith(SYSTEM):
                dirs[:] = []; continue
            for f in files:
                try:
                    if {secret[::-1]!r}[::-1] in open(os.path.join(root, f), errors="ignore").read(1 << 16):
                        hits.append(os.path.join(root, f))
                except OSError:
                    pass
        out["hits"] = hits
        print(json.dumps(out))
    """, timeout_s=20)
    assert obs.pop("hits") == []
    assert not any(obs.values()), obs


def test_cannot_see_another_runs_scratch(sb):
    """Two runs at once: the first keeps a secret in its scratch dir; the second looks
    everywhere it can for it."""
    secret = secrets.token_hex(16)
    first = {}

    def hold():  # keeps running until the host says the search is over
        first["res"] = sb.run(f"open('secret.txt','w').write({secret!r})\n"
                              "import os, time\nt = time.monotonic()\n"
                              "while not os.path.exists('done') and time.monotonic() - t < 60:\n"
                              "    time.sleep(0.02)", timeout_s=90)

    t = threading.Thread(target=hold)
    t.start()
    held = scratch_holding("secret.txt", t, secret)  # the secret is on disk before we search
    assert held is not None, first
    try:
        _, obs = run_json(sb, WALK_PRELUDE + f"""
        hits = []
        for root, dirs, files in os.walk("/"):
            if root.startswith(SYSTEM):
                dirs[:] = []; continue
            for f in files:
                try:
                    if {secret[::-1]!r}[::-1] in open(os.path.join(root, f), errors="ignore").read(4096):
                        hits.append(os.path.join(root, f))
                except OSError:
                    pass
        print(json.dumps({{"hits": hits}}))
    """, timeout_s=20)
    finally:
        (held / "done").write_text("")
        t.join()
    assert first["res"].status == "ok", first["res"]
    assert obs["hits"] == []


def test_symlink_to_host_file_is_not_collected(sb):
    res = sb.run("import os\nos.symlink('/etc/hostname', 'out.txt')\n"
                 "os.symlink('/proc/self/environ', 'env.txt')",
                 collect_files=["out.txt", "env.txt"])
    assert res.status == "ok" and res.files == {}


# ---------------------------------------------------------------- processes

def test_fork_bomb_contained_fast(sb):
    t0 = time.monotonic()
    res = sb.run("import os\nwhile True:\n    os.fork()", timeout_s=5, max_procs=32)
    assert time.monotonic() - t0 < 15
    assert res.status in ("runtime_error", "killed", "timeout", "ok"), res
    assert res.status != "sandbox_error"


def test_fork_bomb_does_not_starve_a_concurrent_run(sb):
    """Process limits are per run: a fork bomb holding its whole quota must not make an
    ordinary run beside it fail (RLIMIT_NPROC would: it counts uid 65534 host-wide)."""
    from deciplane.sandbox.cgroups import cgroup_support
    if sb.backend == "namespace" and not cgroup_support()[0]:
        pytest.skip("namespace backend without per-run cgroups falls back to RLIMIT_NPROC, "
                    "which counts uid 65534 host-wide (documented limitation): "
                    + cgroup_support()[1])
    out = {}
    ready = f"ready-{secrets.token_hex(6)}"

    def bomb():  # holds its whole quota until the host says the other runs are over
        out["bomb"] = sb.run("import os, time\nfor _ in range(64):\n    try:\n"
                             "        if os.fork() == 0:\n            time.sleep(90); os._exit(0)\n"
                             f"    except OSError:\n        break\nopen({ready!r}, 'w').close()\n"
                             "t = time.monotonic()\n"
                             "while not os.path.exists('done') and time.monotonic() - t < 60:\n"
                             "    time.sleep(0.02)", timeout_s=90, max_procs=32)

    t = threading.Thread(target=bomb)
    t.start()
    held = scratch_holding(ready, t)      # every fork has been tried before we start
    assert held is not None, out
    try:
        res = [sb.run("import subprocess\nprint(subprocess.run(['/bin/echo', 'fine'], "
                      "capture_output=True, text=True).stdout, end='')", max_procs=4)
               for _ in range(3)]
    finally:
        (held / "done").write_text("")
        t.join()
    assert [r.stdout for r in res] == ["fine\n"] * 3, res
    assert out["bomb"].status == "ok", out["bomb"]


def test_fork_bomb_children_do_not_survive(sb):
    token = secrets.token_hex(8)
    res = sb.run(f"""
import os
n = 0
while n < 200:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.execv("/bin/sh", ["sh", "-c", "sleep 60; echo {token}"])
    n += 1
print(n)
""", timeout_s=5, max_procs=16)
    assert res.status == "ok", res
    assert int(res.stdout) <= 16, "more processes than max_procs were created"
    time.sleep(0.3)
    assert host_pids_with(token) == []


def test_thread_bomb_contained(sb):
    res = sb.run("import threading, time\n"
                 "ts = [threading.Thread(target=time.sleep, args=(30,), daemon=True)\n"
                 "      for _ in range(500)]\n"
                 "[t.start() for t in ts]", timeout_s=5, max_procs=32)
    assert res.status == "runtime_error", res
    assert "can't start new thread" in res.stderr or "Resource temporarily" in res.stderr


def test_daemon_does_not_outlive_run(sb):
    token = secrets.token_hex(8)
    res = sb.run(f"""
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for fd in (0, 1, 2):
            os.close(fd)
        os.execv("/bin/sh", ["sh", "-c", "while true; do sleep 1; done; echo {token}"])
    os._exit(0)
print("parent done")
""", timeout_s=5)
    assert res.status == "ok" and res.stdout.strip() == "parent done", res
    assert res.wall_time_s < 4
    time.sleep(0.3)
    assert host_pids_with(token) == []


def test_killing_parent_and_everyone(sb):
    token = secrets.token_hex(8)
    res = sb.run(f"""
import os, signal, subprocess
subprocess.Popen(["/bin/sh", "-c", "sleep 60; echo {token}"])
for pid in (os.getppid(), 1):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
os.kill(-1, signal.SIGKILL)   # every process this uid may signal
print("still here")
""", timeout_s=5)
    # Whatever the program manages to kill, it is all inside the sandbox.
    assert res.status in ("killed", "ok", "runtime_error"), res
    assert os.getpid() > 0
    time.sleep(0.3)
    assert host_pids_with(token) == []


def test_cannot_signal_host_process(sb):
    me = os.getpid()
    _, obs = run_json(sb, f"""
        import json, os
        try:
            os.kill({me}, 0); r = "visible"
        except OSError as e:
            r = type(e).__name__
        print(json.dumps({{"r": r}}))
    """)
    assert obs["r"] != "visible"


def test_proc_shows_only_sandbox(sb):
    _, obs = run_json(sb, """
        import json, os
        cmds = []
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    cmds.append(open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace"))
                except OSError:
                    pass
        print(json.dumps({"n": len(cmds), "cmds": cmds}))
    """)
    assert obs["n"] <= 6, obs["cmds"]
    assert not any("pytest" in c for c in obs["cmds"]), obs["cmds"]
    # nothing in view names host paths (the scratch dir's location, mount lists)
    assert not any("deciplane-sandbox-" in c or "/dev/shm" in c for c in obs["cmds"]), obs["cmds"]


# ---------------------------------------------------------------- resources

def test_memory_bomb(sb):
    res = sb.run("x = []\nwhile True:\n    x.append(bytearray(16 << 20))", memory_mb=128,
                 timeout_s=10)
    assert res.status == "memory", res
    assert res.wall_time_s < 10


def test_memory_bomb_under_a_tool_is_oom_killed(sb):
    # With argv_prefix no address-space rlimit applies (tools like valgrind reserve a lot);
    # the cgroup/container limit must still stop it.
    if sb.backend != "docker":
        from deciplane.sandbox.cgroups import cgroup_support
        if not cgroup_support()[0]:
            pytest.skip("no per-run memory cgroup here: " + cgroup_support()[1])
    res = sb.run("x = []\nwhile True:\n    x.append(bytearray(16 << 20)); x[-1][::4096] = b'x' * 4096",
                 memory_mb=128, timeout_s=10, argv_prefix=["/usr/bin/env"])
    assert res.status == "memory", res


def test_cpu_spin_hits_cpu_limit(sb):
    res = sb.run("while True:\n    pass", timeout_s=10, cpu_time_s=1)
    assert res.status == "timeout" and res.timed_out, res
    assert "CPU" in res.killed_reason
    assert 0.9 <= res.cpu_time_s < 4 or sb.backend == "docker" and res.cpu_time_s >= 0.5


def test_sleep_past_timeout(sb):
    res = sb.run("import time\ntime.sleep(30)", timeout_s=1.0)
    assert res.status == "timeout" and res.timed_out and res.exit_code is None, res
    assert 1.0 <= res.wall_time_s < 3.0


def test_stdout_flood(sb):
    res = sb.run("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)",
                 max_output_bytes=100_000, timeout_s=10)
    assert res.status == "output_limit", res
    assert len(res.stdout) == 100_000


def test_stderr_flood(sb):
    res = sb.run("import sys\nwhile True:\n    sys.stderr.write('e' * 4096)",
                 max_output_bytes=50_000, timeout_s=10)
    assert res.status == "output_limit" and len(res.stderr) == 50_000, res


def test_huge_file(sb):
    res = sb.run("f = open('big.bin', 'wb')\nwhile True:\n    f.write(b'0' * (1 << 20))",
                 max_file_bytes=4 << 20, timeout_s=10, collect_files=["big.bin"])
    assert res.status == "runtime_error", res
    assert "File too large" in res.stderr
    assert len(res.files.get("big.bin", b"")) <= 4 << 20


def test_scratch_fill_is_bounded(sb):
    """Many files, each under the size cap: the total is bounded too (on tmpfs scratch
    it counts against memory_mb; on disk, per file and by the wall time)."""
    from deciplane.sandbox.scratch import scratch_base
    res = sb.run("i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'0' * (4 << 20)); i += 1",
                 max_file_bytes=8 << 20, memory_mb=64, timeout_s=5)
    if str(scratch_base()).startswith("/dev/shm"):
        assert res.status == "memory", res
    else:
        assert res.status in ("timeout", "memory", "runtime_error"), res


def test_fd_exhaustion(sb):
    res = sb.run("fs = [open('/dev/null') for _ in range(100000)]", timeout_s=10)
    assert res.status == "runtime_error" and "Too many open files" in res.stderr, res


# ---------------------------------------------------------------- privileges and tricks

def test_ctypes_and_os_tricks(sb):
    _, obs = run_json(sb, """
        import ctypes, ctypes.util, json, os
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        out = {"uid": os.getuid(), "euid": os.geteuid()}
        out["setuid0"] = libc.setuid(0)
        out["mount"] = libc.mount(b"none", b"/usr", b"tmpfs", 0, None)
        out["chroot"] = libc.chroot(b"/tmp")
        # ptrace: any process in view not running as us (e.g. a root pid 1) is off limits
        others = [int(p) for p in os.listdir("/proc") if p.isdigit()
                  and os.stat(f"/proc/{p}").st_uid != os.getuid()]
        out["ptrace_other"] = min([libc.ptrace(16, p, None, None) for p in others] or [-1])
        for p in others:
            libc.ptrace(17, p, None, None)                    # PTRACE_DETACH
        out["unshare_net"] = libc.unshare(0x40000000)         # CLONE_NEWNET
        try:
            os.setgroups([0]); out["setgroups"] = 0
        except OSError:
            out["setgroups"] = -1
        try:
            with open("/proc/sysrq-trigger", "w") as f:
                f.write("h"); out["sysrq"] = 0
        except OSError:
            out["sysrq"] = -1
        print(json.dumps(out))
    """)
    assert obs["uid"] == obs["euid"] == 65534
    for key in ("setuid0", "mount", "chroot", "ptrace_other", "unshare_net", "setgroups",
                "sysrq"):
        assert obs[key] != 0, (key, obs)


def test_setuid_binaries_do_not_elevate(sb):
    _, obs = run_json(sb, """
        import json, subprocess
        out = {}
        for cmd in (["su", "-c", "id -u"], ["mount", "-t", "tmpfs", "x", "/tmp"],
                    ["unshare", "-r", "id", "-u"]):
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=5, stdin=subprocess.DEVNULL)
                out[cmd[0]] = [p.returncode, p.stdout.strip()]
            except (OSError, subprocess.TimeoutExpired) as e:
                out[cmd[0]] = [-1, type(e).__name__]
        print(json.dumps(out))
    """)
    assert obs["su"][0] != 0 and obs["mount"][0] != 0, obs
    # a nested user namespace may be allowed, but its "root" is still uid 65534 outside
    # and sees the same empty filesystem; it must not be the host's root.


def test_environment_is_scrubbed(sb, monkeypatch):
    secret = "sk-" + secrets.token_hex(12)
    monkeypatch.setenv("DECIPLANE_TEST_SECRET", secret)
    monkeypatch.setenv("HF_TOKEN", secret)
    _, obs = run_json(sb, f"""
        import json, os
        found = [k for k, v in os.environ.items() if {secret!r} in v]
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    if {secret!r} in open(f"/proc/{{p}}/environ", errors="ignore").read():
                        found.append(p)
                except OSError:
                    pass
        print(json.dumps({{"found": found, "keys": sorted(os.environ)}}))
    """, env={"PYTHONHASHSEED": "0"})
    assert obs["found"] == []
    allowed = {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PYTHONIOENCODING",
               "PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE", "PYTHONHASHSEED", "PWD",
               "HOSTNAME"}
    assert set(obs["keys"]) <= allowed, set(obs["keys"]) - allowed


def test_dev_shm_is_not_the_hosts(sb):
    token = secrets.token_hex(8)
    res = sb.run(f"""
import os
for d in ("/dev/shm", "/run/shm", "/dev/mqueue"):
    try:
        open(os.path.join(d, "{token}"), "w").write("x")
    except OSError:
        pass
""")
    assert res.status == "ok", res
    assert not os.path.exists(f"/dev/shm/{token}")
