"""What a program inside each sandbox backend can see of the host through /proc, and the
state of its loopback interface, against what the Sandbox documents (``Sandbox.loopback``).

Host paths looked for: the caller's working directory, the project checkout, the run's
host-side scratch root, the caller's home, deciplane's home and the caller's Python
prefix (a venv). Every process visible inside (``/proc/*``) is checked, environment and
command line, with and without per-run cgroups (the two ways a run is started), and the
program's mount table.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from deciplane.utils import deciplane_home
from tests.sandbox.sandbox_helpers import (backend_params, close_warm,  # noqa: F401
                                        fresh_sandbox, sandbox_or_skip, sandbox_tmp)

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, os, socket
procs = {}
for p in sorted(x for x in os.listdir("/proc") if x.isdigit()):
    entry = {}
    for f in ("environ", "cmdline"):
        try:
            entry[f] = open(f"/proc/{p}/{f}", "rb").read().decode(errors="replace")
        except OSError as e:
            entry[f] = None  # not readable from inside (hidepid, another user)
    procs[p] = entry
state = {}
try:
    state["operstate"] = open("/sys/class/net/lo/operstate").read().strip()
except OSError:
    state["operstate"] = None
try:
    state["flags"] = int(open("/sys/class/net/lo/flags").read(), 16)
except OSError:
    state["flags"] = None
try:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    socket.create_connection(srv.getsockname(), timeout=2).close()
    state["self_connect"] = True
except OSError as e:
    state["self_connect"] = False
    state["error"] = str(e)
print(json.dumps({"procs": procs, "lo": state, "cwd": os.getcwd(),
                  "mountinfo": open("/proc/self/mountinfo").read()}))
"""


def _host_paths(scratch_root: str) -> list[str]:
    paths = {os.getcwd(), str(ROOT), scratch_root, os.path.expanduser("~"),
             str(deciplane_home()), sys.prefix}
    return sorted(p for p in paths if p and p != "/" and len(p) > 4)


def _probe(sb) -> dict:  # noqa: ANN001 - a Sandbox or a warm runner
    res = sb.run(PROBE, timeout_s=20)
    assert res.status == "ok", (res.status, res.stderr[-2000:])
    return json.loads(res.stdout)


@pytest.fixture(autouse=True)
def _no_kept_jails():
    yield
    close_warm()


@pytest.mark.parametrize("cgroups", ["1", "0"], ids=["cgroups", "rlimits-only"])
@pytest.mark.parametrize("backend", backend_params(warm=True))
def test_no_host_path_in_any_proc_environ_or_cmdline(backend, cgroups, monkeypatch,
                                                     sandbox_tmp, tmp_path):
    sandbox_or_skip(backend)  # skips with the reason where the backend cannot run
    monkeypatch.setenv("DECIPLANE_SANDBOX_TMP", sandbox_tmp)
    monkeypatch.setenv("DECIPLANE_SANDBOX_CGROUPS", cgroups)
    monkeypatch.chdir(tmp_path)  # a distinctive caller cwd (what PWD leaked)
    sb = fresh_sandbox(backend)
    obs = _probe(sb)
    needles = _host_paths(sandbox_tmp) + [str(tmp_path)]
    assert obs["procs"], "no process visible inside the sandbox at all"
    leaks = [(pid, field, needle) for pid, entry in obs["procs"].items()
             for field, text in entry.items() if text
             for needle in needles if needle in text]
    assert not leaks, (leaks, obs["procs"])
    assert obs["cwd"] == "/sandbox"
    # mount sources appear relative to their filesystem (the scratch dir shows as
    # /<scratch-root-name>/run-...; documented): never as a full host path
    assert not [n for n in needles if n in obs["mountinfo"]], obs["mountinfo"]


@pytest.mark.parametrize("backend", backend_params(warm=True))
def test_loopback_state_is_as_documented(backend, monkeypatch, sandbox_tmp):
    sb = sandbox_or_skip(backend)
    monkeypatch.setenv("DECIPLANE_SANDBOX_TMP", sandbox_tmp)
    lo = _probe(sb)["lo"]
    if sb.loopback == "down":
        assert lo["self_connect"] is False, lo
        assert lo["flags"] is None or not lo["flags"] & 0x1, lo  # IFF_UP clear
    else:
        assert sb.loopback == "up"
        assert lo["self_connect"] is True, lo  # private to the run: only itself
