"""CLI: ``deciplane play``, ``deciplane evaluate`` and ``deciplane demo``.

``evaluate --agent NAME`` builds agents through
:data:`deciplane.evaluation.evaluate.AGENT_FACTORIES`: a module that registers a factory
(``register_agent("menu", factory)``) gets ``--agent menu`` here with ``--model`` and
``--agent-option k=v`` passed to the factory.

``evaluate RUN_DIR`` scores a trained run's checkpoint instead (the agent, model and
environment or benchmark come from the run's ``config.yaml``; see
:mod:`deciplane.evaluation.run_eval`).
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any, Iterator, Optional

import typer
from rich.console import Console
from rich.table import Table

from deciplane.agents.labels import DEFAULT_LABELS
from deciplane.errors import ConfigError, DeciplaneError

console = Console()


@contextlib.contextmanager
def _friendly_errors() -> Iterator[None]:
    """deciplane errors end the command with their message (they say what to do), exit 2."""
    try:
        yield
    except DeciplaneError as e:
        console.print(f"[red]error:[/red] {e}", highlight=False)
        raise typer.Exit(2) from None

# The menu agents' own labels (A, B, ... then a, b, ...), so that what a player types is
# what a model reads.
LABELS = "".join(DEFAULT_LABELS)
_INFORM_EPILOGUE = re.compile(
    r"^\s*(You scored .* in \d+ turns?\.|Would you like to RESTART, RESTORE.*)\s*$",
    re.MULTILINE)


def parse_options(items: list[str] | None) -> dict[str, Any]:
    """``["n_games=3", "games=tw-simple"]`` -> ``{"n_games": 3, "games": "tw-simple"}``
    (values parsed as YAML scalars/lists)."""
    import yaml

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r} is not KEY=VALUE")
        out[key.strip()] = yaml.safe_load(value)
    return out


def menu_label(i: int) -> str:
    """The key that picks menu action ``i`` in ``deciplane play``: A-Z, a-z (the menu
    agents' labels), then numbers."""
    return LABELS[i] if i < len(LABELS) else str(i)


def parse_choice(text: str, n: int) -> int | None:
    """A menu index from what the player typed (a label or a number), or None. A
    lower-case letter also picks its capital while the menu has no lower-case labels."""
    text = text.strip()
    if text.isdigit() and int(text) < n:
        return int(text)
    if len(text) != 1:
        return None
    if text in LABELS[:n]:
        return LABELS.index(text)
    if n <= 26 and text.upper() in LABELS[:n]:
        return LABELS.index(text.upper())
    return None


def without_inform_epilogue(text: str) -> str:
    """A game's last observation without Inform's end-of-game lines (its own turn count,
    which includes the opening turn, and the RESTART/RESTORE/QUIT/UNDO question, which
    cannot be answered here)."""
    return _INFORM_EPILOGUE.sub("", text).rstrip()


def status_line(steps: int, info: dict[str, Any]) -> str:
    """``step 3 · score 1/2`` shown above each menu."""
    score = info.get("score")
    line = f"step {steps}"
    if score is not None:
        line += f" · score {score:g}/{info.get('max_score', '?')}"
    return line


def _env_kwargs(split: Optional[str], games: Optional[str], options: list[str] | None,
                ) -> dict[str, Any]:
    kwargs = parse_options(options)
    steps = kwargs.get("max_episode_steps")
    if "max_episode_steps" in kwargs and steps is not None and (
            isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        # checked here, before any game or model loads (gym.make would check it only
        # after building the environment)
        raise ConfigError(f"-e max_episode_steps={steps!r}: must be a whole number >= 1 "
                          "(e.g. -e max_episode_steps=50)")
    if split is not None:
        kwargs.setdefault("split", split)
    if games is not None:
        kwargs.setdefault("games", games)
    return kwargs


def play_cmd(
    env_id: str = typer.Argument("deciplane/TextWorld-v0", help="registered environment id"),
    games: Optional[str] = typer.Option(None, help="TextWorld preset or 'embedded'"),
    split: Optional[str] = typer.Option("train", help="train | valid | test"),
    game: Optional[str] = typer.Option(None, help="game of the suite: index or name"),
    seed: int = typer.Option(0, help="reset seed (picks the game when --game is not given)"),
    env_option: Optional[list[str]] = typer.Option(None, "--env-option", "-e",
                                                    help="KEY=VALUE passed to gym.make"),
) -> None:
    """Play an environment in the terminal: type the letter of a menu action (q quits)."""
    from deciplane.envs import make

    options = None
    if game is not None:
        options = {"game": int(game) if game.isdigit() else game}
    with _friendly_errors():
        env = make(env_id, **_env_kwargs(split, games, env_option))
        obs, info = env.reset(seed=seed, options=options)
    if "game_name" in info:
        console.print(f"[dim]game {info['game_name']} · split fingerprint "
                      f"{info.get('split_fingerprint')}[/dim]", highlight=False)
    total, steps = 0.0, 0
    try:
        while True:
            console.print(obs.strip(), highlight=False, markup=False)
            console.print(f"[dim]{status_line(steps, info)}[/dim]", highlight=False)
            action = _ask(info)
            if action is None:
                console.print("bye")
                return
            obs, reward, term, trunc, info = env.step(action)
            total, steps = total + float(reward), steps + 1
            if reward:
                console.print(f"[green]reward {reward:+g}[/green]")
            if term or trunc:
                console.print(without_inform_epilogue(obs.strip()), highlight=False, markup=False)
                outcome = "won" if info.get("won") else "lost" if info.get("lost") else "ended"
                console.print(f"[bold]{outcome}[/bold] after {steps} steps; score "
                              f"{info.get('score', total)}/{info.get('max_score', '?')}")
                return
    finally:
        env.close()


def _ask(info: dict[str, Any]) -> int | str | None:
    """Show the menu and read a choice; None when the player quits (q or end of input)."""
    menu = info.get("menu")
    while True:
        if menu is not None:
            for i, action in enumerate(menu):
                console.print(f"  [bold]{menu_label(i)}[/bold]) {action}", highlight=False)
        try:
            text = typer.prompt("choose a letter (q to quit)" if menu is not None else
                                "your answer (q to quit)", default="", show_default=False)
        except (EOFError, typer.Abort):
            return None
        if text.strip() in ("q", "quit"):
            return None
        if menu is None:
            return text
        choice = parse_choice(text, len(menu))
        if choice is not None:
            return choice
        console.print(f"[red]{text!r} is not on the menu[/red]; type one of "
                      f"{menu_label(0)}..{menu_label(len(menu) - 1)}", highlight=False)


def evaluate_cmd(
    run_dir: Optional[Path] = typer.Argument(
        None, metavar="RUN_DIR",
        help="a `deciplane train --run-dir` folder: score its checkpoint (the agent, model "
             "and environment come from the run's config.yaml)"),
    checkpoint: str = typer.Option("latest", help="with RUN_DIR: latest | iter_N"),
    benchmark: Optional[str] = typer.Option(
        None, help="with RUN_DIR of a single-turn run (math_grpo): benchmark to answer "
                   "(default: the one it trained on)"),
    limit: Optional[int] = typer.Option(None, help="with --benchmark: first N tasks only"),
    agent: Optional[str] = typer.Option(None, help="expert (default) | random | menu | text | "
                                                   "an agent registered by a plug-in"),
    env: Optional[str] = typer.Option(None, "--env", help="registered environment id "
                                                         "(default deciplane/TextWorld-v0); "
                                                         "with RUN_DIR of a suite run (envs:), "
                                                         "the name of the env to play"),
    split: Optional[str] = typer.Option("test", help="split to evaluate on"),
    episodes: Optional[int] = typer.Option(None, help="default: every game of the split once"),
    games: Optional[str] = typer.Option(None, help="TextWorld preset or 'embedded' (default; "
                                                   "with RUN_DIR: the run's)"),
    num_envs: int = typer.Option(1, help="environments stepped in lockstep (batched agent)"),
    seed: int = typer.Option(0, help="seed of episode 0 (episode i uses seed+i)"),
    model: Optional[str] = typer.Option(None, help="model for model-backed agents"),
    agent_option: Optional[list[str]] = typer.Option(None, "--agent-option", "-a",
                                                      help="KEY=VALUE for the agent factory"),
    env_option: Optional[list[str]] = typer.Option(None, "--env-option", "-e",
                                                    help="KEY=VALUE passed to gym.make"),
    threads: Optional[int] = typer.Option(None, help="torch threads (with RUN_DIR default: "
                                                     "the run's model.threads)"),
    trunk_dtype: Optional[str] = typer.Option(
        None, help="with RUN_DIR: auto | float32 | bfloat16, the precision of the frozen "
                   "layers (default: the run's model.trunk_dtype)"),
    device: Optional[str] = typer.Option(
        None, help="with RUN_DIR: cpu | cuda | auto, where the model runs (default: the run's "
                   "model.device)"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="write the report here"),
    progress: bool = typer.Option(True, help="show a progress bar"),
) -> None:
    """Evaluate an agent on a split: success rate, steps, return, the split fingerprint.

    With RUN_DIR, score a trained run's checkpoint instead: environment runs (rlid_ppo,
    text_ppo) play the split with the run's agent; single-turn runs (math_grpo) answer
    --benchmark and are scored by the held-out scorer.
    """
    if run_dir is not None:
        _check_run_dir_flags(agent, model, agent_option)
        with _friendly_errors():
            _evaluate_run_dir(run_dir, checkpoint, benchmark, limit, split, episodes, games,
                              env_option, num_envs, seed, threads, json_out, progress,
                              trunk_dtype, device, env)
        return
    if device is not None:
        raise typer.BadParameter("--device places a trained run's model: pass RUN_DIR first; "
                                 "a menu or text agent takes --agent-option device=cuda")
    if benchmark is not None or limit is not None or checkpoint != "latest" or trunk_dtype:
        raise typer.BadParameter("--benchmark, --limit, --checkpoint and --trunk-dtype score a "
                                 "trained run: pass its folder first (deciplane evaluate "
                                 "RUN_DIR --benchmark arith)")
    from deciplane.evaluation.evaluate import evaluate_agent, make_agent

    opts = parse_options(agent_option)
    if model is not None:
        opts["model"] = model
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    with _friendly_errors():
        kwargs = _env_kwargs(None, games, env_option)  # bad options fail before any load
        the_agent = make_agent(agent or "expert", seed=seed, **opts)
        report = evaluate_agent(env or "deciplane/TextWorld-v0", the_agent, split=split,
                                episodes=episodes, num_envs=num_envs, seed=seed,
                                env_kwargs=kwargs, progress=progress)
    console.print(report_table([report]))
    console.print(f"split fingerprint: [bold]{report.split_fingerprint}[/bold]", highlight=False)
    _write_json(report, json_out)


def _check_run_dir_flags(agent: Optional[str], model: Optional[str],
                         agent_option: list[str] | None) -> None:
    """With RUN_DIR the agent, model and environment come from the run: refuse flags that
    would silently be ignored (``--env`` names an env of a suite run: ``run_eval.run_env``
    refuses it for a run of one env)."""
    given = [flag for flag, v in (("--agent", agent), ("--model", model),
                                  ("--agent-option", agent_option)) if v]
    if given:
        raise typer.BadParameter(f"{', '.join(given)} cannot be combined with RUN_DIR: a run's "
                                 "agent, model and environment come from its config.yaml; "
                                 "drop them, or drop RUN_DIR to build an agent from scratch")


def _evaluate_run_dir(run_dir: Path, checkpoint: str, benchmark: Optional[str],
                      limit: Optional[int], split: Optional[str], episodes: Optional[int],
                      games: Optional[str], env_option: list[str] | None, num_envs: int,
                      seed: int, threads: Optional[int], json_out: Optional[Path],
                      progress: bool, trunk_dtype: Optional[str] = None,
                      device: Optional[str] = None, env: Optional[str] = None) -> None:
    """``deciplane evaluate RUN_DIR``: environment runs play ``split``; single-turn runs
    answer ``benchmark``. Prints the table, writes ``json_out``."""
    from deciplane.errors import ConfigError
    from deciplane.evaluation import run_eval

    config = run_eval.read_run_config(run_dir)
    split = split or "test"
    if run_eval.evaluates_on(config) == "benchmark":
        if episodes is not None or games is not None or env_option:
            raise ConfigError(f"{run_dir} is a single-turn ({config.algorithm}) run: it answers "
                              "a benchmark; use --benchmark NAME --limit N instead of "
                              "--episodes/--games/--env-option")
        report = run_eval.evaluate_run_benchmark(run_dir, benchmark, checkpoint=checkpoint,
                                                 split=split, limit=limit, threads=threads,
                                                 trunk_dtype=trunk_dtype, device=device)
        console.print(benchmark_table(report))
        if report.benchmark != report.trained_on:
            console.print(f"[yellow]note:[/yellow] the run trained on {report.trained_on}; "
                          f"this is a transfer score on {report.benchmark}", highlight=False)
    else:
        if benchmark is not None or limit is not None:
            raise ConfigError(f"{run_dir} is an environment run ({config.algorithm} on "
                              f"{config.env.id}), not a benchmark run: drop --benchmark/--limit "
                              "(use --episodes N to shorten the evaluation)")
        overrides = _env_kwargs(None, games, env_option)
        report = run_eval.evaluate_run(run_dir, checkpoint, split=split, episodes=episodes,
                                       num_envs=num_envs, seed=seed, env_overrides=overrides,
                                       threads=threads, trunk_dtype=trunk_dtype, device=device,
                                       progress=progress, env=env)
        console.print(report_table([report]))
    console.print(f"run {report.run_dir} · checkpoint [bold]{report.checkpoint}[/bold] · "
                  f"split fingerprint [bold]{report.split_fingerprint}[/bold]",
                  highlight=False)
    then = run_eval.recorded_fingerprint(run_dir, report.split, env)
    same_benchmark = getattr(report, "benchmark", None) in (None, getattr(report, "trained_on",
                                                                          None))
    if then and same_benchmark and then != report.split_fingerprint:
        console.print(f"[yellow]note:[/yellow] at training time the run's summary.json recorded "
                      f"fingerprint {then} for split {report.split}; the split (or its "
                      "generator version) has changed since: the summary's numbers are not "
                      "directly comparable", highlight=False)
    _write_json(report, json_out)


def _write_json(report: Any, json_out: Optional[Path]) -> None:
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report.to_dict(), indent=2))
        console.print(f"report written to {json_out}", highlight=False)


def benchmark_table(report: Any) -> Table:
    """A rich table of a :class:`~deciplane.evaluation.run_eval.BenchmarkEvalReport` (the
    benchmark, split and fingerprint in the title)."""
    table = Table("model", "checkpoint", "problems", "correct", "accuracy", "wall s",
                  title=f"{report.benchmark} · split {report.split} · fingerprint "
                        f"{report.split_fingerprint}")
    table.add_row(report.model, report.checkpoint, str(report.count), str(report.n_correct),
                  f"{report.accuracy:.1%}", f"{report.wall_s:.1f}")
    return table


def report_table(reports: list[Any]) -> Table:
    """A rich table with one row per :class:`EvalReport` (env, split and fingerprint in
    the title)."""
    first = reports[0]
    title = f"{first.env_id} · split {first.split} · fingerprint {first.split_fingerprint}"
    if getattr(first, "checkpoint", None):
        title += f" · {first.checkpoint}"
    table = Table("agent", "episodes", "success", "95% CI", "steps", "return", "invalid",
                  "decisions/s", title=title)
    for r in reports:
        lo, hi = getattr(r, "success_ci95", (0.0, 1.0))
        table.add_row(r.agent, str(r.episodes), f"{r.success_rate:.1%}", f"{lo:.0%}-{hi:.0%}",
                      f"{r.mean_steps:.1f}",
                      f"{r.mean_return:.2f}", f"{r.invalid_action_rate:.1%}",
                      f"{r.decisions_per_s:.1f}")
    return table


def demo_cmd(
    out: Path = typer.Option(Path("runs/demo"), help="folder for results.json and the chart"),
    random_episodes: int = typer.Option(5, help="random-agent episodes per test game"),
    seed: int = typer.Option(0, help="random agent / reset seed"),
) -> None:
    """Generate the embedded TextWorld suite, evaluate the expert and a random agent on
    its held-out test split, print a table and write a PNG bar chart."""
    from deciplane.envs.textworld.games import make_game_suite
    from deciplane.evaluation.evaluate import (ExpertAgent, RandomAgent, evaluate_agent,
                                             plot_success, success_by_family)

    env_id = "deciplane/TextWorld-v0"
    suite = make_game_suite("embedded", "test", progress=True)
    console.print(f"embedded suite, test split: {len(suite)} games, fingerprint "
                  f"[bold]{suite.fingerprint}[/bold]", highlight=False)
    kwargs = {"games": "embedded"}
    reports = [
        evaluate_agent(env_id, ExpertAgent(), split="test", seed=seed, env_kwargs=kwargs),
        evaluate_agent(env_id, RandomAgent(seed), split="test", seed=seed, env_kwargs=kwargs,
                       episodes=random_episodes * len(suite)),
    ]
    console.print(report_table(reports))
    families = Table("game family", *[r.agent for r in reports])
    rates = [success_by_family(r) for r in reports]
    for fam in rates[0]:
        families.add_row(fam, *[f"{rt.get(fam, 0.0):.0%}" for rt in rates])
    console.print(families)
    out.mkdir(parents=True, exist_ok=True)
    png = plot_success(reports, out / "textworld_success.png")
    (out / "results.json").write_text(json.dumps([r.to_dict() for r in reports], indent=2))
    console.print(f"chart: [bold]{png}[/bold]\nresults: {out / 'results.json'}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``play``, ``evaluate`` and ``demo`` to the ``deciplane`` command."""
    app.command("play")(play_cmd)
    app.command("evaluate")(evaluate_cmd)
    app.command("demo")(demo_cmd)
