"""MenuAgent (METHODS §1): single-token labels, softmax over the menu only, batching, records."""

from __future__ import annotations

import pytest
import torch

from deciplane.agents import MenuAgent, compile_alphabet
from deciplane.agents.labels import single_token_id
from deciplane.errors import ConfigError, MenuTooLarge
from deciplane.types import Decision, Menu

OBS = ["You are in a kitchen. There is a closed fridge here. An exit leads north.",
       "You are in a bedroom. A small key lies on the bed.",
       "You are in a kitchen. There is a closed fridge here. A door leads west to the garden."]
MENUS = [Menu(("go north", "open fridge", "examine fridge")), Menu(("take key", "go east")),
         Menu(tuple(f"take coin {i}" for i in range(12)))]


def manual_label_logits(policy, decision: Decision) -> torch.Tensor:
    """Next-token logits at the labels from a plain unpadded forward of the stored prompt."""
    with torch.no_grad():
        logits = policy.model(decision.prompt_ids.unsqueeze(0)).logits[0, -1]
    return logits[decision.label_token_ids]


@pytest.mark.parametrize("which", ["tiny", "smol"])
def test_every_label_is_one_token_where_it_is_read(request, which):
    policy = request.getfixturevalue(which)
    agent = MenuAgent(policy)
    alpha = agent.alphabet
    assert len(alpha) == 52 and len(set(alpha.token_ids)) == 52
    prompt = agent.prompt(OBS[0], MENUS[0])
    assert prompt.endswith("Answer:")
    base = policy.tokenize(prompt).tolist()
    for read, tid in zip(alpha.read, alpha.token_ids):
        assert policy.tokenize(prompt + read).tolist() == base + [tid], read
    # the check is done in context: a label that is two tokens there is rejected
    assert single_token_id(policy.tokenizer, "Answer:", " A") == alpha.token_ids[0]
    assert single_token_id(policy.tokenizer, "Answer:", " AB12") is None


def test_probabilities_are_a_softmax_over_the_label_logits_only(tiny):
    agent = MenuAgent(tiny, temperature=0.5)
    for d in agent.act(OBS, MENUS, seed=0):
        assert torch.isclose(d.log_probs.exp().sum(), torch.tensor(1.0), atol=1e-6)
        torch.testing.assert_close(d.label_logits, manual_label_logits(tiny, d), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(d.log_probs, torch.log_softmax(d.label_logits / 0.5, -1))


@pytest.mark.parametrize("which", ["tiny", "smol"])
def test_batched_equals_unbatched_and_prefix_cache_is_exact(request, which):
    policy = request.getfixturevalue(which)
    obs, menus = (OBS, MENUS) if which == "tiny" else (OBS[::2], MENUS[::2])
    cached = MenuAgent(policy, greedy=True, history=0)
    plain = MenuAgent(policy, greedy=True, history=0, prefix_cache=False)
    batch = cached.act(obs, menus)
    singles = [plain.act([o], [m])[0] for o, m in zip(obs, menus)]
    for b, s in zip(batch, singles):
        assert b.index == s.index
        assert torch.equal(b.prompt_ids, s.prompt_ids)
        torch.testing.assert_close(b.label_logits, s.label_logits, atol=2e-4, rtol=1e-4)
    if which == "tiny":  # the shared prefix really was reused (chat header + system prompt)
        assert cached._prefix is not None and len(cached._prefix[1]) >= 16


def test_decision_records_are_complete_and_detached(tiny):
    hist = [[("You wake up.", "look")], [], [("A", "go west"), ("B", "go east"), ("C", "look")]]
    decisions = MenuAgent(tiny, history=2).act(OBS, MENUS, hist, seed=1)
    for d, menu in zip(decisions, MENUS):
        assert d.menu == menu and len(d.labels) == len(menu) == d.label_token_ids.shape[0]
        assert d.labels[:2] == (" A", " B")
        assert d.label_logits.shape == d.log_probs.shape == (len(menu),)
        assert d.label_token_ids.dtype == torch.long and d.prompt_ids.dtype == torch.long
        assert not (d.label_logits.requires_grad or d.log_probs.requires_grad or d.prompt_ids.requires_grad)
        assert 0 <= d.index < len(menu) and d.action == menu[d.index] and d.log_prob <= 0
    text = tiny.tokenizer.decode(decisions[2].prompt_ids)
    assert "go east" in text and "look" in text and "go west" not in text  # last 2 turns only
    assert "L) take coin 11" in text


def test_greedy_sampling_and_seeds(tiny):
    d = MenuAgent(tiny, greedy=True).act(OBS, MENUS)
    assert [x.index for x in d] == [int(x.log_probs.argmax()) for x in d]
    agent = MenuAgent(tiny, temperature=5.0)
    a = [x.index for x in agent.act(OBS * 4, MENUS * 4, seed=7)]
    b = [x.index for x in agent.act(OBS * 4, MENUS * 4, seed=7)]
    assert a == b and len(set(a)) > 1
    hot = agent.act(OBS[:1], MENUS[:1])[0].log_probs.exp()
    cold = MenuAgent(tiny, temperature=0.1).act(OBS[:1], MENUS[:1])[0].log_probs.exp()
    assert cold.max() > hot.max()


def test_too_large_menus_name_the_limit_and_the_option(tiny):
    big = Menu(tuple(f"take coin {i}" for i in range(60)))
    with pytest.raises(MenuTooLarge, match=r"60 actions.*at most 52.*max_menu=.*labels="):
        MenuAgent(tiny).act(["a room"], [big])
    with pytest.raises(MenuTooLarge, match=r"at most 5 \(max_menu=5\)"):
        MenuAgent(tiny, max_menu=5).act(OBS[2:], MENUS[2:])
    with pytest.raises(ConfigError, match="only 52 labels"):
        MenuAgent(tiny, max_menu=100)
    digits = MenuAgent(tiny, labels=[str(i) for i in range(10)])
    assert len(digits.alphabet) == 10 and digits.alphabet.read[0] == " 0"


def test_menu_log_probs_recompute_with_grad_and_track_updates(fresh_tiny):
    agent = MenuAgent(fresh_tiny, temperature=0.8)
    decisions = agent.act(OBS, MENUS, seed=0)
    new, ent = agent.menu_log_probs(decisions, with_entropy=True)
    for d, lp, h in zip(decisions, new, ent):
        assert lp.requires_grad and h.requires_grad
        torch.testing.assert_close(lp.detach(), d.log_probs, atol=1e-5, rtol=1e-5)
        assert 0 <= float(h.detach()) <= float(torch.log(torch.tensor(len(d.menu)))) + 1e-6
    # a PPO-style step raises the chosen actions' log-probs; stored old log-probs do not move
    old = [d.log_probs.clone() for d in decisions]
    opt = torch.optim.SGD(fresh_tiny.trainable_parameters(), lr=0.5)
    (-sum(lp[d.index] for lp, d in zip(new, decisions))).backward()
    opt.step()
    after = agent.menu_log_probs(decisions)
    assert sum(float(a[d.index].detach()) for a, d in zip(after, decisions)) > sum(float(o[d.index]) for o, d in zip(old, decisions))
    assert all(torch.equal(o, d.log_probs) for o, d in zip(old, decisions))
    # the prefix KV cache notices the in-place update (parameter version counters)
    fresh = agent.act(OBS, MENUS, seed=0)
    uncached = MenuAgent(fresh_tiny, temperature=0.8, prefix_cache=False).act(OBS, MENUS, seed=0)
    for a, b in zip(fresh, uncached):
        torch.testing.assert_close(a.label_logits, b.label_logits, atol=1e-4, rtol=1e-4)


def test_custom_alphabet_is_checked_against_the_tokenizer(tiny):
    alpha = compile_alphabet(tiny.tokenizer, "Answer:", ["A", "B", "north", "xq"])
    assert " north" in alpha.read and "xq" not in alpha.shown


def test_length_buckets_bound_the_padding():
    from deciplane.agents.menu import length_buckets

    assert length_buckets([10, 11, 50], 0.15) == [[0, 1], [2]]
    assert length_buckets([10, 11, 50], float("inf")) == [[0, 1, 2]]
    lengths = [5, 300, 7, 290, 6, 120]
    buckets = length_buckets(lengths, 0.25)
    assert sorted(i for b in buckets for i in b) == list(range(6))
    for b in buckets:
        assert len(b) * max(lengths[i] for i in b) <= 1.25 * sum(lengths[i] for i in b)


def test_bucketed_batch_equals_one_padded_forward(tiny):
    long_obs = [OBS[0] * 8, OBS[1], OBS[2] * 3]
    a = MenuAgent(tiny, greedy=True, max_padding=0.0).act(long_obs, MENUS)
    b = MenuAgent(tiny, greedy=True, max_padding=float("inf")).act(long_obs, MENUS)
    for x, y in zip(a, b):
        torch.testing.assert_close(x.label_logits, y.label_logits, atol=1e-4, rtol=1e-4)
