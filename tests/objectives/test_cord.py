"""CORD gradient combination (METHODS.md §3): hand cases, properties, full-batch buffers."""

from __future__ import annotations

import pytest
import torch

from deciplane.errors import ConfigError, ObjectiveInputError
from deciplane.objectives import CordGradBuffers, CORDLossConfig, cord_combine, cord_stats

T = torch.tensor


def test_conflict_hand_computed_and_swapping_protected_changes_result():
    g_task, g_teacher = T([1.0, 0.0]), T([-1.0, 1.0])
    # protect task: g_u = [-1, 1] - (-1 / 1) [1, 0] = [0, 1] -> g = [1, 1]
    assert torch.allclose(cord_combine(g_task, g_teacher, 1.0, "task", "conflict"), T([1.0, 1.0]))
    # protect teacher: g_u = [1, 0] - (-1 / 2) [-1, 1] = [.5, .5] -> g = [-.5, 1.5]
    assert torch.allclose(cord_combine(g_task, g_teacher, 1.0, "teacher", "conflict"),
                          T([-0.5, 1.5]))
    # lambda scales the teacher before projecting: .5 * [-2, 2] == [-1, 1]
    assert torch.allclose(cord_combine(g_task, T([-2.0, 2.0]), 0.5, "task"), T([1.0, 1.0]))


def test_aligned_gradients_conflict_is_plain_sum_always_removes_parallel_part():
    g_task, g_teacher = T([1.0, 0.0]), T([1.0, 1.0])
    assert torch.allclose(cord_combine(g_task, g_teacher, 1.0, "task", "conflict"),
                          g_task + g_teacher)
    # always: g_u = [1, 1] - (1 / 1) [1, 0] = [0, 1] -> g = [1, 1]
    assert torch.allclose(cord_combine(g_task, g_teacher, 1.0, "task", "always"), T([1.0, 1.0]))


def test_lambda_zero_and_zero_norm_rules():
    g_task = T([0.3, -0.2])
    assert torch.equal(cord_combine(g_task, T([-100.0, 5.0]), 0.0, "teacher", "always"), g_task)
    # ||g_p|| = 0: no projection, just the sum (no NaN)
    out = cord_combine(torch.zeros(2), T([-1.0, 2.0]), 0.5, "task", "always")
    assert torch.allclose(out, T([-0.5, 1.0]))
    out = cord_combine(T([-1.0, 2.0]), torch.zeros(2), 1.0, "teacher", "conflict")
    assert torch.allclose(out, T([-1.0, 2.0]))


def test_projection_properties_random():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        a, b = torch.randn(16, generator=g), torch.randn(16, generator=g)
        for prot, gp in (("task", a), ("teacher", 0.7 * b)):
            out = cord_combine(a, b, 0.7, prot, "always")
            # the unprotected part is orthogonal to the protected gradient
            assert abs(float((out - gp).dot(gp))) < 1e-4
            out_c = cord_combine(a, b, 0.7, prot, "conflict")
            # conflict mode never leaves a negative component along g_p
            assert float((out_c - gp).dot(gp)) > -1e-4


def _two_micro_batches():
    # micro-batch 1 conflicts (task [1, 0] vs teacher [-1, 1]); micro-batch 2 does not
    # (teacher [2, 0]); summed over the optimizer batch: task [2, 0], teacher [1, 1], dot 2
    return [(T([1.0, 0.0]), T([-1.0, 1.0])), (T([1.0, 0.0]), T([2.0, 0.0]))]


def test_full_batch_projection_differs_from_per_micro_batch():
    mbs = _two_micro_batches()
    full = cord_combine(sum(a for a, _ in mbs), sum(b for _, b in mbs), 1.0)
    assert torch.allclose(full, T([3.0, 1.0]))           # no conflict in the full batch
    per_mb = sum(cord_combine(a, b, 1.0) for a, b in mbs)
    assert torch.allclose(per_mb, T([4.0, 1.0]))         # [1, 1] + [3, 0]: a different update


def test_grad_buffers_accumulate_over_micro_batches_and_write_grads():
    w = torch.zeros(2, requires_grad=True)
    bias = torch.zeros(1, requires_grad=True)            # reaches only the task loss
    frozen = torch.ones(3)                               # not trainable, ignored
    bufs = CordGradBuffers([w, bias, frozen])
    assert bufs.numel == 3
    for a, b in _two_micro_batches():                    # linear losses: grads are a, b
        task = (w * a).sum() + bias.sum()
        teacher = (w * b).sum()
        bufs.accumulate(task, teacher)
    assert torch.allclose(bufs.task, T([2.0, 0.0, 2.0]))
    assert torch.allclose(bufs.teacher, T([1.0, 1.0, 0.0]))
    g = bufs.write_combined(CORDLossConfig(lam=1.0, protected="task", mode="conflict"))
    assert torch.allclose(g, T([3.0, 1.0, 2.0]))
    assert torch.allclose(w.grad, T([3.0, 1.0])) and torch.allclose(bias.grad, T([2.0]))
    assert bufs.stats(CORDLossConfig())["cord/conflict"] == 0.0
    bufs.reset()
    assert float(bufs.task.abs().sum()) == 0.0 and bufs.micro_batches == 0


def test_grad_buffers_match_autograd_for_a_real_module():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    x = torch.randn(6, 4)
    bufs = CordGradBuffers(net.parameters())
    for xb in x.split(3):
        out = net(xb)
        bufs.accumulate(out[:, 0].pow(2).mean() / 2, out[:, 1].mean() / 2)
    net.zero_grad()
    out = net(x)
    (out[:, 0].pow(2).mean()).backward()
    ref = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
    assert torch.allclose(bufs.task, ref, atol=1e-6)
    # lambda = 0: the written gradient is exactly the task gradient
    bufs.write_combined(CORDLossConfig(lam=0.0))
    assert torch.allclose(torch.cat([p.grad.reshape(-1) for p in net.parameters()]), ref,
                          atol=1e-6)


def test_validation():
    with pytest.raises(ConfigError, match="'task', 'teacher'"):
        CORDLossConfig(protected="student")
    with pytest.raises(ConfigError, match="'conflict', 'always'"):
        cord_combine(T([1.0]), T([1.0]), 1.0, "task", "sometimes")
    with pytest.raises(ObjectiveInputError, match="same length"):
        cord_combine(T([1.0]), T([1.0, 2.0]), 1.0)
    with pytest.raises(ObjectiveInputError, match="no trainable"):
        CordGradBuffers([torch.ones(2)])
    assert cord_stats(T([1.0, 0.0]), T([-1.0, 1.0]), 1.0)["cord/conflict"] == 1.0
