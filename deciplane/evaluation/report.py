"""``deciplane report RUN_DIR``: PNG learning curves and a markdown summary of a run."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from deciplane.errors import DeciplaneError
from deciplane.engine.logger import read_metrics
from deciplane.engine.rundir import CONFIG_FILE
from deciplane.methods import get as get_method

# figure name -> metric-name prefixes it shows
_FIGURES = {
    "returns": ("rollout/return", "rollout/reward"),
    "losses": ("loss/",),
    "diagnostics": ("cord/", "tlm_dre/", "distill/", "rollout/episode_len", "rollout/invalid",
                    "eval/"),
}
# which eval metrics go on which figure (counts and lengths would squash the rates)
_RATE_SUFFIXES = ("success_rate", "accuracy", "mean_return")


class ReportError(DeciplaneError, FileNotFoundError):
    """The run directory has nothing to report."""


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for r in records:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            xs.append(r.get("env_steps", r.get("iteration", 0)))
            ys.append(float(v))
    return xs, ys


def _keys(records: list[dict[str, Any]], prefixes: tuple[str, ...], figure: str) -> list[str]:
    keys: set[str] = set()
    for r in records:
        for k, v in r.items():
            if any(k.startswith(p) for p in prefixes) and isinstance(v, (int, float)) \
                    and not isinstance(v, bool):
                if k.startswith("eval/"):
                    rate = k.endswith(_RATE_SUFFIXES)
                    if (figure == "learning_curve") != rate or k.endswith(("episodes", "count")):
                        continue
                keys.add(k)
    return sorted(keys)


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write one PNG per figure group that has data; return their paths.

    ``learning_curve.png`` is success rate against environment steps: the training
    rollouts (with a 95% Wilson band from each iteration's episodes) and every held-out
    evaluation (zero-shot, after the warm start, during training, final; 95% Wilson
    error bars), each line drawn only through points that were measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    out = []
    for curve in (plot_learning_curve(run_dir, records), plot_env_curves(run_dir, records)):
        if curve is not None:
            out.append(curve)
    for name, prefixes in _FIGURES.items():
        keys = _keys(records, prefixes, name)
        if not keys:
            continue
        fig, ax = plt.subplots(figsize=(7, 4))
        for k in keys[:12]:
            xs, ys = _series(records, k)
            if xs:
                ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, ms=3, label=k)
        ax.set_xlabel("environment steps" if any("env_steps" in r for r in records)
                      else "iteration")
        ax.set_ylabel({"returns": "return / reward per episode", "losses": "loss",
                       "diagnostics": "value (see legend)"}.get(name, name))
        ax.set_title(f"{run_dir.name}: {name.replace('_', ' ')}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        out.append(_save_figure(fig, run_dir / f"{name}.png"))
    return out


def rollout_points(records: list[dict[str, Any]], env: str | None = None
                   ) -> list[tuple[float, float, int]]:
    """``(env_steps, success rate, episodes)`` of each logged training iteration (its
    episodes: the difference of the cumulative ``episodes`` counter); of a suite's env
    ``env``: the iterations that drew it (``rollout/ENV/success``, ``rollout/ENV/episodes``)."""
    pts, prev = [], None
    key = "rollout/success" if env is None else f"rollout/{env}/success"
    for r in records:
        if r.get("iteration", 0) < 1 or not isinstance(r.get(key), (int, float)):
            continue
        if env is not None:
            n = int(r.get(f"rollout/{env}/episodes") or 0)
        else:
            eps = r.get("episodes")
            n = int(eps - prev) if isinstance(eps, int) and prev is not None else int(eps or 0)
            prev = eps if isinstance(eps, int) else prev
        pts.append((float(r.get("env_steps", 0)), float(r[key]), max(n, 0)))
    return pts


def eval_points(summary: dict[str, Any], records: list[dict[str, Any]],
                env: str | None = None) -> dict[str, list[tuple[float, str, dict[str, Any]]]]:
    """Per split, the held-out evaluations in env-step order: ``(env_steps, stage,
    metrics)`` for zero-shot (0), after the warm start (its expert env steps), during
    training (from metrics.jsonl) and final (the run's env steps); of a suite's env ``env``
    when given (each result's ``per_env``)."""
    def pick(m: dict[str, Any]) -> dict[str, Any] | None:
        return m if env is None else (m.get("per_env") or {}).get(env)

    out: dict[str, list[tuple[float, str, dict[str, Any]]]] = {}
    warm_steps = float((summary.get("warm_start") or {}).get("env_steps", 0) or 0)
    for stage, key, x in (("zero-shot", "before", 0.0),
                          ("after warm start", "after_warm_start", warm_steps)):
        for split, m in (summary.get(key) or {}).items():
            if pick(m):
                out.setdefault(split, []).append((x, stage, pick(m)))
    parts = 3 if env is None else 4       # eval/SPLIT/success_rate, eval/SPLIT/ENV/...
    for r in records:
        if r.get("iteration", 0) < 1:
            continue
        for k, v in r.items():
            path = k.split("/")
            if k.startswith("eval/") and k.endswith("/success_rate") and len(path) == parts \
                    and (env is None or path[2] == env):
                prefix = "/".join(path[:-1])
                out.setdefault(path[1], []).append(
                    (float(r.get("env_steps", 0)), "during training",
                     {"success_rate": v, "episodes": r.get(f"{prefix}/episodes")}))
    for split, m in (summary.get("eval") or {}).items():
        if pick(m):
            out.setdefault(split, []).append((float(summary.get("env_steps", 0)), "final",
                                              pick(m)))
    for pts in out.values():
        pts.sort(key=lambda p: p[0])
    return out


def suite_envs(summary: dict[str, Any]) -> list[str]:
    """The env names of a suite run (its summary's ``config.envs``), or [] for one env."""
    return [e["name"] for e in (summary.get("config") or {}).get("envs") or []]


def plot_learning_curve(run_dir: Path, records: list[dict[str, Any]]) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from deciplane.stats import wilson_interval

    summary = _read_summary(run_dir)
    roll = rollout_points(records)
    evals = eval_points(summary, records)
    if not roll and not evals:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    _draw_curve(ax, roll, evals)
    ax.set_title(f"{run_dir.name}: learning curve")
    return _save_figure(fig, run_dir / "learning_curve.png")


def plot_env_curves(run_dir: Path, records: list[dict[str, Any]]) -> Path | None:
    """``learning_curve_per_env.png`` of a suite run: one panel per env (its rollouts and
    held-out evaluations, as :func:`plot_learning_curve`) on shared axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = _read_summary(run_dir)
    envs = suite_envs(summary)
    if not envs:
        return None
    cols = min(3, len(envs))
    rows = -(-len(envs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), sharex=True,
                             sharey=True, squeeze=False)
    for ax, env in zip(axes.flat, envs):
        _draw_curve(ax, rollout_points(records, env), eval_points(summary, records, env),
                    legend=ax is axes.flat[0])
        ax.set_title(env, fontsize=9)
    for ax in list(axes.flat)[len(envs):]:
        ax.set_visible(False)
    fig.suptitle(f"{run_dir.name}: learning curve per env")
    return _save_figure(fig, run_dir / "learning_curve_per_env.png")


def _save_figure(fig: Any, path: Path) -> Path:
    """Lay out, write (110 dpi) and close ``fig``."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _draw_curve(ax: Any, roll: list[tuple[float, float, int]],
                evals: dict[str, list[tuple[float, str, dict[str, Any]]]],
                legend: bool = True) -> None:
    """Training rollouts (a 95% Wilson band) and held-out evaluations (95% Wilson error
    bars) against env steps, on ``ax``."""
    from deciplane.stats import wilson_interval

    if roll:
        xs = [p[0] for p in roll]
        ys = [p[1] for p in roll]
        band = [wilson_interval(round(p[1] * p[2]), p[2]) if p[2] else (p[1], p[1])
                for p in roll]
        ax.plot(xs, ys, marker="o", ms=3, label="training rollouts (sampled)")
        ax.fill_between(xs, [b[0] for b in band], [b[1] for b in band], alpha=0.2)
    markers = {"zero-shot": "s", "after warm start": "D", "during training": "o", "final": "*"}
    for split, pts in sorted(evals.items()):
        xs, ys, lo, hi = [], [], [], []
        for x, stage, m in pts:
            rate = m.get("success_rate")
            if not isinstance(rate, (int, float)):
                continue
            ci = m.get("success_ci95")
            n = m.get("episodes")
            if not ci and isinstance(n, int) and n > 0:
                ci = wilson_interval(round(rate * n), n)
            ci = ci or (rate, rate)
            xs.append(x)
            ys.append(rate)
            lo.append(max(0.0, rate - ci[0]))     # rounding can put a bound past the rate
            hi.append(max(0.0, ci[1] - rate))
            ax.plot([x], [rate], marker=markers.get(stage, "o"), ms=8, color="C1" if split
                    == "test" else "C2", linestyle="none")
            ax.annotate(stage, (x, rate), textcoords="offset points", xytext=(4, 4),
                        fontsize=7)
        if xs:
            ax.errorbar(xs, ys, yerr=[lo, hi], capsize=3, marker=None,
                        color="C1" if split == "test" else "C2",
                        label=f"held-out {split} (greedy), 95% Wilson interval")
    ax.set_xlabel("environment steps (expert warm-start episodes included)")
    ax.set_ylabel("success rate (episodes won)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=7, loc="best")


def _read_summary(run_dir: Path) -> dict[str, Any]:
    p = run_dir / "summary.json"
    return json.loads(p.read_text()) if p.is_file() else {}


def markdown_summary(run_dir: str | Path, baselines: dict[str, dict[str, Any]] | None = None
                     ) -> str:
    """report.md: the run, the held-out results side by side (random, zero-shot, BC-only,
    RL, expert on the same episodes, with 95% intervals), the paired comparisons, where the
    time went, and the last training iteration's metrics."""
    run_dir = Path(run_dir)
    summary = _read_summary(run_dir)
    records = read_metrics(run_dir)
    lines = [f"# Run report: `{run_dir.name}`", ""]
    if summary:
        cfg = summary.get("config", {})
        envs = cfg.get("envs") or [cfg.get("env", {})]
        lines += [f"- algorithm: `{cfg.get('algorithm', '?')}`, model: "
                  f"`{cfg.get('model', {}).get('name', '?')}` "
                  f"({cfg.get('model', {}).get('finetune', '?')}), "
                  + ("env" if len(envs) == 1 else f"a suite of {len(envs)} envs") + ": "
                  + "; ".join((f"{e['name']} (weight {e.get('weight', 1):g}) = "
                               if "name" in e else "")
                              + f"`{e.get('id', '?')}` {e.get('kwargs', '')}" for e in envs),
                  f"- seed: {summary.get('seed')}, status: {summary.get('status', '?')}",
                  f"- RL iterations: {summary.get('iterations')}, wall time: "
                  f"{summary.get('wall_time_s', float('nan')):.1f} s, env steps: "
                  f"{summary.get('env_steps')}, optimizer steps: {summary.get('optimizer_steps')}"
                  f" (skipped {summary.get('skipped_steps', 0)})"]
        if summary.get("warm_start"):
            ws = {k: v for k, v in summary["warm_start"].items() if k != "valid_curve"}
            lines.append(f"- behaviour-cloning warm start: {ws}")
            curve = summary["warm_start"].get("valid_curve")
            if curve:
                lines.append("- warm start, held-out expert episodes per epoch (NLL, "
                             "agreement): " + ", ".join(
                                 f"{int(r['epoch'])}: {-r['valid']:.3f} / "
                                 f"{r.get('valid_agreement', float('nan')):.0%}" for r in curve))
        if summary.get("groups_with_signal"):
            g = summary["groups_with_signal"]
            lines.append("- groups whose returns differ (RL signal), per iteration: "
                         + ", ".join(f"{x:.0%}" for x in g))
        if summary.get("step_group_share"):
            g = summary["step_group_share"]
            lines.append("- decisions in a GiGPO step group of 2 or more (a recurring "
                         "state), per iteration: " + ", ".join(f"{x:.0%}" for x in g))
        if summary.get("split_fingerprints"):
            fps = ", ".join(f"{k}={v}" for k, v in summary["split_fingerprints"].items())
            lines.append(f"- split fingerprints: {fps}")
        prov = summary.get("provenance") or {}
        if prov:
            pk = ", ".join(f"{k} {v}" for k, v in (prov.get("packages") or {}).items())
            lines.append(f"- provenance: commit {prov.get('commit')}, python "
                         f"{prov.get('python')}, java {prov.get('java')}; {pk}")
        lines += _results_table(summary, baselines or {})
        lines += _comparisons(summary)
        lines += _time_table(summary)
    if records:
        train = [r for r in records if r.get("iteration", 0) >= 1]
        if train:
            last = train[-1]
            lines += ["", f"## Last training iteration ({last.get('iteration')})", "",
                      "Rollout, loss and optimizer metrics of that iteration (held-out "
                      "results are in the table above).", "", "| metric | value |", "|---|---|"]
            for k in sorted(last):
                if k != "iteration" and not k.startswith("eval/"):
                    lines.append(f"| {k} | {_fmt(last[k])} |")
        else:
            lines += ["", "No RL iteration ran (see status and the time table)."]
    return "\n".join(lines) + "\n"


STAGES = (("zero-shot, labels readout", "zero_shot_labels"), ("zero-shot", "before"),
          ("BC-only (after warm start)", "after_warm_start"), ("RL (final)", "eval"))


def _results_table(summary: dict[str, Any], baselines: dict[str, dict[str, Any]]) -> list[str]:
    """The held-out rows: per split, or per split and env of a suite (``SPLIT/ENV``, then
    the suite's pooled episodes and its macro average)."""
    rows: list[tuple[str, str, dict[str, Any]]] = []
    splits = sorted({s for _, k in STAGES for s in (summary.get(k) or {})})
    envs = suite_envs(summary)
    for split in splits:
        for scope, env in [(f"{split}/{e}", e) for e in envs] + [(split, None)]:
            if "random" in baselines.get(scope, {}):
                rows.append((scope, "random", baselines[scope]["random"]))
            for label, key in STAGES:
                m = (summary.get(key) or {}).get(split)
                if m and env is not None:
                    m = (m.get("per_env") or {}).get(env)
                if m:
                    rows.append((scope if not envs or env else f"{split} (all envs pooled)",
                                 label, m))
            if "expert" in baselines.get(scope, {}):
                rows.append((scope, "expert", baselines[scope]["expert"]))
    if not rows:
        return []
    out = ["", "## Held-out results", "",
           "Greedy decisions; every row played the same episodes (same games, same menu "
           "order) unless its fingerprint or episode count differs.", "",
           "| split | agent | episodes | success (95% CI) | mean steps | invalid rate | "
           "fingerprint |", "|---|---|---|---|---|---|---|"]
    for split, label, m in rows:
        ci = m.get("success_ci95")
        rate = m.get("success_rate", float("nan"))
        n = m.get("episodes")
        if not ci and isinstance(n, int) and n > 0 and isinstance(rate, (int, float)):
            from deciplane.stats import wilson_interval

            ci = wilson_interval(round(rate * n), n)      # summaries written before 0.2
        ci_s = f" ({ci[0]:.0%}-{ci[1]:.0%})" if ci else ""
        inv = m.get("invalid_rate", m.get("invalid_action_rate", float("nan")))
        out.append(f"| {split} | {label} | {m.get('episodes')} | {rate:.0%}{ci_s} | "
                   f"{_fmt(m.get('mean_steps', float('nan')))} | {_fmt(inv)} | "
                   f"{m.get('split_fingerprint', '')} |")
    if envs:
        out += _macro_table(summary, splits)
    cached = summary.get("baseline_cache") or {}
    if cached:   # a zero-shot row this run did not play: say so where it is read
        names = {"labels": "zero-shot, labels readout", "trained": "zero-shot"}
        read = ", ".join(f"{names.get(k.split('/')[0], k)} on {k.split('/')[-1]} ({v})"
                         for k, v in sorted(cached.items()))
        out += ["", f"Read from the baseline cache ($DECIPLANE_HOME/baselines), not played "
                f"in this run: {read}."]
    return out


def _macro_table(summary: dict[str, Any], splits: list[str]) -> list[str]:
    """A suite's macro average per stage: the mean of its envs' success rates."""
    out = ["", "Macro average of the suite (each env counts once, whatever its episodes):", "",
           "| split | agent | macro success |", "|---|---|---|"]
    for split in splits:
        for label, key in STAGES:
            m = (summary.get(key) or {}).get(split) or {}
            if isinstance(m.get("macro_success_rate"), (int, float)):
                out.append(f"| {split} | {label} | {m['macro_success_rate']:.0%} |")
    return out


def _comparisons(summary: dict[str, Any]) -> list[str]:
    comps = dict(summary.get("comparisons") or {})
    for env, per_split in (summary.get("comparisons_per_env") or {}).items():
        comps.update({f"{split}/{env}": cs for split, cs in per_split.items()})
    if not comps:
        return []
    out = ["", "## Paired comparisons (same episodes, 95%)", "",
           "| split | A - B | episodes | only A won | only B won | difference (95% CI) | "
           "McNemar p | A better at 95% |", "|---|---|---|---|---|---|---|---|"]
    for split, cs in sorted(comps.items()):
        for name, c in cs.items():
            lo, hi = c["ci95"]
            out.append(f"| {split} | {name} | {c['n']} | {c['only_a']} | {c['only_b']} | "
                       f"{c['difference']:+.0%} ({lo:+.0%} to {hi:+.0%}) | "
                       f"{c['mcnemar_p']:.3g} | {'yes' if c.get('a_better_95') else 'no'} |")
    return out


def _time_table(summary: dict[str, Any]) -> list[str]:
    t = summary.get("time") or {}
    phases = t.get("phases_s") or {}
    if not phases:
        return []
    out = ["", "## Where the time went", "", "| phase | seconds | share of wall time |",
           "|---|---|---|"]
    share = t.get("share_of_wall") or {}
    for k, v in sorted(phases.items(), key=lambda kv: -kv[1]):
        out.append(f"| {k} | {v:.1f} | {share.get(k, 0):.0%} |")
    plan = summary.get("plan") or {}
    if plan.get("max_wall_time_s") is not None:
        out += ["", f"Plan: budget {plan['max_wall_time_s']:.0f} s; evaluations at most "
                f"{plan.get('eval_share', 0):.0%} ({plan.get('eval_episodes')} of "
                f"{plan.get('eval_episodes_requested')} episodes each), warm start at most "
                f"{plan.get('warm_start_share', 0):.0%}; longest evaluation "
                f"{_fmt(plan.get('eval_s_max'))} s, longest iteration "
                f"{_fmt(plan.get('iteration_s_max'))} s."]
        if plan.get("eval_cut_reason"):
            out.append(f"Evaluation episodes cut: {plan['eval_cut_reason']}.")
    cost = summary.get("decision_cost")
    if cost:
        out += ["", "## Cost of a decision (this process)", "",
                "| phase | decisions | prompt tokens per decision | tokens computed per "
                "decision | CPU-s per decision |", "|---|---|---|---|---|"]
        for phase, row in (cost.get("phases") or {}).items():
            out.append(f"| {phase} | {row['decisions']} | {row['prompt_tokens_per_decision']:.0f} "
                       f"| {row['computed_tokens_per_decision']:.0f} | "
                       f"{row['cpu_s_per_decision']:.3f} |")
        cache = cost.get("prompt_cache")
        if cache:
            out.append(f"\nPrompt cache (blocks of {cache['block_tokens']} tokens, at most "
                       f"{cache['max_bytes'] / 2 ** 30:.1f} GiB per process): "
                       f"{cache['reuse_share']:.0%} of the tokens it was asked for read from it, "
                       f"{cache['evictions']} blocks evicted.")
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list) and len(v) > 6:
        return f"[{len(v)} values]"
    return str(v)


BASELINES_FILE = "baselines.json"


def run_baselines(run_dir: str | Path) -> dict[str, dict[str, Any]]:
    """Random play and the env expert on the episodes the run's held-out evaluations
    played (same split, episode count and seeds, hence the same games and menus; no model
    needed), per split (a suite: per ``SPLIT/ENV``): ``{split: {"random": metrics,
    "expert": metrics}}``. Cached in ``RUN_DIR/baselines.json`` under the split fingerprint
    and episode count."""
    from deciplane.evaluation.evaluate import ExpertAgent, RandomAgent, evaluate_agent
    from deciplane.evaluation.run_eval import read_run_config, run_env, run_env_kwargs

    run_dir = Path(run_dir)
    summary = _read_summary(run_dir)
    cache_path = run_dir / BASELINES_FILE
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    config = read_run_config(run_dir)
    if get_method(config.algorithm, "train").evaluates_on != "env":
        return {}
    out: dict[str, dict[str, Any]] = {}
    scopes = []           # (row scope, env name or None, the result the run recorded)
    for split, m in (summary.get("eval") or {}).items():
        if m.get("per_env"):
            scopes += [(f"{split}/{env}", env, r) for env, r in m["per_env"].items()]
        else:
            scopes.append((split, None, m))
    for scope, env, m in scopes:
        split = scope.split("/")[0]
        section = run_env(config, env)
        n = m.get("episodes")
        fp = m.get("split_fingerprint")
        if not isinstance(n, int) or n < 1:
            continue
        key = f"{scope}|{fp}|{n}|{section.max_episode_steps}"
        if key not in cache:
            env_split, kwargs = run_env_kwargs(config, split, env=env)
            res = {}
            for agent in (RandomAgent(seed=0), ExpertAgent()):
                rep = evaluate_agent(section.id, agent, split=env_split, episodes=n,
                                     seed=0, env_kwargs=kwargs, progress=False)
                res[agent.name] = {"success_rate": rep.success_rate,
                                   "success_ci95": list(rep.success_ci95),
                                   "episodes": rep.episodes, "mean_steps": rep.mean_steps,
                                   "invalid_rate": rep.invalid_action_rate,
                                   "split_fingerprint": rep.split_fingerprint}
            cache[key] = res
            cache_path.write_text(json.dumps(cache, indent=1, sort_keys=True))
        out[scope] = cache[key]
    return out


def write_report(run_dir: str | Path, baselines: bool = True) -> tuple[Path, list[Path]]:
    """Write ``report.md`` and PNG curves into ``run_dir``; return their paths.
    ``baselines``: also play random and expert on the same held-out episodes (cached)."""
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.jsonl").is_file() and not (run_dir / "summary.json").is_file():
        raise ReportError(f"{run_dir} has no metrics.jsonl or summary.json; pass the --run-dir "
                          "of a `deciplane train` run")
    pngs = plot_run(run_dir)
    base: dict[str, dict[str, Any]] = {}
    note = ""
    if baselines and (run_dir / CONFIG_FILE).is_file():
        try:
            base = run_baselines(run_dir)
        except Exception as e:  # noqa: BLE001 - the report still has the run's own rows
            note = f"\n(random/expert rows left out: {type(e).__name__}: {e})\n"
    md = markdown_summary(run_dir, base) + note
    if pngs:
        md += "\n" + "\n".join(f"![{p.stem}]({p.name})" for p in pngs) + "\n"
    path = run_dir / "report.md"
    path.write_text(md)
    return path, pngs
