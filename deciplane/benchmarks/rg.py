"""``rg:<family>``: procedurally generated tasks from `reasoning-gym` (PyPI
``reasoning-gym``, Apache-2.0), scored by reasoning-gym's own ``score_answer``.

``load_benchmark("rg:chain_sum", "test", limit=64, min_terms=2, max_terms=2)``: every
keyword goes to the family's reasoning-gym config (on the CLI ``--benchmark-arg
KEY=VALUE``). Nothing is downloaded: the generators run locally.

Splits
    ``test`` (200), ``valid`` (100), ``train`` (500), drawn from one seeded stream per
    family and parameter set: the generator's items are taken in order, any question
    already used is skipped, and the first 200 distinct questions make ``test``, the
    next 100 ``valid``, the next 500 ``train`` -- so the splits are disjoint by question
    text. Parameters that allow fewer than 800 distinct questions (within
    :data:`MAX_DRAWS_FACTOR` x 800 draws) give proportionally smaller splits (e.g.
    ``rg:chain_sum`` with two 1-digit terms has 200: test 50, valid 25, train 125).

Isolation
    The gold and reasoning-gym's ``metadata`` (which often repeats the answer, e.g.
    ``total_legs``) live only in :class:`RGItem` objects, which only the scorer's process
    builds; the public ``meta`` of a task is ``{"family": ...}``. The judge
    (:func:`judge_rg`) calls the family's ``score_answer(answer, entry)`` there and counts
    an answer right when it scores 1.0 (reasoning-gym gives partial credit, e.g. to an
    answer that merely contains the gold; that is not a correct answer here).

``reasoning_gym`` is imported only inside the loader and the judge (its import takes a
couple of seconds and loads every family).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from deciplane.benchmarks.data import Benchmark, LabeledItem, register_benchmark
from deciplane.errors import UnknownBenchmark

SPLIT_SIZES: dict[str, int] = {"test": 200, "valid": 100, "train": 500}
"""Split sizes, in the order the splits are drawn from the stream."""
MAX_DRAWS_FACTOR = 4
"""At most this many generator draws per wanted question (duplicates are skipped)."""


@dataclass(frozen=True)
class RGItem(LabeledItem):
    """A reasoning-gym task with its gold and the full reasoning-gym entry (question,
    answer, metadata) that ``score_answer`` needs; built only in the scorer's process
    (``entry`` is not part of the public ``meta``)."""

    entry: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    dataset: Any = field(default=None, compare=False, repr=False)
    """The reasoning-gym dataset that generated ``entry`` (its ``score_answer`` judges)."""


def family_of(name: str) -> str:
    """``"rg:chain_sum"`` -> ``"chain_sum"`` (an error for a bare ``"rg"``)."""
    head, _, family = name.partition(":")
    if head != "rg" or not family:
        raise UnknownBenchmark(f"reasoning-gym benchmarks are named 'rg:<family>', got {name!r}; "
                               "e.g. rg:chain_sum (`deciplane benchmarks` lists the families)")
    return family


def _rg():
    try:
        import reasoning_gym  # noqa: F401
        from reasoning_gym.factory import DATASETS
    except ImportError as exc:  # pragma: no cover - dependency missing
        raise UnknownBenchmark("rg:<family> benchmarks need the PyPI package reasoning-gym: "
                               "pip install reasoning-gym") from exc
    return DATASETS


def families() -> list[str]:
    """Every reasoning-gym family name (imports reasoning_gym)."""
    return sorted(_rg())


def stream_seed(family: str, params: dict[str, Any]) -> int:
    """The generator seed of a family and parameter set (stable across runs)."""
    blob = json.dumps([family, params], sort_keys=True, default=str)
    return int(hashlib.sha256(f"deciplane/rg/{blob}".encode()).hexdigest()[:8], 16)


def make_dataset(family: str, params: dict[str, Any], size: int, seed: int):
    """reasoning-gym's dataset object for ``family`` (typed errors for unknown names and
    options)."""
    import dataclasses

    datasets = _rg()
    if family not in datasets:
        near = [f for f in datasets if family.split("_")[0] in f][:8]
        raise UnknownBenchmark(f"reasoning-gym has no family {family!r}"
                               + (f"; similar: {', '.join(near)}" if near else "")
                               + f" ({len(datasets)} families: `deciplane benchmarks` lists them)")
    cls, config_cls = datasets[family]
    allowed = {f.name for f in dataclasses.fields(config_cls)} - {"seed", "size"}
    bad = sorted(set(params) - allowed)
    if bad:
        raise UnknownBenchmark(f"rg:{family} has no option {', '.join(map(repr, bad))}; its "
                               f"options: {', '.join(sorted(allowed))}")
    try:
        config = config_cls(**params, seed=seed, size=size)
        if hasattr(config, "validate"):
            config.validate()
    except (AssertionError, ValueError, TypeError) as exc:
        raise UnknownBenchmark(f"rg:{family} rejected the options {params}: {exc}") from None
    return cls(config=config)


def split_sizes(n_distinct: int) -> dict[str, int]:
    """Split sizes for a stream with ``n_distinct`` distinct questions: the nominal
    :data:`SPLIT_SIZES` when there are enough, else the same proportions of what exists
    (test first; every split keeps at least one question when there are 3 or more)."""
    total = sum(SPLIT_SIZES.values())
    if n_distinct >= total:
        return dict(SPLIT_SIZES)
    names = list(SPLIT_SIZES)
    sizes = {s: (n_distinct * SPLIT_SIZES[s]) // total for s in names}
    if n_distinct >= len(names):
        for s in names:
            sizes[s] = max(sizes[s], 1)
    sizes[names[-1]] = n_distinct - sum(sizes[s] for s in names[:-1])
    return sizes


def distinct_entries(family: str, params: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    """``([entry, ...], dataset)``: the first (up to 800) distinct questions of the seeded
    stream of ``family`` with ``params``, in draw order."""
    total = sum(SPLIT_SIZES.values())
    max_draws = total * MAX_DRAWS_FACTOR
    ds = make_dataset(family, params, size=max_draws, seed=stream_seed(family, params))
    seen: set[str] = set()
    distinct: list[dict[str, Any]] = []
    for idx in range(max_draws):
        entry = ds[idx]
        if entry["question"] in seen:
            continue
        seen.add(entry["question"])
        distinct.append(entry)
        if len(distinct) == total:
            break
    return distinct, ds


def draw_splits(family: str, params: dict[str, Any]) -> tuple[dict[str, list[dict[str, Any]]], Any]:
    """``({split: [reasoning-gym entry, ...]}, dataset)``: distinct questions from one
    seeded stream, cut in draw order into test, valid, train (:func:`split_sizes`)."""
    distinct, ds = distinct_entries(family, params)
    out: dict[str, list[dict[str, Any]]] = {}
    start = 0
    for split, n in split_sizes(len(distinct)).items():
        out[split] = distinct[start:start + n]
        start += n
    return out, ds


def load_rg(name: str, split: str, family: str | None = None, test_only: bool = False,
            **params: Any) -> tuple[list[LabeledItem], str]:
    """The loader of the table entry ``rg`` (scorer process / training envs only);
    ``family`` is given for a fixed-parameter entry (:func:`register_fixed`), else it
    comes from ``name``."""
    import reasoning_gym

    family = family or family_of(name)
    if test_only:
        if split != "test":
            raise UnknownBenchmark(f"{name} has only a test split")
        entries, ds = distinct_entries(family, params)
    else:
        drawn, ds = draw_splits(family, params)
        entries = drawn[split]
    if not entries:
        raise UnknownBenchmark(f"rg:{family} with options {params} produced no task for split "
                               f"{split!r}; loosen the options (fewer distinct questions exist)")
    items: list[LabeledItem] = [
        RGItem(id=f"{name}/{split}/{i:05d}", prompt=e["question"], gold=str(e["answer"]),
               meta={"family": family}, entry=e, dataset=ds)
        for i, e in enumerate(entries)]
    source = json.dumps({"reasoning_gym": reasoning_gym.__version__, "family": family,
                         "params": params, "test_only": test_only}, sort_keys=True, default=str)
    return items, source


def score_one(answer: str | None, item: LabeledItem) -> float:
    """reasoning-gym's ``score_answer`` of one answer (its own float in [0, 1])."""
    if not isinstance(item, RGItem):
        raise TypeError(f"judge_rg scores RGItem objects (from the rg loader), got "
                        f"{type(item).__name__}")
    ans = None if answer is None else str(answer).strip()
    return float(item.dataset.score_answer(ans, item.entry))


def judge_rg(pairs: Sequence[tuple[str, LabeledItem]]) -> list[bool]:
    """Right iff reasoning-gym's ``score_answer`` gives 1.0 (runs in the scorer's process)."""
    return [score_one(a, it) >= 1.0 - 1e-9 for a, it in pairs]


def rg_sizes(name: str) -> dict[str, int]:
    """Nominal split sizes (the listing does not draw every family)."""
    return dict(SPLIT_SIZES)


def register_fixed(name: str, family: str, params: dict[str, Any], description: str, *,
                   test_only: bool = False) -> None:
    """Register ``name`` as reasoning-gym ``family`` with fixed ``params`` (a calibrated
    benchmark: its own name, ids and fingerprint; ``load_benchmark`` options are added
    to, and may override, ``params``). ``test_only``: a test-time benchmark whose single
    split ``test`` is every distinct question (up to 800) of a small family."""
    fixed = dict(params)

    def load(bench_name: str, split: str, **extra: Any):
        return load_rg(bench_name, split, family=family, test_only=test_only,
                       **{**fixed, **extra})

    splits = ("test",) if test_only else tuple(SPLIT_SIZES)
    register_benchmark(Benchmark(name, description, splits=lambda n: splits, load=load,
                                 judge="deciplane.benchmarks.rg:judge_rg"))


register_benchmark(Benchmark(
    "rg", "reasoning-gym families as rg:<family> (e.g. rg:chain_sum, rg:basic_arithmetic, "
          "rg:leg_counting); options via --benchmark-arg KEY=VALUE; scored by score_answer",
    splits=lambda name: tuple(SPLIT_SIZES), load=load_rg,
    judge="deciplane.benchmarks.rg:judge_rg", prefix=True, sizes=rg_sizes,
    members=lambda: [f"rg:{f}" for f in families()]))


PRODUCTS_1D = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
register_fixed("products-1d", "products", PRODUCTS_1D,
               "reasoning-gym products of two 1-digit numbers, all 100 (test only): the "
               "calibrated test-time default (docs/testtime_benchmarks.md)", test_only=True)


__all__ = ["RGItem", "SPLIT_SIZES", "families", "load_rg", "judge_rg", "score_one",
           "draw_splits", "distinct_entries", "split_sizes", "make_dataset", "family_of",
           "register_fixed", "PRODUCTS_1D"]
