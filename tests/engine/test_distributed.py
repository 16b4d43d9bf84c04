"""Data-parallel optimizer steps (gloo, 2 CPU processes) equal one process on the global batch.

Two processes are spawned once; each runs every case (LoRA and full fine-tuning of the real
``deciplane/tiny`` model, a token-mean task loss, CORD with a distillation loss, a batch
with fewer rows than ranks) and writes its parameters after one optimizer step. The parent
runs the same cases in one process over the whole batch and compares.
"""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from deciplane.engine import distributed
from deciplane.engine.optim import (CordRule, MicroLoss, Normaliser, Optimizer, accumulate,
                                    optimizer_step)
from deciplane.errors import ConfigError

torch.set_num_threads(1)


def test_shard_bounds_hand_computed():
    assert [distributed.shard_bounds(5, r, 2) for r in (0, 1)] == [(0, 3), (3, 5)]
    assert [distributed.shard_bounds(7, r, 3) for r in (0, 1, 2)] == [(0, 3), (3, 5), (5, 7)]
    assert [distributed.shard_bounds(1, r, 2) for r in (0, 1)] == [(0, 1), (1, 1)]
    assert distributed.shard([9, 8, 7, 6, 5], rank=1, world=2) == [6, 5]
    assert distributed.shard([9, 8, 7]) == [9, 8, 7]          # no process group: all rows
    with pytest.raises(ConfigError, match="rank 2 is not in a world of 2"):
        distributed.shard_bounds(4, 2, 2)


def test_without_a_process_group_everything_is_a_no_op():
    assert not distributed.active() and distributed.world_size() == 1 and distributed.is_main()
    assert distributed.sum_metrics({"a": 1.5}) == {"a": 1.5}
    assert distributed.sum_int(3) == 3 and distributed.agree(True)
    with pytest.raises(ConfigError, match="accelerate launch"):
        Optimizer([torch.nn.Parameter(torch.zeros(2))], lr=0.1, data_parallel=True)


# ---- the cases, run by each rank and by the single-process reference ----------------------

CASES = ("lora", "full", "cord_lora", "one_row")
ROWS = 5                     # rows of the optimizer batch: 3 on rank 0, 2 on rank 1


def _batch():
    g = torch.Generator().manual_seed(7)
    lengths = [3, 1, 4, 2, 5]                       # response tokens per row
    seqs = [torch.randint(5, 200, (4 + n,), generator=g) for n in lengths]
    adv = torch.randn(ROWS, generator=g)
    teacher = [1, 0, 1, 1, 0]                       # rows with a distillation target
    return seqs, lengths, adv, teacher


def _token_logps(model, seq: torch.Tensor, n: int) -> torch.Tensor:
    logits = model(input_ids=seq[None]).logits[0, :-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, seq[1:, None])[:, 0]
    return logp[-n:]                                 # the response's n tokens


def _run_case(case: str) -> dict[str, torch.Tensor]:
    from deciplane.agents.loading import load_policy

    torch.manual_seed(0 if distributed.rank() == 0 else 123)   # rank 1 starts different:
    policy = load_policy("deciplane/tiny")                      # the broadcast must fix it
    if case != "full":
        policy.add_lora(r=4, alpha=8)
    else:
        for p in policy.model.parameters():
            p.requires_grad_(True)
    model = policy.model
    if case != "full" and distributed.rank() == 1:   # LoRA B starts at 0: perturb rank 1
        with torch.no_grad():
            for p in model.parameters():
                if p.requires_grad:
                    p.add_(0.5)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = Optimizer(params, lr=1e-3, weight_decay=0.01, max_grad_norm=0.5)
    seqs, lengths, adv, teacher = _batch()

    def loss_fn(micro: list[int]) -> MicroLoss:
        tok = [_token_logps(model, seqs[i], lengths[i]) for i in micro]
        task = sum(-(adv[i] * t).sum() for i, t in zip(micro, tok)) / sum(lengths[i]
                                                                         for i in micro)
        out = MicroLoss(task=task, metrics={"m/adv": float(adv[micro].mean())},
                        tokens=sum(lengths[i] for i in micro))
        if case.startswith("cord"):
            out.distill = sum(-t.mean() * teacher[i] for i, t in zip(micro, tok))
        return out

    rows = [3] if case == "one_row" else [4, 0, 2, 1, 3]
    cord = CordRule(lam=0.7, combine="conflict") if case.startswith("cord") else None
    norms = (Normaliser(lengths), Normaliser(teacher, "sum") if cord else None)
    # the gradient itself (Adam's first step is nearly sign(g): it hides a wrong scale)
    accumulate(opt, rows, 2, loss_fn, *norms, cord=cord, metric_share="rows")
    out = {"grad/" + n: p.grad.detach().clone() for n, p in model.named_parameters()
           if p.requires_grad}
    metrics = optimizer_step(opt, rows, 2, loss_fn, *norms, cord=cord, metric_share="rows")
    out.update({n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad})
    out.update({"metric/" + k: torch.tensor(v, dtype=torch.float64)
                for k, v in metrics.items()})
    return out


def _worker(rank: int, world: int, init: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        assert distributed.active() and distributed.rank() == rank
        for case in CASES:
            torch.save(_run_case(case), Path(out_dir) / f"{case}.rank{rank}.pt")
        assert distributed.agree(rank == 0) is True      # rank 0's flag everywhere
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_step_equals_one_process_on_the_global_batch():
    from deciplane.agents.loading import ensure_tiny

    ensure_tiny()   # built here: under a process group transformers saves on rank 0 only
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(2, f"tcp://127.0.0.1:{_free_port()}", tmp), nprocs=2,
                 join=True)
        for case in CASES:
            want = _run_case(case)
            r0 = torch.load(Path(tmp) / f"{case}.rank0.pt")
            r1 = torch.load(Path(tmp) / f"{case}.rank1.pt")
            assert set(r0) == set(want) == set(r1), case
            for k in want:
                torch.testing.assert_close(r0[k], r1[k], rtol=0, atol=0)   # ranks agree bitwise
                torch.testing.assert_close(r0[k], want[k], rtol=1e-4, atol=1e-7,
                                           msg=lambda m, k=k, c=case: f"{c} {k}: {m}")
            assert "metric/optim/grad_norm" in want and "metric/m/adv" in want
            if case.startswith("cord"):
                assert "metric/cord/projected" in want and "metric/loss/distill" in want
