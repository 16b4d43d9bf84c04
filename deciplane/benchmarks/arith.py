"""Procedural integer arithmetic word problems (benchmarks ``arith`` and ``arith-shift``).

Calibrated for the default model (SmolLM2-135M-Instruct, see DESIGN.md "Built-in
benchmarks"): its sampled pass@1 on 1-digit problems is ~20-40% and the majority vote
over 8 samples is right more often — the regime where test-time RL has a signal;
2-digit problems are too hard for it (the vote is rarely right).

Difficulty levels
    1. a direct question about one operation on 1-digit operands (1..9):
       ``a + b``, ``a - b`` (``a > b``) or ``a * b`` ("What is 7 + 5?").
    2. the same operations as a one-step story ("Mia has 7 apples. ...", operands 2..9).
    3. two-step stories with 1-digit operands: ``a + b - c`` or ``a * b + c``.
    4. one operation with a 2-digit operand, as a story, for users who want a harder set.

Benchmarks
    ``arith``: phrasing/template set A, 70% level 1 and 30% level 2.
    ``arith-shift``: the same family, shifted: phrasing/template set B (operators in
    words, other story situations: shops, classrooms, shelves), 50% level 1, 40% level 2,
    10% level 3 — harder than ``arith``.

Every problem ends with the line "Answer with just the number." (``ANSWER_HINT``).
Measured with SmolLM2-135M-Instruct (``benchmarks/calibrate_math.py --n 24``, chat
template, 24 new tokens, T=0.7, 8 samples, first 24 test problems):

============  ======  ==============  =====
benchmark     greedy  sampled pass@1  maj@8
============  ======  ==============  =====
arith         0.33    0.22            0.33
arith-shift   0.25    0.25            0.38
============  ======  ==============  =====

Without the hint the same problems gave 0.25/0.13/0.12 and 0.17/0.13/0.12 (the model
restates the problem and is cut off); an all-story version gave pass@1 0.05-0.12.

Splits ``train`` / ``valid`` / ``test`` are generated from disjoint seeds and then made
disjoint *by problem text*: test is generated first, valid skips test's texts, train
skips both. Everything is deterministic (``random.Random`` with string seeds): the same
split is the same list on every machine.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Mapping, Sequence

#: Part of every problem text: without it the default model restates the problem and is
#: cut off (measured: sampled pass@1 0.13 -> 0.22-0.25, maj@8 0.12 -> 0.33-0.38).
ANSWER_HINT = "\nAnswer with just the number."

SPLIT_SIZES: dict[str, int] = {"train": 1000, "valid": 200, "test": 200}
SPLIT_ORDER = ("test", "valid", "train")  # generation priority (disjointness by text)

NAMES = ("Mia", "Leo", "Ava", "Noah", "Emma", "Liam", "Zoe", "Omar", "Lily", "Sam", "Nora",
         "Ben", "Ivy", "Max", "Ella", "Kai", "Ruby", "Finn", "Luna", "Jack")
OBJECTS = ("apples", "pencils", "marbles", "stickers", "cookies", "books", "cards", "shells",
           "balloons", "coins", "oranges", "toy cars", "stamps", "crayons", "eggs")
CONTAINERS = ("bags", "boxes", "baskets", "jars", "packs", "bowls")


@dataclass(frozen=True)
class Problem:
    """One generated problem: text, integer answer, difficulty level, operation tag."""

    text: str
    answer: int
    level: int
    op: str


# --- template set A (arith) ----------------------------------------------------------
_A_ADD = ("{n1} has {a} {o}. {n2} gives {n1} {b} more {o}. How many {o} does {n1} have now?",
          "There are {a} {o} on the table. {n1} puts {b} more {o} on the table. How many {o} "
          "are on the table now?")
_A_SUB = ("{n1} has {a} {o}. {n1} gives {b} {o} to {n2}. How many {o} does {n1} have left?",
          "There are {a} {o} in a basket. {n1} takes {b} {o} out. How many {o} are left in "
          "the basket?")
_A_MUL = ("{n1} has {a} {c}. Each of the {c} holds {b} {o}. How many {o} does {n1} have in "
          "total?",
          "{n1} makes {a} piles of {o} with {b} {o} in each pile. How many {o} are there in "
          "all?")
_A_ADD_SUB = ("{n1} has {a} {o}. {n2} gives {n1} {b} more {o}. Then {n1} loses {d} {o}. How "
              "many {o} does {n1} have now?",)
_A_MUL_ADD = ("{n1} has {a} {c} with {b} {o} in each, and {d} loose {o}. How many {o} does "
              "{n1} have in total?",)

# --- template set B (arith-shift) ----------------------------------------------------
_B_ADD = ("A shop sold {a} {o} in the morning and {b} {o} in the afternoon. How many {o} did "
          "the shop sell that day?",
          "In a classroom, {n1} counts {a} {o} and {n2} counts {b} {o}. How many {o} did they "
          "count together?")
_B_SUB = ("A shop had {a} {o}. It sold {b} of them. How many {o} does the shop still have?",
          "{n1} needs {a} {o} for a project and already has {b}. How many more {o} does {n1} "
          "need?")
_B_MUL = ("A shelf has {a} rows with {b} {o} in every row. How many {o} are on the shelf?",
          "Each of {a} friends brings {b} {o} to a party. How many {o} are at the party?")
_B_ADD_SUB = ("A shop had {a} {o}, got a delivery of {b} more, then sold {d}. How many {o} "
              "does the shop have now?",)
_B_MUL_ADD = ("A teacher gives {a} students {b} {o} each and keeps {d} {o} for herself. How "
              "many {o} did she have?",)

# --- direct questions (level 1) ------------------------------------------------------
_A_DIRECT = {"+": ("What is {a} + {b}?", "Compute {a} + {b}.", "{a} + {b} = ?",
                   "Add {a} and {b}.", "What is the sum of {a} and {b}?"),
             "-": ("What is {a} - {b}?", "Compute {a} - {b}.", "{a} - {b} = ?",
                   "Subtract {b} from {a}.", "What is the difference of {a} and {b}?"),
             "*": ("What is {a} * {b}?", "Compute {a} * {b}.", "{a} * {b} = ?",
                   "Multiply {a} by {b}.", "What is the product of {a} and {b}?")}
_B_DIRECT = {"+": ("How much is {a} plus {b}?", "Calculate {a} plus {b}.",
                   "What do you get when you add {b} to {a}?", "{a} plus {b} equals what?",
                   "Find the total of {a} and {b}."),
             "-": ("How much is {a} minus {b}?", "Calculate {a} minus {b}.",
                   "What do you get when you take {b} away from {a}?",
                   "{a} minus {b} equals what?", "Find {a} take away {b}."),
             "*": ("How much is {a} times {b}?", "Calculate {a} times {b}.",
                   "What do you get when you multiply {a} by {b}?",
                   "{a} times {b} equals what?", "Find {a} groups of {b}.")}
DIRECT_SETS = {"A": _A_DIRECT, "B": _B_DIRECT}

TEMPLATE_SETS: dict[str, dict[str, Sequence[str]]] = {
    "A": {"+": _A_ADD, "-": _A_SUB, "*": _A_MUL, "+-": _A_ADD_SUB, "*+": _A_MUL_ADD},
    "B": {"+": _B_ADD, "-": _B_SUB, "*": _B_MUL, "+-": _B_ADD_SUB, "*+": _B_MUL_ADD},
}


@dataclass(frozen=True)
class ArithSpec:
    """How one arith benchmark is generated."""

    name: str
    templates: str                       # key of TEMPLATE_SETS
    level_weights: Mapping[int, float]   # difficulty level -> probability
    description: str


SPECS: dict[str, ArithSpec] = {
    "arith": ArithSpec("arith", "A", {1: 0.7, 2: 0.3},
                       "1-digit integer arithmetic: 70% direct questions, 30% one-step stories"),
    "arith-shift": ArithSpec("arith-shift", "B", {1: 0.5, 2: 0.4, 3: 0.1},
                             "shifted arith: operators in words, new stories, 10% two-step"),
}


def _operands(rng: random.Random, level: int) -> tuple[str, int, int, int]:
    """(op tag, a, b, c) for a difficulty level; results are never negative."""
    if level in (1, 2):
        lo = 1 if level == 1 else 2
        op = rng.choice("+-*")
        if op == "-":
            a = rng.randint(lo + 1, 9)
            return op, a, rng.randint(lo, a - 1), 0
        return op, rng.randint(lo, 9), rng.randint(lo, 9), 0
    if level == 3:
        op = rng.choice(("+-", "*+"))
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        c = rng.randint(2, min(9, a + b - 1)) if op == "+-" else rng.randint(2, 9)
        return op, a, b, c
    if level == 4:
        op = rng.choice("+-*")
        a, b = (rng.randint(10, 19), rng.randint(2, 9)) if op == "*" else \
            (rng.randint(10, 99), rng.randint(2, 9))
        return op, a, b, 0
    raise ValueError(f"difficulty level must be 1, 2, 3 or 4, got {level!r}")


def _answer(op: str, a: int, b: int, c: int) -> int:
    return {"+": a + b, "-": a - b, "*": a * b, "+-": a + b - c, "*+": a * b + c}[op]


def make_problem(rng: random.Random, level: int, templates: str = "A") -> Problem:
    """One problem of the given level from a template set, drawn with ``rng``."""
    op, a, b, c = _operands(rng, level)
    # level 1: direct questions; levels 2-4: stories (level 4 reuses one-step stories)
    template = rng.choice(DIRECT_SETS[templates][op] if level == 1
                          else TEMPLATE_SETS[templates][op])
    n1, n2 = rng.sample(NAMES, 2)
    text = template.format(n1=n1, n2=n2, o=rng.choice(OBJECTS), c=rng.choice(CONTAINERS),
                           a=a, b=b, d=c) + ANSWER_HINT
    return Problem(text=text, answer=_answer(op, a, b, c), level=level, op=op)


def generate(spec: ArithSpec, n: int, seed: str, exclude: set[str] | frozenset = frozenset()
             ) -> list[Problem]:
    """``n`` distinct problems (by text) not in ``exclude``, deterministic in ``seed``."""
    rng = random.Random(f"deciplane/{spec.name}/{seed}")
    levels, weights = zip(*sorted(spec.level_weights.items()))
    seen, out = set(exclude), []
    for _ in range(200 * n + 1000):
        if len(out) == n:
            return out
        level = rng.choices(levels, weights)[0]
        p = make_problem(rng, level, spec.templates)
        if p.text not in seen:
            seen.add(p.text)
            out.append(p)
    raise RuntimeError(f"could not generate {n} distinct {spec.name} problems; "
                       "lower the split size or add templates")


def generate_splits(name: str, sizes: Mapping[str, int] = SPLIT_SIZES) -> dict[str, list[Problem]]:
    """All splits of benchmark ``name``, disjoint by problem text (test first)."""
    spec = SPECS[name]
    taken: set[str] = set()
    out: dict[str, list[Problem]] = {}
    for split in SPLIT_ORDER:
        out[split] = generate(spec, sizes[split], seed=split, exclude=taken)
        taken.update(p.text for p in out[split])
    return out


__all__ = ["Problem", "ArithSpec", "SPECS", "SPLIT_SIZES", "make_problem", "generate",
           "generate_splits", "TEMPLATE_SETS", "DIRECT_SETS"]
