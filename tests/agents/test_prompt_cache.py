"""Reuse per row (deciplane.agents.prompt_cache): prompts computed in fixed token blocks,
blocks met before read from a bounded cache; results bitwise independent of the cache."""

from __future__ import annotations

import torch

from deciplane.agents import MenuAgent, load_policy
from deciplane.agents.prompt_cache import BlockCache, block_bounds, chain_keys
from deciplane.types import Menu

OBS = ["Your task is to put the towel away.\n\nLocation: You are in the bathroom. You see "
       "a sink and a towel rack.\nInventory: a towel\nLast action: take towel",
       "Your task is to put the towel away.\n\nLocation: You are in the bathroom. You see "
       "a sink and a towel rack.\nInventory: nothing\nLast action: put towel on rack",
       "A completely different game: the cellar is dark."]
MENUS = [Menu(("go north", "put towel on rack", "open door")), Menu(("go north", "take towel")),
         Menu(("light lamp", "go up"))]


def _items_policy():
    policy = load_policy("deciplane/tiny")
    head = policy.add_item_head(layer=2)
    with torch.no_grad():   # a trained-looking head: an all-zero key needs no forward
        head.key.weight.copy_(torch.randn(head.key.weight.shape,
                                          generator=torch.Generator().manual_seed(0)))
    return policy


def _logits(decisions):
    return [d.label_logits for d in decisions]


def test_block_bounds_and_chain_keys_by_hand():
    assert block_bounds(70, 32) == [(0, 32), (32, 64), (64, 70)]
    assert block_bounds(32, 32) == [(0, 32)]
    assert block_bounds(0, 32) == []
    a = chain_keys([1, 2, 3, 4, 5], 2)
    b = chain_keys([1, 2, 3, 9, 5], 2)
    assert len(a) == 3 and a[0] == b[0] and a[1] != b[1] and a[2] != b[2]  # chained
    assert chain_keys([1, 2], 2, b"ctx") != chain_keys([1, 2], 2, b"other")
    assert chain_keys(torch.tensor([1, 2, 3]), 2) == chain_keys([1, 2, 3], 2)


def test_cached_and_uncached_rows_are_bitwise_equal_for_both_readouts(tiny):
    items = _items_policy()
    for policy, readout in ((tiny, "labels"), (items, "items")):
        uncached = MenuAgent(policy, readout=readout, block_cache=BlockCache(8, max_bytes=0))
        cache = BlockCache(8)
        cached = MenuAgent(policy, readout=readout, block_cache=cache)
        ref = _logits(uncached.act(OBS, MENUS))
        cached.act(OBS[:1], MENUS[:1])             # then rows 1 and 2 form a batch of two
        first = _logits(cached.act(OBS, MENUS))
        again = _logits(cached.act(OBS[::-1], MENUS[::-1]))[::-1]   # every block cached
        alone = _logits(cached.act(OBS[2:], MENUS[2:]))              # shares nothing
        for r, f, a in zip(ref, first, again):
            assert torch.equal(r, f) and torch.equal(r, a)
        assert torch.equal(alone[0], ref[2])
        assert cache.stats.tokens_reused > cache.stats.tokens_computed
        assert uncached.block_cache.stats.tokens_reused == 0 and len(uncached.block_cache) == 0
        # and the batched forward agrees up to float rounding
        batched = _logits(MenuAgent(policy, readout=readout).act(OBS, MENUS))
        for r, b in zip(ref, batched):
            assert torch.allclose(r, b, atol=1e-4)


def test_kept_states_and_stored_log_probs_do_not_depend_on_the_cache():
    """The readout states a trainer keeps, the log-probs it stores and the boundary states
    of a frozen-trunk update are the same bits from a warm cache as from none."""
    policy = _items_policy()
    runs = []
    for cache in (BlockCache(8, max_bytes=0), BlockCache(8)):
        agent = MenuAgent(policy, readout="items", keep_readout=True, keep_boundary=1,
                          block_cache=cache)
        agent.act(OBS[:2], MENUS[:2])         # warms the cache (no effect when max 0)
        runs.append(agent.act(OBS, MENUS, seed=5))
    for a, b in zip(*runs):
        assert torch.equal(a.readout_hidden, b.readout_hidden)
        assert torch.equal(a.boundary_hidden, b.boundary_hidden)
        assert torch.equal(a.log_probs, b.log_probs) and a.index == b.index
        assert a.readout_hidden.shape[0] == a.prompt_ids.numel()


def test_the_cache_evicts_at_its_ceiling_and_stays_exact(tiny):
    ref = _logits(MenuAgent(tiny, block_cache=BlockCache(8, max_bytes=0)).act(OBS, MENUS))
    probe = BlockCache(8)
    MenuAgent(tiny, block_cache=probe).act(OBS[:1], MENUS[:1])
    one_block = max(b.nbytes for b in probe._blocks.values())
    small = BlockCache(8, max_bytes=3 * one_block)
    agent = MenuAgent(tiny, block_cache=small)
    for _ in range(2):
        out = _logits(agent.act(OBS, MENUS))
        assert all(torch.equal(r, o) for r, o in zip(ref, out))
    assert small.stats.evictions > 0 and small.nbytes <= small.max_bytes and len(small) <= 3


def test_a_weight_change_invalidates_blocks_but_a_head_change_does_not(fresh_tiny):
    policy = fresh_tiny
    head = policy.add_item_head(layer=2)
    with torch.no_grad():
        head.key.weight.normal_()
    cache = BlockCache(8)
    agent = MenuAgent(policy, readout="items", block_cache=cache)
    agent.act(OBS, MENUS)
    computed = cache.stats.tokens_computed
    with torch.no_grad():
        head.query.weight.mul_(1.5)           # the head reads the states: blocks stay valid
    agent.act(OBS, MENUS)
    assert cache.stats.tokens_computed == computed
    with torch.no_grad():                     # a trunk weight below the exit: recomputed
        next(p for n, p in policy.model.named_parameters() if ".layers.0." in n).mul_(1.01)
    agent.act(OBS, MENUS)
    assert cache.stats.tokens_computed == 2 * computed


def test_a_round_of_rows_gives_each_row_the_bits_it_gets_alone():
    """SmolLM2 at the demo's readout layer: rows computed together in a round (their pasts
    hold the same number of blocks) equal the same rows computed one by one, so what the
    cache held (which decides who is computed together) cannot change a bit."""
    policy = load_policy("deciplane/smollm2-135m-instruct")   # smol: converted once
    item_head = policy.add_item_head(layer=18)
    with torch.no_grad():
        item_head.key.weight.normal_(generator=torch.Generator().manual_seed(0))
    together = MenuAgent(policy, readout="items", keep_readout=True,
                         block_cache=BlockCache(16, max_bytes=0)).act(OBS, MENUS)
    alone = [MenuAgent(policy, readout="items", keep_readout=True,
                       block_cache=BlockCache(16, max_bytes=0)).act([o], [m])[0]
             for o, m in zip(OBS, MENUS)]
    for a, b in zip(together, alone):
        assert torch.equal(a.readout_hidden, b.readout_hidden)
        assert torch.equal(a.label_logits, b.label_logits)
