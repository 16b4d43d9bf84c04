"""Answer extraction by the allowed rules, normalisation, equivalence and voting."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from deciplane.envs.math.answers import (answers_equivalent, cluster_answers, extract_answer,
                                    last_boxed, majority_vote, normalize_answer)
from deciplane.errors import InvalidAnswer


@pytest.mark.parametrize("text,expected", [
    ("so \\boxed{\\frac{1}{\\sqrt{2}}} then \\boxed{\\{1,2\\}}.", "\\{1,2\\}"),  # last box
    ("\\boxed{\\frac{a}{b}} and 7", "\\frac{a}{b}"),        # boxed beats a later number
    ("The answer is 42. Check: 6*7=42, not 41", "42"),      # phrase beats last number
    ("the answer is $\\frac{3}{4}$. Done", "\\frac{3}{4}"),
    ("Final answer: -0.50", "-0.5"),
    ("The final answer to this arithmetic problem is 13.", "13"),   # not "to this ... 13"
    ("The final answer is: 8", "8"),
    ("The answer is 12, since 5 + 7 = 12 and not 13", "12"),   # clause cut off
    ("the answer is $\\frac{1}{2}$ because half", "\\frac{1}{2}"),
    ("The answer is **7**.", "7"),
    ("The answer is \\{1, 2\\}.", "\\{1, 2\\}"),             # a set keeps its comma
    ("I have 3 apples and 1,000 pears", "1000"),           # last number
    ("3/4 of them", "3/4"),
    ("total 007", "7"),
    ("x = 5", "5"),
    ("no numbers here", None),
    ("", None),
    ("\\boxed{", None),                                     # unclosed box, no number
    ("\\boxed{ }", None),                                   # empty box -> nothing valid
])
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_extract_none_and_invalid():
    assert extract_answer(None) is None
    with pytest.raises(InvalidAnswer):
        extract_answer(b"12")
    with pytest.raises(InvalidAnswer):
        extract_answer("12\udcff")


def test_last_boxed_nested_and_escaped_braces():
    assert last_boxed("\\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{\\{1, \\{2\\}\\}}") == "\\{1, \\{2\\}\\}"
    assert last_boxed("\\fbox{3} \\boxed{4}") == "4"
    assert last_boxed("no box") is None


@pytest.mark.parametrize("raw,norm", [
    ("  $12$. ", "12"), ("+5", "5"), ("-0", "0"), ("1,000.50", "1000.5"), ("007", "7"),
    ("\\dfrac{1}{2}", "\\frac{1}{2}"), ("\\left( 1, 2 \\right)", "( 1, 2 )"),
    ("\\text{Monday}", "Monday"), ("   ", None), (None, None),
])
def test_normalize_answer(raw, norm):
    assert normalize_answer(raw) == norm


def test_normalize_is_idempotent():
    for raw in ["  $12$. ", "1,000.50", "\\dfrac{1}{2}", "-0.0", "x = \\frac{3}{4}"]:
        once = normalize_answer(raw)
        assert normalize_answer(once) == once


def test_answers_equivalent_among_predictions():
    assert answers_equivalent("1/2", "0.5")
    assert answers_equivalent("\\frac{1}{2}", "$0.5$.")
    assert not answers_equivalent("1/2", "0.6")
    assert not answers_equivalent(None, "1")
    assert not answers_equivalent("", "")
    with ThreadPoolExecutor(4) as ex:  # safe from threads
        assert all(ex.map(lambda _: answers_equivalent("1/2", "0.5"), range(8)))


def test_majority_vote_clusters_equivalent_answers_and_drops_invalid():
    answers = ["1/2", "0.5", None, "3", "", "3", "\\frac{1}{2}", "4"]
    vote = majority_vote(answers)
    assert vote.answer == "1/2" and vote.count == 3 and vote.n_valid == 6
    assert vote.clusters == [[0, 1, 6], [3, 5], [7]]
    assert vote.agree == [True, True, False, False, False, False, True, False]
    assert not vote.tie


def test_majority_vote_ties_are_deterministic_and_reported():
    vote = majority_vote(["3", "4", "4", "3"])
    assert vote.answer == "3" and vote.tie and vote.tied == ["4"]
    assert majority_vote(["4", "3", "3", "4"]).answer == "4"   # first appearance wins
    # order of clusters never depends on set/hash order
    assert cluster_answers(["9", "8", "8", "9"]) == ([[0, 3], [1, 2]], ["9", "8"])


def test_majority_vote_with_no_valid_answer():
    vote = majority_vote([None, "", "  "])
    assert vote.answer is None and vote.count == 0 and vote.clusters == []
    assert vote.agree == [False, False, False]


@pytest.mark.parametrize("text,expected", [
    ("\\frac{1}{2}", "\\frac{1}{2}"),          # bare LaTeX kept whole (last number would be 2)
    ("$\\frac{1}{2}$", "\\frac{1}{2}"),
    ("x \\in [2,5)", "x \\in [2,5)"),
    (" 12 ", "12"),
    ("So the total is \\boxed{15}.", "15"),      # responses: allowed rules
    ("She has 12 apples. Then 3 more: 15", "15"),
    ("I do not know", None),
    (None, None),
])
def test_answer_for_grading(text, expected):
    from deciplane.envs.math.answers import answer_for_grading

    assert answer_for_grading(text) == expected
