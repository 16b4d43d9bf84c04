"""``deciplane doctor``: which sandbox backends work here (and why not), what ``auto``
picks, valgrind, java (the facts come from :func:`deciplane.cli.doctor_report.doctor_report`)."""

from __future__ import annotations

import torch
import typer
from rich.console import Console
from rich.table import Table

from deciplane.cli.doctor_report import doctor_report


def doctor_cmd() -> None:
    """Which sandbox backends work here (and why not), what `auto` picks, valgrind, java,
    Ray (env workers) and accelerate (multi-GPU training)."""
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
    ok, why = rep["java"]
    console.print(f"java (TextWorldExpress-v0): {'yes' if ok else 'no'} ({why})")
    for key in ("ray", "accelerate"):
        ok, why = rep[key]
        console.print(f"{key}: {'yes' if ok else 'no'} ({why})")
    from deciplane.interop.common import interop_status

    ok, why = interop_status()
    console.print(f"interop (OpenEnv, SkyRL): {'yes' if ok else 'no'} ({why})", highlight=False)
    from deciplane.agents.precision import matmul_gflops, native_bf16, resolve_trunk_dtype

    console.print("native bf16 (model.trunk_dtype auto): "
                  + ("yes: frozen layers run in bfloat16" if native_bf16() else
                     "no: no avx512_bf16/amx_bf16 on this CPU, frozen layers stay float32"))
    fp32, bf16 = matmul_gflops(torch.float32), matmul_gflops(torch.bfloat16)
    auto = str(resolve_trunk_dtype("auto", "cpu")).removeprefix("torch.")
    console.print(f"1024^3 matmul, one thread: float32 {fp32:.0f} GFLOP/s, bfloat16 {bf16:.0f} "
                  f"GFLOP/s ({bf16 / fp32:.2f}x); model.trunk_dtype auto -> {auto}",
                  highlight=False)
    from deciplane.envs.alfworld.official import doctor_lines

    for line in doctor_lines():  # ALFWorld-v0: packages, planner, official data + version
        console.print(line, highlight=False)
    if not rep["auto"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_cmd)


__all__ = ["register", "doctor_cmd"]
