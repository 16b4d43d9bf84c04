"""Device placement (issue 51, item 1): every tensor that meets the model's is made where
the model is, and a device this machine lacks is refused before anything loads.

Without a GPU, :mod:`fake_gpu` runs the code on the CPU and records each op that would
mix a GPU and a CPU tensor on a real one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from deciplane.agents import load_policy
from deciplane.agents.menu import MenuAgent
from deciplane.agents.policy import left_pad, position_ids_from_mask
from deciplane.engine.trunk import TrunkStates
from deciplane.errors import ConfigError
from deciplane.objectives.distill import expert_distill_loss
from deciplane.objectives.policy_loss import PolicyLossConfig, policy_loss
from deciplane.objectives.rlid import RLiDLossConfig, rlid_loss
from deciplane.trainers.config import load_config
from deciplane.methods.rlid_ppo import menu_ids, pad_menu_log_probs
from deciplane.methods.text_ppo import TextPPO
from deciplane.types import Menu
from deciplane.utils import resolve_device, rng_state, set_rng_state
from fake_gpu import GPU, _on_gpu, fake_gpu

ROOT = Path(__file__).resolve().parent.parent
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")


@pytest.fixture()
def tiny():
    return load_policy("deciplane/tiny")


def test_fake_gpu_catches_a_cpu_tensor_meeting_the_model(tiny):
    """The checker itself: a forward on CPU ids is flagged, on moved ids it is not."""
    ids = torch.tensor([[1, 2, 3]])
    with fake_gpu(tiny) as gpu:
        tiny.model(input_ids=ids)
    assert gpu.mixed
    with fake_gpu(tiny) as gpu:
        out = tiny.model(input_ids=ids.to(tiny.device))
    assert not gpu.mixed and _on_gpu(out.logits)


def test_untrained_item_head_states_are_on_the_model_device(tiny):
    """menu.act's no-forward branch (a constant item head) fed CPU zeros to the head."""
    tiny.add_item_head()
    agent = MenuAgent(tiny, readout="items")
    assert agent._needs_no_forward()
    menus = [Menu(("go north", "take key")), Menu(("eat apple", "go south", "look"))]
    with fake_gpu(tiny) as gpu:
        decisions = agent.act(["a kitchen", "a hall"], menus, seed=0)
    assert gpu.mixed == []
    assert [len(d.log_probs) for d in decisions] == [2, 3]


def test_expert_distill_gathers_on_the_log_probs_device(tiny):
    with fake_gpu(tiny) as gpu:
        lp = torch.log_softmax(torch.randn(3, 4), -1).to(GPU)                   # (N, K)
        loss, n = expert_distill_loss(lp, [1, None, 3])
    assert gpu.mixed == [] and _on_gpu(loss) and n == 2
    assert torch.isclose(loss, -(lp[0, 1] + lp[2, 3]))


def test_padded_menu_mask_meets_gpu_log_probs_in_rlid(tiny):
    rows = [torch.log_softmax(torch.randn(k), 0) for k in (2, 3)]
    with fake_gpu(tiny) as gpu:
        lp, mask = pad_menu_log_probs([r.to(GPU) for r in rows])                 # (2, 3)
        out = rlid_loss(RLiDLossConfig(), lp, torch.tensor([0, 2]), torch.tensor([-0.7, -1.1]),
                        torch.tensor([1.0, -1.0]), torch.tensor([0, 1]), mask,
                        menu_ids([("a", "b"), ("c", "d", "e")]), weights=torch.ones(2))
    assert gpu.mixed == [] and _on_gpu(mask) and _on_gpu(out.loss)
    assert mask.tolist() == [[True, True, False], [True, True, True]]


def test_text_ppo_token_tensors_are_on_the_model_device(tiny):
    """Old log-probs and turn ids were CPU tensors that policy_loss met with GPU log-probs."""
    turn = lambda p, r: SimpleNamespace(prompt_ids=torch.tensor(p), response_ids=torch.tensor(r),  # noqa: E731
                                        response_logprobs=torch.full((len(r),), -1.0))
    trajs = [SimpleNamespace(turns=[turn([5, 6, 7], [8, 9]), turn([5, 6], [10])]),
             SimpleNamespace(turns=[turn([5, 7], [11])])]
    algo = SimpleNamespace(policy=tiny, config=SimpleNamespace(temperature=1.0))
    with fake_gpu(tiny) as gpu:
        logp, old, tid = TextPPO._token_tensors(algo, trajs)                     # (B, T)
        out = policy_loss(PolicyLossConfig(), logp, old, torch.ones(2), tid >= 0)
    assert gpu.mixed == [] and _on_gpu(out.loss)
    assert tid.tolist() == [[0, 0, 1], [0, -1, -1]]


def test_seeded_trunk_states_meet_the_top_layers_on_the_model_device(tiny):
    """math_grpo with lora_last_layers: the sampler keeps the boundary states on the CPU."""
    seqs = [torch.tensor([3, 4, 5, 6]), torch.tensor([7, 8])]
    ids, mask = left_pad(seqs, 0)
    pos = position_ids_from_mask(mask)
    tiny.model.requires_grad_(False)              # a frozen trunk below the boundary
    with torch.no_grad():
        full = TrunkStates(boundary=1).hidden(tiny.model, ids, mask, pos)       # (B, T, H)
    states = TrunkStates(boundary=1)
    for i, s in enumerate(seqs):
        states.seed(s, full[i, ids.shape[1] - len(s):].clone())                # CPU rows
    with torch.no_grad(), fake_gpu(tiny) as gpu:
        logits = states(tiny.model, ids.to(tiny.device), mask.to(tiny.device),
                        pos.to(tiny.device), logits_to_keep=1)
    assert gpu.mixed == [] and _on_gpu(logits)
    assert states.computed_tokens == 0            # the seeded rows were used, not recomputed


def test_rng_state_reaches_the_generator_on_the_cpu(tiny, monkeypatch):
    """An adapter checkpoint is read with map_location=the policy's device: its RNG state
    then sits on the GPU, and torch.set_rng_state takes a CPU ByteTensor only."""
    torch.manual_seed(7)
    state = rng_state()
    expected = torch.rand(3)
    seen = []
    real = torch.set_rng_state
    monkeypatch.setattr(torch, "set_rng_state", lambda t: (seen.append(_on_gpu(t)), real(t)))
    with fake_gpu(tiny):
        state["torch"] = state["torch"].to(GPU)                     # what map_location does
        set_rng_state(state)
    assert seen == [False]
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_rng_state_is_saved_and_restored():
    torch.cuda.manual_seed_all(3)
    torch.zeros(1, device="cuda")
    state = rng_state()
    expected = torch.rand(3, device="cuda")
    state = {k: (v.cuda() if k == "torch" else v) for k, v in state.items()}   # map_location
    set_rng_state(state)
    assert torch.equal(torch.rand(3, device="cuda"), expected)


@NO_CUDA
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_a_missing_gpu_is_a_config_error(device):
    with pytest.raises(ConfigError, match="no CUDA GPU.*model.device=cpu"):
        resolve_device(device)


def test_device_index_and_name_are_checked(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match="1 CUDA device"):
        resolve_device("cuda:1")
    with pytest.raises(ConfigError, match="not a torch device"):
        resolve_device("gpu0")
    assert resolve_device(None) == resolve_device("cpu") == torch.device("cpu")


def test_choosing_cuda_allows_tf32(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    before = (torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision())
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        assert resolve_device("cuda") == torch.device("cuda")
        assert torch.backends.cuda.matmul.allow_tf32
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before[0]
        torch.set_float32_matmul_precision(before[1])


def test_eval_workers_on_one_gpu_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ConfigError, match="eval.workers=2.*second copy"):
        load_config(ROOT / "configs/quickstart_twx.yaml",
                    ["model.device=cuda", "eval.workers=2"])


@pytest.fixture()
def no_model_load(monkeypatch):
    """Fail the test if a command starts loading a model."""
    def loading(*a, **k):
        raise AssertionError("a model load started")
    monkeypatch.setattr("deciplane.agents.loading.resolve_model", loading)


@NO_CUDA
def test_train_on_a_missing_gpu_fails_before_the_model_loads(no_model_load, tmp_path):
    from deciplane.cli import app

    res = CliRunner().invoke(app, ["train", str(ROOT / "configs/quickstart_twx.yaml"),
                                   "--set", "model.device=cuda",
                                   "--run-dir", str(tmp_path / "run")])
    assert res.exit_code == 2, res.output
    assert "'cuda'" in res.output and "model.device=cpu" in res.output
    assert not (tmp_path / "run").exists()


@NO_CUDA
def test_adapt_on_a_missing_gpu_fails_before_the_model_loads(no_model_load, tmp_path):
    from deciplane.cli import app

    res = CliRunner().invoke(app, ["adapt", "ttrl", "--benchmark", "arith", "--model",
                                   "deciplane/tiny", "--device", "cuda",
                                   "--run-dir", str(tmp_path / "run")])
    assert res.exit_code != 0
    assert "'cuda'" in res.output and "no CUDA GPU" in res.output, res.output
