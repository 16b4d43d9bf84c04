"""verify_math: real math-verify equivalence, thread/process safety, timeouts, bad input."""

from __future__ import annotations

import multiprocessing as mp
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from deciplane.envs import verify_math
from deciplane.envs.math.verify import _pool, verify_many
from deciplane.errors import InvalidAnswer

# (prediction, gold, equivalent?)
CASES = [
    ("1/2", "0.5", True),                       # fraction vs decimal
    ("0.5", "\\frac{1}{2}", True),
    ("\\frac12", "1/2", True),                  # bare LaTeX without $...$
    ("\\dfrac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}", True),
    ("\\sqrt{2}+\\frac{1}{3}", "\\frac{1}{3}+\\sqrt2", True),
    ("The final answer is $\\boxed{42}$.", "42", True),   # boxed inside a response
    ("\\boxed{\\{1,2\\}}", "\\{2,1\\}", True),  # sets, order-free
    ("\\{1,2,3\\}", "\\{1,2\\}", False),
    ("[2,5)", "[2,5)", True),                   # intervals
    ("x \\in [2,5)", "[2,5)", True),
    ("(2,5)", "[2,5)", False),                  # open vs half-open
    ("(-\\infty, 3]", "(-\\infty,3]", True),
    ("x^2+2x+1", "(x+1)^2", True),              # symbolic
    ("\\frac{\\pi}{2}", "\\pi/2", True),
    ("1,000", "1000", True),
    ("12", "12", True),                         # integer fast path
    ("-7", "7", False),
    ("7", "12", False),                         # plain wrong answers
    ("\\frac{1}{3}", "0.5", False),
    ("\\text{(C)}", "C", True),
]


@pytest.mark.parametrize("pred,gold,expected", CASES)
def test_equivalence_cases(pred, gold, expected):
    assert verify_math(pred, gold) is expected


def test_batch_matches_single_calls():
    assert verify_many([(p, g) for p, g, _ in CASES]) == [e for _, _, e in CASES]


def test_from_thread_pool():
    # math-verify's own signal.alarm timer fails in threads (silently: every answer wrong);
    # ours must give the same answers from 4 threads at once.
    with ThreadPoolExecutor(max_workers=4) as ex:
        got = list(ex.map(lambda c: verify_math(c[0], c[1]), CASES * 2))
    assert got == [e for _, _, e in CASES] * 2


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_from_daemonic_process_pool(start):
    verify_math("\\frac{1}{4}", "0.25")  # the parent has live workers when it forks
    ctx = mp.get_context(start)
    with ctx.Pool(1) as pool:  # pool workers are daemonic: they cannot use multiprocessing
        got = pool.starmap(verify_math, [("1/2", "0.5"), ("\\frac13", "0.5")])
    assert got == [True, False]


def test_tiny_timeout_returns_false_fast_and_pool_recovers():
    assert verify_math("\\frac{1}{4}", "0.25")  # warm a worker
    before = _pool().timeouts
    t0 = time.monotonic()
    # Strings used by no other test: sympy's caches in a warm worker would answer a
    # repeated pair within the 1 ms deadline.
    pred, gold = "\\sqrt{7}+\\frac{5}{13}-\\sqrt{3}", "\\frac{5}{13}-\\sqrt3+\\sqrt7"
    assert verify_math(pred, gold, timeout_s=0.001) is False
    assert time.monotonic() - t0 < 3.0
    assert _pool().timeouts == before + 1
    assert verify_math(pred, gold) is True


def test_pathological_input_is_bounded():
    verify_math("\\frac{1}{4}", "0.25")  # warm
    t0 = time.monotonic()
    assert verify_math("(1+x)^{100000}", "\\frac{3}{7}+x", timeout_s=1.0) is False
    assert time.monotonic() - t0 < 6.0  # 1 s deadline + kill; a fresh worker starts lazily


@pytest.mark.parametrize("pred", [None, "", "   \n"])
def test_missing_prediction_is_false(pred):
    assert verify_math(pred, "3") is False


@pytest.mark.parametrize("pred,gold", [(b"12", "12"), (12, "12"), ("12", 12), ("1\udcff", "1"),
                                       ("1", "")])
def test_invalid_inputs_raise(pred, gold):
    with pytest.raises(InvalidAnswer):
        verify_math(pred, gold)


def test_worker_killed_from_outside_is_replaced():
    import os
    import signal

    assert verify_math("\\frac{1}{4}", "0.25")
    pool = _pool()
    for w in list(pool.idle):
        os.kill(w.proc.pid, signal.SIGKILL)
        w.proc.wait()
    assert verify_math("\\frac{1}{4}", "0.25") is True
