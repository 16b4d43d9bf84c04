"""``Sandbox.run(warm=True)``, the warm jail for new programs: every run classified as
the cold ``run()`` classifies it, one kept jail serving different programs one after
another, nothing of a run (files, processes, IPC, its source or input in memory, changes
made to the supervisor from outside) reaching the next, channel descriptors handed over
at the same numbers, and the fallbacks (a broken jail, what the warm path does not
offer). The attack and isolation suites also run through it (their ``*-program``
params)."""

from __future__ import annotations

import json
import os
import secrets
import textwrap

import pytest

from sandbox_helpers import (WARM_BACKENDS, close_warm, my_children,  # noqa: F401
                             sandbox_or_skip, sandbox_tmp)
from test_sandbox_warm import PROGRAMS, STATE_PROBE, _fields

from deciplane.sandbox import warm
from deciplane.errors import WarmJailBroken

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(params=WARM_BACKENDS)
def sb(request, monkeypatch, sandbox_tmp):
    monkeypatch.setenv("DECIPLANE_SANDBOX_TMP", sandbox_tmp)
    box = sandbox_or_skip(request.param)
    close_warm()
    before = set(my_children())
    yield box
    close_warm()
    assert set(my_children()) - before == set(), "a warm jail left a child behind"
    assert os.listdir(os.path.join(sandbox_tmp, f"deciplane-sandbox-{os.getuid()}")) in (
        [], ["ns-template"]), "a scratch directory was left behind"


@pytest.fixture
def stats():
    """``warm.STATS`` counted from zero for one test."""
    saved = dict(warm.STATS)
    for k in warm.STATS:
        warm.STATS[k] = 0
    yield warm.STATS
    warm.STATS.update({k: saved[k] + v for k, v in warm.STATS.items()})


def test_results_match_cold_run(sb, stats):
    for name, (code, stdins) in PROGRAMS.items():
        for stdin in stdins:
            got = sb.run(code, stdin=stdin, memory_mb=128, warm=True)
            want = sb.run(code, stdin=stdin, memory_mb=128)
            assert _fields(got) == _fields(want), (name, got, want)
            assert got.backend == sb.backend
    runs = sum(len(s) for _, s in PROGRAMS.values())
    assert stats["warm"] == runs and stats["started"] == 1, stats   # one jail for all


def test_programs_are_independent(sb, stats):
    """Each step is a *different* program (its own source) in the same kept jail."""
    steps = ["files", "globals", "tmp", "daemon", "ipc", "dev"]
    order = ["check"] + [s for step in steps for s in (step, "check")]
    out = []
    for i, cmd in enumerate(order):
        res = sb.run(STATE_PROBE + f"# program {i}\n", stdin=cmd,
                     files={"data.txt": "original"}, timeout_s=10, warm=True)
        assert res.status == "ok", (cmd, res.status, res.stderr[-500:])
        out.append(res)
    checks = [json.loads(r.stdout.splitlines()[0]) for r, c in zip(out, order) if c == "check"]
    base = checks[0]
    assert base["data"] == "original" and base["tmp"] == [] and base["env"] is None
    for step, after in zip(steps, checks[1:]):
        assert after == base, f"state left by the {step!r} program reached the next one"
    assert stats["warm"] == len(order) and stats["started"] <= 2, stats   # /dev: fresh jail


MEMORY_SCAN = textwrap.dedent("""
    import re, sys
    needle = bytes.fromhex(sys.stdin.read().strip())
    found = 0      # the needle itself is one (or more: its copies): compared with cold
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
        for line in maps:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if "r" not in line.split()[1] or hi - lo > 1 << 28:
                continue
            try:
                mem.seek(lo)
                found += mem.read(hi - lo).count(needle)
            except (OSError, OverflowError, ValueError):
                pass
    print(found)
""")


def test_next_program_finds_nothing_of_the_previous_in_its_memory(sb):
    """The child is a copy of the supervisor: nothing of a run — its source, stdin,
    output, files — may be in the supervisor's memory for the next child to read."""
    secret = secrets.token_hex(16)
    leak = sb.run(f"S = {secret!r}\nprint(S, input(), S * 3)", stdin=secret + "\n",
                  files={"data.txt": secret}, warm=True)
    assert leak.status == "ok" and leak.stdout.count(secret) == 5, leak
    # the needle is built at run time from its hex: not in the scanner's own source
    res = sb.run(MEMORY_SCAN, stdin=secret.encode().hex(), timeout_s=20, warm=True)
    cold = sb.run(MEMORY_SCAN, stdin=secret.encode().hex(), timeout_s=20)
    assert res.status == cold.status == "ok", (res.stderr[-500:], cold.stderr[-500:])
    assert int(res.stdout) <= int(cold.stdout), \
        "a previous run's data is in the next run's memory"


TAMPER = textwrap.dedent("""
    import os, resource, sys
    sup = os.getppid()
    what = sys.stdin.read().strip()
    if what == "nice":
        os.setpriority(os.PRIO_PROCESS, sup, 7)
    elif what == "prlimit":
        resource.prlimit(sup, resource.RLIMIT_MEMLOCK, (4096, 4096))
    elif what == "affinity":
        os.sched_setaffinity(sup, {sorted(os.sched_getaffinity(0))[0]})
    print(what)
""")
LOOK = ("import os, resource\n"
        "print(os.getpriority(os.PRIO_PROCESS, 0), resource.getrlimit(resource.RLIMIT_MEMLOCK),"
        " sorted(os.sched_getaffinity(0)))")


def test_changes_made_to_the_supervisor_cost_a_fresh_jail(sb, stats):
    """Same uid: a program can renice, prlimit or re-pin its supervisor. The next
    program (which inherits those) must see a jail as the cold path starts one."""
    want = sb.run(LOOK).stdout
    changes = ["nice", "prlimit", "affinity"]
    for what in changes:
        res = sb.run(TAMPER, stdin=what, warm=True)
        assert res.status == "ok", (what, res.stderr[-300:])
        after = sb.run(LOOK, warm=True)
        assert after.stdout == want, (what, after.stdout, want)
    assert stats["tainted"] == len(changes), stats
    # (its /proc files, oom_score_adj included, are root's: the supervisor is not
    # dumpable; the between-run check covers the OOM score anyway)


KILL_SUPERVISOR = ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
                   "print('still here')")


def test_a_program_that_kills_its_supervisor_is_rerun_cold(sb, stats):
    got = sb.run(KILL_SUPERVISOR, warm=True)
    want = sb.run(KILL_SUPERVISOR)
    assert _fields(got) == _fields(want), (got, want)
    assert stats["cold"] == 1, stats
    assert sb.run("print(1)", warm=True).stdout == "1\n"      # a fresh jail after


def test_with_channel_fds_a_broken_jail_raises(sb, stats):
    r, w = os.pipe()
    try:
        with pytest.raises(WarmJailBroken, match="re-run"):
            sb.run(KILL_SUPERVISOR, warm=True, channel_fds=[w])
        with pytest.raises(OSError):
            os.fstat(w)                     # handed over: closed whatever happened
    finally:
        os.close(r)
    assert stats["broken"] == 1, stats


def test_channel_fds_arrive_at_the_same_numbers_and_are_handed_over(sb, stats):
    r, w = os.pipe()
    try:
        code = f"import os\nos.write({w}, b'hello from ' + str(os.getuid()).encode())"
        res = sb.run(code, warm=True, channel_fds=[w])
        assert res.status == "ok", res.stderr[-300:]
        with pytest.raises(OSError):
            os.fstat(w)
        data = b""
        while chunk := os.read(r, 100):      # EOF: no copy of the write end is left
            data += chunk
        assert data == b"hello from 65534"
    finally:
        os.close(r)
    assert stats["warm"] == 1


def test_what_the_warm_path_does_not_offer_runs_cold(sb, stats, monkeypatch):
    res = sb.run("open('o.txt', 'w').write('x')", warm=True, collect_files=["o.txt"])
    assert res.files == {"o.txt": b"x"}
    assert sb.run("print(1)", warm=True, argv_prefix=["/usr/bin/env"]).stdout == "1\n"
    r, w = os.pipe()
    high = os.dup2(w, 3000)          # beyond the numbers a warm child can take
    os.close(w)
    try:
        assert sb.run("print(2)", warm=True, channel_fds=[high]).stdout == "2\n"
    finally:
        os.close(r)
    monkeypatch.setenv("DECIPLANE_SANDBOX_WARM", "0")
    assert sb.run("print(3)", warm=True).stdout == "3\n"
    assert stats["warm"] == 0 and stats["started"] == 0, stats


def test_one_jail_serves_many_programs_and_closes_clean(sb, stats):
    outs = [sb.run(f"print({i} * {i})", warm=True).stdout for i in range(30)]
    assert outs == [f"{i * i}\n" for i in range(30)]
    assert stats["started"] == 1 and stats["warm"] == 30, stats
    assert warm._IDLE, "the jail was not kept"


def test_a_refused_file_name_still_closes_the_channel(sb):
    from deciplane.errors import ConfigError

    r, w = os.pipe()
    try:
        with pytest.raises(ConfigError, match="not allowed"):
            sb.run("pass", files={"../x": "y"}, warm=True, channel_fds=[w])
        with pytest.raises(OSError):
            os.fstat(w)
    finally:
        os.close(r)
