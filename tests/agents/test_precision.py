"""The bf16 trunk: frozen layers in bfloat16, trainable ones in fp32; the same policy for the
rollout and the frozen-trunk update (first PPO ratio 1)."""

from __future__ import annotations

import functools

import pytest
import torch

from deciplane.agents import MenuAgent, load_policy
from deciplane.agents.precision import (apply_trunk_dtype, cast_frozen_linears,
                                        resolve_trunk_dtype, trunk_dtype_of)
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


PROMPTS = ["What is 12 + 35?", "Name the capital of France.", "hi"]


def _lora_everywhere(name: str):
    torch.manual_seed(0)
    policy = load_policy(name)
    policy.add_lora(r=4, alpha=8)
    for n, p in policy.model.named_parameters():   # LoRA's B starts at 0: move it
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.02)
    return policy


@pytest.mark.parametrize("name", ["deciplane/tiny", "deciplane/smollm2-135m-instruct"])
def test_frozen_linears_in_bf16_generate_like_fp32_and_train_the_same_lora(name):
    """LoRA in every layer (the test-time adapters): no frozen layer exists, so the frozen
    linears (LoRA's base weights) compute in bf16, with fp32 in and out."""
    torch.set_num_threads(1)
    fp32, bf16 = _lora_everywhere(name), _lora_everywhere(name)
    n_layers = len(bf16.model.get_base_model().model.layers)
    assert cast_frozen_linears(bf16.model) == 7 * n_layers      # q k v o gate up down
    assert cast_frozen_linears(bf16.model) == 0                 # nothing left to cast
    for n, p in bf16.model.named_parameters():
        wanted = torch.float32 if (p.requires_grad or "embed" in n or "norm" in n) else torch.bfloat16
        assert p.dtype == wanted, n
    prompts = [fp32.format_prompt(p) for p in PROMPTS]
    g32 = fp32.generate(prompts, max_new_tokens=8, do_sample=False)
    g16 = bf16.generate(prompts, max_new_tokens=8, do_sample=False)
    if name != "deciplane/tiny":     # the random tiny model's top tokens are near ties
        assert [g.text for g in g32] == [g.text for g in g16]
        for x, y in zip(g32, g16):   # stated tolerance: greedy tokens' log-probs within 0.1
            torch.testing.assert_close(x.response_logprobs, y.response_logprobs, rtol=0, atol=0.1)
    # sampled log-probs are what the update recomputes (ratio 1 up to batching)
    ids = torch.cat([g16[0].prompt_ids, g16[0].response_ids])[None]
    logits = bf16.model(input_ids=ids).logits[0, -g16[0].response_ids.numel() - 1:-1].float()
    lp = torch.log_softmax(logits, -1).gather(-1, g16[0].response_ids[:, None])[:, 0]
    torch.testing.assert_close(lp.detach(), g16[0].response_logprobs, rtol=0, atol=2e-2)
    # gradients reach every LoRA weight through the bf16 matmuls, along fp32's
    grads = []
    for policy in (fp32, bf16):
        policy.model.zero_grad()
        out = policy.model(input_ids=ids).logits.float()
        torch.log_softmax(out, -1)[0, :-1].gather(-1, ids[0, 1:, None]).mean().backward()
        grads.append(torch.cat([p.grad.flatten() for n, p in policy.model.named_parameters()
                                if p.requires_grad]))
        assert all(p.grad is None for p in policy.model.parameters() if not p.requires_grad)
    assert float(torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0)) > 0.99


def test_bf16_trunk_generation_with_kept_boundary_states():
    """The free-text agent on a bf16 trunk (LoRA in the top layers): generation with the KV
    cache through the mixed model, the same greedy text, boundary states in fp32."""
    torch.set_num_threads(1)
    name = "deciplane/smollm2-135m-instruct"
    fp32, bf16 = _lora_top(name, 28), _lora_top(name, 28)
    b = first_trainable_layer(bf16.model)
    apply_trunk_dtype(bf16.model, b)
    prompts = [fp32.format_prompt(p) for p in PROMPTS]
    g32 = fp32.generate(prompts, max_new_tokens=8, do_sample=False, keep_layer=b)
    g16 = bf16.generate(prompts, max_new_tokens=8, do_sample=False, keep_layer=b)
    assert [g.text for g in g32] == [g.text for g in g16]
    for x, y in zip(g32, g16):
        torch.testing.assert_close(x.response_logprobs, y.response_logprobs, rtol=0, atol=5e-2)
        assert y.boundary_hidden.dtype == torch.float32
        rel = (x.boundary_hidden - y.boundary_hidden).norm() / x.boundary_hidden.norm()
        assert float(rel) < 0.01      # bf16's 8 mantissa bits, through 2 layers


@pytest.mark.parametrize("name", ["deciplane/tiny", "deciplane/smollm2-135m-instruct"])
def test_autocast_layers_train_fp32_weights_with_bf16_matmuls(name):
    """model.compute_dtype: bfloat16 — full fine-tuning, every layer under autocast: the
    weights stay fp32, log-probs come from fp32 logits, the update's forward equals the
    rollout's (first ratio 1) and its gradient points where fp32's does."""
    from deciplane.agents.policy import score_responses
    from deciplane.agents.precision import autocast_layers

    torch.set_num_threads(1)
    fp32, bf16 = load_policy(name), load_policy(name)
    n_layers = len(bf16.model.model.layers)
    assert autocast_layers(bf16.model) == n_layers
    with pytest.raises(ConfigError, match="already"):
        autocast_layers(bf16.model)
    assert all(p.dtype == torch.float32 and p.requires_grad for p in bf16.model.parameters())
    prompts = [fp32.format_prompt(p) for p in PROMPTS]
    g32 = fp32.generate(prompts, max_new_tokens=8, do_sample=False)
    g16 = bf16.generate(prompts, max_new_tokens=8, do_sample=False)
    if name != "deciplane/tiny":
        assert [g.text for g in g32] == [g.text for g in g16]
    args = ([g.prompt_ids for g in g16], [g.response_ids for g in g16])
    rollout = score_responses(bf16, *args, grad=False)
    grads = []
    for policy in (fp32, bf16):
        policy.model.zero_grad()
        fwd = score_responses(policy, *args, grad=True)
        assert fwd.logp.dtype == torch.float32
        if policy is bf16:      # the same function as the rollout's: ratio exp(0) = 1
            torch.testing.assert_close(fwd.logp.detach(), rollout.logp, rtol=0, atol=1e-5)
        fwd.logp[fwd.mask].mean().backward()
        grads.append(torch.cat([p.grad.flatten() for p in policy.model.parameters()]))
    assert float(torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0)) > 0.98
