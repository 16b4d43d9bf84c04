"""The bf16 trunk: frozen layers in bfloat16, trainable ones in fp32; the same policy for the
rollout and the frozen-trunk update (first PPO ratio 1)."""

from __future__ import annotations

import functools

import pytest
import torch

from deciplane.agents import MenuAgent, load_policy
from deciplane.agents.precision import apply_trunk_dtype, resolve_trunk_dtype, trunk_dtype_of
from deciplane.engine.trunk import first_trainable_layer, menu_update_logits
from deciplane.errors import ConfigError
from deciplane.types import Menu

OBS = ["You are in a kitchen. There is a key on the table.", "You are hungry.",
       "A dark room."]
MENUS = [Menu(("go north", "take key", "open door", "look")), Menu(("eat apple", "go south")),
         Menu(("go east", "inventory", "look"))]


def _lora_top(name: str, last: int = 1):
    from deciplane.trainers.run import lora_targets

    torch.manual_seed(0)
    policy = load_policy(name)
    policy.add_lora(r=4, alpha=8, target_modules=lora_targets(policy, None, last))
    return policy


def test_resolve_and_refuse():
    assert resolve_trunk_dtype("float32") == torch.float32
    assert resolve_trunk_dtype("bfloat16") == torch.bfloat16
    assert resolve_trunk_dtype("auto") in (torch.float32, torch.bfloat16)
    with pytest.raises(ConfigError, match="trunk_dtype"):
        resolve_trunk_dtype("int8")
    policy = load_policy("deciplane/tiny")           # everything trains: nothing to cast
    with pytest.raises(ConfigError, match="trainable"):
        apply_trunk_dtype(policy.model, 1)


@pytest.mark.parametrize("name", ["deciplane/tiny", "deciplane/smollm2-135m-instruct"])
def test_bf16_trunk_decisions_match_fp32_and_the_first_ratio_is_one(name):
    torch.set_num_threads(1)
    last = 1 if name == "deciplane/tiny" else 28   # SmolLM2: a 2-layer bf16 slice, 28 fp32
    fp32, bf16 = _lora_top(name, last), _lora_top(name, last)
    b = first_trainable_layer(bf16.model)
    assert apply_trunk_dtype(bf16.model, b) == b and trunk_dtype_of(bf16.model) == (torch.bfloat16, b)
    a32 = MenuAgent(fp32, greedy=True)
    a16 = MenuAgent(bf16, greedy=True, keep_boundary=b)
    d32, d16 = a32.act(OBS, MENUS), a16.act(OBS, MENUS)
    # stated tolerance: bf16 has 8 mantissa bits; menu log-probs within 0.05, same choices
    for x, y in zip(d32, d16):
        torch.testing.assert_close(x.log_probs, y.log_probs, rtol=0, atol=5e-2)
        assert x.index == y.index
        assert y.boundary_hidden.dtype == torch.float32   # the trainable part sees fp32
    # the update reads the rollout's boundary states: the same function, ratio 1
    a16.update_logits = functools.partial(menu_update_logits, bf16.model, boundary=b,
                                          pad_id=bf16.tokenizer.pad_token_id)
    for lp, d in zip(a16.menu_log_probs(d16), d16):
        ratio = (lp.detach() - d.log_probs)[d.index].exp()
        assert float(ratio) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("name,layer", [("deciplane/tiny", 1), ("deciplane/smollm2-135m-instruct", 2)])
def test_bf16_trunk_items_readout_matches_fp32_and_the_head_update_ratio_is_one(name, layer):
    """The items readout stops at its head's layer (early exit): the states it reads come
    out of the bf16 layers, and go to the head (and the output layer) in fp32."""
    torch.set_num_threads(1)
    agents = []
    for cast in (False, True):
        torch.manual_seed(0)
        policy = load_policy(name)
        for p in policy.model.parameters():
            p.requires_grad_(False)
        head = policy.add_item_head(layer=layer, rank=4)
        torch.nn.init.normal_(head.key.weight, std=0.1)     # a trained-looking head
        n = len(policy.model.model.layers)
        if cast:
            assert apply_trunk_dtype(policy.model, n) == n   # nothing in the decoder trains
        agents.append(MenuAgent(policy, greedy=True, history=0, readout="items",
                                keep_readout=True))
    d32, d16 = agents[0].act(OBS, MENUS), agents[1].act(OBS, MENUS)
    for x, y in zip(d32, d16):
        torch.testing.assert_close(x.log_probs, y.log_probs, rtol=0, atol=5e-2)
        assert x.index == y.index
        assert y.readout_hidden.dtype == torch.float32
    # the head-only update scores the states the rollout kept: the same function, ratio 1
    for lp, d in zip(agents[1].menu_log_probs(d16), d16):
        ratio = (lp.detach() - d.log_probs)[d.index].exp()
        assert float(ratio) == pytest.approx(1.0, abs=1e-5)
