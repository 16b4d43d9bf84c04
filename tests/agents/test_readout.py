"""The items readout of the menu agent: spans, the head, one forward, the caches, saving."""

from __future__ import annotations

import pytest
import torch

from deciplane.agents import MenuAgent, load_policy
from deciplane.agents.readout import (ItemHead, entry_char_spans, item_logits, pool_spans,
                                      token_spans)
from deciplane.errors import ConfigError
from deciplane.types import Menu

OBS = ["You are in a kitchen. There is a key on the table.", "You are hungry."]
MENUS = [Menu(("go north", "take key", "open door", "look")), Menu(("eat apple", "go south"))]


def test_entry_char_spans_hand_computed():
    text = "x\nA) go\nB) eat"
    assert entry_char_spans(text, 2, ["A) go", "B) eat"], ["go", "eat"]) == [(5, 7), (11, 14)]
    with pytest.raises(ConfigError, match="not found"):
        entry_char_spans(text, 3, ["A) go"], ["go"])


def test_token_spans_hand_computed():
    offsets = [(0, 2), (2, 5), (5, 8), (8, 8)]
    assert token_spans(offsets, [(3, 6)]) == [(1, 3)]
    assert token_spans(offsets, [(0, 2), (5, 8)]) == [(0, 1), (2, 3)]
    with pytest.raises(ConfigError):
        token_spans(offsets, [(8, 9)])


def test_pool_spans_and_the_head_score():
    states = torch.arange(12, dtype=torch.float32).reshape(4, 3)               # (T, H)
    pooled = pool_spans(states, [(0, 2), (3, 4)])
    torch.testing.assert_close(pooled, torch.tensor([[1.5, 2.5, 3.5], [9.0, 10.0, 11.0]]))
    head = ItemHead(3, layer=1, rank=2)
    assert torch.equal(item_logits(head, states, [(0, 2), (3, 4)]), torch.zeros(2))  # K = 0
    with torch.no_grad():
        head.query.weight.copy_(torch.tensor([[1.0, 0, 0], [0, 1.0, 0]]))
        head.key.weight.copy_(torch.tensor([[1.0, 0, 0], [0, 0, 0]]))
    # decision state = row 3 (the last token); rms-normalised rows
    rms = lambda x: x / x.pow(2).mean().sqrt()                               # noqa: E731
    q = rms(states[3])[:2]
    want = torch.stack([rms(pooled[0])[0] * q[0], rms(pooled[1])[0] * q[0]]) / 2 ** 0.5
    torch.testing.assert_close(item_logits(head, states, [(0, 2), (3, 4)]), want)


def _items_policy(name="deciplane/tiny", layer=None, lora=False):
    torch.manual_seed(0)
    policy = load_policy(name)
    if lora:
        policy.add_lora(r=4, alpha=8)
    head = policy.add_item_head(layer=layer)
    with torch.no_grad():
        head.key.weight.normal_(0, 1.0)
    return policy


def test_items_agent_needs_a_head_and_an_untrained_head_is_uniform(fresh_tiny):
    with pytest.raises(ConfigError, match="add_item_head"):
        MenuAgent(fresh_tiny, readout="items")
    with pytest.raises(ConfigError, match="readout"):
        MenuAgent(fresh_tiny, readout="letters")
    fresh_tiny.add_item_head()
    d = MenuAgent(fresh_tiny, readout="items").act(OBS, MENUS, seed=0)
    torch.testing.assert_close(d[0].log_probs.exp(), torch.full((4,), 0.25))


@pytest.mark.parametrize("name", ["deciplane/tiny", "deciplane/smollm2-135m-instruct"])
def test_spans_cover_each_entry_and_probabilities_live_on_the_menu(name):
    policy = _items_policy(name)
    agent = MenuAgent(policy, readout="items")
    for d in agent.act(OBS, MENUS, seed=0):
        assert d.readout == "items" and len(d.item_spans) == len(d.menu)
        for (s, e), action in zip(d.item_spans, d.menu.actions):
            assert policy.tokenizer.decode(d.prompt_ids[s:e]).strip() == action
        assert d.log_probs.shape == (len(d.menu),)
        assert float(d.log_probs.exp().sum()) == pytest.approx(1.0, abs=1e-5)


def test_masked_entries_get_zero_in_the_objectives_softmax():
    from deciplane.methods.rlid_ppo import pad_menu_log_probs

    agent = MenuAgent(_items_policy(), readout="items")
    lp, mask = pad_menu_log_probs(agent.menu_log_probs(agent.act(OBS, MENUS, seed=0)))
    probs = lp.exp()
    assert mask.tolist()[1] == [True, True, False, False]
    assert float(probs[1, 2:].sum()) == 0.0
    torch.testing.assert_close(probs.sum(-1), torch.ones(2))


@pytest.mark.parametrize("layer", [None, 1])
def test_the_prefix_cache_and_dedup_give_the_fresh_forwards_log_probs(layer):
    policy = _items_policy(layer=layer)
    cached = MenuAgent(policy, readout="items")
    fresh = MenuAgent(policy, readout="items", prefix_cache=False, dedup=False)
    obs = [OBS[0], OBS[0], OBS[1]]           # a duplicate row: dedup; one prompt: the
    menus = [MENUS[0], MENUS[0], MENUS[1]]   # whole menu sits in the shared prefix
    for batch in ([obs[0]], obs):
        a = cached.act(batch, menus[:len(batch)], seed=0)
        b = fresh.act(batch, menus[:len(batch)], seed=0)
        for x, y in zip(a, b):
            torch.testing.assert_close(x.log_probs, y.log_probs, rtol=1e-5, atol=1e-5)
    # the update recomputes the rollout's log-probs with grad (first PPO ratio = 1)
    ds = cached.act(obs, menus, seed=0)
    for lp, d in zip(cached.menu_log_probs(ds), ds):
        assert lp.requires_grad
        torch.testing.assert_close(lp.detach(), d.log_probs, rtol=1e-5, atol=1e-5)


def test_early_exit_stops_at_the_heads_layer_with_the_same_policy():
    """The agent's forward stops at the head's layer 6 of SmolLM2's 30 and gives the
    log-probs of a full forward read at layer 6."""
    from deciplane.agents.policy import capture_hidden
    from deciplane.agents.menu import menu_logp

    policy = _items_policy("deciplane/smollm2-135m-instruct", layer=6)
    agent = MenuAgent(policy, readout="items", keep_readout=True)
    assert agent.early_exit
    for d in agent.act(OBS, MENUS, seed=0):
        with torch.no_grad(), capture_hidden(policy.model, 6) as cap:
            policy.model(input_ids=d.prompt_ids[None])
        torch.testing.assert_close(d.readout_hidden, cap[0][0], rtol=1e-5, atol=1e-5)
        want = menu_logp(item_logits(policy.item_head, cap[0][0], d.item_spans))
        torch.testing.assert_close(d.log_probs, want, rtol=1e-5, atol=1e-5)


def test_the_head_is_saved_and_loaded_with_the_policy(tmp_path):
    policy = _items_policy(lora=True)
    before = [d.log_probs for d in MenuAgent(policy, readout="items").act(OBS, MENUS, seed=0)]
    policy.save(tmp_path / "p")
    loaded = load_policy(str(tmp_path / "p"))
    assert loaded.item_head is not None and loaded.item_head.layer == policy.item_head.layer
    after = [d.log_probs for d in MenuAgent(loaded, readout="items").act(OBS, MENUS, seed=0)]
    for x, y in zip(before, after):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
    with pytest.raises(ConfigError, match="once"):
        loaded.add_item_head()


def test_lora_below_the_head_frozen_trunk_update_equals_the_full_update():
    """SmolLM2, LoRA in layers 4-5, the head at layer 6: the rollout stops at layer 6 and
    keeps the boundary states of layer 4; the update runs layers 4-5 only (and stops at 6
    too) with the same log-probs and LoRA/head gradients as a full forward."""
    import functools

    from deciplane.engine.trunk import first_trainable_layer, menu_update_logits
    from deciplane.trainers.run import lora_targets

    torch.manual_seed(0)
    policy = load_policy("deciplane/smollm2-135m-instruct")
    policy.add_lora(r=4, alpha=8, target_modules=lora_targets(policy, None, 2, used_layers=6))
    for name, p in policy.model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.02)
    head = policy.add_item_head(layer=6)
    with torch.no_grad():
        head.key.weight.normal_(0, 1.0)
    assert first_trainable_layer(policy.model) == 4
    agent = MenuAgent(policy, readout="items", keep_boundary=4)
    assert agent.early_exit
    decs = agent.act(OBS, MENUS, seed=0)
    assert all(d.boundary_hidden is not None and d.readout_hidden is None for d in decs)

    def grads(update):
        agent.update_logits = update
        policy.model.zero_grad()
        lps = agent.menu_log_probs(decs)
        sum(lp[d.index] for lp, d in zip(lps, decs)).backward()
        return lps, {n: p.grad.clone() for n, p in policy.model.named_parameters()
                     if p.requires_grad}

    full_lp, full_g = grads(None)
    trunk_lp, trunk_g = grads(functools.partial(menu_update_logits, policy.model, boundary=4,
                                                pad_id=policy.tokenizer.pad_token_id))
    for a, b, d in zip(full_lp, trunk_lp, decs):
        torch.testing.assert_close(a.detach(), d.log_probs, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(b.detach(), d.log_probs, rtol=1e-4, atol=1e-5)
    assert any(g.abs().sum() > 0 for n, g in full_g.items() if "lora" in n)
    for n in full_g:
        torch.testing.assert_close(trunk_g[n], full_g[n], rtol=1e-4, atol=1e-5)


def test_an_untrained_head_needs_no_forward_and_decides_the_same(fresh_tiny):
    """K = 0 scores every entry 0 whatever the states: the agent skips the forward (no
    token computed) and decides exactly as with it (uniform; greedy = the first entry)."""
    fresh_tiny.add_item_head()
    skip = MenuAgent(fresh_tiny, readout="items", greedy=True)
    keep = MenuAgent(fresh_tiny, readout="items", greedy=True, keep_readout=True)
    a, b = skip.act(OBS, MENUS), keep.act(OBS, MENUS)
    assert skip.tokens_computed == 0 and keep.tokens_computed > 0
    for x, y in zip(a, b):
        assert torch.equal(x.log_probs, y.log_probs) and x.index == y.index == 0
    with torch.no_grad():
        fresh_tiny.item_head.key.weight[0, 0] = 1e-3      # trained: forwards again
    skip.act(OBS, MENUS)
    assert skip.tokens_computed > 0
