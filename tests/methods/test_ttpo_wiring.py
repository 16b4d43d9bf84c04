"""TTPO's own wiring (the pure loss pieces are tested in tests/objectives/test_ttpo.py):
balanced P/N selection, the agree/disagree split from predictions only, the teacher
context, and the teacher-student KL that feeds the token weights."""

from __future__ import annotations

import inspect
import math

import torch

from deciplane.methods.ttpo import (TTPO, TTPOConfig, agree_branch_kl, balanced_selection,
                                    split_agree)
from deciplane.objectives.ttpo import restrict_teacher, top_p_support
from deciplane.agents import load_policy
from deciplane.objectives import ttpo_token_weights
from deciplane.types import UnlabeledTask


def test_balanced_selection_hand_cases():
    agree = [True, True, True, False, False, True, False, True]
    assert balanced_selection(agree, 4) == [0, 1, 3, 4]            # 2 P + 2 N, first ones
    assert balanced_selection([True] * 7 + [False], 4) == [0, 1, 2, 7]   # N has only 1
    assert balanced_selection([False, False, True], 2) == [0, 2]
    assert balanced_selection([True, True], 8) == [0, 1]
    assert balanced_selection(agree, 3) == [0, 1, 3]               # odd: the extra one goes to P


def test_split_uses_predictions_only():
    assert list(inspect.signature(split_agree).parameters) == ["answers"]
    v, agree = split_agree(["4", "4.0", None, "5", ""])
    assert v.answer == "4" and agree == [True, True, False, False, False]
    v, agree = split_agree([None, None])
    assert v.answer is None and agree == [False, False]


def test_teacher_context_appends_the_majority_answer():
    policy = load_policy("deciplane/tiny")
    ad = TTPO(policy, TTPOConfig(votes=2, train_samples=2))
    task = UnlabeledTask(id="x", prompt="you see 3 keys")
    student, teacher = ad.format(task), ad.format(task, "answer: 3")
    assert "you see 3 keys" in student and "answer: 3" not in student
    assert "you see 3 keys\n\nanswer: 3" in teacher


def test_agree_branch_kl_hand_computed():
    log = lambda *p: torch.log(torch.tensor(p))          # noqa: E731
    # student: 2 rows, width 3, vocab 2; row 1 is an agree row with a 2-token response
    student = torch.zeros(2, 3, 2)
    student[1, 1], student[1, 2] = log(0.5, 0.5), log(0.9, 0.1)
    teacher = torch.zeros(1, 4, 2)                         # teacher padded wider, right-aligned
    teacher[0, 2], teacher[0, 3] = log(0.8, 0.2), log(0.5, 0.5)
    kl = agree_branch_kl(student, teacher, rows=[1], lengths=[3, 2])
    k1 = 0.8 * math.log(0.8 / 0.5) + 0.2 * math.log(0.2 / 0.5)
    k2 = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    expected = torch.tensor([[0.0, 0.0, 0.0], [0.0, k1, k2]])
    assert torch.allclose(kl, expected, atol=1e-6)
    # the weights fed to the loss: D normalised per sample -> the larger KL gets D = 1;
    # with equal entropies H = 0, so w = D
    mask = torch.tensor([[False, False, False], [False, True, True]])
    w = ttpo_token_weights(torch.ones(2, 3), kl, mask)
    assert torch.allclose(w, torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]]))
    assert agree_branch_kl(student, None, rows=[], lengths=[3, 2]).abs().sum() == 0


def test_support_restriction_hand_computed():
    """support_top_p: the teacher renormalised over the student's top-p tokens."""
    log = lambda *p: torch.log(torch.tensor(p))          # noqa: E731
    assert top_p_support(log(0.5, 0.3, 0.2), 0.7).tolist() == [True, True, False]
    assert top_p_support(log(0.2, 0.5, 0.3), 0.4).tolist() == [False, True, False]
    q = restrict_teacher(log(0.6, 0.3, 0.1), torch.tensor([False, True, True])).exp()
    assert torch.allclose(q, torch.tensor([0.0, 0.75, 0.25]), atol=1e-6)
    # one agree row, one token: student (0.2, 0.5, 0.3), teacher (0.6, 0.3, 0.1); top-p 0.8
    # keeps the student's tokens 1 and 2 -> teacher (0, 0.75, 0.25) on them
    student = log(0.2, 0.5, 0.3).view(1, 1, 3)
    teacher = log(0.6, 0.3, 0.1).view(1, 1, 3)
    kl = agree_branch_kl(student, teacher, rows=[0], lengths=[1], support_top_p=0.8)
    expected = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.3)
    assert abs(float(kl[0, 0]) - expected) < 1e-6
    full = agree_branch_kl(student, teacher, rows=[0], lengths=[1])
    assert abs(float(full[0, 0]) - (0.6 * math.log(3) + 0.3 * math.log(0.6)
                                     + 0.1 * math.log(1 / 3))) < 1e-6
    s = student.clone().requires_grad_(True)                 # finite gradients off the support
    agree_branch_kl(s, teacher, rows=[0], lengths=[1], support_top_p=0.8).sum().backward()
    assert torch.isfinite(s.grad).all() and float(s.grad[0, 0, 0]) == 0.0


def test_agree_branch_kl_carries_gradient_to_the_student_only():
    student = torch.log_softmax(torch.randn(1, 2, 5), -1).requires_grad_(True)
    teacher = torch.log_softmax(torch.randn(1, 2, 5), -1).requires_grad_(True)
    agree_branch_kl(student, teacher, rows=[0], lengths=[2]).sum().backward()
    assert student.grad is not None and student.grad.abs().sum() > 0
    assert teacher.grad is None


def test_branch_switch_trains_one_branch_and_logs_its_metrics():
    """`branches` (an ablation switch): `agree` keeps only agree rows, `disagree` only
    disagree rows; every step logs the branch metrics."""
    torch.manual_seed(0)
    tasks = [UnlabeledTask(id=str(i), prompt=f"what is {i} + 1?") for i in range(4)]
    seen = {}
    for branches in ("both", "agree", "disagree"):
        policy = load_policy("deciplane/tiny", seed=0)
        ad = TTPO(policy, TTPOConfig(votes=4, train_samples=4, max_new_tokens=6, max_steps=2,
                                     prompts_per_step=2, guard=False, branches=branches))
        ad.run(tasks)
        hist = [h for h in ad.records.history if h.get("update/skipped") == 0.0]
        seen[branches] = hist
        for h in ad.records.history:
            assert 0.0 < h["signal/agreement"] <= 1.0   # the shared step signal (adapt.guard)
        if branches == "agree":
            assert all(h["ttpo/disagree_rows"] == 0 for h in ad.records.history)
        if branches == "disagree":
            assert all(h["ttpo/agree_rows"] == 0 for h in ad.records.history)
    trained = [h for hs in seen.values() for h in hs]
    assert trained, "no step trained: the test says nothing"
    assert all("ttpo/agree_weight" in h and "ttpo/entropy" in h for h in trained)
