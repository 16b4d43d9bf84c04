"""The ``deciplane`` command (typer + rich).

One module per command group (``train``, ``adapt``, ``evaluate``, ``codeopt``, ``doctor``);
this module wires them up. Nothing outside ``deciplane.cli`` imports typer.
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Train and adapt LLM agents: environments, agents, trainers, adapters.")
console = Console()


@app.callback()
def _root() -> None:
    """deciplane: environments, agents, trainers and test-time adapters for LLM agents."""


@app.command("envs")
def envs_cmd() -> None:
    """List registered environments (built-in and plug-ins), one per line."""
    from deciplane.envs import registry

    for env_id, desc in registry().items():
        print(f"{env_id}  {desc}")


@app.command("methods")
def methods_cmd() -> None:
    """List every method (built-in and plug-ins): name, kind, paper, what is ours, summary."""
    from deciplane.methods import available

    for spec in available().values():
        source = f", plug-in from {spec.distribution}" if spec.plugin else ""
        print(f"{spec.name}  ({spec.kind}{source})  {spec.summary}")
        print(f"    paper: {spec.paper or '(none: ours)'}")
        print(f"    ours: {spec.ours}")


# ---- sections added by the individual features below --------------------------------

# training: `deciplane train CONFIG.yaml`, `deciplane report RUN_DIR` (deciplane/cli/train.py)
from deciplane.cli.train import register as _register_train_commands  # noqa: E402

_register_train_commands(app)


# test-time adaptation: `deciplane adapt ttrl|ttpo|options` (deciplane/cli/adapt.py)
from deciplane.cli.adapt import register as _register_adapt_commands  # noqa: E402

_register_adapt_commands(app)


@app.command("benchmarks")
def benchmarks_cmd() -> None:
    """List built-in benchmarks, the number of tasks in each split, and the rg:<family> names."""
    from deciplane.benchmarks import descriptions, list_benchmarks

    table = Table("benchmark", "splits (tasks)", "description")
    for name, sizes in list_benchmarks().items():
        splits = ", ".join(f"{s} {n}" for s, n in sizes.items())
        table.add_row(name, splits, descriptions().get(name, ""))
    console.print(table)
    from deciplane.benchmarks.data import BENCHMARKS

    for name, bench in sorted(BENCHMARKS.items()):
        if bench.prefix and bench.members is not None:
            try:
                members = bench.members()
            except Exception as e:  # the family's package is missing
                console.print(f"{name}:<family>: unavailable ({e})", highlight=False)
                continue
            console.print(f"{name}:<family> ({len(members)}): {', '.join(members)}",
                          highlight=False, soft_wrap=True)
    console.print("load with: tasks, scorer = deciplane.envs.load_benchmark(NAME, SPLIT)",
                  highlight=False)


# code optimisation: `deciplane codeopt list|show|run` (deciplane/cli/codeopt.py)
from deciplane.cli.codeopt import register as _register_codeopt_commands  # noqa: E402

_register_codeopt_commands(app)


# sandbox diagnostics: `deciplane doctor` (deciplane/cli/doctor.py)
from deciplane.cli.doctor import register as _register_doctor  # noqa: E402

_register_doctor(app)


# `deciplane play|evaluate|demo` (deciplane/cli/evaluate.py)
from deciplane.cli.evaluate import register as _register_eval_commands  # noqa: E402

_register_eval_commands(app)


# `deciplane serve ENV_ID`: an OpenEnv server (deciplane/cli/serve.py; needs [interop])
from deciplane.cli.serve import register as _register_serve  # noqa: E402

_register_serve(app)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
