"""Frozen-trunk caching is exact: logits, loss and LoRA gradients equal a full forward."""

from __future__ import annotations

import pytest
import torch

from deciplane.agents.loading import load_policy
from deciplane.agents.policy import left_pad, position_ids_from_mask
from deciplane.engine.trunk import (check_trunk_frozen, first_trainable_layer, top_logits,
                                    trunk_hidden)
from deciplane.errors import ConfigError


def _batch(policy, texts):
    ids, mask = left_pad([policy.tokenize(t) for t in texts], policy.tokenizer.pad_token_id)
    return ids, mask, position_ids_from_mask(mask)


def _loss(logits):
    # a loss that depends on every position and the whole vocabulary
    return torch.log_softmax(logits.float(), -1)[..., :7].mean()


def _compare(policy, boundary, texts):
    model = policy.model
    ids, mask, pos = _batch(policy, texts)
    params = [p for p in model.parameters() if p.requires_grad]

    model.zero_grad()
    full = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
    _loss(full).backward()
    grads_full = [p.grad.clone() for p in params]

    model.zero_grad()
    hidden = trunk_hidden(model, ids, mask, pos, boundary)
    assert not hidden.requires_grad
    top = top_logits(model, hidden, mask, pos, boundary)
    _loss(top).backward()
    grads_top = [p.grad.clone() for p in params]

    torch.testing.assert_close(top, full, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads_top, grads_full):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    last = top_logits(model, hidden, mask, pos, boundary, logits_to_keep=1)
    torch.testing.assert_close(last[:, -1], full[:, -1], rtol=1e-5, atol=1e-5)


TEXTS = ["You are in a kitchen. A) go north B) take apple", "look", "C) open the fridge now"]


def test_tiny_model_lora_on_last_layer_is_exact():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    policy = load_policy("deciplane/tiny")
    policy.add_lora(r=4, alpha=8, target_modules=["model.layers.1.self_attn.q_proj",
                                                  "model.layers.1.mlp.down_proj"])
    for name, p in policy.model.named_parameters():   # non-zero B so LoRA changes the output
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02)
    assert first_trainable_layer(policy.model) == 1
    _compare(policy, 1, TEXTS)


def test_a_trainable_parameter_under_the_boundary_is_refused():
    policy = load_policy("deciplane/tiny")
    policy.add_lora(r=2, alpha=4)                  # adapters in every layer
    assert first_trainable_layer(policy.model) == 0
    with pytest.raises(ConfigError, match="below it is trainable"):
        check_trunk_frozen(policy.model, 1)


@pytest.mark.slow
def test_smollm2_two_layer_slice_is_exact():
    torch.set_num_threads(1)
    policy = load_policy("deciplane/smollm2-135m-instruct")
    decoder = policy.model.model
    decoder.layers = torch.nn.ModuleList(list(decoder.layers)[:2])   # a 2-layer slice
    policy.model.config.num_hidden_layers = 2
    for p in policy.model.parameters():
        p.requires_grad_(False)
    for p in decoder.layers[1].mlp.parameters():    # partial fine-tuning of layer 1's MLP
        p.requires_grad_(True)
    assert first_trainable_layer(policy.model) == 1
    _compare(policy, 1, TEXTS)


OBS = ["You are in a kitchen. There is a closed fridge here. An exit leads north.",
       "You are in a bedroom. A small key lies on the bed.",
       "You are in a kitchen. There is a closed fridge here. An exit leads north."]


def _lora_policy(which: str):
    torch.manual_seed(0)
    if which == "tiny":
        policy = load_policy("deciplane/tiny")
    else:                                   # a 2-layer slice of SmolLM2
        policy = load_policy("deciplane/smollm2-135m-instruct")
        decoder = policy.model.model
        decoder.layers = torch.nn.ModuleList(list(decoder.layers)[:2])
        policy.model.config.num_hidden_layers = 2
    policy.add_lora(r=4, alpha=8, target_modules=["model.layers.1.self_attn.q_proj",
                                                  "model.layers.1.self_attn.v_proj",
                                                  "model.layers.1.mlp.down_proj"])
    for name, p in policy.model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    return policy


@pytest.mark.parametrize("which", ["tiny", pytest.param("smollm2-slice", marks=pytest.mark.slow)])
def test_rollout_states_and_the_shared_prefix_update_equal_a_fresh_full_forward(which):
    """The rollout's log-probs (prefix KV cache, identical prompts computed once) and its
    kept boundary states equal a fresh forward of each prompt; the update from those
    states with the batch's shared prefix run once gives the full forward's logits and
    LoRA gradients."""
    from deciplane.agents import MenuAgent
    from deciplane.agents.menu import _common_prefix_len
    from deciplane.engine.trunk import MIN_SHARED_PREFIX, menu_update_logits
    from deciplane.types import Menu

    torch.set_num_threads(1)
    policy = _lora_policy(which)
    model = policy.model
    menus = [Menu(("go north", "open fridge")), Menu(("take key", "go east", "look")),
             Menu(("go north", "open fridge"))]
    agent = MenuAgent(policy, keep_boundary=1)
    before = agent.tokens_computed
    decs = agent.act(OBS, menus, seed=0)
    prompts = [d.prompt_ids for d in decs]
    assert torch.equal(prompts[0], prompts[2])
    shared = _common_prefix_len(prompts[:2])
    assert shared >= MIN_SHARED_PREFIX
    # computed: the shared prefix once, then the two distinct suffixes
    assert agent.tokens_computed - before == sum(int(p.numel()) for p in prompts[:2]) - shared
    ids, mask, pos = _batch_ids(policy, prompts)
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, position_ids=pos,
                     use_cache=False).logits[:, -1]
        fresh = trunk_hidden(model, ids, mask, pos, 1)
    for i, d in enumerate(decs):
        torch.testing.assert_close(d.label_logits, full[i, d.label_token_ids], rtol=1e-5, atol=1e-5)
        t = int(d.prompt_ids.numel())
        torch.testing.assert_close(d.boundary_hidden, fresh[i, ids.shape[1] - t:],
                                   rtol=1e-5, atol=1e-5)
    params = [p for p in model.parameters() if p.requires_grad]

    def grads(fn):
        model.zero_grad()
        out = fn()
        _loss(out).backward()
        return out.detach(), [p.grad.clone() for p in params]

    ref, g_ref = grads(lambda: model(input_ids=ids, attention_mask=mask, position_ids=pos,
                                     use_cache=False).logits[:, -1])
    for shared_prefix in (True, False):
        for kept in (decs, [_without_states(d) for d in decs]):
            got, g = grads(lambda: menu_update_logits(model, kept, 1, policy.tokenizer.pad_token_id,
                                                      shared_prefix=shared_prefix))
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)   # logits ~10
            for a, b in zip(g, g_ref):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def _batch_ids(policy, prompts):
    ids, mask = left_pad(prompts, policy.tokenizer.pad_token_id)
    return ids, mask, position_ids_from_mask(mask)


def _without_states(d):
    import dataclasses
    return dataclasses.replace(d, boundary_hidden=None, boundary_layer=None)
