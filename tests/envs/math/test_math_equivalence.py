"""deciplane's own equivalence table for verify_math, one class per row group: the classes
math-verify's upstream tests cover, each expected answer worked out by hand.

Agreement with math-verify's own upstream parametrised cases (269 cases of
github:huggingface/Math-Verify tests/ at 5d148cf, math-verify 0.9.0), committed as data in
``math_verify_upstream_cases.json`` and checked by ``test_agrees_with_math_verify_upstream_cases``;
see docs/reliability.md.
"""

from __future__ import annotations

import math

import pytest

from deciplane.envs.math.verify import (join_digit_groups, read_plain_number, verify_many,
                                       verify_math)
from deciplane.errors import ConfigError

# (prediction, gold, equivalent?)
TABLE = {
    "thousands separators": [
        ("1 000", "1000", True),            # a space groups thousands: not 1*000
        ("1 000", "0", False),
        ("7,425,000", "7425000", True),
        ("1,000.5", "1000.5", True),
        ("1 000 000", "10^6", True),
        ("12,345", "12345", True),
        ("1,000", "1", False),
    ],
    "decimal commas": [
        ("1000,99", "1000.99", True),       # one comma, not a group of three: a decimal
        ("1000,99", "99", False),           # not the set {99, 1000}
        ("1.22", "1,22", True),             # gold written with a decimal comma
        ("22", "1,22", False),
        ("0.111", "0,111", True),           # leading zero: 0,111 is a decimal, not 111
        ("2,5", "5/2", True),
    ],
    "percent": [
        ("50\\%", "\\frac{1}{2}", True),
        ("The answer is $\\boxed{25\\%}$", "0.25", True),
        ("25\\%", "25", True),             # math-verify also accepts the bare number
        ("30\\%", "0.25", False),
    ],
    "sets and intervals": [
        ("\\{3, 1, 2\\}", "\\{1,2,3\\}", True),
        ("\\{1,2\\}", "\\{1,2,3\\}", False),
        ("[0, 1)", "[0,1)", True),
        ("(0, 1)", "[0,1)", False),
        ("(-\\infty, 2] \\cup [5, \\infty)", "(-\\infty,2]\\cup[5,\\infty)", True),
        ("1, 2", "\\{1,2\\}", True),          # a comma and a space: a list of solutions
    ],
    "matrices": [
        ("\\begin{pmatrix}1 & 2\\\\3 & 4\\end{pmatrix}",
         "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", True),
        ("\\begin{pmatrix}1 & 2\\\\3 & 5\\end{pmatrix}",
         "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", False),
        ("\\begin{pmatrix}\\frac12\\\\ 2\\end{pmatrix}", "\\begin{pmatrix}0.5\\\\2\\end{pmatrix}",
         True),
    ],
    "equations": [
        ("x = 5", "5", True),                # the right-hand side is the answer
        ("$y = 2x + 1$", "y = 1 + 2x", True),
        ("x = 4", "5", False),
    ],
    "units in boxed answers": [
        ("\\boxed{12 \\text{ cm}}", "12", True),
        ("\\boxed{3\\,\\text{meters}}", "3", True),
        ("\\boxed{12 \\text{ cm}}", "13", False),
    ],
    "digit groups in LaTeX (issue 24: never a product or a concatenation)": [
        ("$\\boxed{10\\,000}$", "0", False),          # math-verify alone: 10*000 = 0
        ("$\\boxed{10\\,000}$", "10000", True),
        ("$\\boxed{7 200}$", "207", False),             # math-verify alone: "7" "200" -> 207
        ("$\\boxed{7 200}$", "7200", True),
        ("$\\boxed{1\\,000\\,000}$", "1000000", True),
        ("$\\boxed{1\\,000\\,000}$", "0", False),
        ("10\\ 000", "10000", True), ("10~000", "10000", True),
        ("10\u2009000", "10000", True), ("10\u202f000", "10000", True),
        ("$12\\,345.5$", "12345.5", True),
        ("$\\boxed{10\\,000}$", "10\\,000", True),       # the gold is read the same way
        ("$\\boxed{3{,}000}$", "3000", True),             # {,}: math-verify's own comma rule
        ("$\\boxed{3{,}000}$", "3", False),
        ("$\\boxed{2\\,\\text{m}}$", "2", True),          # a thin space before a unit
        # not a digit group (single digits): left to math-verify, which reads it as
        # neither 2*3 nor 23; we do not guess either way
        ("$\\boxed{2\\,3}$", "6", False),
        ("$\\boxed{2\\,3}$", "23", False),
        ("3.141 592", "3.141592", False),             # grouped decimals: unchanged
    ],
    "long text around a boxed answer": [
        ("Let me think. " * 200 + "First 3 + 4 = 7, then 7 * 2 = 14. So the answer is "
         "$\\boxed{14}$. I double-checked: 14 is right.", "14", True),
        ("We try 10 and 12 first. " * 50 + "Therefore the result is \\boxed{\\frac{3}{4}}.",
         "0.75", True),
        ("Lots of numbers: 1, 2, 3, 99. " * 50 + "Final: \\boxed{98}", "99", False),
    ],
}
CASES = [pytest.param(p, g, e, id=f"{cls}-{i}") for cls, rows in TABLE.items()
         for i, (p, g, e) in enumerate(rows)]


@pytest.mark.parametrize("pred,gold,expected", CASES)
def test_equivalence_table(pred, gold, expected):
    assert verify_math(pred, gold) is expected


def test_table_in_one_batch_matches():
    pairs = [(p, g) for rows in TABLE.values() for p, g, _ in rows]
    assert verify_many(pairs) == [e for rows in TABLE.values() for *_, e in rows]


@pytest.mark.parametrize("text,number", [
    ("1 000", "1000"), ("7,425,000", "7425000"), ("1,000.99", "1000.99"),
    ("1000,99", "1000.99"), ("0,111", "0.111"), ("1,22", "1.22"), ("-2,5", "-2.5"),
    ("1\u202f000", "1000"), (" 12,345 ", "12345"),
    ("1, 2", None), ("3,4,5", None), ("1,000 000", None), ("0,111,222", None),
    ("01,000", "01.000"), ("1000", None), ("x,1", None), ("", None),
])
def test_read_plain_number(text, number):
    assert read_plain_number(text) == number


@pytest.mark.parametrize("text,joined", [
    ("$\\boxed{10\\,000}$", "$\\boxed{10000}$"), ("7 200", "7200"),
    ("1\\,000\\,000", "1000000"), ("10\\ 000", "10000"), ("10~000", "10000"),
    ("10\u2009000", "10000"), ("1 000 000 and 7 200", "1000000 and 7200"),
    ("12\\,345.5", "12345.5"),
    ("2\\,3", "2\\,3"), ("10 00", "10 00"), ("3.141 592", "3.141 592"), ("0 500", "0 500"),
    ("1234 567", "1234 567"), ("10 0000", "10 0000"), ("3{,}000", "3{,}000"),
    ("10\\,000 000", "10000 000"),                      # one separator kind per number
])
def test_join_digit_groups(text, joined):
    assert join_digit_groups(text) == joined


@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf, "5", None, True])
def test_bad_timeout_is_a_config_error(timeout):
    with pytest.raises(ConfigError, match="timeout_s must be a finite number"):
        verify_math("1/2", "0.5", timeout_s=timeout)


def test_options():
    # float_rounding: decimal places compared
    assert verify_math("0.33", "1/3", float_rounding=2) is True
    assert verify_math("0.33", "1/3") is False
    # strict=False lets variable names differ
    assert verify_math("$f(y)$", "$f(x)$") is False
    assert verify_math("$f(y)$", "$f(x)$", strict=False) is True
    # set relations
    assert verify_math("$-2 \\le x \\le 7$", "$x \\in [-2,7]$") is False
    assert verify_math("$-2 \\le x \\le 7$", "$x \\in [-2,7]$",
                       allow_set_relation_comp=True) is True
    with pytest.raises(ConfigError, match="unknown verify option"):
        verify_math("1", "1", precision=3)
    with pytest.raises(ConfigError, match="float_rounding"):
        verify_math("1", "1", float_rounding=-1)
    with pytest.raises(ConfigError, match="targets"):
        verify_math("1", "1", targets=("words",))


def _upstream_options(o: dict) -> dict:
    names = {"precision": "float_rounding", "strict": "strict",
             "allow_set_relation_comp": "allow_set_relation_comp", "match_types": "targets"}
    return {names[k]: tuple(v) if k == "match_types" else v for k, v in o.items()}


def test_agrees_with_math_verify_upstream_cases():
    """math-verify's own 269 parametrised cases (its tests at commit 5d148cf, committed
    as data): verify_math with the options each upstream test passes gives the upstream
    verdict on every one (with default options, 263: docs/reliability.md)."""
    import json
    from collections import defaultdict
    from pathlib import Path

    doc = json.loads((Path(__file__).with_name("math_verify_upstream_cases.json")).read_text())
    cases = doc["cases"]
    assert len(cases) == 269
    groups: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(cases):
        groups[json.dumps(c["options"], sort_keys=True)].append(i)
    got: list = [None] * len(cases)
    for key, idx in groups.items():
        opts = _upstream_options(json.loads(key))
        for i, r in zip(idx, verify_many([(cases[i]["pred"], cases[i]["gold"]) for i in idx],
                                         **opts)):
            got[i] = r
    misses = [c for g, c in zip(got, cases) if g != c["expected"]]
    assert not misses, misses[:3]
