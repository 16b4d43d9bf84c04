"""Many mixed runs in a row leave nothing behind: no processes (alive or zombie), no
file descriptors in the caller, no scratch dirs, no cgroups."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import pytest

from sandbox_helpers import (backend_params, host_pids_with, my_children, open_fds,
                             sandbox_or_skip, sandbox_tmp)  # noqa: F401 - a fixture

pytestmark = pytest.mark.timeout(300)

# (code, run kwargs, expected status); one in ten waits for a timeout.
MIX = [
    ("print(input()[::-1])", {"stdin": "abc\n"}, "ok"),
    ("import sys; sys.exit(3)", {}, "runtime_error"),
    ("print('x' * 5000)", {"max_output_bytes": 1000}, "output_limit"),
    ("b = bytearray(1 << 31)", {"memory_mb": 64}, "memory"),
    ("open('o.txt', 'w').write('hi')", {"collect_files": ["o.txt"]}, "ok"),
    ("import os; os.kill(os.getpid(), 9)", {}, "killed"),
    ("raise ValueError('boom')", {}, "runtime_error"),
    ("import time; time.sleep(5)", {"timeout_s": 0.3}, "timeout"),
    ("import subprocess; subprocess.Popen(['/bin/sh', '-c', 'sleep 30; : TOKEN'])", {}, "ok"),
    ("print(sum(range(10**5)))", {"files": {"data/in.txt": "1 2 3"}}, "ok"),
]
RUNS = {"bwrap": 200, "namespace": 200, "docker": 30}


@pytest.mark.parametrize("backend", backend_params())
def test_mixed_runs_leak_nothing(backend, monkeypatch, sandbox_tmp):
    monkeypatch.setenv("DECIPLANE_SANDBOX_TMP", sandbox_tmp)
    sb = sandbox_or_skip(backend)
    token = secrets.token_hex(8)
    # Warm-up: the docker SDK keeps a bounded pool of engine connections, filled over the
    # first runs; after that the count of open descriptors must not move.
    for _ in range(10 if backend == "docker" else 1):
        sb.run("pass")
    fds_before = open_fds()
    children_before = set(my_children())  # other suites' long-lived workers
    counts: dict[str, int] = {}
    t0 = time.monotonic()
    for i in range(RUNS[backend]):
        code, kw, expected = MIX[i % len(MIX)]
        res = sb.run(code.replace("TOKEN", token), **kw)
        assert res.status == expected, (i, code, res)
        counts[res.status] = counts.get(res.status, 0) + 1
        if "collect_files" in kw:
            assert res.files == {"o.txt": b"hi"}
    elapsed = time.monotonic() - t0
    time.sleep(0.3)
    assert set(my_children()) - children_before == set(), "children or zombies left behind"
    fds_after = open_fds()
    # Pooled engine connections may be replaced (new socket inodes) but never grow.
    assert len(fds_after) <= len(fds_before), (sorted(fds_before), sorted(fds_after))
    assert {f for f in fds_after if "socket:" not in f} == \
        {f for f in fds_before if "socket:" not in f}, "file descriptors leaked"
    if backend != "docker":
        assert fds_after == fds_before, "file descriptors leaked"
    assert host_pids_with(token) == [], "a spawned process outlived its run"
    base = Path(sandbox_tmp) / f"deciplane-sandbox-{os.getuid()}"
    assert [p.name for p in base.iterdir() if p.name != "ns-template"] == []
    # Cgroup jails are pooled for reuse: at most _POOL_MAX, all empty; none after the pool
    # is released (as at interpreter exit).
    from deciplane.sandbox import cgroups as _common
    mine = f"run-{os.getpid()}-"
    for ctl in Path("/sys/fs/cgroup").glob("*/deciplane"):
        jails = [d for d in os.listdir(ctl) if d.startswith(mine)]
        assert len(jails) <= _common._POOL_MAX
        assert all((ctl / d / "cgroup.procs").read_text() == "" for d in jails)
    _common._destroy_pool()
    for ctl in Path("/sys/fs/cgroup").glob("*/deciplane"):
        assert not [d for d in os.listdir(ctl) if d.startswith(mine)], f"cgroup left in {ctl}"
    print(f"{backend}: {RUNS[backend]} runs in {elapsed:.1f}s; {counts}")
