"""Run logging: ``metrics.jsonl`` (one record per iteration), TensorBoard, a rich progress bar.

``metrics.jsonl`` is the source of truth (reports and tests read it); on resume, records
newer than the checkpoint are dropped, so a killed-and-resumed run's file equals an
uninterrupted run's. TensorBoard gets the same scalars (``purge_step`` on resume).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

METRICS_FILE = "metrics.jsonl"
# metrics shown in the progress bar, if present
_SHOWN = ("rollout/success", "rollout/return", "eval/valid/success_rate", "loss/total",
          "rollout/accuracy")


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every record of ``RUN_DIR/metrics.jsonl`` (a torn last line is ignored)."""
    p = Path(run_dir) / METRICS_FILE
    if not p.is_file():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


class RunLogger:
    """Writes metrics to jsonl + TensorBoard and drives a progress bar."""

    def __init__(self, run_dir: str | Path, total: int, start: int = 0,
                 progress: bool = True, tensorboard: bool = True,
                 console: Console | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        self._truncate_after(start)
        self._fh = open(self.path, "a")
        if console is None:
            console = Console(stderr=True)
            if not console.is_terminal:    # a log file: long lines, not wrapped at 80
                console = Console(stderr=True, width=200)
        self.console = console
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.run_dir / "tb"),
                                         purge_step=start + 1 if start else None)
            except Exception as e:  # noqa: BLE001 - tensorboard missing or broken
                self.console.print(f"[yellow]TensorBoard disabled ({e}); metrics.jsonl is "
                                   "still written[/yellow]")
        self._progress = None
        if progress:
            self._progress = Progress(TextColumn("[bold]train[/bold]"), BarColumn(),
                                      MofNCompleteColumn(), TimeElapsedColumn(),
                                      TimeRemainingColumn(), TextColumn("{task.description}"),
                                      console=self.console, transient=False)
            self._progress.start()
            self._task = self._progress.add_task("", total=total, completed=start)

    def _truncate_after(self, iteration: int) -> None:
        """Drop records with ``iteration > iteration`` (left over from a killed run)."""
        if not self.path.exists():
            return
        keep = [r for r in read_metrics(self.run_dir) if r.get("iteration", 0) <= iteration]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in keep))
        os.replace(tmp, self.path)

    def log(self, iteration: int, metrics: dict[str, Any]) -> None:
        rec = {"iteration": iteration, **{k: _clean(v) for k, v in metrics.items()}}
        self._fh.write(json.dumps(rec, sort_keys=True) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        if self._tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    self._tb.add_scalar(k, v, iteration)
            self._tb.flush()
        if self._progress is not None:
            shown = "  ".join(f"{k.split('/')[-1]}={metrics[k]:.3g}" for k in _SHOWN
                              if isinstance(metrics.get(k), (int, float)))
            self._progress.update(self._task, completed=iteration, description=shown)
            if not self.console.is_terminal and iteration > 0:   # a log file: one line each
                self.console.print(f"iteration {iteration}/{self._progress.tasks[0].total:.0f} "
                                   f"{shown}".rstrip(), highlight=False)

    def event(self, phase: str, done: int, total: int, metrics: dict[str, Any] | None = None
              ) -> None:
        """A progress event of a long phase (an evaluation batch, a warm-start epoch): one
        line when the console is not a terminal (a log file), else the bar's text."""
        shown = "  ".join(f"{k}={v:.3g}" for k, v in (metrics or {}).items()
                          if isinstance(v, (int, float)))
        line = f"{phase} {done}/{total} {shown}".rstrip()
        if self._progress is not None and self.console.is_terminal:
            self._progress.update(self._task, description=line)
        else:
            self.console.print(line, highlight=False)

    def print(self, msg: str) -> None:
        if self._progress is not None:
            self._progress.console.print(msg)
        else:
            self.console.print(msg)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if not self._fh.closed:
            self._fh.close()
