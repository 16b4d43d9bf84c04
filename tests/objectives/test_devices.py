"""Every composed objective gives the same numbers on every available device.

On a CPU-only machine this runs the device path once on ``cpu``; where CUDA is present
it also checks that nothing in ``deciplane.objectives`` silently builds tensors on the
CPU (ids/actions may come from the rollout on the CPU, the tensors on the accelerator).
"""

from __future__ import annotations

import pytest
import torch

from deciplane.objectives import (ADVANTAGE_ESTIMATORS, CordGradBuffers, CORDLossConfig,
                                  ERPOLossConfig, PolicyLossConfig, RLiDLossConfig, TASCOLossConfig,
                                  TLMDRELossConfig, TTPOLossConfig, erpo_loss, gae,
                                  is_degenerate_batch, menu_log_softmax, policy_loss,
                                  rlid_loss, tasco_loss, tlm_dre_loss, ttpo_loss)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    b, t, v = 4, 6, 7
    mask = torch.ones(b, t, dtype=torch.bool)
    mask[1, 4:] = False
    mask[3, 2:] = False
    return dict(
        logp=-torch.rand(b, t, generator=g) * 2, old=-torch.rand(b, t, generator=g) * 2,
        ref=-torch.rand(b, t, generator=g) * 2, mask=mask,
        adv=torch.tensor([1.0, -0.5, 0.25, -1.0]), logits=torch.randn(b, t, v, generator=g),
        logits2=torch.randn(b, t, v, generator=g), rewards=torch.tensor([1.0, 0.0, 1.0, 1.0]),
        turns=torch.tensor([[0, 0, -1, 1, 1, 1], [0, 1, 1, 2, -1, -1],
                            [0, -1, -1, 1, 1, -1], [0, 0, -1, -1, -1, -1]]),
        menu_logits=torch.randn(b, 3, generator=g),
        menu_mask=torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1]]).bool())


def _all_losses(dev: str) -> dict[str, float]:
    x = {k: v.to(dev) for k, v in _inputs().items()}
    cpu_ids = torch.tensor([0, 0, 1, 1])                   # ids straight from a rollout
    out: dict[str, float] = {}
    for name, fn in ADVANTAGE_ESTIMATORS.items():
        out[f"adv/{name}"] = float(fn(x["rewards"], cpu_ids).sum() + fn(x["rewards"],
                                                                         cpu_ids)[0])
    out["degenerate"] = float(is_degenerate_batch(x["rewards"], cpu_ids))
    right = x["mask"]
    a, r = gae(x["logp"], x["ref"], right, 0.9, 0.8, torch.ones(4))
    out["gae"] = float(a.sum() + r.sum())
    for ratio in ("token", "sequence"):
        cfg = PolicyLossConfig(ratio=ratio, aggregation="seq_sum_const", max_len=6,
                               eps_high=0.28, kl_beta=0.1)
        out[f"pl/{ratio}"] = policy_loss(cfg, x["logp"], x["old"], x["adv"], x["mask"],
                                         x["ref"]).loss.item()
    lp = menu_log_softmax(x["menu_logits"], x["menu_mask"])
    out["rlid"] = rlid_loss(RLiDLossConfig(), lp, torch.tensor([0, 1, 2, 0]),
                            lp.detach()[:, 0] - 0.1, x["adv"], cpu_ids, x["menu_mask"],
                            cpu_ids).loss.item()
    out["tlm"] = tlm_dre_loss(TLMDRELossConfig(), x["logp"], x["old"], x["ref"], x["adv"],
                              x["turns"]).loss.item()
    ent = -(x["logits"].softmax(-1) * x["logits"].log_softmax(-1)).sum(-1)
    agree = torch.tensor([True, False, True, False], device=dev)
    out["ttpo"] = ttpo_loss(TTPOLossConfig(), x["ref"].abs(), ent, x["logp"], x["mask"], agree,
                            x["adv"]).loss.item()
    out["tasco"] = tasco_loss(x["logits"], [x["logits2"]], x["mask"],
                              TASCOLossConfig().mu).loss.item()
    out["erpo"] = erpo_loss(ERPOLossConfig(), x["logp"], None, x["adv"].clamp(max=0), x["mask"],
                            ent).loss.item()
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2).to(dev)
    bufs = CordGradBuffers(net.parameters())
    for xb in x["menu_logits"].split(2):
        y = net(xb)
        bufs.accumulate(y[:, 0].mean(), -y[:, 1].mean() - y[:, 0].mean())
    out["cord"] = float(bufs.write_combined(CORDLossConfig(lam=0.5, mode="always")).sum())
    assert all(p.grad.device == p.device for p in net.parameters())
    return out


@pytest.mark.parametrize("dev", DEVICES)
def test_objectives_match_cpu_on_every_device(dev):
    ref = _all_losses("cpu")
    got = _all_losses(dev)
    assert all(torch.isfinite(torch.tensor(v)) for v in got.values()), got
    for k in ref:
        assert got[k] == pytest.approx(ref[k], rel=1e-4, abs=1e-5), k
