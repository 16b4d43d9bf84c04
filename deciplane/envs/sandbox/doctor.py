"""``deciplane doctor``: what can contain untrusted code on this machine, and why not."""

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


def doctor_report() -> dict:
    """``{"backends": {name: (ok, reason)}, "auto": name|None, "auto_error": str|None,
    "python": path, "cgroups": (ok, reason), "valgrind": (ok, reason)}``."""
    from deciplane.envs.sandbox import available_backends, resolve_backend
    from deciplane.envs.sandbox._common import cgroup_support, find_python, scratch_base
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
    report["docker_host"] = (os.environ.get("DECIPLANE_DOCKER_HOST")
                             or os.environ.get("DOCKER_HOST") or "(default socket)")
    return report


def register(app) -> None:  # noqa: ANN001 - a typer.Typer
    import typer
    from rich.console import Console
    from rich.table import Table

    @app.command("doctor")
    def doctor_cmd() -> None:
        """Which sandbox backends work here (and why not), what `auto` picks, valgrind."""
        console = Console()
        rep = doctor_report()
        table = Table(title="sandbox backends", show_lines=False)
        table.add_column("backend")
        table.add_column("available")
        table.add_column("details / how to fix")
        for name, (ok, why) in rep["backends"].items():
            table.add_row(name, "[green]yes[/]" if ok else "[red]no[/]", why)
        console.print(table)
        if rep["auto"]:
            console.print(f"auto -> [bold]{rep['auto']}[/]")
        else:
            console.print(f"auto -> [red]none[/]: {rep['auto_error']}")
        ok, why = rep["cgroups"]
        console.print(f"per-run cgroups: {'yes' if ok else 'no'} ({why})")
        console.print(f"sandbox python: {rep['python']}")
        console.print(f"scratch dirs under: {rep['scratch']}")
        console.print(f"docker engine: {rep['docker_host']}")
        ok, why = rep["valgrind"]
        console.print(f"valgrind: {'yes' if ok else 'no'} ({why})")
        if not rep["auto"]:
            raise typer.Exit(1)
