"""Intervals and paired comparisons against hand-computed values."""

from __future__ import annotations

import math

import pytest

from deciplane.stats import (mcnemar_exact_p, paired_counts, paired_difference,
                                        wilson_interval)
from deciplane.provenance import package_versions, provenance


def test_wilson_hand_computed():
    # 0/10: centre = half = (z^2/20)/(1 + z^2/10) = 0.19208/1.38415 = 0.13877
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.27753, abs=1e-5)
    lo, hi = wilson_interval(5, 10)      # symmetric around 1/2
    assert lo == pytest.approx(0.23659, abs=1e-5) and hi == pytest.approx(1 - lo)
    assert wilson_interval(10, 10)[0] == pytest.approx(1 - 0.27753, abs=1e-5)
    assert wilson_interval(0, 50)[0] == 0.0 and wilson_interval(50, 50)[1] == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_wilson_narrows_with_n():
    widths = [wilson_interval(n // 2, n)[1] - wilson_interval(n // 2, n)[0] for n in (10, 50, 250)]
    assert widths[0] > widths[1] > widths[2]


def test_mcnemar_exact():
    # b=12, c=2: 2 * P(X <= 2), X ~ Bin(14, 1/2) = 2 * (1 + 14 + 91) / 16384
    assert mcnemar_exact_p(12, 2) == pytest.approx(2 * 106 / 16384)
    assert mcnemar_exact_p(0, 0) == 1.0 and mcnemar_exact_p(3, 3) == 1.0


def test_paired_difference_hand_computed():
    # 50 episodes: 36 won by both, 12 only by A, 2 only by B, 0 by neither.
    a = [True] * 48 + [False] * 2
    b = [True] * 36 + [False] * 12 + [True] * 2
    assert paired_counts(a, b) == (36, 12, 2, 0)
    r = paired_difference(a, b)
    assert r.rate_a == 0.96 and r.rate_b == 0.76 and r.difference == pytest.approx(0.2)
    # Bonett-Price: p12 = 13/52, p21 = 3/52, d = 10/52, se = sqrt((16/52 - d^2) / 52)
    d = 10 / 52
    half = 1.959964 * math.sqrt((16 / 52 - d * d) / 52)
    assert r.ci95[0] == pytest.approx(d - half, abs=1e-5)     # 0.0509
    assert r.ci95[1] == pytest.approx(d + half, abs=1e-5)     # 0.3337
    assert r.a_better and r.mcnemar_p == pytest.approx(2 * 106 / 16384)


def test_paired_difference_properties():
    a = [True, False, True, True, False, False, True, False]
    b = [False, False, True, False, True, False, True, True]
    ab, ba = paired_difference(a, b), paired_difference(b, a)
    assert ab.difference == -ba.difference
    assert ab.ci95[0] == pytest.approx(-ba.ci95[1]) and ab.ci95[1] == pytest.approx(-ba.ci95[0])
    same = paired_difference(a, a)          # no discordant episode: still a real interval
    half = 1.959964 * math.sqrt(0.2 / 10)    # p12 = p21 = 1/10
    assert same.difference == 0 and same.ci95 == pytest.approx((-half, half), abs=1e-5)
    assert not same.a_better
    with pytest.raises(ValueError):
        paired_difference([True], [True, False])


def test_provenance_names_versions():
    p = provenance()
    assert p["packages"]["torch"] and p["packages"]["deciplane"]
    assert package_versions(("no-such-dist-xyz",)) == {"no-such-dist-xyz": None}
    assert set(p) == {"commit", "python", "platform", "java", "packages"}
