"""The compiled launcher (``deciplane-launch``): built here, used for local backends'
runs when there is something to do before the sandbox starts (cgroup join; for bwrap as
root also the network namespace and the drop to uid 65534), and the old ``sh`` /
``unshare`` / ``setpriv`` chain when it is turned off. Containment either way is what
test_sandbox_adversarial/leaks/isolation check (they run with the launcher)."""

from __future__ import annotations

import os
import subprocess

import pytest

from sandbox_helpers import sandbox_or_skip, sandbox_tmp  # noqa: F401

import deciplane.sandbox as S
from deciplane.sandbox import launcher


@pytest.fixture
def exe(monkeypatch):
    monkeypatch.setenv("DECIPLANE_SANDBOX_LAUNCHER", "1")   # opt-in for now
    path = launcher.launcher_path()
    if path is None:
        pytest.skip("no C compiler here: the launcher is not built (sh/unshare/setpriv chain)")
    return path


def test_launcher_is_trusted_and_reports_failures(exe):
    st = os.stat(exe)
    assert st.st_uid == os.getuid() and not st.st_mode & 0o022
    out = subprocess.run([exe, "-c", "/nonexistent/cgroup.procs", "--", "/bin/true"],
                         capture_output=True, text=True)
    assert out.returncode == 125 and "cannot join cgroup" in out.stderr
    out = subprocess.run([exe, "--", "/nonexistent"], capture_output=True, text=True)
    assert out.returncode == 125 and "cannot exec" in out.stderr
    out = subprocess.run([exe, "-u", "1", "--", "/bin/true"], capture_output=True, text=True)
    assert out.returncode == 125 and "go together" in out.stderr


@pytest.mark.skipif(os.getuid() != 0, reason="the uid drop and netns need root")
def test_launcher_drops_to_nobody_in_an_empty_netns(exe):
    out = subprocess.run([exe, "-n", "-u", "65534", "-g", "65534", "--", "/bin/sh", "-c",
                          "id -u; id -G; cat /proc/self/status | grep NoNewPrivs; "
                          "ls /sys/class/net"], capture_output=True, text=True, env={})
    lines = out.stdout.split()
    assert out.returncode == 0, out.stderr
    assert lines[:2] == ["65534", "65534"] and "1" in lines[2:4] and lines[-1] == "lo"


@pytest.mark.parametrize("backend", ["bwrap", "namespace"])
def test_runs_use_the_launcher_and_the_fallback_chain(backend, exe, monkeypatch, sandbox_tmp):
    monkeypatch.setenv("DECIPLANE_SANDBOX_TMP", sandbox_tmp)
    sb = sandbox_or_skip(backend)
    seen = []
    real = S.execute

    def spy(argv, *a, **k):
        seen.append(argv[0])
        return real(argv, *a, **k)

    monkeypatch.setattr(S, "execute", spy)
    code = "import os\nprint(os.getuid(), os.getcwd(), sorted(os.environ))"
    with_launcher = sb.run(code)
    monkeypatch.setenv("DECIPLANE_SANDBOX_LAUNCHER", "0")
    without = sb.run(code)
    assert with_launcher.status == without.status == "ok", (with_launcher, without)
    assert with_launcher.stdout == without.stdout
    if sb._cgroups:   # the cgroup join: the launcher, else the `sh` prefix
        assert seen == [exe, "/bin/sh"], seen
