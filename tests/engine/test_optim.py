"""The engine's optimizer step on small real modules: normalisers, accumulation equal to the
full-batch gradient, per-group clipping, skip on a non-finite norm, the CORD buffers."""

from __future__ import annotations

import math

import pytest
import torch

from deciplane.engine.optim import (CordRule, MicroLoss, Normaliser, Optimizer, accumulate,
                                    micro_batches, optimizer_step)
from deciplane.errors import ConfigError

torch.set_num_threads(1)


def test_normaliser_share_and_scale_hand_computed():
    tokens = Normaliser([3, 1, 4])                  # a token mean over 8 tokens
    assert tokens.share([0, 1], [0, 1, 2]) == 4 / 8
    assert float(tokens.scale(torch.tensor(2.0), [2], [0, 1, 2])) == pytest.approx(2.0 * 4 / 8)
    experts = Normaliser([1, 0, 1], reduction="sum")  # a mean over rows with a target
    assert float(experts.scale(torch.tensor(6.0), [0, 1], [0, 1, 2])) == pytest.approx(3.0)
    empty = Normaliser([0, 0], reduction="sum")
    assert float(empty.scale(torch.tensor(5.0), [0], [0, 1])) == 5.0   # divided by max(0, 1)


def test_micro_batches_split_in_order():
    assert micro_batches(5, 2) == [[0, 1], [2, 3], [4]]
    assert micro_batches(0, 3) == []


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 3, generator=g)
    y = torch.randn(7, generator=g)
    lengths = [1, 4, 2, 2, 3, 1, 5]               # units per row (a token-mean-like weight)
    return x, y, lengths


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_accumulation_over_micro_batches_equals_the_full_batch_gradient(reduction):
    x, y, lengths = _data()
    w = torch.tensor(lengths, dtype=torch.float32)

    def loss_fn_for(model):
        def loss_fn(micro):
            err = (model(x[micro]).squeeze(-1) - y[micro]) ** 2 * w[micro]    # (n,)
            total = err.sum()
            return MicroLoss(task=total / w[micro].sum() if reduction == "mean" else total,
                             metrics={"m": 1.0})
        return loss_fn

    norm = Normaliser(lengths, reduction=reduction)
    grads = {}
    for size in (7, 3, 1):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        opt = Optimizer(list(model.parameters()), lr=0.1)
        metrics = accumulate(opt, list(range(7)), size, loss_fn_for(model), norm)
        grads[size] = [p.grad.clone() for p in model.parameters()]
        assert metrics["m"] == pytest.approx(1.0)  # shares add up to 1
    # the full-batch loss: sum_i w_i err_i / sum_i w_i
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    ((model(x).squeeze(-1) - y) ** 2 * w).sum().div(w.sum()).backward()
    for size in (7, 3, 1):
        for got, want in zip(grads[size], (p.grad for p in model.parameters())):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_each_parameter_group_is_clipped_separately():
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    opt = Optimizer([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1, max_grad_norm=1.0,
                    names=["policy", "value_head"])
    a.grad = torch.tensor([3.0, 4.0])               # norm 5 -> clipped to 1
    b.grad = torch.tensor([0.5])                    # norm 0.5 -> untouched
    out = opt.step()
    assert out["optim/grad_norm"] == pytest.approx(5.0)
    assert out["optim/grad_norm_value_head"] == pytest.approx(0.5)
    assert opt.steps == 1 and opt.skipped == 0
    assert a.grad is None and b.grad is None        # zeroed after the step
    # first AdamW step moves each parameter by ~lr against the sign of its gradient
    assert a.detach().tolist() == pytest.approx([-0.1, -0.1], abs=1e-4)
    assert b.detach().tolist() == pytest.approx([-0.5], abs=1e-4)


def test_nonfinite_gradient_skips_the_step_and_leaves_weights():
    p = torch.nn.Parameter(torch.ones(2))
    opt = Optimizer([p], lr=0.1, weight_decay=0.5)
    p.grad = torch.tensor([float("nan"), 1.0])
    out = opt.step()
    assert out["optim/nonfinite_grad"] == 1.0 and math.isnan(out["optim/grad_norm"])
    assert opt.steps == 0 and opt.skipped == 1
    assert p.detach().tolist() == [1.0, 1.0]        # no AdamW call: no weight decay either
    opt.skip()
    assert opt.skipped == 2


def test_cord_combines_full_batch_gradients_of_the_two_objectives():
    # task gradient (1, 0) and teacher gradient (-1, 1): they conflict (dot < 0), so
    # "conflict" projects the teacher's off the task's: lam * (0, 1) is added
    p = torch.nn.Parameter(torch.zeros(2))
    opt = Optimizer([p], lr=0.1)
    t_dir, d_dir = torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])

    def loss_fn(micro):
        return MicroLoss(task=(p * t_dir).sum() * len(micro), distill=(p * d_dir).sum() * len(micro))

    task, distill = Normaliser([1] * 4), Normaliser([1] * 4, reduction="sum")
    m = accumulate(opt, [0, 1, 2, 3], 2, loss_fn, task, distill,
                   cord=CordRule(lam=0.5, combine="conflict", protect="task"))
    # task: mean over 4 rows of len(micro) * t -> per micro 2*t*(2/4) -> total 2*t
    # distill: sum form -> per micro 2*d / 4 -> total d
    g_task, g_teacher = 2 * t_dir, d_dir
    proj = g_teacher - (g_teacher @ g_task) / (g_task @ g_task) * g_task     # (0, 1)
    torch.testing.assert_close(p.grad, g_task + 0.5 * proj)
    assert m["cord/projected"] == 1.0
    assert m["loss/distill"] == pytest.approx(0.0)   # p = 0: the loss value is 0
    # the plain sum baseline
    opt.zero_grad()
    accumulate(opt, [0, 1, 2, 3], 2, loss_fn, task, distill, cord=CordRule(lam=0.5, combine="sum"))
    torch.testing.assert_close(p.grad, g_task + 0.5 * g_teacher)


def test_optimizer_step_takes_one_step_and_rejects_bad_settings():
    p = torch.nn.Parameter(torch.ones(1))
    opt = Optimizer([p], lr=0.1)
    optimizer_step(opt, [0, 1], 1, lambda micro: MicroLoss(task=(p ** 2).sum()),
                   Normaliser([1, 1]))
    assert opt.steps == 1 and float(p.detach()) < 1.0
    with pytest.raises(ConfigError, match="micro_batch_size"):
        optimizer_step(opt, [0], 0, lambda micro: MicroLoss(task=p.sum()), Normaliser([1]))
    with pytest.raises(ConfigError, match="no trainable parameters"):
        Optimizer([torch.zeros(1)], lr=0.1)
    with pytest.raises(ConfigError, match="distillation Normaliser"):
        accumulate(opt, [0], 1, lambda micro: MicroLoss(task=p.sum(), distill=p.sum()),
                   Normaliser([1]))
