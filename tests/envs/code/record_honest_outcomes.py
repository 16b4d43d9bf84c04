"""Record how the hidden-test harness judges a fixed set of honest programs on easy-funcs.

    python tests/envs/code/record_honest_outcomes.py   # rewrites honest_outcomes.json

Written once against main *before* the two-process harness (issue 24) replaced the
one-process driver; ``test_reward_hacks.py`` checks that the new harness gives every
program the same pass/fail. The programs are honest attempts, right and wrong: per task
of the easy-funcs test split, the reference-equivalent solution of its family, a near
miss (a plausible bug that passes some hidden tests) where the family has one, and a
body that raises on some inputs. Not collected by pytest (no ``test_`` prefix)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from deciplane.envs.code import easy_funcs  # noqa: E402
from deciplane.envs.code.harness import extract_program, run_hidden_tests  # noqa: E402
from deciplane.sandbox import Sandbox  # noqa: E402

sys.path.insert(0, str(HERE))
from test_code_benchmarks import SOLUTIONS  # noqa: E402

NEAR_MISS = {
    "add_k": "return x + {0} + (x < 0)", "times_k": "return x * {0} if x else 1",
    "divisible_by_k": "return n % {0} == 0 and n != 0", "first_k_chars": "return s[:{0} - 1]",
    "repeat_k": "return s * ({0} - 1) if s else ''", "count_above_k": "return sum(1 for x in xs if x >= {0})",
    "list_sum": "return sum(xs[1:])", "list_max": "return sorted(xs)[-1] if len(xs) > 1 else 0",
    "last_element": "return xs[0]", "upper": "return s.capitalize()",
    "reverse_string": "return s[::-1].strip()", "count_char": "return s.lower().count('{0}') - s.startswith('{0}')",
    "sum_above_k": "return sum(x for x in xs if x >= {0})",
    "squares_of_evens": "return [x * x for x in xs if x % 2 == 0 and x]",
    "count_vowels": "return sum(c in 'aeiouy' for c in s)",
    "reverse_words": "return ' '.join(s.split()[::-1])", "affine": "return {0} * x + {1} if x else {1} + 1",
    "clamp": "return max(x, {0})", "long_words": "return [w for w in words if len(w) >= {0}]",
    "second_largest": "d = sorted(xs)\n    return d[-2] if len(d) > 1 else None",
    "first_index_above_k": "return next((i for i, x in enumerate(xs) if x >= {0}), -1)",
    "running_sums": "return [sum(xs[:i]) for i in range(len(xs))]",
    "palindrome": "return s == s[::-1]",
    "most_common_char": "return max(s, key=s.count)",
}
N_TASKS = 40
RAISES = "return {{}}[len(repr(locals())) % 3]"


def programs() -> list[dict]:
    out = []
    for i, task in enumerate(easy_funcs.generate_splits()["test"][:N_TASKS]):
        consts = task.key.split("/")[1:]
        for kind, body in (("right", SOLUTIONS[task.family]), ("near_miss", NEAR_MISS[task.family]),
                           ("raises", RAISES)):
            out.append({"task": i, "family": task.family, "kind": kind,
                        "response": "    " + body.format(*consts) + "\n"})
    return out


def main() -> None:
    tasks = easy_funcs.generate_splits()["test"]
    sb = Sandbox()
    rows = []
    for p in programs():
        t = tasks[p["task"]]
        prog = extract_program(p["response"], t.prompt, t.entry_point)
        o = run_hidden_tests(sb, prog, t.tests, t.entry_point)
        rows.append({**p, "passed": o.passed, "failure": o.failure})
    meta = {"recorded_with": os.popen("git -C %s rev-parse --short HEAD" % HERE).read().strip(),
            "harness": "one-process driver (before issue 24)", "split": "easy-funcs/test",
            "n": len(rows), "passed": sum(r["passed"] for r in rows)}
    (HERE / "honest_outcomes.json").write_text(json.dumps({"meta": meta, "programs": rows},
                                                          indent=0) + "\n")
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
