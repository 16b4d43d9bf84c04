"""``deciplane codeopt list`` and ``deciplane codeopt run TASK_ID candidate.py``."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

console = Console()
codeopt_app = typer.Typer(no_args_is_help=True, add_completion=False,
                          help="CodeOpt: list the tasks, judge a candidate program.")


@codeopt_app.command("list")
def list_cmd(split: str = typer.Option("all", help="train, test or all")) -> None:
    """The CodeOpt tasks: id, split, origin, title, known faster solutions."""
    from deciplane.envs.codeopt.tasks import list_tasks

    from deciplane.errors import ConfigError

    try:
        tasks = list_tasks(split)  # type: ignore[arg-type]
    except ConfigError as exc:
        Console(stderr=True).print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    table = Table("task", "split", "origin", "title", "known faster solutions")
    for t in tasks:
        table.add_row(t.id, t.split, t.origin, t.title, str(len(t.solutions)))
    console.print(table)
    console.print("show a task: deciplane codeopt show TASK_ID; judge a program: "
                  "deciplane codeopt run TASK_ID candidate.py", highlight=False)


@codeopt_app.command("show")
def show_cmd(task_id: str) -> None:
    """Print a task's observation (what the agent sees)."""
    from deciplane.envs.codeopt.tasks import get_task
    from deciplane.errors import TaskError

    try:
        text = get_task(task_id).observation()
    except TaskError as exc:
        Console(stderr=True).print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    console.print(text, markup=False, highlight=False)


@codeopt_app.command("run")
def run_cmd(
    task_id: str = typer.Argument(..., help="a task id (deciplane codeopt list)"),
    candidate: Path = typer.Argument(..., exists=True, dir_okay=False, readable=True,
                                     help="the candidate program (Python source)"),
    timer: str = typer.Option("cpu", help="cpu (median CPU time, noise band) or "
                                          "instructions (callgrind counts, exact)"),
    reward: str = typer.Option("log_speedup", help="log_speedup or percentile"),
    cap: float = typer.Option(4.0, help="largest log2-speedup reward"),
    repeats: int = typer.Option(0, help="timed runs (0: the timer's default)"),
    backend: str = typer.Option("auto", help="sandbox backend: auto, bwrap, namespace, docker"),
    as_json: bool = typer.Option(False, "--json", help="print the full info dict as JSON"),
) -> None:
    """Judge CANDIDATE on TASK_ID: correctness tests, then timed against the reference.
    Prints the verdict, the measured costs and the reward (exit code 1 if incorrect)."""
    from deciplane.envs.codeopt.evaluate import evaluate
    from deciplane.envs.codeopt.tasks import get_task
    from deciplane.envs.codeopt.timers import make_timer
    from deciplane.sandbox import Sandbox

    from deciplane.errors import DeciplaneError

    try:
        task = get_task(task_id)
        code = candidate.read_text(encoding="utf-8", errors="replace")
        sandbox = Sandbox(backend)
        kwargs = {"repeats": repeats} if repeats > 0 else {}
        t = make_timer(timer, sandbox, **kwargs)
        with console.status(f"judging {candidate.name} on {task.id} ({timer} timer, "
                            f"{sandbox.backend} sandbox)..."):
            ev = evaluate(task, code, sandbox, t, reward=reward, cap=cap)  # type: ignore[arg-type]
    except DeciplaneError as exc:
        Console(stderr=True).print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    info = ev.info()
    if as_json:
        print(json.dumps(info, indent=1, default=str))
    else:
        _print_verdict(info)
    raise typer.Exit(0 if ev.correct else 1)


@codeopt_app.command("suite")
def suite_cmd(
    folder: Path = typer.Argument(None, exists=True, file_okay=False,
                                  help="a folder of TASK_ID.py programs"),
    known: bool = typer.Option(False, "--known", help="judge the known faster solutions "
                                                      "instead (a check of the timers)"),
    split: str = typer.Option("all", help="train, test or all (with --known)"),
    timer: str = typer.Option("cpu", help="cpu or instructions"),
    repeats: int = typer.Option(0, help="timed runs (0: the timer's default)"),
    backend: str = typer.Option("auto", help="sandbox backend"),
) -> None:
    """Judge one program per task and print the docs/methods.md §6 report: mean speedup, share
    of tasks with speedup >= 1.1 (incorrect programs count as 1.0), share correct."""
    from deciplane.envs.codeopt.evaluate import evaluate_suite
    from deciplane.envs.codeopt.tasks import list_tasks
    from deciplane.envs.codeopt.timers import make_timer
    from deciplane.sandbox import Sandbox
    from deciplane.errors import DeciplaneError

    err = Console(stderr=True)
    if known == (folder is not None):
        err.print("[red]error:[/red] give a folder of TASK_ID.py programs or --known",
                  highlight=False)
        raise typer.Exit(2)
    try:
        if known:
            programs = {t.id: t.solutions[0] for t in list_tasks(split)  # type: ignore[arg-type]
                        if t.solutions}
        else:
            programs = {p.stem: p.read_text(encoding="utf-8", errors="replace")
                        for p in sorted(folder.glob("*.py"))}
        sandbox = Sandbox(backend)
        t = make_timer(timer, sandbox, **({"repeats": repeats} if repeats > 0 else {}))
        with console.status(f"judging {len(programs)} programs ({timer} timer)..."):
            evals, summary = evaluate_suite(programs, sandbox, t)
    except DeciplaneError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    table = Table("task", "verdict", "speedup", "reward")
    for e in evals:
        table.add_row(e.task_id, e.verdict, f"{e.speedup:.3f}x" if e.speedup else "-",
                      f"{e.reward:.3f}")
    console.print(table)
    console.print(f"mean speedup {summary['mean_speedup']:.3f}x, share >= 1.1x "
                  f"{summary['share_speedup_ge_1.1']:.0%}, correct "
                  f"{summary['share_correct']:.0%}, mean reward {summary['mean_reward']:.3f} "
                  f"({len(evals)} tasks, {timer} timer, {sandbox.backend} sandbox)",
                  highlight=False)


def _fmt(value: float | None, unit: str) -> str:
    if value is None or value != value:  # None or NaN
        return "-"
    return f"{value * 1000:.1f} ms" if unit == "s" else f"{value:,.0f} instr"


def _print_verdict(info: dict) -> None:
    colour = "green" if info["correct"] else "red"
    console.print(f"[bold {colour}]{info['verdict']}[/]  task {info['task_id']}  "
                  f"tests {info['tests_passed']}/{info['tests_total']}  "
                  f"timer {info['timer']}  sandbox {info['backend']}", highlight=False)
    console.print(info["message"], markup=False, highlight=False)
    if "ref_cost" in info and info["correct"]:
        unit = info["unit"]
        what = "median CPU time" if unit == "s" else "instructions beyond start-up"
        console.print(f"reference {_fmt(info['ref_cost'], unit)}, candidate "
                      f"{_fmt(info['cand_cost'], unit)} ({what})", highlight=False)
        band = info["noise_band"]
        console.print(f"speedup {info['speedup']:.3f}x (raw {info['raw_speedup']:.3f}x"
                      + (f", noise band ±{band:.1%}" if band else ", exact") + ")",
                      highlight=False)
        if info.get("percentile") is not None:
            console.print(f"percentile among reference solutions {info['percentile']:.3f}",
                          highlight=False)
    console.print(f"reward {info['reward']:.4f} ({info['reward_mode']}, cap {info['cap']:g})",
                  highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``deciplane codeopt ...`` to the main command."""
    app.add_typer(codeopt_app, name="codeopt")
