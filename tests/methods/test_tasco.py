"""TASCO: prefix-only adaptation of a frozen model (real PEFT prefix, the tiny model)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from typer.testing import CliRunner

from deciplane.methods.tasco import (TASCO, PrefixModel, TASCOConfig, instability,
                                     prefix_cache, weights_sha256)
from deciplane.agents import load_policy
from deciplane.objectives import TASCOLossConfig
from deciplane.agents.policy import left_pad, position_ids_from_mask
from deciplane.objectives.tasco import sam_perturbation
from deciplane.types import UnlabeledTask

torch.set_num_threads(1)

TINY = dict(max_new_tokens=6, prompts_per_step=2, max_steps=2, answer_batch=8,
            micro_batch_size=4, samples=2)
PROMPTS = ["what is 2 + 3 ?", "hi", "how many apples are in the red box if you add one more ?"]


def _tasks(n=4):
    return [UnlabeledTask(f"t{i}", f"what is {i} + 2 ?", {}) for i in range(n)]


@pytest.fixture()
def prefixed():
    """The tiny policy with a PEFT prefix set far from zero (so it visibly matters)."""
    policy = load_policy("deciplane/tiny")
    pm = PrefixModel(policy.model, num_virtual_tokens=3)
    with torch.no_grad():
        pm.weight.copy_(torch.randn(pm.weight.shape, generator=torch.Generator().manual_seed(3)))
    return policy, pm


def test_prefix_cache_has_pefts_layout(prefixed):
    _, pm = prefixed
    ours = prefix_cache(pm.weight, 2, num_layers=pm.num_layers, num_heads=pm.num_heads,
                        head_dim=pm.head_dim)
    theirs = pm.peft.get_prompt(2)
    assert len(ours.layers) == len(theirs.layers) == pm.num_layers
    for a, b in zip(ours.layers, theirs.layers):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
        assert tuple(a.keys.shape) == (2, pm.num_heads, 3, pm.head_dim)


def _peft_step_decode(policy, pm, prompts, n_tokens):
    """Greedy decode one token at a time through the PEFT model's own forward (no cache)."""
    ids, mask = left_pad([policy.tokenize(policy.format_prompt(p)) for p in prompts],
                         policy.tokenizer.pad_token_id)
    out_tokens, out_logp = [], []
    with torch.no_grad():
        for _ in range(n_tokens):
            logits = pm.peft(input_ids=ids, attention_mask=mask,
                             position_ids=position_ids_from_mask(mask),   # PEFT adds m itself
                             use_cache=False).logits[:, -1].float()
            nxt = logits.argmax(-1)
            out_tokens.append(nxt)
            out_logp.append(torch.log_softmax(logits, -1).gather(-1, nxt[:, None])[:, 0])
            ids = torch.cat([ids, nxt[:, None]], 1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
    return torch.stack(out_tokens, 1), torch.stack(out_logp, 1)


def test_prefix_generation_equals_stepwise_peft_decode_on_a_padded_batch(prefixed):
    policy, pm = prefixed
    gens = pm.policy(policy).generate([policy.format_prompt(p) for p in PROMPTS],
                                      max_new_tokens=8, do_sample=False)
    lengths = {int(policy.tokenize(policy.format_prompt(p)).numel()) for p in PROMPTS}
    assert len(lengths) == 3                       # really left-padded
    tokens, logp = _peft_step_decode(policy, pm, PROMPTS, 8)
    for i, g in enumerate(gens):
        n = int(g.response_ids.numel())
        assert n >= 1
        assert g.response_ids.tolist() == tokens[i, :n].tolist()
        torch.testing.assert_close(g.response_logprobs, logp[i, :n], atol=1e-4, rtol=1e-4)
    base = policy.generate([policy.format_prompt(p) for p in PROMPTS], max_new_tokens=8,
                           do_sample=False)
    # the prefix does change the greedy tokens of the base model
    assert any(b.response_ids.tolist() != g.response_ids.tolist() for b, g in zip(base, gens))


def test_sampled_prefix_generation_logprobs_match_the_peft_forward(prefixed):
    policy, pm = prefixed
    prompts = [policy.format_prompt(p) for p in PROMPTS[:2]]
    gens = pm.policy(policy).generate(prompts, max_new_tokens=5, temperature=1.0,
                                      num_return_sequences=2, seed=7)
    assert [g.prompt_index for g in gens] == [0, 0, 1, 1]
    for g in gens:
        ids = torch.cat([g.prompt_ids, g.response_ids])[None]
        mask = torch.ones_like(ids)
        with torch.no_grad():
            logits = pm.peft(input_ids=ids, attention_mask=mask,
                             position_ids=position_ids_from_mask(mask)).logits[0].float()
        r = int(g.response_ids.numel())
        lp = torch.log_softmax(logits[-r - 1:-1], -1).gather(-1, g.response_ids[:, None])[:, 0]
        torch.testing.assert_close(g.response_logprobs, lp, atol=1e-4, rtol=1e-4)


def test_training_forward_equals_peft_forward_and_only_the_prefix_gets_gradients(prefixed):
    policy, pm = prefixed
    ids, mask = left_pad([policy.tokenize(policy.format_prompt(p)) for p in PROMPTS],
                         policy.tokenizer.pad_token_id)
    ours = pm.forward(ids, mask)
    theirs = pm.peft(input_ids=ids, attention_mask=mask,
                     position_ids=position_ids_from_mask(mask)).logits
    real = mask.bool()
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)
    ours[real].logsumexp(-1).mean().backward()
    assert pm.weight.grad is not None and float(pm.weight.grad.abs().sum()) > 0
    assert all(p.grad is None and not p.requires_grad for p in policy.model.parameters())


def test_run_keeps_base_weights_and_the_saved_prefix_answers_again(tmp_path):
    policy = load_policy("deciplane/tiny")
    before = weights_sha256(policy.model, skip="")
    adapter = TASCO(policy, TASCOConfig(**TINY, lr=0.1, trunk_dtype="float32"))
    w0 = adapter.prefix.weight.detach().clone()
    answers = adapter.run(_tasks())
    assert set(answers) == {"t0", "t1", "t2", "t3"}
    assert weights_sha256(policy.model, skip="") == before and adapter.base_weights_unchanged()
    assert not torch.equal(adapter.prefix.weight.detach(), w0)          # the prefix trained
    assert adapter.budget.optimizer_steps == 2
    prompts = [adapter.format(t) for t in _tasks()]
    texts = [g.text for g in adapter.prefix_policy.generate(prompts, max_new_tokens=6, do_sample=False)]
    path = adapter.save_prefix(tmp_path / "prefix")
    assert (path / "adapter_config.json").is_file()
    fresh = load_policy("deciplane/tiny")
    _, loaded = TASCO.load_prefix(fresh, path)
    again = [g.text for g in loaded.generate(prompts, max_new_tokens=6, do_sample=False)]
    assert again == texts
    assert weights_sha256(fresh.model, skip="prompt_encoder") == before


def test_instability_is_zero_without_perturbation_and_grows_with_sigma():
    # hand-built: two classes, logits = prefix @ A
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    prefix = torch.zeros(1, 2)
    z = torch.tensor([[1.0, -1.0]])              # a fixed unit-ish direction
    mask = torch.ones(1, 1)

    def logits(eps):
        return ((prefix + eps) @ a).view(1, 1, 2)

    assert float(instability(logits(0), [logits(0 * z)], mask)) == 0.0
    vals = [float(instability(logits(0), [logits(s * z)], mask)) for s in (0.1, 0.5, 1.0, 2.0)]
    assert all(x < y for x, y in zip(vals, vals[1:]))
    # p = (1/2, 1/2), q = softmax(s, -s): KL = -log 2 - (log q1 + log q2) / 2
    s = 1.0
    q1, q2 = math.exp(s) / (math.exp(s) + math.exp(-s)), math.exp(-s) / (math.exp(s) + math.exp(-s))
    assert vals[2] == pytest.approx(-math.log(2) - 0.5 * (math.log(q1) + math.log(q2)), rel=1e-5)
    # averaged over draws
    two = float(instability(logits(0), [logits(0.5 * z), logits(2.0 * z)], mask))
    assert two == pytest.approx((vals[1] + vals[3]) / 2, rel=1e-5)


def test_sigma_zero_gives_zero_instability_and_sam_steps_have_norm_rho():
    policy = load_policy("deciplane/tiny")
    adapter = TASCO(policy, TASCOConfig(**{**TINY, "max_steps": 1}, loss=TASCOLossConfig(sigma=0.0)))
    adapter.run(_tasks(2))
    assert adapter.records.history[0]["tasco/instability"] == 0.0
    assert adapter.records.history[0]["tasco/entropy"] > 0
    # a real prefix gradient, normalised to radius rho
    ids, mask = left_pad([policy.tokenize(policy.format_prompt(p)) for p in PROMPTS],
                         policy.tokenizer.pad_token_id)
    (g,) = torch.autograd.grad(adapter.prefix.forward(ids, mask).logsumexp(-1).mean(),
                               [adapter.prefix.weight])
    for rho in (0.05, 0.5):
        (eps,) = sam_perturbation([g], rho)
        assert float(eps.norm()) == pytest.approx(rho, rel=1e-5)
    sam = TASCO(load_policy("deciplane/tiny"),
                TASCOConfig(**{**TINY, "max_steps": 1},
                            loss=TASCOLossConfig(perturbation="sam", rho=0.5)))
    sam.run(_tasks(2))
    assert sam.records.history[0]["tasco/instability"] > 0
    assert sam.config.variant() == "sam perturbation"


def test_confidence_only_runs_without_perturbed_forwards_and_is_labelled():
    cfg = TASCOConfig(**{**TINY, "max_steps": 1}, loss=TASCOLossConfig(mu=0.0))
    assert cfg.variant() == "confidence-only (mu=0)"
    adapter = TASCO(load_policy("deciplane/tiny"), cfg)
    adapter.run(_tasks(2))
    h = adapter.records.history[0]
    assert h["tasco/instability"] == 0.0 and h["loss/total"] == pytest.approx(h["tasco/entropy"])
    assert adapter.budget.forward_passes == 1       # 4 answers, one micro-batch, no perturbed forward
    rnd = TASCO(load_policy("deciplane/tiny"), TASCOConfig(**{**TINY, "max_steps": 1},
                                                       loss=TASCOLossConfig(sigma=0.05, n_draws=3)))
    rnd.run(_tasks(2))
    assert rnd.budget.forward_passes == 4           # clean + 3 draws
    assert rnd.budget.backward_tokens == rnd.budget.forward_tokens   # one backward through all 4


def test_config_errors_name_the_field():
    from deciplane.errors import ConfigError

    with pytest.raises(ConfigError, match="num_virtual_tokens"):
        TASCOConfig(num_virtual_tokens=0)
    with pytest.raises(ConfigError, match="perturbation"):
        TASCOConfig(loss=TASCOLossConfig(perturbation="gaussian"))
    policy = load_policy("deciplane/tiny")
    policy.add_lora(r=2, alpha=4)
    with pytest.raises(ConfigError, match="without LoRA"):
        TASCO(policy, TASCOConfig())


def test_cli_tasco_on_a_reasoning_gym_family_writes_summary(tmp_path):
    from deciplane.cli import app

    out = tmp_path / "run"
    res = CliRunner().invoke(app, [
        "adapt", "tasco", "--benchmark", "rg:chain_sum", "--benchmark-arg", "max_terms=2",
        "--benchmark-arg", "max_digits=1", "--model", "deciplane/tiny", "--limit", "4",
        "--threads", "1", "--run-dir", str(out), "--set", "max_new_tokens=6",
        "--set", "prompts_per_step=2", "--set", "max_steps=2", "--set", "loss.perturbation=sam"])
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert s["method"] == "tasco" and s["variant"] == "sam perturbation"
    assert "paper-inspired" in s["method_note"] and "ours" in s["method_note"]
    assert s["benchmark_args"] == {"max_terms": 2, "max_digits": 1}
    assert s["base_weights_unchanged"] is True
    maj = s["baselines"]["majority_vote_equal_budget"]
    assert maj["budget_unit"] == "forward_token_equivalents"
    # the baseline's votes are what the adapter's compute buys at the greedy cost per answer
    greedy_fte = (s["baseline_budget"]["prefill_tokens"] + s["baseline_budget"]["generated_tokens"]
                  - maj["forward_token_equivalents"])
    assert maj["votes_per_task"] == max(1, round(s["forward_token_equivalents"] / greedy_fte))
    assert s["baselines"]["best_of_n_equal_budget"]["n_per_task"] == maj["votes_per_task"]
    for name in ("no_adaptation_greedy", "majority_vote_equal_budget", "best_of_n_equal_budget"):
        assert set(s["paired_vs_baselines"][name]) >= {"difference", "ci95", "n", "mcnemar_p"}
    assert len(s["after"]["ci95"]) == 2 and s["mean_output_tokens"] > 0
    assert (out / "accuracy_vs_steps.png").stat().st_size > 1000


def test_bf16_linears_under_the_prefix_keep_the_base_frozen_and_the_prefix_answers_again(tmp_path):
    """trunk_dtype=bfloat16: the frozen model's linear layers run in bf16, the prefix (and
    the attention it enters) stays fp32; only the prefix trains."""
    policy = load_policy("deciplane/tiny")
    adapter = TASCO(policy, TASCOConfig(**TINY, lr=0.1, trunk_dtype="bfloat16"))
    assert adapter.frozen_dtype == "bfloat16" and adapter.frozen_linears_cast == 14
    assert policy.model.model.layers[0].self_attn.q_proj.weight.dtype == torch.bfloat16
    assert adapter.prefix.weight.dtype == torch.float32
    w0 = adapter.prefix.weight.detach().clone()
    adapter.run(_tasks())
    assert adapter.base_weights_unchanged() and not torch.equal(adapter.prefix.weight.detach(), w0)
    prompts = [adapter.format(t) for t in _tasks()]
    texts = [g.text for g in adapter.prefix_policy.generate(prompts, max_new_tokens=6, do_sample=False)]
    path = adapter.save_prefix(tmp_path / "prefix")
    _, loaded = TASCO.load_prefix(load_policy("deciplane/tiny"), path, trunk_dtype="bfloat16")
    assert [g.text for g in loaded.generate(prompts, max_new_tokens=6, do_sample=False)] == texts
