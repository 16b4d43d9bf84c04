"""What can contain untrusted code on this machine, and why not (shown by ``deciplane doctor``)."""

from __future__ import annotations

import os
import shutil
import subprocess


def valgrind_status() -> tuple[bool, str]:
    """Whether ``valgrind`` (the ``instructions`` timer) is installed, with its version."""
    exe = shutil.which("valgrind")
    if exe is None:
        return False, "not installed; `apt-get install valgrind` (needed by the instructions timer)"
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10)
        return True, f"{exe} ({out.stdout.strip()})"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{exe} does not run: {exc}"


def accelerate_status() -> tuple[bool, str]:
    """Whether ``accelerate`` (multi-process / multi-GPU training) imports, with what it sees."""
    try:
        import accelerate
        import torch
    except ImportError:
        return False, "not installed; `pip install accelerate` (multi-GPU training)"
    except Exception as exc:  # noqa: BLE001 - a broken install must not break doctor
        return False, f"installed but does not import: {type(exc).__name__}: {exc}"
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    dist = "yes" if torch.distributed.is_available() else "no"
    return True, f"accelerate {accelerate.__version__} (CUDA devices: {gpus}; torch.distributed: {dist})"


def doctor_report() -> dict:
    """``{"backends": {name: (ok, reason)}, "auto": name|None, "auto_error": str|None,
    "python": path, "cgroups": (ok, reason), "valgrind": (ok, reason), "java": (ok, reason),
    "ray": (ok, reason), "accelerate": (ok, reason)}``."""
    from deciplane.sandbox import available_backends, resolve_backend
    from deciplane.sandbox.cgroups import cgroup_support
    from deciplane.sandbox.host import find_python
    from deciplane.sandbox.scratch import scratch_base
    from deciplane.errors import DeciplaneError

    report: dict = {"backends": available_backends(), "auto": None, "auto_error": None}
    try:
        report["auto"] = resolve_backend("auto")
    except DeciplaneError as exc:
        report["auto_error"] = str(exc)
    try:
        report["python"] = find_python()
    except DeciplaneError as exc:
        report["python"] = f"error: {exc}"
    report["cgroups"] = cgroup_support()
    try:
        report["scratch"] = str(scratch_base())
    except DeciplaneError as exc:
        report["scratch"] = f"error: {exc}"
    report["valgrind"] = valgrind_status()
    from deciplane.ray_cluster import ray_status
    from deciplane.envs.twx.java import java_status  # TextWorld-Express runs in a JVM

    report["java"] = java_status()
    report["ray"] = ray_status()
    report["accelerate"] = accelerate_status()
    report["docker_host"] = (os.environ.get("DECIPLANE_DOCKER_HOST")
                             or os.environ.get("DOCKER_HOST") or "(default socket)")
    return report
