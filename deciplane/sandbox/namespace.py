"""The ``namespace`` backend, for machines without bubblewrap: util-linux only.

``unshare`` creates mount, pid, network, ipc and uts namespaces (plus a user namespace when
not root); inside, one ``mount --all --fstab`` call assembles a minimal root on a tmpfs —
the system directories bound read-only, a skeleton ``/etc`` and ``/dev`` (null, zero,
random, urandom only), a fresh ``/proc``, a private ``/tmp`` and the run's scratch dir —
then ``chroot`` enters it. As root the program runs as uid/gid 65534 (``chroot
--userspec``: every capability dropped); without root it stays namespace-root mapped to the
calling user, with capabilities dropped (``setpriv``) and ``no_new_privs``. The pid
namespace ends with its first process, so nothing outlives the run.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import threading
from pathlib import Path

from deciplane.sandbox.host import python_ro_paths, system_ro_paths
from deciplane.sandbox.limits import NOBODY, SCRATCH, Limits, prlimit_argv, tool_path
from deciplane.sandbox.results import RawRun
from deciplane.sandbox.scratch import scratch_base

NAME = "namespace"
TOOLS = ("unshare", "mount", "chroot", "prlimit", "setpriv", "env")
DEVICES = ("null", "zero", "random", "urandom", "full")
ROOT_TMPFS_BYTES = 1 << 20
TMP_BYTES = 64 << 20


def _tool(name: str) -> str | None:
    return tool_path(name)


def template_dir() -> Path:
    """A host-side skeleton (root-owned, read-only inside the sandbox), made once per
    scratch location: ``etc/`` with the loader cache, time zone and a passwd/group that
    know only root and nobody; ``dev/`` with empty files the real device nodes are bound
    over; and ``root/``, the empty mount point of the sandbox's root tmpfs."""
    base = scratch_base() / "ns-template"
    with _TEMPLATE_LOCK:
        if (base / "root").is_dir() and (base / "etc" / "group").is_file():
            return base
        return _make_template(base)


_TEMPLATE_LOCK = threading.Lock()


def _make_template(base: Path) -> Path:
    (base / "etc").mkdir(parents=True, exist_ok=True)
    (base / "dev").mkdir(exist_ok=True)
    (base / "root").mkdir(exist_ok=True)
    for name in DEVICES:
        (base / "dev" / name).touch(exist_ok=True)
    for src in ("/etc/ld.so.cache", "/etc/localtime"):
        if os.path.exists(src):
            shutil.copyfile(src, base / "etc" / os.path.basename(src))
    (base / "etc" / "passwd").write_text(
        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"nobody:x:{NOBODY}:{NOBODY}:nobody:{SCRATCH}:/usr/sbin/nologin\n")
    (base / "etc" / "group").write_text(f"root:x:0:\nnogroup:x:{NOBODY}:\n")
    (base / "etc" / "hosts").write_text("127.0.0.1 localhost sandbox\n")
    for p in [base, *base.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return base


def fstab(root: str, scratch: str, python: str) -> str:
    """The mount table (``mount --all --fstab``, applied in order) of one run's root."""
    tpl = template_dir()
    lines = [f"tmpfs {root} tmpfs size={ROOT_TMPFS_BYTES},mode=755,nosuid,nodev 0 0"]
    for path in system_ro_paths() + python_ro_paths(python):
        if path.startswith("/etc/"):
            continue  # the skeleton /etc below replaces these
        src = os.path.realpath(path)  # merged-/usr: /lib -> /usr/lib is bound as a dir
        if os.path.isdir(src):
            lines.append(f"{src} {root}{path} none bind,ro,nosuid,nodev,X-mount.mkdir 0 0")
    lines.append(f"{tpl}/etc {root}/etc none bind,ro,nosuid,nodev,X-mount.mkdir 0 0")
    lines.append(f"{tpl}/dev {root}/dev none bind,ro,nosuid,X-mount.mkdir 0 0")
    for dev in DEVICES:
        if os.path.exists(f"/dev/{dev}"):
            lines.append(f"/dev/{dev} {root}/dev/{dev} none bind,nosuid 0 0")
    lines += [
        # hidepid=2: the program (uid 65534) cannot see pid 1, the root set-up shell
        f"proc {root}/proc proc nosuid,nodev,noexec,hidepid=2,X-mount.mkdir 0 0",
        f"tmpfs {root}/tmp tmpfs size={TMP_BYTES},mode=1777,nosuid,nodev,X-mount.mkdir 0 0",
        f"{scratch} {root}{SCRATCH} none bind,nosuid,nodev,X-mount.mkdir 0 0",
        f"none {root} none remount,bind,ro,nosuid,nodev 0 0",
    ]
    bad = [ln for ln in lines if any(c.isspace() for c in ln.split(" ")[0] + ln.split(" ")[1])]
    if bad:
        raise ValueError(f"paths with whitespace cannot go in an fstab: {bad}")
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """Probe: can we create the namespaces and mount a root here?"""
    missing = [t for t in TOOLS if _tool(t) is None]
    if missing:
        return False, f"util-linux/coreutils tools missing: {', '.join(missing)}"
    try:
        import tempfile
        with tempfile.TemporaryDirectory(dir=scratch_base()) as d:
            os.chmod(d, 0o755)
            argv = build_argv("/usr/bin/true", d, Limits(), {}, [], True, True,
                              program=["/usr/bin/true"])
            try:
                out = subprocess.run(argv, capture_output=True, text=True, timeout=20)
            finally:
                Path(d + ".fstab").unlink(missing_ok=True)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return False, f"probe failed: {exc}"
    if out.returncode != 0:
        return False, ("cannot create mount/pid/net namespaces here: "
                       + out.stderr.strip()[-300:])
    who = ("uid 65534" if os.getuid() == 0 else
           f"namespace-root mapped to uid {os.getuid()}, capabilities dropped")
    return True, f"util-linux unshare + mount + chroot; sandboxed code runs as {who}"


def build_argv(python: str, scratch: str, limits: Limits, env: dict[str, str],
               argv_prefix: list[str], address_space_limit: bool, drop: bool,
               program: list[str] | None = None, nproc_limit: bool = True,
               rlimits: dict[str, int] | None = None) -> list[str]:
    """``unshare <namespaces> -- sh -c 'mount --all --fstab F; chroot ... env -i ...
    prlimit ... prog'``. The fstab is written next to the scratch dir (mode 0600, outside
    the sandbox). ``sh`` stays pid 1 of the namespace and waits for the program, so the
    program gets ordinary signal semantics and orphans die with the namespace."""
    root = str(template_dir() / "root")
    tab = Path(scratch).parent / (Path(scratch).name + ".fstab")
    tab.write_text(fstab(root, scratch, python))
    os.chmod(tab, 0o600)
    prog = program or (list(argv_prefix) + [python, "main.py"])
    envs = [f"{k}={v}" for k, v in env.items()]
    inner = [_tool("chroot") or "chroot"]
    if drop:
        inner += [f"--userspec={NOBODY}:{NOBODY}", "--groups="]
    inner += [root]
    if not drop:  # still namespace-root: drop every capability before running the program
        inner += ["/usr/bin/setpriv", "--inh-caps=-all", "--bounding-set=-all",
                  "--no-new-privs", "--"]
    inner += ["/usr/bin/env", "-i", "-C", SCRATCH, *envs]
    inner += prlimit_argv(rlimits if rlimits is not None else
                          limits.rlimits(address_space=address_space_limit,
                                         nproc=nproc_limit)) + prog
    script = 'mount --all --fstab "$1" || exit 125; shift; "$@"'
    ns = [_tool("unshare") or "unshare", "--mount", "--pid", "--net", "--ipc", "--uts",
          "--fork", "--kill-child", "--propagation", "private"]
    if os.getuid() != 0:
        ns += ["--user", "--map-root-user"]
    return ns + ["--", "/bin/sh", "-c", script, "sh", str(tab)] + inner


def check_status(raw: RawRun, scratch: str | os.PathLike) -> None:
    """Exit 125 from the set-up shell (or an error from unshare/mount/chroot before the
    program ran) is a sandbox failure, not the program's."""
    Path(str(scratch) + ".fstab").unlink(missing_ok=True)
    if raw.timed_out or raw.output_exceeded or raw.sandbox_failed:
        return
    err = raw.stderr.decode(errors="replace")
    first = err.strip().splitlines()[0] if err.strip() else ""
    if raw.returncode == 125 or first.startswith(("unshare:", "mount:", "chroot:")):
        raw.sandbox_failed = f"namespace set-up failed (exit {raw.returncode}): {err.strip()[-500:]}"

