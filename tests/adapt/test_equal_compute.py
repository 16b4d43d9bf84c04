"""The equal-compute selection baselines of ``deciplane adapt`` and the runner's accounting:
forward-token equivalents, best-of-N, the Wilson interval and paired comparisons against
hand-computed values; best-of-N and majority vote share their samples (the tiny model)."""

from __future__ import annotations

import pytest
import torch

from deciplane.adapt.base import majority_answers
from deciplane.adapt.equal_compute import best_of_n_index, equal_compute_baselines
from deciplane.adapt.runner import accuracy_interval
from deciplane.agents import load_policy
from deciplane.engine.budget import Budget, forward_token_equivalents
from deciplane.engine.compare import paired_vs

torch.set_num_threads(1)

PROMPTS = ["what is 2 + 3 ?", "hi", "how many apples are in the red box if you add one more ?"]


def test_compute_accounting_and_selection_helpers():
    b = Budget(prefill_tokens=100, generated_tokens=20, forward_tokens=50, backward_tokens=30)
    assert forward_token_equivalents(b) == 100 + 20 + 50 + 60
    assert forward_token_equivalents(b.as_dict()) == 230
    assert best_of_n_index([-1.0, -0.2, -0.1], ["3", "4", None]) == 1
    assert best_of_n_index([-1.0, -1.0], ["3", "4"]) == 0
    assert best_of_n_index([-1.0], [None]) is None
    assert accuracy_interval(0, 0) == [0.0, 1.0]
    lo, hi = accuracy_interval(50, 100)            # Wilson: 0.5 +- 0.0962
    assert lo == pytest.approx(0.4038, abs=1e-4) and hi == pytest.approx(0.5962, abs=1e-4)
    d = paired_vs({"a": True, "b": True, "c": False, "d": False},
                  {"d": True, "c": False, "b": True, "a": False})      # paired by id, not order
    assert (d["both"], d["only_a"], d["only_b"], d["neither"]) == (1, 1, 1, 1)
    assert d["difference"] == 0.0 and d["mcnemar_p"] == 1.0 and not d["a_better_95"]
    with pytest.raises(ValueError, match="same task ids"):
        paired_vs({"a": True}, {"b": True})


def test_equal_compute_baselines_vote_on_the_same_samples_as_majority_answers():
    policy = load_policy("deciplane/tiny")
    prompts = [policy.format_prompt(p) for p in PROMPTS]
    kw = dict(votes=3, max_new_tokens=5, temperature=1.5, top_p=1.0, seed=11, prompts_per_batch=2)
    maj, per = majority_answers(policy, prompts, budget=Budget(), **kw)
    res = equal_compute_baselines(policy, prompts, budget=Budget(), **kw)
    assert res["majority"] == maj and res["samples"] == per
    assert all(b == "" or b in p for b, p in zip(res["best_of_n"], per))
