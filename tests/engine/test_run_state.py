"""One checkpoint format for every method (:class:`deciplane.engine.checkpoint.RunState`),
and the two formats written before it still read."""

from __future__ import annotations

import pytest
import torch

from deciplane.engine import checkpoint as ckpt
from deciplane.engine.budget import Budget
from deciplane.errors import CheckpointError
from deciplane.utils import rng_state


def _save(run_dir, model, optimizer, counters, extra=None, keep_last=2):
    """A trainer's checkpoint, as the Trainer writes it."""
    return ckpt.save_run_state(run_dir, ckpt.training_state(model, optimizer, counters, extra),
                               ckpt.counters_meta(counters), keep_last)


def _state() -> ckpt.RunState:
    return ckpt.RunState(step=3, params={"w": torch.arange(4.0)}, optimizer={"state": {}},
                         rng=rng_state(), counters={"iteration": 3, "env_steps": 30},
                         modules={"value_head": {"b": torch.ones(1)}},
                         method={"plan": {"eval_episodes": 40}})


def test_round_trip_through_a_checkpoint_folder(tmp_path):
    want = _state()
    path = ckpt.save_run_state(tmp_path, want, meta={"env_steps": 30})
    assert path.name == "iter_000003"
    got = ckpt.load_run_state(path)
    assert got.step == 3 and torch.equal(got.params["w"], want.params["w"])
    assert got.counters == want.counters and got.method == want.method
    assert torch.equal(got.modules["value_head"]["b"], torch.ones(1))
    assert torch.load(path / "state.pt", weights_only=False)["format"] == ckpt.STATE_FORMAT


def test_trainer_and_adapter_write_the_same_fields(tmp_path):
    """A trainer's checkpoint (training_state) is a RunState: its step is the iteration,
    its method state the trainer's extra state."""
    m = torch.nn.Linear(2, 1)
    opt = torch.optim.AdamW(m.parameters(), lr=0.1)
    path = _save(tmp_path, m, opt, ckpt.Counters(iteration=2, episodes=5),
                                extra={"pre_rl_done": True})
    payload = torch.load(path / "state.pt", weights_only=False)
    assert set(payload) == {"format", *ckpt.RunState.__dataclass_fields__}
    state = ckpt.run_state_from_payload(payload)
    assert state.step == 2 and state.counters["episodes"] == 5
    assert state.method == {"pre_rl_done": True} and set(state.params) == {"weight", "bias"}


def test_old_trainer_payload_reads_as_a_run_state():
    old = {"trainable": {"w": torch.zeros(2)}, "optimizer": None, "rng": rng_state(),
           "counters": {"iteration": 7, "env_steps": 70}, "extra": {"before": {"x": 1}},
           "modules": {}}
    state = ckpt.run_state_from_payload(old)
    assert state.step == 7 and state.counters["env_steps"] == 70
    assert state.method == {"before": {"x": 1}} and torch.equal(state.params["w"], torch.zeros(2))


def test_old_adapter_payload_reads_as_a_run_state():
    budget = Budget(samples=12)
    old = {"step": 2, "params": {"w": torch.ones(2)}, "optimizer": {"state": {}},
           "optimizer_counters": (2, 1), "budget": budget, "eval_budget": Budget(),
           "records": "records", "rng": rng_state(), "extra": {"lr_scale": 0.5}}
    state = ckpt.run_state_from_payload(old)
    assert state.step == 2 and state.counters == {"optimizer_steps": 2, "skipped_steps": 1}
    assert state.method["budget"].samples == 12 and state.method["extra"] == {"lr_scale": 0.5}
    assert state.method["records"] == "records" and "guard" not in state.method


def test_unknown_payloads_are_refused_with_what_to_do():
    with pytest.raises(CheckpointError, match="upgrade deciplane"):
        ckpt.run_state_from_payload({"format": "deciplane-run-state/99"})
    with pytest.raises(CheckpointError, match="not written by deciplane"):
        ckpt.run_state_from_payload({"weights": 1})
    with pytest.raises(CheckpointError, match="not written by deciplane"):
        ckpt.run_state_from_payload([1, 2])
