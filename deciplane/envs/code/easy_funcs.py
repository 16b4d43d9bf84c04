"""``easy-funcs``: procedurally generated small function-writing tasks with hidden tests.

Every task is a HumanEval-style statement — a typed signature and a docstring — whose
hidden tests are computed from a reference implementation on seeded random inputs (and
a few edge cases). The reference implementations and the tests exist only where the
labelled items are built: the held-out scorer's process and the training env.

Families (``FAMILIES``), by difficulty level
    1. one operation with a constant: ``x + k``, ``x * k``, "divisible by k", the first
       ``k`` characters, ``s * k``, count of elements above ``k``, sum / max / last
       element of a list, upper case, reversal, count of a character.
    2. two-step compositions: sum of the elements above ``k``, squares of the even
       numbers, number of vowels, words in reverse order, ``a * x + b``, clamp to
       ``[lo, hi]``, keep the strings longer than ``k``.
    3. small algorithms with an edge case: the second largest distinct value (or
       ``None``), index of the first element above ``k`` (or ``-1``), running sums,
       palindrome check ignoring case, most frequent character (first on ties).

Knobs (:class:`EasyFuncsSpec`): ``level_weights`` (probability of each level) and
``examples`` (how many doctest examples the docstring shows — computed from the
reference on inputs *not* among the hidden tests; the tasks and their hidden tests do not
depend on it). ``deciplane benchmarks`` lists the sizes. SmolLM2-135M-Instruct, first 30
test tasks, 4 samples at T=0.7 (``benchmarks/calibrate_code.py``): greedy pass@1 0.60,
sampled pass@1 0.40 (level 1 / 2 / 3: 0.48 / 0.40 / 0.06), pass@4 0.77 — see
``docs/code.md``.

Splits ``test`` (100), ``valid`` (50), ``train`` (250) are disjoint by *task* — the
family and its constants (``(family, k)``), not only by text — so a train task never
reappears in test with other examples. Test is drawn first, valid skips its tasks, train
skips both. Deterministic (``random.Random`` with string seeds).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

SPLIT_SIZES: dict[str, int] = {"train": 250, "valid": 50, "test": 100}
SPLIT_ORDER = ("test", "valid", "train")
N_HIDDEN_TESTS = 8



def _ints(rng: random.Random, lo: int = -9, hi: int = 20, n: tuple[int, int] = (0, 7)) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(rng.randint(*n))]


_WORDS = ("apple", "sun", "tree", "blue", "river", "cat", "moon", "red", "stone", "bird",
          "fish", "a", "level", "noon", "green", "sky")


def _word(rng: random.Random) -> str:
    return rng.choice(_WORDS)


def _text(rng: random.Random, n: tuple[int, int] = (0, 4)) -> str:
    return " ".join(_word(rng) for _ in range(rng.randint(*n)))


def _letters(rng: random.Random, alphabet: str = "abcde", n: tuple[int, int] = (0, 9)) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(*n)))


@dataclass(frozen=True)
class Task:
    """One generated task: statement (``prompt``), entry point, hidden ``check`` code,
    difficulty level, family and the key that makes splits disjoint."""

    key: str
    prompt: str
    entry_point: str
    tests: str
    level: int
    family: str
    n_tests: int


@dataclass(frozen=True)
class Family:
    """A task family: ``make(rng) -> (constants, fname, params, returns, doc, ref,
    inputs)``; ``params`` is ``[(name, annotation)]``."""

    name: str
    level: int
    make: Callable[[random.Random], tuple]
    n_keys: int  # number of distinct constant settings (for sizing the splits)


def _f(name: str, level: int, n_keys: int):
    def wrap(make):
        return Family(name, level, make, n_keys)
    return wrap


K = range(2, 41)       # integer constants of the "k" families


@_f("add_k", 1, len(K))
def _add_k(rng):
    k = rng.choice(K)
    return (k,), f"add_{k}", [("x", "int")], "int", f"Return x plus {k}.", \
        (lambda x: x + k), (lambda r: (r.randint(-50, 50),))


@_f("times_k", 1, len(K))
def _times_k(rng):
    k = rng.choice(K)
    return (k,), f"times_{k}", [("x", "int")], "int", f"Return x multiplied by {k}.", \
        (lambda x: x * k), (lambda r: (r.randint(-30, 30),))


@_f("divisible_by_k", 1, len(K))
def _div_k(rng):
    k = rng.choice(K)
    return (k,), f"is_divisible_by_{k}", [("n", "int")], "bool", \
        f"Return True if n is divisible by {k}, otherwise False.", \
        (lambda n: n % k == 0), (lambda r: (r.choice([r.randint(-60, 60), k * r.randint(-9, 9)]),))


@_f("first_k_chars", 1, 8)
def _first_k(rng):
    k = rng.randint(1, 8)
    return (k,), f"first_{k}_chars", [("s", "str")], "str", \
        f"Return the first {k} characters of s (all of s if it is shorter).", \
        (lambda s: s[:k]), (lambda r: (_letters(r, "abcdefgh", (0, 12)),))


@_f("repeat_k", 1, 8)
def _repeat_k(rng):
    k = rng.randint(2, 9)
    return (k,), f"repeat_{k}_times", [("s", "str")], "str", \
        f"Return the string s repeated {k} times.", \
        (lambda s: s * k), (lambda r: (_letters(r, "xyz", (0, 4)),))


@_f("count_above_k", 1, len(K))
def _count_above(rng):
    k = rng.choice(K)
    return (k,), f"count_greater_than_{k}", [("xs", "list[int]")], "int", \
        f"Return how many numbers in xs are greater than {k}.", \
        (lambda xs: sum(1 for x in xs if x > k)), (lambda r: (_ints(r, 0, 30),))


@_f("list_sum", 1, 1)
def _list_sum(rng):
    return (), "sum_list", [("xs", "list[int]")], "int", \
        "Return the sum of the numbers in xs (0 for an empty list).", \
        (lambda xs: sum(xs)), (lambda r: (_ints(r),))


@_f("list_max", 1, 1)
def _list_max(rng):
    return (), "largest", [("xs", "list[int]")], "int", \
        "Return the largest number in xs. xs is never empty.", \
        (lambda xs: max(xs)), (lambda r: (_ints(r, n=(1, 7)),))


@_f("last_element", 1, 1)
def _last(rng):
    return (), "last_element", [("xs", "list[int]")], "int", \
        "Return the last element of xs. xs is never empty.", \
        (lambda xs: xs[-1]), (lambda r: (_ints(r, n=(1, 7)),))


@_f("upper", 1, 1)
def _upper(rng):
    return (), "shout", [("s", "str")], "str", "Return s converted to upper case.", \
        (lambda s: s.upper()), (lambda r: (_text(r),))


@_f("reverse_string", 1, 1)
def _rev(rng):
    return (), "reverse_string", [("s", "str")], "str", "Return s reversed.", \
        (lambda s: s[::-1]), (lambda r: (_letters(r, "abcxyz", (0, 8)),))


@_f("count_char", 1, 26)
def _count_char(rng):
    c = rng.choice("abcdefghijklmnopqrstuvwxyz")
    return (c,), f"count_{c}", [("s", "str")], "int", \
        f"Return how many times the letter '{c}' appears in s.", \
        (lambda s: s.count(c)), (lambda r: (_letters(r, "abcde" + c, (0, 10)),))


@_f("sum_above_k", 2, len(K))
def _sum_above(rng):
    k = rng.choice(K)
    return (k,), f"sum_greater_than_{k}", [("xs", "list[int]")], "int", \
        f"Return the sum of the numbers in xs that are greater than {k}.", \
        (lambda xs: sum(x for x in xs if x > k)), (lambda r: (_ints(r, 0, 30),))


@_f("squares_of_evens", 2, 1)
def _sq_even(rng):
    return (), "squares_of_evens", [("xs", "list[int]")], "list[int]", \
        "Return the squares of the even numbers in xs, in their original order.", \
        (lambda xs: [x * x for x in xs if x % 2 == 0]), (lambda r: (_ints(r),))


@_f("count_vowels", 2, 1)
def _vowels(rng):
    return (), "count_vowels", [("s", "str")], "int", \
        "Return the number of vowels (a, e, i, o, u) in the lower-case string s.", \
        (lambda s: sum(ch in "aeiou" for ch in s)), (lambda r: (_text(r),))


@_f("reverse_words", 2, 1)
def _rev_words(rng):
    return (), "reverse_words", [("s", "str")], "str", \
        "Return the words of s in reverse order, joined by single spaces. Words in s are "\
        "separated by single spaces.", \
        (lambda s: " ".join(s.split(" ")[::-1])), (lambda r: (_text(r, (1, 5)),))


@_f("affine", 2, 72)
def _affine(rng):
    a, b = rng.randint(2, 9), rng.randint(1, 9)
    return (a, b), f"affine_{a}_{b}", [("x", "int")], "int", f"Return {a} * x + {b}.", \
        (lambda x: a * x + b), (lambda r: (r.randint(-20, 20),))


@_f("clamp", 2, 40)
def _clamp(rng):
    lo = rng.randint(-5, 5)
    hi = lo + rng.randint(1, 8) * 2
    return (lo, hi), f"clamp_{lo}_{hi}".replace("-", "m"), [("x", "int")], "int", \
        f"Return x limited to the range from {lo} to {hi}: {lo} if x is smaller than {lo}, "\
        f"{hi} if x is larger than {hi}, else x.", \
        (lambda x: min(max(x, lo), hi)), (lambda r: (r.randint(lo - 10, hi + 10),))


@_f("long_words", 2, 6)
def _long_words(rng):
    k = rng.randint(1, 6)
    return (k,), f"words_longer_than_{k}", [("words", "list[str]")], "list[str]", \
        f"Return the strings of words that are longer than {k} characters, in order.", \
        (lambda ws: [w for w in ws if len(w) > k]), \
        (lambda r: ([_word(r) for _ in range(r.randint(0, 6))],))


@_f("second_largest", 3, 1)
def _second(rng):
    def ref(xs):
        d = sorted(set(xs))
        return d[-2] if len(d) >= 2 else None
    return (), "second_largest", [("xs", "list[int]")], "int | None", \
        "Return the second largest distinct value in xs, or None if xs has fewer than "\
        "two distinct values.", ref, (lambda r: (_ints(r, 0, 6, (0, 6)),))


@_f("first_index_above_k", 3, len(K))
def _first_idx(rng):
    k = rng.choice(K)
    def ref(xs):
        return next((i for i, x in enumerate(xs) if x > k), -1)
    return (k,), f"first_index_above_{k}", [("xs", "list[int]")], "int", \
        f"Return the index of the first number in xs that is greater than {k}, or -1 if "\
        "there is none.", ref, (lambda r: (_ints(r, 0, 30),))


@_f("running_sums", 3, 1)
def _running(rng):
    def ref(xs):
        out, t = [], 0
        for x in xs:
            t += x
            out.append(t)
        return out
    return (), "running_sums", [("xs", "list[int]")], "list[int]", \
        "Return the list of running sums of xs: element i is xs[0] + ... + xs[i].", \
        ref, (lambda r: (_ints(r),))


@_f("palindrome", 3, 1)
def _pal(rng):
    def gen(r):
        w = _letters(r, "abAB", (0, 4))
        return (r.choice([w + w[::-1], w + r.choice("ab") + w[::-1].swapcase(), w]),)
    return (), "is_palindrome", [("s", "str")], "bool", \
        "Return True if s reads the same forwards and backwards, ignoring upper/lower "\
        "case; otherwise False.", (lambda s: s.lower() == s.lower()[::-1]), gen


@_f("most_common_char", 3, 1)
def _most_common(rng):
    def ref(s):
        return max(s, key=lambda ch: (s.count(ch), -s.index(ch)))
    return (), "most_common_char", [("s", "str")], "str", \
        "Return the character that appears most often in s; on a tie, the one that "\
        "appears first. s is never empty.", ref, (lambda r: (_letters(r, "abcd", (1, 9)),))


FAMILIES: tuple[Family, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Family))


@dataclass(frozen=True)
class EasyFuncsSpec:
    """How the benchmark is generated (the difficulty knobs)."""

    level_weights: Mapping[int, float] = field(default_factory=lambda: {1: 0.5, 2: 0.35, 3: 0.15})
    examples: int = 1
    """Doctest examples shown in the docstring (computed from the reference)."""
    n_tests: int = N_HIDDEN_TESTS


DEFAULT_SPEC = EasyFuncsSpec()


def n_keys(level: int | None = None) -> int:
    """How many distinct tasks the families can make (of one level, or all)."""
    return sum(f.n_keys for f in FAMILIES if level is None or f.level == level)


def _statement(fname: str, params: Sequence[tuple[str, str]], returns: str, doc: str,
               examples: Sequence[tuple[tuple, Any]]) -> str:
    sig = ", ".join(f"{n}: {t}" for n, t in params)
    lines = [f"def {fname}({sig}) -> {returns}:", f'    """{doc}']
    for args, out in examples:
        lines.append(f"    >>> {fname}({', '.join(map(repr, args))})")
        lines.append(f"    {out!r}")
    lines.append('    """')
    return "\n".join(lines) + "\n"


def _check_code(cases: Sequence[tuple[tuple, Any]]) -> str:
    body = [f"    assert candidate({', '.join(map(repr, a))}) == {out!r}, "
            f"{'input ' + ', '.join(map(repr, a))!r}" for a, out in cases]
    return "def check(candidate):\n" + "\n".join(body) + "\n"


def make_task(family: Family, rng: random.Random, spec: EasyFuncsSpec = DEFAULT_SPEC) -> Task:
    """One task of ``family``, its constants drawn with ``rng``. Inputs come from a
    generator seeded by the task's key, so a task's hidden tests (``spec.n_tests``
    distinct inputs) do not depend on ``spec.examples``; the statement's doctests are the
    next ``spec.examples`` distinct inputs."""
    consts, fname, params, returns, doc, ref, inputs = family.make(rng)
    key = f"{family.name}/{'/'.join(map(str, consts))}"
    irng = random.Random(f"deciplane/easy-funcs/inputs/{key}")
    seen: list[tuple] = []
    for _ in range(200):
        if len(seen) >= spec.n_tests + spec.examples:
            break
        args = inputs(irng)
        if args not in seen:
            seen.append(args)
    cases = [(a, ref(*a)) for a in seen]
    hidden, shown = cases[:spec.n_tests], cases[spec.n_tests:]
    return Task(key=key, prompt=_statement(fname, params, returns, doc, shown),
                entry_point=fname, tests=_check_code(hidden), level=family.level,
                family=family.name, n_tests=len(hidden))


def generate(n: int, seed: str, spec: EasyFuncsSpec = DEFAULT_SPEC,
             exclude: set[str] | frozenset = frozenset()) -> list[Task]:
    """``n`` tasks with distinct keys not in ``exclude``, deterministic in ``seed``."""
    rng = random.Random(f"deciplane/easy-funcs/{seed}")
    by_level: dict[int, list[Family]] = {}
    for fam in FAMILIES:
        by_level.setdefault(fam.level, []).append(fam)
    levels, weights = zip(*sorted((lv, w) for lv, w in spec.level_weights.items() if w > 0))
    taken, out = set(exclude), []
    for _ in range(500 * n + 1000):
        if len(out) == n:
            return out
        level = rng.choices(levels, weights)[0]
        fam = rng.choice(by_level[level])
        task = make_task(fam, rng, spec)
        if task.key not in taken:
            taken.add(task.key)
            out.append(task)
    raise RuntimeError(f"could not generate {n} distinct easy-funcs tasks (seed {seed!r}); "
                       "lower the split size or add families")


def generate_splits(spec: EasyFuncsSpec = DEFAULT_SPEC,
                    sizes: Mapping[str, int] = SPLIT_SIZES) -> dict[str, list[Task]]:
    """Every split, disjoint by task key (test first)."""
    taken: set[str] = set()
    out: dict[str, list[Task]] = {}
    for split in SPLIT_ORDER:
        out[split] = generate(sizes[split], split, spec, taken)
        taken.update(t.key for t in out[split])
    return out


__all__ = ["Task", "Family", "FAMILIES", "EasyFuncsSpec", "DEFAULT_SPEC", "SPLIT_SIZES",
           "make_task", "generate", "generate_splits", "n_keys"]
