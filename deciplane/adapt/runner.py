"""Adapt, then score: the whole ``deciplane adapt METHOD`` run with its baselines.

Order of a run (the adapter never sees the scorer; every gold-side number is computed by
the held-out scorer *after* the answers exist):

1. ``tasks, scorer = load_benchmark(...)``; the policy is loaded; the adapter is built.
2. Baselines with the initial policy: greedy answers (``before`` and
   ``baselines.no_adaptation_greedy``) and majority vote at the **same sample budget**
   as the adapter (``ceil(adapter samples / tasks)`` votes per task,
   ``baselines.majority_vote_equal_budget``); the same samples give the sampled pass@1
   (``baselines.no_adaptation_sampled``).
3. ``answers = adapter.run(tasks)`` (intermediate answer sets are recorded, not scored).
4. The scorer scores everything: final and intermediate answers, the baselines, and
   the diagnostics (how often the majority pseudo-label was right, pseudo-reward
   accuracy).
5. ``RUN_DIR/summary.json``, ``answers.json`` and ``accuracy_vs_steps.png``
   (``metrics.jsonl`` has every step's metrics, written as the run goes).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from deciplane.adapt.base import AdaptConfig, BaseAdapter, extract
from deciplane.adapt.equal_compute import equal_compute_baselines
from deciplane.errors import ConfigError
from deciplane.engine.baselines import BaselineStore
from deciplane.engine.budget import Budget, forward_token_equivalents
from deciplane.engine.compare import paired_vs
from deciplane.engine.generation import generate_texts, generation_progress
from deciplane.engine.rundir import ARGS_FILE, SUMMARY_FILE, RunDir, changed_on_resume
from deciplane.methods import MethodTable, get, load_config_class, load_target
from deciplane.utils import atomic_write_json, resolve_device, seed_everything

ADAPTERS = MethodTable("adapt", load_target)
"""Method name -> adapter class: a read-only view of :mod:`deciplane.methods` (the
registry; new code calls ``load_target(get(name, "adapt"))``)."""

DEFAULT_MODEL = "deciplane/smollm2-135m-instruct"
DEFAULT_BENCHMARK = "products-1d"
"""The calibrated test-time default: SmolLM2-135M's majority label is right on 0.60 of its
100 tasks and maj@8 - pass@1 = +0.23 (docs/testtime_benchmarks.md)."""


def build_config(method: str, overrides: Sequence[str] = (), seed: int | None = None) -> AdaptConfig:
    """The adapter's config from ``key=value`` strings (values parsed as YAML and coerced
    to the field's type). ``preset=paper`` starts from the paper's values."""
    from deciplane.config import (deep_merge, from_dict, parse_override, read_old_names,
                                  set_dotted)

    cls = load_config_class(get(method, "adapt"))
    raw: dict[str, Any] = {}
    paper = False
    for item in overrides:
        key, value = parse_override(item)
        if key == "preset":
            if value not in ("paper", "cpu"):
                raise ConfigError(f"preset={value!r} is not known; use preset=paper or preset=cpu")
            paper = value == "paper"
            continue
        set_dotted(raw, key, value)
    if seed is not None:
        raw["seed"] = seed
    if paper:      # the paper's values, then the options given (old names read first)
        raw = deep_merge(cls.paper_options(), read_old_names(cls, raw))
    return from_dict(cls, raw)   # unknown options, old names, types, ranges: the one loader


def _baseline_key(model: str, benchmark: str, split: str, limit: int | None, seed: int | None,
                  votes: int | None, config: AdaptConfig, frozen_dtype: str = "float32") -> str:
    """Cache key of baseline answers; greedy answers pass ``seed=votes=None`` (they depend
    on neither, so every seed and budget shares them). ``frozen_dtype``: the precision the
    frozen weights ran in (``trunk_dtype`` as resolved on this machine)."""
    import hashlib

    parts = [model, benchmark, split, limit, seed, votes, config.max_new_tokens,
             config.temperature, config.top_p, config.system_prompt, config.instruction,
             config.answer_batch]
    if frozen_dtype != "float32":     # fp32 keys stay as they were before the option
        parts.append(frozen_dtype)
    blob = json.dumps(parts, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _cached_baseline(store: BaselineStore, name: str, key: str,
                     compute: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """``compute()``'s result, kept in the store as ``baselines-{name}-{key}.json`` (answers
    and their budget only, never gold); returns ``(result, came_from_cache)``."""
    entry = f"baselines-{name}-{key}"
    result = store.load(entry)
    if result is not None:
        return result, True
    result = compute()
    store.store(entry, result)
    return result, False


def _score_dict(report) -> dict[str, Any]:
    return {"accuracy": report.accuracy, "n_correct": report.n_correct, "count": report.count,
            "missing": report.n_missing}


def accuracy_interval(k: int, n: int) -> list[float]:
    """Wilson 95% interval of an accuracy ``k / n`` (:func:`deciplane.stats.wilson_interval`)."""
    from deciplane.stats import wilson_interval

    return [round(x, 4) for x in wilson_interval(k, n)]


@dataclass
class _Run:
    """What the steps of one adaptation run share."""

    method: str
    benchmark: str
    split: str
    model: str
    seed: int
    limit: int | None
    config: AdaptConfig
    tasks: list
    policy: Any
    adapter: BaseAdapter
    cache: BaselineStore
    report: Callable[[str, int, int, dict], None]
    benchmark_args: dict[str, Any]

    @property
    def own_answers(self) -> bool:
        """Adapters with their own answer format (code) bring their greedy answers and
        selection baseline (Probe-ERPO: consensus selection); others use majority vote."""
        return hasattr(self.adapter, "selection_answers")

    @property
    def fte_mode(self) -> bool:
        return getattr(type(self.adapter), "budget_unit", "samples") == "forward_token_equivalents"

    @property
    def selection_name(self) -> str:
        return getattr(self.adapter, "SELECTION_BASELINE", "majority_vote_equal_budget")

    def key(self, seed: int | None, votes: int | None) -> str:
        bkey = self.benchmark if not self.benchmark_args else \
            f"{self.benchmark}?{json.dumps(self.benchmark_args, sort_keys=True)}"
        return _baseline_key(self.model, bkey, self.split, self.limit, seed, votes, self.config,
                             self.adapter.frozen_dtype)


@dataclass
class _Baselines:
    """The baselines' answers and budgets (empty with ``baselines=False``)."""

    votes: int
    greedy: dict[str, str] = field(default_factory=dict)
    greedy_budget: dict[str, Any] = field(default_factory=dict)
    selection: dict[str, str] = field(default_factory=dict)
    samples: dict[str, list[str | None]] = field(default_factory=dict)
    best_of_n: dict[str, str] = field(default_factory=dict)
    selection_budget: dict[str, Any] = field(default_factory=dict)
    total: Budget = field(default_factory=Budget)


def run_adaptation(method: str, *, benchmark: str = DEFAULT_BENCHMARK, split: str = "test",
                   model: str = DEFAULT_MODEL, overrides: Sequence[str] = (), seed: int = 0,
                   run_dir: str | Path | None = None, limit: int | None = None,
                   threads: int | None = None, baselines: bool = True,
                   baseline_cache: str | Path | None = None, device: str | None = None,
                   progress: Callable[[str, int, int, dict], None] | None = None,
                   benchmark_args: dict[str, Any] | None = None,
                   resume: bool = False) -> dict[str, Any]:
    """Run one adaptation with its baselines and write the run directory; returns the
    summary dict (also in ``RUN_DIR/summary.json``).

    ``baseline_cache``: a folder where the baselines' *answers* (model outputs, no gold)
    are kept, keyed by everything they depend on (model, data, seed, votes, generation
    settings), so that TTRL and TTPO runs with the same sample budget share them.
    ``benchmark_args``: options of the benchmark's loader (e.g. an ``rg:`` family's).

    An adapter whose class says ``budget_unit = "forward_token_equivalents"`` (TASCO)
    gets its equal-budget baselines *after* its run, sized by its measured compute:
    majority vote and best-of-N over as many samples per task as that compute buys.

    Nothing is lost on a crash: the run's arguments go to ``RUN_DIR/run_args.json``, the
    baselines' answers to ``RUN_DIR/baselines/`` (unless ``baseline_cache`` names another
    folder), every step's metrics to ``RUN_DIR/metrics.jsonl`` and the adapter's state to
    ``RUN_DIR/checkpoints/`` after every step. ``resume=True`` (needs ``run_dir``)
    continues such a run — even one killed with SIGKILL — after its last finished step,
    with the arguments it was started with, and ends with the summary an uninterrupted run
    writes (same answers, same budget counts). A new run never starts in a directory that
    holds a run (:class:`~deciplane.engine.rundir.RunDir`, as for training).
    """
    import torch

    from deciplane.agents import load_policy
    from deciplane.envs import load_benchmark

    t_start = time.perf_counter()
    cpu_start = time.process_time()
    args = {"method": method, "benchmark": benchmark, "split": split, "model": model,
            "overrides": list(overrides), "seed": seed, "limit": limit,
            "baselines": baselines, "benchmark_args": dict(benchmark_args or {}),
            "baseline_cache": None if baseline_cache is None else str(baseline_cache)}
    resumes = 0
    if resume:
        args, resumes = _resume_args(run_dir, args)
    config = build_config(args["method"], args["overrides"], args["seed"])
    resolve_device(device)    # a GPU this machine lacks: ConfigError before the data loads
    if threads:
        torch.set_num_threads(int(threads))
    seed_everything(args["seed"])
    run_dir = Path(run_dir) if run_dir else Path("runs") / \
        f"adapt-{method}-{benchmark}-{split}-seed{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    rundir = RunDir(run_dir).check(resume=resume)     # a new run: never in a used directory
    report = progress or (lambda *a: None)

    tasks, scorer = load_benchmark(args["benchmark"], args["split"], limit=args["limit"],
                                   **args["benchmark_args"])
    adapter = None
    try:
        policy = load_policy(args["model"], device=device,
                             seed=args["seed"] if args["model"] == "deciplane/tiny" else 0)
        adapter = load_target(get(args["method"], "adapt"))(
            policy, config, progress=lambda s, n, m: report("adapt", s, n, m))
        if not resume:
            rundir.record(ARGS_FILE, args)
        run = _Run(args["method"], args["benchmark"], args["split"], args["model"], args["seed"],
                   args["limit"], config, tasks, policy, adapter,
                   BaselineStore(Path(args["baseline_cache"] or run_dir / "baselines")), report,
                   args["benchmark_args"])
        planned = adapter.planned_samples(len(tasks))
        base = _Baselines(votes=max(1, math.ceil(planned / len(tasks))))
        if args["baselines"]:
            base = _baselines_before(run, base.votes)
        answers = adapter.run(tasks, run_dir=run_dir)     # prompts only
        if args["baselines"] and run.fte_mode:
            base = _baselines_after(run, base)
        summary = _summary(run, scorer, answers, base, planned, resumes, args["baselines"])
        summary["wall_time_s"] = round(time.perf_counter() - t_start, 2)
        # CPU seconds of this process summed over its threads: on a shared machine this,
        # not the wall time, says what the run costs (the scorer's workers are excluded).
        summary["cpu_time_s"] = round(time.process_time() - cpu_start, 2)
        summary["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        if adapter is not None:
            adapter.close()
        scorer.close()
    return _write_results(rundir, summary, answers, base)


def _baseline(run: _Run, label: str, cache_name: str, key: str,
              compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """One baseline's answers, from the cache or computed (with progress lines)."""
    run.report(f"baseline: {label}", 0, 1, {})
    # a baseline can sample for an hour: show its prompts as they are done
    with generation_progress(lambda done, total: run.report(
            f"baseline: {label} (prompts sampled)", done, total, {})):
        result, cached = _cached_baseline(run.cache, cache_name, key, compute)
    run.report(f"baseline: {label}" + (" (cached)" if cached else ""), 1, 1, {})
    return result


def _greedy_answers(run: _Run) -> dict[str, Any]:
    b = Budget()
    if run.own_answers:
        with b.clock():
            return {"answers": run.adapter.greedy_answers(run.tasks, b), "budget": b.as_dict()}
    prompts = [run.adapter.format(t) for t in run.tasks]
    with b.clock():
        texts = generate_texts(run.policy, prompts, max_new_tokens=run.config.max_new_tokens,
                               greedy=True, budget=b, prompts_per_batch=run.config.answer_batch)
    return {"answers": {t.id: a or "" for t, a in zip(run.tasks, extract(texts))},
            "budget": b.as_dict()}


def _vote_samples(run: _Run, votes: int) -> dict[str, Any]:
    """``votes`` samples per task: their majority vote and best-of-N by mean token log-prob
    (the same samples as majority_answers: same call, same seeds)."""
    b = Budget()
    cfg = run.config
    prompts = [run.adapter.format(t) for t in run.tasks]
    with b.clock():
        res = equal_compute_baselines(
            run.policy, prompts, votes=votes, max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature, top_p=cfg.top_p, seed=run.seed + 4_242_424,
            budget=b, prompts_per_batch=max(1, cfg.answer_batch // votes))
    ids = [t.id for t in run.tasks]
    return {"answers": dict(zip(ids, res["majority"])),
            "best_of_n": dict(zip(ids, res["best_of_n"])),
            "samples": dict(zip(ids, res["samples"])), "budget": b.as_dict()}


def _selection_answers(run: _Run, votes: int) -> dict[str, Any]:
    """The equal-budget selection baseline: majority vote, or the adapter's own
    (Probe-ERPO: consensus selection)."""
    if not run.own_answers:
        return _vote_samples(run, votes)
    b = Budget()
    with b.clock():
        answers, samples = run.adapter.selection_answers(run.tasks, votes, run.seed + 4_242_424, b)
    return {"answers": answers, "samples": samples, "budget": b.as_dict()}


def _baselines_before(run: _Run, votes: int) -> _Baselines:
    """Greedy answers of the initial policy (shared by every seed and budget) and, unless
    the budget is compute measured after the run, the equal-sample selection baseline."""
    tag = f"-{run.method}" if run.own_answers else ""
    g = _baseline(run, "greedy", "greedy" + tag, run.key(None, None),
                  lambda: _greedy_answers(run))
    base = _Baselines(votes=votes, greedy=g["answers"], greedy_budget=g["budget"])
    base.total += Budget(**g["budget"])
    if not run.fte_mode:
        m = _baseline(run, "consensus selection" if run.own_answers else "majority vote",
                      "majority" + tag, run.key(run.seed, votes),
                      lambda: _selection_answers(run, votes))
        base.selection, base.samples = m["answers"], m["samples"]
        base.best_of_n = m.get("best_of_n", {})   # absent in caches written before it existed
        base.selection_budget = m["budget"]
        base.total += Budget(**m["budget"])
    return base


def _baselines_after(run: _Run, base: _Baselines) -> _Baselines:
    """Equal compute: as many samples per task as the adapter's measured forward-token
    equivalents buy, at the greedy baseline's cost per answer."""
    n = len(run.tasks)
    per_answer = max(1.0, forward_token_equivalents(base.greedy_budget) / n)
    votes = max(1, round(forward_token_equivalents(run.adapter.budget) / (n * per_answer)))
    m = _baseline(run, "majority vote / best-of-N (equal compute)", "majority-bon",
                  run.key(run.seed, votes), lambda: _vote_samples(run, votes))
    base.votes = votes
    base.selection, base.samples, base.best_of_n = m["answers"], m["samples"], m["best_of_n"]
    base.selection_budget = m["budget"]
    base.total += Budget(**m["budget"])
    return base


def _summary(run: _Run, scorer: Any, answers: dict[str, str], base: _Baselines,
             planned: int, resumes: int, with_baselines: bool) -> dict[str, Any]:
    """Score everything (gold stays in the scorer process) into the run's summary."""
    import torch

    adapter, config, n = run.adapter, run.config, len(run.tasks)
    after = scorer.score(answers)
    summary: dict[str, Any] = {
        "method": run.method, "benchmark": run.benchmark, "split": run.split,
        "model": run.model, "n_tasks": n, "seed": run.seed, "limit": run.limit,
        "device": str(run.policy.device), "torch_threads": torch.get_num_threads(),
        "frozen_dtype": adapter.frozen_dtype,
        "frozen_linears_cast": adapter.frozen_linears_cast,
        "split_fingerprint": after.split_fingerprint,
        "config": _jsonable(asdict(config)),
        "paper_values_changed": _jsonable(config.changed_from_paper()),
        "after": _score_dict(after),
        "budget": adapter.budget.as_dict(),
        "eval_budget": adapter.eval_budget.as_dict(),
        "planned_samples": planned,
        "forward_token_equivalents": forward_token_equivalents(adapter.budget),
        "benchmark_args": _jsonable(run.benchmark_args),
        "resumed": resumes,
        "status": adapter.status,
    }
    variant = getattr(config, "variant", None)
    if callable(variant):
        summary["variant"] = variant()
    if getattr(config, "NOTE", None):
        summary["method_note"] = config.NOTE
    summary["after"]["ci95"] = accuracy_interval(after.n_correct, after.count)
    if getattr(adapter, "final_answer_tokens", None) is not None:
        summary["mean_output_tokens"] = round(adapter.final_answer_tokens / max(n, 1), 2)
    if hasattr(adapter, "base_weights_unchanged"):
        summary["base_weights_sha256"] = adapter.base_sha256
        summary["base_weights_unchanged"] = adapter.base_weights_unchanged()
    curve = []
    if with_baselines:
        before = scorer.score(base.greedy)
        curve = _baseline_summary(run, scorer, summary, after, before, base)
    for steps, ans in adapter.records.checkpoints:
        curve.append({"optimizer_steps": steps, "accuracy": scorer.score(ans).accuracy})
    summary["curve"] = curve
    if hasattr(adapter, "summary_extra"):   # adapter-specific notes and counters
        summary.update(_jsonable(adapter.summary_extra()))
    # what the collapse guard did ({} when it did not fire or was off: config.guard)
    summary["collapse"] = _jsonable(adapter.guard.fired)
    summary["guard"] = {"enabled": config.guard,
                        "starting_state": _jsonable(adapter.guard.reference),
                        "probe_tasks": min(config.guard_probe, n)}
    summary["guard_budget"] = adapter.guard_budget.as_dict()
    summary["diagnostics"] = _diagnostics(scorer, adapter)
    return summary


def _baseline_summary(run: _Run, scorer: Any, summary: dict[str, Any], after: Any,
                      before: Any, base: _Baselines) -> list[dict[str, Any]]:
    """The baselines' scores and the paired comparisons into ``summary``; returns the
    curve's starting point (greedy answers before any step)."""
    adapter, n, votes = run.adapter, len(run.tasks), base.votes
    sel_name = run.selection_name
    majority = scorer.score(base.selection)
    sampled = scorer.sample_accuracy(base.samples)
    m_budget = base.selection_budget
    summary["before"] = _score_dict(before)
    summary["baselines"] = {
        "no_adaptation_greedy": {**_score_dict(before),
                                 "ci95": accuracy_interval(before.n_correct, before.count),
                                 "mean_output_tokens": round(
                                     base.greedy_budget["generated_tokens"] / max(n, 1), 2)},
        "no_adaptation_sampled": {"accuracy": sampled.mean, "pass_any": sampled.pass_any,
                                  "samples_per_task": votes,
                                  "note": "sampled pass@1 averaged over the samples of " + sel_name},
        sel_name: {**_score_dict(majority), "votes_per_task": votes,
                   "ci95": accuracy_interval(majority.n_correct, majority.count),
                   "samples": votes * n,
                   "adapter_samples": adapter.budget.samples,
                   "budget_unit": "forward_token_equivalents" if run.fte_mode else "samples",
                   "forward_token_equivalents": forward_token_equivalents(m_budget),
                   "mean_output_tokens_per_sample": round(
                       m_budget["generated_tokens"] / max(m_budget["samples"], 1), 2)},
    }
    paired = {"no_adaptation_greedy": paired_vs(after.correct, before.correct),
              sel_name: paired_vs(after.correct, majority.correct)}
    if base.best_of_n:
        best = scorer.score(base.best_of_n)
        summary["baselines"]["best_of_n_equal_budget"] = {
            **_score_dict(best), "n_per_task": votes,
            "ci95": accuracy_interval(best.n_correct, best.count),
            "selection": "highest mean token log-prob of the sample (no gold)",
            "note": "the same samples as majority_vote_equal_budget"}
        paired["best_of_n_equal_budget"] = paired_vs(after.correct, best.correct)
    summary["paired_vs_baselines"] = paired
    summary["baseline_budget"] = base.total.as_dict()
    if run.config.final_answer == "greedy":
        return [{"optimizer_steps": 0, "accuracy": before.accuracy}]
    return []


def _write_results(rundir: RunDir, summary: dict[str, Any], answers: dict[str, str],
                   base: _Baselines) -> dict[str, Any]:
    """answers.json, the plot and summary.json; a finished run keeps its results, not its
    state (the checkpoints are removed)."""
    run_dir = rundir.path
    atomic_write_json(run_dir / "answers.json", {"after": answers, "before_greedy": base.greedy,
                                                 "majority_vote_equal_budget": base.selection})
    summary["plot"] = plot_curve(summary, run_dir / "accuracy_vs_steps.png")
    summary["run_dir"] = str(run_dir)
    rundir.write_summary(summary)
    rundir.remove_state()
    return summary


def _resume_args(run_dir: str | Path | None, given: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The arguments a run in ``run_dir`` was started with, and how many times it has been
    resumed before (counted in ``run_args.json``). Arguments in ``given`` that differ
    from the stored ones are an error, except those left at ``run_adaptation``'s defaults
    (a resume command need not repeat them)."""
    import inspect

    if run_dir is None:
        raise ConfigError("resume needs the run directory of the run to continue (--run-dir)")
    path = Path(run_dir) / ARGS_FILE
    if (Path(run_dir) / SUMMARY_FILE).is_file():
        raise ConfigError(f"{run_dir} holds a finished run (summary.json); nothing to resume")
    if not path.is_file():
        raise ConfigError(f"{path} not found: {run_dir} is not a `deciplane adapt` run directory "
                          "(or the run stopped before it loaded its model); start it again "
                          "without --resume")
    stored = json.loads(path.read_text())
    defaults = {k: p.default for k, p in inspect.signature(run_adaptation).parameters.items()}
    defaults.update(overrides=[], benchmark_args={})
    recorded = {k: stored[k] for k in given if k in stored}   # in the arguments' order
    differ = changed_on_resume(recorded, given, defaults=defaults)
    if differ:
        raise ConfigError("resume continues the run with its own arguments; these differ: "
                          + ", ".join(f"{k}={given[k]!r} (run: {stored[k]!r})" for k in differ))
    resumes = int(stored.get("resumes", 0)) + 1
    atomic_write_json(path, {**stored, "resumes": resumes})
    return stored, resumes


def _diagnostics(scorer, adapter: BaseAdapter) -> dict[str, Any]:
    """Gold-side diagnostics, computed by the scorer after the run."""
    rec = adapter.records
    out: dict[str, Any] = {"votes": len(rec.votes), "ties": rec.ties,
                           "skipped_prompts": rec.skipped_prompts}
    if rec.votes:
        first = scorer.label_accuracy(rec.first_labels())
        last = scorer.label_accuracy(rec.last_labels())
        by_step: dict[int, dict[str, str | None]] = {}
        for v in rec.votes:
            by_step.setdefault(v.step, {})[v.task_id] = v.majority
        reps = [scorer.label_accuracy(labels) for labels in by_step.values()]
        n_lab = sum(r.n_labelled for r in reps)
        all_acc = sum(r.n_correct for r in reps) / n_lab if n_lab else 0.0
        rewards = scorer.reward_accuracy(rec.reward_samples())
        out.update({
            "pseudo_label_accuracy_first_vote": first.accuracy,
            "pseudo_label_accuracy_last_vote": last.accuracy,
            "pseudo_label_accuracy_all_votes": all_acc,
            "pseudo_label_coverage": first.coverage,
            "reward_accuracy": rewards.accuracy,
            "reward": rewards.to_dict(),
        })
    return out


def _jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str))


def plot_curve(summary: dict[str, Any], path: Path) -> str | None:
    """Accuracy vs optimizer steps with the baselines as horizontal lines (PNG)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return None
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    curve = summary.get("curve", [])
    if curve:
        ax.plot([c["optimizer_steps"] for c in curve], [c["accuracy"] for c in curve], "o-",
                label=f"{summary['method'].upper()} (greedy answers)", color="C0")
    styles = {"no_adaptation_greedy": ("C1", "--"), "no_adaptation_sampled": ("C2", ":"),
              "majority_vote_equal_budget": ("C3", "-.")}
    for name, b in summary.get("baselines", {}).items():
        color, ls = styles.get(name, ("gray", "--"))
        label = name if "votes_per_task" not in b else \
            f"{name.split('_equal')[0].replace('_', ' ')} @{b['votes_per_task']} (equal samples)"
        ax.axhline(b["accuracy"], color=color, ls=ls, label=label)
    ax.set_xlabel("optimizer steps")
    ax.set_ylabel("held-out accuracy")
    ax.set_title(f"{summary['method'].upper()} on {summary['benchmark']}/{summary['split']} "
                 f"(n={summary['n_tasks']}, seed {summary['seed']})", fontsize=9)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path.name


__all__ = ["ADAPTERS", "build_config", "run_adaptation", "plot_curve"]
