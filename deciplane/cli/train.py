"""``deciplane train`` and ``deciplane report`` (registered on the main typer app)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def train_cmd(
    config: Optional[Path] = typer.Argument(None, help="YAML config, e.g. configs/quickstart.yaml "
                                                       "(optional with --resume)."),
    set_: list[str] = typer.Option([], "--set", help="Override an option: --set optim.lr=1e-4 "
                                                     "(dotted keys; repeatable)."),
    run_dir: Optional[Path] = typer.Option(None, "--run-dir", help="Where checkpoints, logs and "
                                                                   "summary.json go (default "
                                                                   "runs/<algorithm>-<time>)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --run-dir from its "
                                                        "last checkpoint (exact resume)."),
    help_config: bool = typer.Option(False, "--help-config", help="List every option of the "
                                                                  "config's algorithm (of every "
                                                                  "training method without a "
                                                                  "config) and exit."),
) -> None:
    """RL training from a YAML config: progress bar, TensorBoard logs, checkpoints, summary.json."""
    from rich.console import Console

    from deciplane.errors import DeciplaneError

    console = Console(stderr=True)
    try:
        if help_config:
            _print_options(config, set_)
            return
        from deciplane.trainers.run import run_training

        summary = run_training(str(config) if config else None, run_dir=run_dir,
                               overrides=list(set_), resume=resume)
    except DeciplaneError as e:
        console.print(f"[red]error:[/red] {e}", highlight=False)
        raise typer.Exit(2) from None
    if summary.get("data_parallel", {}).get("rank", 0):
        return                                  # data-parallel: rank 0 prints
    test = summary.get("eval", {}).get("test", {})
    before = summary.get("before", {}).get("test", {})
    key = "success_rate" if "success_rate" in test else "accuracy"
    if key in test:
        b = f"{before[key]:.3f} -> " if key in before else ""
        console.print(f"test {key}: {b}{test[key]:.3f}  ({summary['wall_time_s']:.0f} s, "
                      f"{summary['env_steps']} env steps)", highlight=False)
    rd = summary.get("run_dir", run_dir)
    console.print(f"summary: {rd}/summary.json  (plots: deciplane report {rd})", highlight=False)


def _print_options(config: Optional[Path], overrides: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    from deciplane.methods import available, load_config_class
    from deciplane.trainers.config import describe_config, load_config

    classes = [type(load_config(config, overrides))] if config else [
        load_config_class(spec) for spec in available().values() if spec.kind == "train"]
    for cls in classes:
        table = Table("option", "type", "default", "meaning", title=cls.__name__)
        for row in describe_config(cls):
            table.add_row(*row)
        Console().print(table)


def report_cmd(run_dir: Path = typer.Argument(..., help="A run directory of `deciplane train`.")
               ) -> None:
    """PNG learning curves and a markdown summary (report.md) of a training run."""
    from rich.console import Console

    from deciplane.errors import DeciplaneError
    from deciplane.evaluation.report import write_report

    console = Console()
    try:
        md, pngs = write_report(run_dir)
    except DeciplaneError as e:
        console.print(f"[red]error:[/red] {e}", highlight=False)
        raise typer.Exit(2) from None
    print(md.read_text())
    for p in pngs:
        print(f"wrote {p}")
    print(f"wrote {md}")


def train_help() -> str:
    """``deciplane train --help``: the command's doc and the training methods of the
    registry (plug-ins included)."""
    from deciplane.methods import names

    return (f"{train_cmd.__doc__}\n\nMethods (`algorithm:` in the config): "
            f"{', '.join(names('train'))}; `deciplane methods` describes them, --help-config "
            "lists their options.")


def register(app: typer.Typer) -> None:
    """Add ``train`` and ``report`` to the main app."""
    app.command("train", help=train_help())(train_cmd)
    app.command("report")(report_cmd)
