"""``deciplane report RUN_DIR``: PNG learning curves and a markdown summary of a run."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from deciplane.errors import DeciplaneError
from deciplane.trainers.logger import read_metrics
from deciplane.utils import flatten_dict

# figure name -> metric-name prefixes it shows
_FIGURES = {
    "learning_curve": ("rollout/success", "rollout/return", "rollout/accuracy", "rollout/reward",
                       "eval/"),
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


def _final_points(run_dir: Path) -> list[dict[str, Any]]:
    """The final held-out evaluation of summary.json as one more record."""
    p = run_dir / "summary.json"
    if not p.is_file():
        return []
    s = json.loads(p.read_text())
    rec: dict[str, Any] = {"env_steps": s.get("env_steps", 0), "iteration": s.get("iterations")}
    for split, m in (s.get("eval") or {}).items():
        for k, v in m.items():
            rec[f"eval/{split}/{k}"] = v
    return [rec] if len(rec) > 2 else []


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write one PNG per figure group that has data; return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    records = read_metrics(run_dir) + _final_points(run_dir)
    out = []
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
        ax.set_title(f"{run_dir.name}: {name.replace('_', ' ')}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        path = run_dir / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out.append(path)
    return out


def markdown_summary(run_dir: str | Path) -> str:
    run_dir = Path(run_dir)
    summary = {}
    if (run_dir / "summary.json").is_file():
        summary = json.loads((run_dir / "summary.json").read_text())
    records = read_metrics(run_dir)
    lines = [f"# Run report: `{run_dir.name}`", ""]
    if summary:
        cfg = summary.get("config", {})
        lines += [f"- algorithm: `{cfg.get('algorithm', '?')}`, model: "
                  f"`{cfg.get('model', {}).get('name', '?')}` "
                  f"({cfg.get('model', {}).get('finetune', '?')})",
                  f"- seed: {summary.get('seed')}, status: {summary.get('status', '?')}",
                  f"- wall time: {summary.get('wall_time_s', float('nan')):.1f} s, env steps: "
                  f"{summary.get('env_steps')}, optimizer steps: {summary.get('optimizer_steps')}"
                  f" (skipped {summary.get('skipped_steps', 0)})"]
        if summary.get("warm_start"):
            lines.append(f"- behaviour-cloning warm start: {summary['warm_start']}")
        if summary.get("split_fingerprints"):
            fps = ", ".join(f"{k}={v}" for k, v in summary["split_fingerprints"].items())
            lines.append(f"- split fingerprints: {fps}")
        before = flatten_dict(summary.get("before", {}))
        warm = flatten_dict(summary.get("after_warm_start") or {})
        after = flatten_dict(summary.get("eval", {}))
        if warm:
            lines += ["", "| metric | before | after warm start | after |", "|---|---|---|---|"]
            for k in sorted(after):
                lines.append(f"| eval.{k} | {_fmt(before.get(k, ''))} | {_fmt(warm.get(k, ''))} "
                             f"| {_fmt(after[k])} |")
        else:
            lines += ["", "| metric | before | after |", "|---|---|---|"]
            for k in sorted(after):
                lines.append(f"| eval.{k} | {_fmt(before.get(k, ''))} | {_fmt(after[k])} |")
    if records:
        last = records[-1]
        lines += ["", f"Last logged iteration: {last.get('iteration')}", "",
                  "| metric | last value |", "|---|---|"]
        for k in sorted(last):
            if k != "iteration":
                lines.append(f"| {k} | {_fmt(last[k])} |")
    return "\n".join(lines) + "\n"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def write_report(run_dir: str | Path) -> tuple[Path, list[Path]]:
    """Write ``report.md`` and PNG curves into ``run_dir``; return their paths."""
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.jsonl").is_file() and not (run_dir / "summary.json").is_file():
        raise ReportError(f"{run_dir} has no metrics.jsonl or summary.json; pass the --run-dir "
                          "of a `deciplane train` run")
    pngs = plot_run(run_dir)
    md = markdown_summary(run_dir)
    if pngs:
        md += "\n" + "\n".join(f"![{p.stem}]({p.name})" for p in pngs) + "\n"
    path = run_dir / "report.md"
    path.write_text(md)
    return path, pngs
