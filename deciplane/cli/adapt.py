"""``deciplane adapt METHOD``: test-time adaptation, then held-out scoring.

    deciplane adapt ttrl --benchmark products-1d --split test \\
        --model deciplane/smollm2-135m-instruct --set votes=8 --run-dir runs/ttrl --seed 0

One command per test-time adaptation method of :mod:`deciplane.methods` (``ttrl``,
``ttpo``, ``tasco``, ``probe-erpo`` and those of installed plug-ins). Options of the
adapter go through ``--set key=value`` (repeatable; ``--set preset=paper`` starts from the
paper's values); ``deciplane adapt options ttrl`` lists them. Options of the benchmark's
loader (e.g. an ``rg:<family>``'s difficulty) go through ``--benchmark-arg KEY=VALUE``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from deciplane.methods import MethodSpec

console = Console()


def _run(method: str, benchmark: str, split: str, model: str, sets: list[str],
         run_dir: Optional[Path], seed: int, limit: Optional[int], threads: int,
         no_baselines: bool, baseline_cache: Optional[Path], device: str,
         benchmark_args: Optional[list[str]] = None, resume: bool = False) -> None:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from deciplane.adapt.runner import run_adaptation
    from deciplane.config import parse_override
    from deciplane.errors import DeciplaneError

    try:
        bench_args = dict(parse_override(kv) for kv in (benchmark_args or []))
    except DeciplaneError as e:
        console.print(f"[red]error:[/red] --benchmark-arg: {e}", highlight=False)
        raise typer.Exit(2) from None

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                  TimeRemainingColumn(), TextColumn("{task.fields[info]}"),
                  console=console, transient=False) as bar:
        handles: dict[str, int] = {}
        t0 = time.perf_counter()

        def progress(phase: str, done: int, total: int, metrics: dict) -> None:
            if phase not in handles:
                handles[phase] = bar.add_task(phase, total=total, info="")
            info = ""
            if "vote/majority_share" in metrics:
                info = f"maj share {metrics['vote/majority_share']:.2f}"
            if "optimizer_steps" in metrics:
                info += f" opt steps {int(metrics['optimizer_steps'])}"
            bar.update(handles[phase], completed=done, total=max(total, 1), info=info)
            if not console.is_terminal:   # a log file gets one line per event instead of a bar
                console.print(f"[{time.perf_counter() - t0:7.1f}s] {phase} {done}/{total} {info}".rstrip(),
                              highlight=False)

        try:
            summary = run_adaptation(method, benchmark=benchmark, split=split, model=model,
                                     overrides=sets, seed=seed, run_dir=run_dir, limit=limit,
                                     threads=threads, baselines=not no_baselines,
                                     baseline_cache=baseline_cache, device=device,
                                     progress=progress, benchmark_args=bench_args,
                                     resume=resume)
        except DeciplaneError as e:
            console.print(f"[red]error:[/red] {e}", highlight=False)
            raise typer.Exit(2) from None
    label = method.upper() + (f" ({summary['variant']})" if summary.get("variant") else "")
    table = Table("", "accuracy", title=f"{label} on {benchmark}/{split} "
                  f"({summary['n_tasks']} tasks, seed {seed})")
    if "before" in summary:
        table.add_row("before (greedy)", f"{summary['before']['accuracy']:.3f}")
    table.add_row(f"after {method.upper()}", f"{summary['after']['accuracy']:.3f}")
    for name, b in summary.get("baselines", {}).items():
        extra = f" @{b.get('votes_per_task', b.get('n_per_task'))}" if {"votes_per_task", "n_per_task"} & set(b) else ""
        table.add_row(f"baseline {name}{extra}", f"{b['accuracy']:.3f}")
    d = summary.get("diagnostics", {})
    if "pseudo_label_accuracy_all_votes" in d:
        table.add_row("majority pseudo-label correct (scorer)", f"{d['pseudo_label_accuracy_all_votes']:.3f}")
        table.add_row("pseudo-reward accuracy (scorer)", f"{d['reward_accuracy']:.3f}")
    console.print(table)
    b = summary["budget"]
    console.print(f"budget: {b['samples']} samples, {b['generated_tokens']} generated tokens, "
                  f"{b['forward_tokens']} forward / {b['backward_tokens']} backward tokens, "
                  f"{b['optimizer_steps']} optimizer steps, {b['wall_time_s']:.0f}s", highlight=False)
    if "base_weights_unchanged" in summary:
        console.print(f"forward-token equivalents: {summary['forward_token_equivalents']}; base weights "
                      f"unchanged: {summary['base_weights_unchanged']}", highlight=False)
    console.print(f"wrote {summary['run_dir']}/summary.json", highlight=False)


def _command(spec: MethodSpec):
    """The command of one adapt method; its help is the method's summary."""
    method = spec.name

    def cmd(
        benchmark: str = typer.Option("products-1d", help="Benchmark (`deciplane benchmarks` lists them); the default is calibrated so that the default model's majority vote carries a signal (docs/testtime_benchmarks.md)."),
        split: str = typer.Option("test", help="Split to adapt on and score."),
        model: str = typer.Option("deciplane/smollm2-135m-instruct", help="Model name, HF folder or GGUF file."),
        sets: list[str] = typer.Option([], "--set", help="Adapter option key=value (repeatable); `deciplane adapt options` lists them."),
        run_dir: Optional[Path] = typer.Option(None, "--run-dir", help="Where summary.json and the plot go (default runs/adapt-...)."),
        seed: int = typer.Option(0, help="Seed of sampling, task order and baselines."),
        limit: Optional[int] = typer.Option(None, help="Use only the first N tasks of the split."),
        threads: int = typer.Option(2, help="torch threads."),
        no_baselines: bool = typer.Option(False, "--no-baselines", help="Skip the baselines (not recommended: results must be read next to them)."),
        baseline_cache: Optional[Path] = typer.Option(None, "--baseline-cache", help="Folder to keep/reuse the baselines' answers (runs with the same model, data, seed and sample budget share them)."),
        device: str = typer.Option("cpu", help="cpu, cuda or auto."),
        benchmark_args: list[str] = typer.Option([], "--benchmark-arg", help="Option of the benchmark's loader KEY=VALUE (repeatable), e.g. max_terms=2 for rg:chain_sum."),
        resume: bool = typer.Option(False, "--resume", help="Continue the run in --run-dir (stopped or killed) after its last finished step, with the options it was started with."),
    ) -> None:
        _run(method, benchmark, split, model, sets, run_dir, seed, limit, threads, no_baselines,
             baseline_cache, device, benchmark_args, resume)

    plugin = f" (plug-in from {spec.distribution})" if spec.plugin else ""
    cmd.__doc__ = f"{spec.summary}{plugin}"
    return cmd


def _options_command(choices: list[str]):
    """``deciplane adapt options METHOD``, its argument's help naming ``choices``."""

    def options_cmd(method: str = typer.Argument(..., help=", ".join(choices))) -> None:
        """List an adapter's options (for --set), their defaults and the paper values."""
        _print_options(method)

    return options_cmd


def _print_options(method: str) -> None:
    from dataclasses import fields, is_dataclass

    from deciplane.config import field_docs
    from deciplane.errors import ConfigError
    from deciplane.methods import get, load_config_class

    try:
        cls = load_config_class(get(method, "adapt"))
    except ConfigError as e:
        console.print(f"[red]error:[/red] {e}", highlight=False)
        raise typer.Exit(2) from None
    paper_values = getattr(cls, "PAPER", {})
    docs = field_docs(cls)
    default = cls()
    for f in fields(cls):
        value = getattr(default, f.name)
        rows = [(f.name, value, docs.get(f.name, ""))]
        if is_dataclass(value):   # an embedded loss config: one line per option
            inner = field_docs(type(value))
            rows = [(f"{f.name}.{g.name}", getattr(value, g.name), inner.get(g.name, ""))
                    for g in fields(value)]
        for name, v, doc in rows:
            paper = f"  [paper: {paper_values[name]!r}]" if name in paper_values else ""
            console.print(f"{name} = {v!r}{paper}\n    {doc}", highlight=False,
                          soft_wrap=True, markup=False)


def register(app: typer.Typer) -> None:
    """Add the ``adapt`` command group to the main CLI: one command per adapt method of the
    registry, then ``options``."""
    from deciplane.methods import available

    adapt_app = typer.Typer(no_args_is_help=True, add_completion=False,
                            help="Test-time adaptation on unlabeled prompts, then held-out scoring.")
    specs = [spec for spec in available().values() if spec.kind == "adapt"]
    for spec in specs:
        adapt_app.command(spec.name)(_command(spec))
    adapt_app.command("options")(_options_command([spec.name for spec in specs]))
    app.add_typer(adapt_app, name="adapt")


__all__ = ["register"]
