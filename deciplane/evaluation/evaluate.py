"""Evaluate any agent on any registered environment: success, steps, return, speed.

An *agent* is anything with ``act_batch(observations, infos) -> actions`` (see
:class:`EvalAgent`); the evaluator knows nothing about models. Built-in agents:
:class:`ExpertAgent` (the env's ``info["expert_action"]``) and :class:`RandomAgent`
(a uniformly random legal menu index). Other packages add agents (e.g. model-backed ones)
by registering a factory in :data:`AGENT_FACTORIES` with :func:`register_agent`; the
``deciplane evaluate --agent NAME`` command finds them there.

Which episodes are played: if the environment exposes ``num_tasks`` (TextWorld-v0: the
games of the split), episode ``i`` plays task ``i % num_tasks`` via
``reset(seed=seed + i, options={"task": i % num_tasks})`` and ``episodes`` defaults to
``num_tasks`` (every game once); otherwise episode ``i`` is ``reset(seed=seed + i)`` and
``episodes`` defaults to 20. Success is ``info["won"]`` where the env reports it, else a
positive episode return.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from deciplane.engine.episodes import (EnvListSlots, Episode, EpisodeStart, play_episodes,
                                       summarize_episodes)
from deciplane.evaluation.agents import EVAL_AGENT_FACTORIES
from deciplane.errors import ConfigError
from deciplane.stats import PairedComparison, paired_difference, wilson_interval
from deciplane.provenance import provenance

DEFAULT_EPISODES = 20
MAX_STEPS_GUARD = 10_000  # an env that never ends its episodes is truncated here


@runtime_checkable
class EvalAgent(Protocol):
    """What :func:`evaluate_agent` needs from an agent.

    ``act_batch`` gets the current observation and info dict of every live episode (one
    per sub-environment, in the same order) and returns one action each: a menu index
    (``int``) for menu environments, or text (``str``) for text-action environments.
    An agent may also set ``env_kwargs`` (a dict merged into the environment's keyword
    arguments, e.g. ``{"expert": True}``) and ``name``.
    """

    def act_batch(self, observations: list[str], infos: list[dict[str, Any]]) -> list[int | str]:
        ...


class ExpertAgent:
    """Plays ``info["expert_action"]`` (TextWorld's winning policy); needs ``expert=True``."""

    name = "expert"
    env_kwargs = {"expert": True}

    def act_batch(self, observations: list[str], infos: list[dict[str, Any]]) -> list[int]:
        out = []
        for info in infos:
            if "menu" not in info:
                raise ConfigError("the expert agent plays info['expert_action'] of menu "
                                  "environments built with expert=True (e.g. "
                                  "deciplane/TextWorld-v0); this environment has no menu")
            # no winning policy from this state (rare): any legal move
            out.append(int(info.get("expert_action", 0)))
        return out


class RandomAgent:
    """A uniformly random legal menu index (from ``info["action_mask"]`` or the menu)."""

    name = "random"
    env_kwargs: dict[str, Any] = {}

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def act_batch(self, observations: list[str], infos: list[dict[str, Any]]) -> list[int]:
        return [self._pick(info) for info in infos]

    def _pick(self, info: dict[str, Any]) -> int:
        if "action_mask" in info:
            legal = np.flatnonzero(np.asarray(info["action_mask"], dtype=bool))
        elif "menu" in info:
            legal = np.arange(len(info["menu"]))
        else:
            raise ConfigError("the random agent picks from info['menu']/info['action_mask'], "
                              "which this environment does not provide")
        return int(self.rng.choice(legal)) if legal.size else 0


AgentFactory = Callable[..., EvalAgent]


def _expert_factory(seed: int = 0, **options: Any) -> EvalAgent:
    _no_options("expert", options)
    return ExpertAgent()


def _random_factory(seed: int = 0, **options: Any) -> EvalAgent:
    _no_options("random", options)
    return RandomAgent(seed)


def _no_options(name: str, options: dict[str, Any]) -> None:
    given = {k: v for k, v in options.items() if v is not None}
    if given:
        raise ConfigError(f"agent {name!r} takes no options, got {sorted(given)}; model-backed "
                          f"agents are: {', '.join(sorted(AGENT_FACTORIES))}")


# name -> factory(seed=..., **options) -> EvalAgent. Built in: the env's expert, random
# play, and the model-backed menu/text agents (their module loads torch only when used).
# Other modules add theirs with register_agent.
AGENT_FACTORIES: dict[str, AgentFactory] = {"expert": _expert_factory, "random": _random_factory,
                                            **EVAL_AGENT_FACTORIES}


def register_agent(name: str, factory: AgentFactory) -> None:
    """Make ``deciplane evaluate --agent NAME`` build agents with ``factory(seed=..., **opts)``."""
    AGENT_FACTORIES[name] = factory


def make_agent(name: str, seed: int = 0, **options: Any) -> EvalAgent:
    """Build a registered agent; unknown names list the registered ones."""
    if name not in AGENT_FACTORIES:
        raise ConfigError(f"unknown agent {name!r}; registered agents: "
                          f"{', '.join(sorted(AGENT_FACTORIES))}")
    return AGENT_FACTORIES[name](seed=seed, **options)


@dataclass
class EpisodeResult:
    """One evaluated episode."""

    index: int
    task: str
    seed: int
    won: bool
    steps: int
    ret: float
    invalid_actions: int
    truncated: bool


@dataclass
class EvalReport:
    """Aggregates over the evaluated episodes, plus each episode."""

    env_id: str
    split: str | None
    split_fingerprint: str | None
    agent: str
    episodes: int
    success_rate: float
    mean_steps: float
    mean_return: float
    invalid_action_rate: float
    decisions_per_s: float   # agent + env.step time only (resets/game loading excluded)
    wall_s: float
    per_episode: list[EpisodeResult] = field(default_factory=list)
    run_dir: str | None = None      # set when a trained run's checkpoint was evaluated
    checkpoint: str | None = None   # its checkpoint folder name (iter_NNNNNN)
    success_ci95: tuple[float, float] = (0.0, 1.0)   # Wilson score interval of success_rate
    provenance: dict[str, Any] = field(default_factory=dict)  # commit, versions (provenance())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["success_ci95"] = list(self.success_ci95)   # as it reads back from JSON
        return d

    def summary(self) -> str:
        lo, hi = self.success_ci95
        return (f"{self.agent} on {self.env_id} [{self.split}, fingerprint "
                f"{self.split_fingerprint}]: success {self.success_rate:.1%} "
                f"(95% CI {lo:.1%}-{hi:.1%}) over "
                f"{self.episodes} episodes, {self.mean_steps:.1f} steps, return "
                f"{self.mean_return:.2f}, invalid {self.invalid_action_rate:.1%}, "
                f"{self.decisions_per_s:.1f} decisions/s")


def summarize(results: Sequence[EpisodeResult]) -> dict[str, float]:
    """Success rate, mean steps, mean return and invalid-action rate of ``results`` (the
    one summary of episodes, :func:`deciplane.engine.episodes.summarize_episodes`, under
    the report's field names)."""
    s = summarize_episodes([r.seed for r in results],
                           [{"won": r.won, "steps": r.steps, "return": r.ret,
                             "invalid": r.invalid_actions} for r in results])
    return {"success_rate": s["success_rate"], "mean_steps": s["mean_steps"],
            "mean_return": s["mean_return"], "invalid_action_rate": s["invalid_rate"]}


def evaluate_agent(env_id: str, agent: EvalAgent, split: str | None = "test",
                   episodes: int | None = None, num_envs: int = 1, seed: int = 0,
                   env_kwargs: dict[str, Any] | None = None,
                   progress: bool = True) -> EvalReport:
    """Play ``episodes`` episodes of ``env_id`` with ``agent`` and report the results.

    ``num_envs`` environments run in lockstep and the agent gets one batched
    ``act_batch`` call per step over all live episodes. ``split`` is passed to the
    environment (``None`` to pass nothing); ``env_kwargs`` go to ``gym.make``.
    """
    from deciplane.envs import make

    if num_envs < 1:
        raise ConfigError(f"num_envs must be >= 1, got {num_envs}")
    if not isinstance(agent, EvalAgent):
        raise ConfigError(f"{type(agent).__name__} has no act_batch(observations, infos); "
                          "see deciplane.evaluation.evaluate.EvalAgent")
    kwargs: dict[str, Any] = {} if split is None else {"split": split}
    kwargs.update(getattr(agent, "env_kwargs", {}) or {})
    kwargs.update(env_kwargs or {})
    try:
        envs = [make(env_id, **kwargs) for _ in range(num_envs)]
    except TypeError as e:  # the env's constructor does not take one of the arguments
        raise ConfigError(f"{env_id} rejected the arguments {sorted(kwargs)} ({e}); pass "
                          "only options it takes (split=None for envs without splits), or "
                          f"an agent it supports (agent {getattr(agent, 'name', agent)!r} "
                          f"adds {getattr(agent, 'env_kwargs', {})})") from e
    try:
        n_tasks = getattr(envs[0].unwrapped, "num_tasks", None)
        total = int(episodes if episodes is not None else (n_tasks or DEFAULT_EPISODES))
        if total < 1:
            raise ConfigError(f"episodes must be >= 1, got {episodes}")
        t0 = time.perf_counter()
        results, decisions, play_s = _run(envs, agent, total, n_tasks, seed, progress,
                                          getattr(agent, "name", type(agent).__name__))
        wall = time.perf_counter() - t0
        fp = getattr(envs[0].unwrapped, "split_fingerprint", None)
    finally:
        for env in envs:
            env.close()
    return EvalReport(env_id=env_id, split=split, split_fingerprint=fp,
                      agent=getattr(agent, "name", type(agent).__name__), episodes=total,
                      decisions_per_s=decisions / play_s if play_s > 0 else math.inf,
                      wall_s=wall, per_episode=results,
                      success_ci95=wilson_interval(sum(r.won for r in results), len(results)),
                      provenance=provenance(), **summarize(results))


def compare_paired(a: EvalReport, b: EvalReport) -> PairedComparison:
    """Success of ``a`` minus ``b`` on the episodes both played (matched by task and
    seed), with its 95% paired interval. Both must come from the same split fingerprint."""
    if a.split_fingerprint != b.split_fingerprint:
        raise ConfigError(f"cannot pair {a.agent} and {b.agent}: they played different splits "
                          f"(fingerprints {a.split_fingerprint} vs {b.split_fingerprint})")
    won_b = {(r.task, r.seed): r.won for r in b.per_episode}
    pairs = [(r.won, won_b[(r.task, r.seed)]) for r in a.per_episode if (r.task, r.seed) in won_b]
    if not pairs:
        raise ConfigError(f"{a.agent} and {b.agent} share no episode (task, seed) to pair")
    return paired_difference([x for x, _ in pairs], [y for _, y in pairs])


def _run(envs: list[Any], agent: EvalAgent, total: int, n_tasks: int | None, seed: int,
         progress: bool, label: str) -> tuple[list[EpisodeResult], int, float]:
    """Episode ``i`` is ``reset(seed=seed + i, options={"task": i % n_tasks})`` (no options
    for envs without tasks), played by the one episode loop
    (:func:`~deciplane.engine.episodes.play_episodes`) over the ``envs`` in lockstep.
    Returns the results, the number of decisions and the seconds spent deciding and
    stepping (resets and game loading excluded)."""
    starts = [EpisodeStart(seed + i, {"task": i % n_tasks} if n_tasks else None)
              for i in range(total)]

    def act(eps: list[Episode], t: int) -> list[int | str]:
        actions = agent.act_batch([ep.obs for ep in eps], [ep.info for ep in eps])
        if len(actions) != len(eps):
            raise ConfigError(f"act_batch returned {len(actions)} actions for "
                              f"{len(eps)} observations")
        return actions

    with _Bar(progress, total, label) as bar:
        played = play_episodes(EnvListSlots(envs), starts, act, MAX_STEPS_GUARD,
                               on_end=lambda ep: bar.advance(ep.won))
    return [_result(ep) for ep in played.episodes], played.decisions, played.play_s


def _result(ep: Episode) -> EpisodeResult:
    info = ep.first_info
    task = str(info.get("game_name", info.get("task_id", ep.index)))
    return EpisodeResult(ep.index, task, ep.start.seed, ep.won, ep.steps, ep.ret,
                         sum(ep.invalid_steps), ep.truncated)


class _Bar:
    """A rich progress bar with the running success rate (or nothing)."""

    def __init__(self, enabled: bool, total: int, label: str) -> None:
        self.enabled, self.total, self.label = enabled, total, label
        self.won = self.done = 0

    def __enter__(self) -> "_Bar":
        if self.enabled:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn)

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                                     TimeElapsedColumn(), transient=False)
            self.progress.__enter__()
            self.task = self.progress.add_task(f"evaluating {self.label}", total=self.total,
                                               rate="")
        return self

    def advance(self, won: bool) -> None:
        self.done += 1
        self.won += int(won)
        if self.enabled:
            self.progress.update(self.task, advance=1,
                                 rate=f"success {self.won / self.done:.0%}")

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            self.progress.__exit__(*exc)


# ---- reporting --------------------------------------------------------------------------


def task_family(task: str) -> str:
    """``tw-coin_collector-test-s60001`` -> ``tw-coin_collector`` (game name without split
    and seed); other names are returned unchanged."""
    parts = task.rsplit("-", 2)
    return parts[0] if len(parts) == 3 and parts[2][:1] == "s" else task


def success_by_family(report: EvalReport) -> dict[str, float]:
    """Success rate per task family (e.g. per TextWorld preset), sorted by name."""
    groups: dict[str, list[bool]] = {}
    for r in report.per_episode:
        groups.setdefault(task_family(r.task), []).append(r.won)
    return {k: sum(v) / len(v) for k, v in sorted(groups.items())}


def plot_success(reports: Sequence[EvalReport], path: str | Any) -> Any:
    """A grouped bar chart (PNG) of success per task family and overall, one bar per agent."""
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = sorted({f for r in reports for f in success_by_family(r)}) + ["overall"]
    width = 0.8 / max(len(reports), 1)
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(families), 4.0))
    for k, rep in enumerate(reports):
        rates = success_by_family(rep)
        values = [rates.get(f, 0.0) for f in families[:-1]] + [rep.success_rate]
        xs = np.arange(len(families)) + (k - (len(reports) - 1) / 2) * width
        bars = ax.bar(xs, values, width, label=f"{rep.agent} (n={rep.episodes})")
        ax.bar_label(bars, labels=[f"{v:.0%}" for v in values], fontsize=8)
    ax.set_xticks(np.arange(len(families)), families, rotation=15, fontsize=8)
    ax.set_ylim(0, 1.3)
    ax.set_ylabel("success rate")
    first = reports[0] if reports else None
    if first is not None:
        ax.set_title(f"{first.env_id} [{first.split}] fingerprint {first.split_fingerprint}",
                     fontsize=9)
    ax.legend(fontsize=8, loc="upper left", ncol=max(len(reports), 1))
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
