"""The MLP item head (``readout_head: mlp``): its score by hand, uniform when untrained,
the bilinear head while its MLPs are the identity, saved and loaded with the policy."""

from __future__ import annotations

import pytest
import torch

from deciplane.agents import MenuAgent, load_policy
from deciplane.agents.readout import ItemHead, ResidualMLP, item_logits
from deciplane.errors import ConfigError
from deciplane.types import Menu

OBS = ["You are in a kitchen. There is a key on the table.", "You are hungry."]
MENUS = [Menu(("go north", "take key", "open door", "look")), Menu(("eat apple", "go south"))]
SPANS = [(0, 2), (3, 4)]


def _rms(x):
    return x / x.pow(2).mean(-1, keepdim=True).sqrt()


def _set(linear, weight, bias=None):
    with torch.no_grad():
        linear.weight.copy_(torch.tensor(weight))
        if bias is not None:
            linear.bias.copy_(torch.tensor(bias))


def test_the_mlp_heads_logits_by_hand():
    """H = 2, width 1, rank 1: f(x) = x + W2 gelu(W1 x + b1) + b2 on each normed state."""
    states = torch.tensor([[1.0, 1.0], [2.0, 0.0], [0.0, 3.0], [3.0, 4.0]])   # (T, H)
    head = ItemHead(2, layer=1, rank=1, kind="mlp", mlp_hidden=1)
    _set(head.query, [[1.0, 0.0]])
    _set(head.key, [[0.0, 2.0]])
    _set(head.decision_mlp.up, [[1.0, 0.0]], [0.0])
    _set(head.decision_mlp.down, [[0.0], [0.0]], [0.5, 0.0])      # adds 0.5 to x_0
    _set(head.entry_mlp.up, [[0.0, 1.0]], [1.0])
    _set(head.entry_mlp.down, [[0.0], [1.0]], [0.0, 0.0])         # adds gelu(x_1 + 1) to x_1
    gelu = torch.nn.functional.gelu
    d = _rms(states[3])                                            # (0.6, 0.8) * sqrt(2)
    q = d[0] + 0.5                                                 # Q f(d)
    pooled = torch.stack([states[0:2].mean(0), states[3]])         # (1.5, .5), (3, 4)
    e = _rms(pooled)
    k = 2.0 * (e[:, 1] + gelu(e[:, 1] + 1.0))                      # K g(e)
    torch.testing.assert_close(item_logits(head, states, SPANS), k * q / 1.0)


def test_an_untrained_mlp_head_is_uniform_and_then_equals_the_bilinear_head():
    torch.manual_seed(0)
    states = torch.randn(6, 8)                                     # (T, H)
    mlp = ItemHead(8, layer=1, rank=4, kind="mlp", mlp_hidden=5)
    assert mlp.is_constant()
    assert torch.equal(item_logits(mlp, states, SPANS), torch.zeros(2))
    bilinear = ItemHead(8, layer=1, rank=4)
    with torch.no_grad():
        bilinear.key.weight.normal_()
        mlp.query.weight.copy_(bilinear.query.weight)
        mlp.key.weight.copy_(bilinear.key.weight)
    assert not mlp.is_constant()
    # W2 = 0, b2 = 0: the MLPs are the identity, the score the bilinear head's, exactly
    assert torch.equal(item_logits(mlp, states, SPANS), item_logits(bilinear, states, SPANS))
    with torch.no_grad():
        mlp.entry_mlp.down.weight.normal_()
    assert not torch.equal(item_logits(mlp, states, SPANS), item_logits(bilinear, states, SPANS))


def test_the_mlp_draws_no_random_numbers_a_bilinear_head_would_not():
    """The rest of a run sees the same RNG stream with either head (the warm start's
    shuffles, ...): the MLPs' initial weights come from a forked stream."""
    torch.manual_seed(3)
    ItemHead(8, layer=1, rank=4)
    after_bilinear = torch.rand(3)
    torch.manual_seed(3)
    head = ItemHead(8, layer=1, rank=4, kind="mlp", mlp_hidden=5)
    assert torch.equal(torch.rand(3), after_bilinear)
    assert head.decision_mlp.up.weight.abs().sum() > 0        # the first layer is random
    assert len(head.mlp_parameters()) == 8 and ItemHead(8, 1).mlp_parameters() == []


def test_residual_mlp_is_the_identity_at_init_and_checks():
    x = torch.randn(3, 4)
    assert torch.equal(ResidualMLP(4, 2)(x), x)
    with pytest.raises(ConfigError, match="kind"):
        ItemHead(4, layer=1, kind="deep")
    with pytest.raises(ConfigError, match="width"):
        ItemHead(4, layer=1, kind="mlp", mlp_hidden=0)


def test_the_mlp_head_is_saved_and_loaded_with_the_policy(tmp_path):
    torch.manual_seed(0)
    policy = load_policy("deciplane/tiny")
    head = policy.add_item_head(layer=1, kind="mlp", mlp_hidden=16)
    with torch.no_grad():
        for p in head.parameters():
            p.normal_(0, 0.5)
    agent = MenuAgent(policy, readout="items")
    before = [d.log_probs for d in agent.act(OBS, MENUS, seed=0)]
    policy.save(tmp_path / "p")
    loaded = load_policy(str(tmp_path / "p"))
    got = loaded.item_head
    assert got.describe() == head.describe() == {"hidden_size": head.hidden_size, "layer": 1,
                                                 "rank": 16, "kind": "mlp", "mlp_hidden": 16}
    want = head.state_dict()
    assert got.state_dict().keys() == want.keys()
    assert all(torch.equal(got.state_dict()[k], want[k]) for k in want)
    after = [d.log_probs for d in MenuAgent(loaded, readout="items").act(OBS, MENUS, seed=0)]
    for x, y in zip(before, after):
        assert torch.equal(x, y)


def test_config_refuses_an_mlp_head_without_the_items_readout():
    from deciplane.trainers.config import load_config

    with pytest.raises(ConfigError, match="readout: items"):
        load_config(data={"algorithm": "rlid_ppo", "readout_head": "mlp"})
    with pytest.raises(ConfigError, match="readout_head"):
        load_config(data={"algorithm": "rlid_ppo", "readout": "items", "readout_head": "deep"})
    with pytest.raises(ConfigError, match="readout_mlp_hidden"):
        load_config(data={"algorithm": "rlid_ppo", "readout": "items", "readout_head": "mlp",
                          "readout_mlp_hidden": 0})
    cfg = load_config(data={"algorithm": "rlid_ppo", "readout": "items", "readout_head": "mlp"})
    assert cfg.readout_mlp_hidden == 256 and not cfg.readout_mlp_warm_start


def test_training_the_mlp_head_keeps_every_cached_block():
    """The head reads the kept states and is not run by the cached forward: after an
    in-place change of every head weight (an optimizer step) the same prompts are read
    whole from the block cache, and the new head scores them (LoRA below the head would
    change the key: docs/training.md "Capacity during RL")."""
    from deciplane.agents.prompt_cache import BlockCache

    torch.manual_seed(0)
    policy = load_policy("deciplane/tiny")
    for p in policy.model.parameters():
        p.requires_grad_(False)
    head = policy.add_item_head(layer=1, kind="mlp", mlp_hidden=16)
    with torch.no_grad():
        head.key.weight.normal_(0, 1.0)
    agent = MenuAgent(policy, readout="items", block_cache=BlockCache(8), keep_readout=True)
    first = agent.act(OBS, MENUS, seed=0)
    computed = agent.tokens_computed
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.1)                                  # bumps every version counter
    second = agent.act(OBS, MENUS, seed=0)
    assert computed > 0 and agent.tokens_computed == computed      # all reused
    assert not torch.equal(first[0].log_probs, second[0].log_probs)
    for a, b in zip(first, second):                      # the states the head reads
        assert torch.equal(a.readout_hidden, b.readout_hidden)
