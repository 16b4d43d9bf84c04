"""Policy on deciplane/tiny: sampling with log-probs, batched scoring with grad, LoRA, reference."""

from __future__ import annotations

import pytest
import torch

from deciplane.agents.policy import left_pad, position_ids_from_mask
from deciplane.errors import ConfigError


def test_left_pad_and_positions():
    ids, mask = left_pad([torch.tensor([1, 2, 3]), torch.tensor([4])], pad_id=0)
    assert ids.tolist() == [[1, 2, 3], [0, 0, 4]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert position_ids_from_mask(mask).tolist() == [[0, 1, 2], [0, 0, 0]]


def test_generate_order_seed_and_logprobs_match_rescoring(tiny):
    prompts = [tiny.format_prompt("you are in the kitchen"), tiny.format_prompt("take the key")]
    gens = tiny.generate(prompts, max_new_tokens=6, temperature=0.7, num_return_sequences=3, seed=3)
    assert [g.prompt_index for g in gens] == [0, 0, 0, 1, 1, 1]  # prompt-major
    again = tiny.generate(prompts, max_new_tokens=6, temperature=0.7, num_return_sequences=3, seed=3)
    assert all(torch.equal(a.response_ids, b.response_ids) for a, b in zip(gens, again))
    for g in gens:
        assert torch.equal(g.prompt_ids, tiny.tokenize(prompts[g.prompt_index]))
        assert 1 <= len(g.response_ids) <= 6 and g.response_logprobs.shape == g.response_ids.shape
        assert not g.response_logprobs.requires_grad and (g.response_logprobs <= 0).all()
        assert g.text == tiny.tokenizer.decode(g.response_ids, skip_special_tokens=True)
    rescored = tiny.sequence_logprobs([g.prompt_ids for g in gens], [g.response_ids for g in gens],
                                      temperature=0.7)
    for g, lp in zip(gens, rescored):
        torch.testing.assert_close(lp.detach(), g.response_logprobs, atol=1e-4, rtol=1e-4)
    greedy = tiny.generate(prompts[:1], max_new_tokens=4, do_sample=False)
    assert torch.equal(greedy[0].response_ids, tiny.generate(prompts[:1], max_new_tokens=4, do_sample=False)[0].response_ids)
    with pytest.raises(ConfigError, match="temperature"):
        tiny.generate(prompts, max_new_tokens=2, temperature=0)


@pytest.mark.parametrize("lora", [False, True], ids=["plain", "peft"])
def test_generate_keeps_only_the_chosen_tokens_logprobs_bitwise_as_full_logits(tiny,
                                                                              fresh_tiny, lora):
    """The streamed log-probs (two (B, V) rows held at a time) equal, bit for bit, what the
    full per-step logits of ``output_logits=True`` give: the same log_softmax(logits / T)
    at the emitted tokens, eos-padded rows and a stop at max_new_tokens included."""
    from deciplane.agents.policy import left_pad

    policy = fresh_tiny if lora else tiny
    if lora:
        policy.add_lora(r=4, alpha=8)
    prompts = [policy.format_prompt("you are in the kitchen"), policy.format_prompt("go")]
    temperature = 0.7
    gens = policy.generate(prompts, max_new_tokens=7, temperature=temperature,
                           num_return_sequences=2, seed=5)
    ids, mask = left_pad([policy.tokenize(p) for p in prompts], policy.tokenizer.pad_token_id)
    torch.manual_seed(5)
    out = policy.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=7,
                                do_sample=True, temperature=temperature, top_p=1.0, top_k=0,
                                num_return_sequences=2, output_logits=True,
                                return_dict_in_generate=True,
                                pad_token_id=policy.tokenizer.pad_token_id,
                                eos_token_id=sorted(set(policy.eos_token_ids)))
    seqs = out.sequences[:, ids.shape[1]:]
    logits = torch.stack(out.logits, dim=1).float() / temperature
    want = torch.log_softmax(logits, dim=-1).gather(-1, seqs.unsqueeze(-1)).squeeze(-1)
    for row, g in enumerate(gens):
        n = len(g.response_ids)
        assert torch.equal(g.response_ids, seqs[row, :n])
        assert torch.equal(g.response_logprobs, want[row, :n])


def test_responses_end_at_eos_or_stop(tiny):
    eos = tiny.tokenizer.eos_token_id
    seqs = torch.tensor([[5, 6, eos, 9, 9], [5, 6, 7, 8, 9]])
    assert tiny._response_lengths(seqs, None) == [3, 5]
    act_close = tiny.tokenizer.convert_tokens_to_ids("</action>")
    seqs = torch.tensor([[5, act_close, 7, 7], [5, 6, 7, 8]])
    assert tiny._response_lengths(seqs, ["</action>"]) == [2, 4]
    assert tiny._response_lengths(seqs, None, extra_eos=[act_close]) == [2, 4]
    assert tiny._split_stops(["</action>", "STOP here"]) == ([act_close], ["STOP here"])


def test_sequence_logprobs_batched_equals_single_with_grad_and_entropy(tiny):
    prompts = [torch.tensor([10, 11, 12, 13, 14]), torch.tensor([20, 21])]
    responses = [torch.tensor([30, 31]), torch.tensor([40, 41, 42, 43])]
    lps, ents = tiny.sequence_logprobs(prompts, responses, with_entropy=True)
    assert [lp.shape[0] for lp in lps] == [2, 4] and all(lp.requires_grad for lp in lps)
    for p, r, lp, ent in zip(prompts, responses, lps, ents):
        single = tiny.sequence_logprobs([p], [r])[0]
        torch.testing.assert_close(lp, single, atol=1e-5, rtol=1e-5)
        # manual: full forward of the unpadded sequence
        logits = tiny.model(torch.cat([p, r]).unsqueeze(0)).logits[0]
        manual = torch.log_softmax(logits[len(p) - 1:-1], -1).gather(-1, r.unsqueeze(-1)).squeeze(-1)
        torch.testing.assert_close(lp, manual, atol=1e-5, rtol=1e-5)
        assert (ent >= 0).all() and ent.shape == r.shape
    sum(lp.sum() for lp in lps).backward()
    assert tiny.model.model.embed_tokens.weight.grad is not None
    tiny.model.zero_grad(set_to_none=True)


def test_full_finetune_reference_stays_frozen(fresh_tiny):
    p, r = [torch.tensor([3, 4, 5])], [torch.tensor([6, 7])]
    params = fresh_tiny.trainable_parameters()  # snapshots the reference
    before = fresh_tiny.sequence_logprobs(p, r)[0].detach()
    opt = torch.optim.SGD(params, lr=0.05)
    (-fresh_tiny.sequence_logprobs(p, r)[0].sum()).backward()
    opt.step()
    after = fresh_tiny.sequence_logprobs(p, r)[0].detach()
    assert after.sum() > before.sum()
    with fresh_tiny.reference() as ref:
        assert not any(q.requires_grad for q in ref.parameters())
        torch.testing.assert_close(fresh_tiny.sequence_logprobs(p, r, model=ref)[0], before)


def test_lora_trains_adapters_only_and_reference_disables_them(fresh_tiny):
    p, r = [torch.tensor([3, 4, 5])], [torch.tensor([6, 7])]
    before = fresh_tiny.sequence_logprobs(p, r)[0].detach()
    fresh_tiny.add_lora(r=4, alpha=8)
    params = fresh_tiny.trainable_parameters()
    names = [n for n, q in fresh_tiny.model.named_parameters() if q.requires_grad]
    assert params and all("lora_" in n for n in names)
    opt = torch.optim.SGD(params, lr=0.05)
    for _ in range(2):
        opt.zero_grad()
        (-fresh_tiny.sequence_logprobs(p, r)[0].sum()).backward()
        opt.step()
    assert fresh_tiny.sequence_logprobs(p, r)[0].sum() > before.sum()
    with fresh_tiny.reference() as ref:
        torch.testing.assert_close(fresh_tiny.sequence_logprobs(p, r, model=ref)[0].detach(), before)
    with pytest.raises(ConfigError, match="already has LoRA"):
        fresh_tiny.add_lora()
