"""Pure CodeOpt math and parsing: hand-computed cases and properties (no sandbox)."""

from __future__ import annotations

import math
import random

import pytest

from deciplane.envs.codeopt import reward as R
from deciplane.envs.codeopt.evaluate import outputs_match
from deciplane.envs.codeopt.tasks import (extract_pyperformance_source, list_tasks,
                                          pyperformance_benchmark_path)
from deciplane.envs.codeopt.timers import (CallgrindLogError, interleave_order,
                                           parse_callgrind_log)
from deciplane.errors import TaskError


def test_median_and_speedup():
    assert R.median([3, 1, 2]) == 2
    assert R.median([4, 1, 3, 2]) == 2.5
    assert R.speedup(2.0, 0.5) == 4.0
    with pytest.raises(ValueError):
        R.median([])
    with pytest.raises(ValueError):
        R.speedup(1.0, 0.0)


def test_net_cost_subtracts_baseline_with_floor():
    assert R.net_cost(150, 100) == 50
    assert R.net_cost(90, 100) == 1.0          # os._exit-style runs below start-up
    assert R.net_cost(90, 100, floor=5) == 5


def test_noise_band_hand_computed():
    # d = [0, ln 1.1, -ln 1.1]; median 0; MAD = ln 1.1; sigma = 1.4826 ln 1.1
    # se = sqrt(pi/2) * sigma / sqrt(4); medians equal -> offset 0; band = e^(3 se) - 1
    band = R.noise_band([1.0, 1.1, 1.0], [1.0, 1.0, 1.1], repeats=4, z=3.0, floor=0.01)
    sigma = 1.4826 * math.log(1.1)
    expected = math.exp(3 * math.sqrt(math.pi / 2) * sigma / 2) - 1
    assert band == pytest.approx(expected)
    assert band == pytest.approx(0.30428, abs=1e-4)


def test_noise_band_floor_and_offset():
    # identical runs: no noise at all -> the floor
    assert R.noise_band([0.5] * 5, [0.5] * 5, repeats=5) == R.DEFAULT_FLOOR
    # a constant 2x offset between the two halves: MAD 0, but the observed
    # reference-vs-reference speedup of 2 must be inside the band
    assert R.noise_band([1.0] * 3, [2.0] * 3, repeats=3) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        R.noise_band([1.0], [1.0, 2.0], repeats=1)


def test_noise_band_shrinks_with_repeats():
    rng = random.Random(0)
    a = [1 + rng.gauss(0, 0.05) for _ in range(9)]
    b = [1 + rng.gauss(0, 0.05) for _ in range(9)]
    bands = [R.noise_band(a, b, repeats=r, floor=0.0) for r in (1, 4, 16)]
    offset = math.exp(abs(math.log(R.median(a) / R.median(b)))) - 1
    assert bands[0] >= bands[1] >= bands[2] >= offset - 1e-12


def test_apply_noise_band():
    assert R.apply_noise_band(1.02, 0.03) == 1.0
    assert R.apply_noise_band(0.98, 0.03) == 1.0
    assert R.apply_noise_band(1 / 1.03, 0.03) == 1.0
    assert R.apply_noise_band(1.05, 0.03) == 1.05
    assert R.apply_noise_band(0.9, 0.03) == 0.9
    assert R.apply_noise_band(1.0000001, 0.0) == 1.0000001


def test_log_speedup_reward():
    assert R.log_speedup_reward(4.0, cap=4.0) == 2.0
    assert R.log_speedup_reward(1.0, cap=4.0) == 0.0
    assert R.log_speedup_reward(0.5, cap=4.0) == 0.0
    assert R.log_speedup_reward(1024.0, cap=4.0) == 4.0
    rewards = [R.log_speedup_reward(s, 3.0) for s in (0.1, 0.9, 1.0, 1.5, 3.0, 8.0, 100.0)]
    assert rewards == sorted(rewards) and all(0.0 <= r <= 3.0 for r in rewards)


def test_percentile_reward_is_mercury_beyond():
    # references take 10 (slow) and 2 (fast): (10 - 5) / (10 - 2) = 0.625
    assert R.percentile_reward(5.0, [10.0, 2.0]) == pytest.approx(0.625)
    assert R.percentile_reward(1.0, [10.0, 2.0]) == 1.0
    assert R.percentile_reward(20.0, [10.0, 2.0]) == 0.0
    assert R.percentile_reward(10.0, [10.0, 6.0, 2.0]) == 0.0
    # a single reference solution: faster / equal (the reference itself: nothing gained,
    # as with several references where c == max gives 0) / slower
    assert (R.percentile_reward(1.0, [2.0]), R.percentile_reward(2.0, [2.0]),
            R.percentile_reward(3.0, [2.0])) == (1.0, 0.0, 0.0)
    costs = [0.5, 1, 2, 3, 5, 8, 13]
    scores = [R.percentile_reward(c, [1.0, 4.0, 9.0]) for c in costs]
    assert scores == sorted(scores, reverse=True) and all(0 <= s <= 1 for s in scores)


def test_summarize_speedups():
    out = R.summarize_speedups([1.0, 1.2, 2.0, 0.9])
    assert out["mean_speedup"] == pytest.approx(1.275)
    assert out["share_speedup_ge_1.1"] == 0.5
    assert out["n_tasks"] == 4


LOG = """==2== Callgrind, a call-graph generating cache profiler
==2== Command: /usr/bin/python3 main.py
==2== Parent PID: 1
==2==
==2== Events    : Ir
==2== Collected : 31409259
==2==
==2== I   refs:      31,409,259
"""


def test_parse_callgrind_log():
    assert parse_callgrind_log(LOG) == 31409259
    assert parse_callgrind_log(LOG, command="/usr/bin/python3 main.py") == 31409259


@pytest.mark.parametrize("text, kind", [
    (LOG + "==2== Collected : 12\n", "tampered"),                    # a planted total
    (LOG.replace("==2== Collected : 31409259\n", ""), "sandbox_error"),  # no total
    ("Collected : 5\n", "sandbox_error"),                             # not a log
    # a child process (forked or exec'd, followed by --trace-children=yes)
    (LOG + "==3== Command: /usr/bin/python3 -c work\n==3== Collected : 1000\n",
     "multiprocess"),
])
def test_parse_callgrind_log_rejects_untrusted_logs(text, kind):
    with pytest.raises(CallgrindLogError) as err:
        parse_callgrind_log(text)
    assert err.value.kind == kind


def test_parse_callgrind_log_checks_the_command():
    with pytest.raises(CallgrindLogError, match="tampered"):
        parse_callgrind_log(LOG, command="/usr/bin/python3 other.py")


def test_interleave_order_alternates():
    assert interleave_order(3) == [("ref", "cand"), ("cand", "ref"), ("ref", "cand")]


def test_outputs_match():
    assert outputs_match("1 2\n3\n", "1 2   \n3\n\n\n")
    assert not outputs_match("1 2\n3\n", "1  2\n3\n")
    assert not outputs_match("1\n", "1\n2\n")
    assert outputs_match("0.1000000000 -2.5\n", "0.10000000004\n-2.5", "float")
    assert not outputs_match("0.1\n", "0.1001\n", "float")
    assert not outputs_match("ok 1\n", "ko 1\n", "float")
    assert not outputs_match("nan\n", "nan\n".upper(), "float")


def test_extract_pyperformance_source_synthetic():
    src = '''"""doc"""
import pyperf
import math

# a comment that stays
def work(n):
    return math.sqrt(n)


def bench(loops):
    t0 = pyperf.perf_counter()
    return pyperf.perf_counter() - t0


def add_cmdline_args(cmd, args):
    cmd.append(1)


if __name__ == "__main__":
    runner = pyperf.Runner()
    runner.bench_func("x", work, 3)
'''
    out = extract_pyperformance_source(src)
    assert "pyperf" not in out and "# a comment that stays" in out
    ns: dict = {}
    exec(compile(out, "x", "exec"), ns)
    assert ns["work"](16) == 4.0 and "bench" not in ns and "add_cmdline_args" not in ns


def test_extract_pyperformance_source_refuses_leftover_pyperf():
    with pytest.raises(TaskError, match="pyperf"):
        extract_pyperformance_source("import pyperf\nRUNNER = pyperf.Runner()\n")


@pytest.mark.parametrize("task", list_tasks(origin="pyperformance"), ids=lambda t: t.id)
def test_every_pyperformance_task_is_the_installed_benchmark_without_pyperf(task):
    installed = pyperformance_benchmark_path(task.id).read_text()
    # hexiom's LEVELS (boards with their solutions) are its hidden tests: cut out
    drop = ("LEVELS",) if task.id == "hexiom" else ()
    body = extract_pyperformance_source(installed, drop)
    assert "LEVELS[" not in task.reference
    assert task.reference.startswith(body) and "import pyperf" not in task.reference
    compile(task.reference, task.id, "exec")
