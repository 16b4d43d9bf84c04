"""Tiny-model runs of both adapters: parameters move, metrics are finite, the budget adds
up, configs validate."""

from __future__ import annotations

import math

import pytest
import torch

from deciplane.agents import load_policy
from deciplane.envs import load_benchmark
from deciplane.errors import ConfigError
from deciplane.methods.ttpo import TTPO, TTPOConfig
from deciplane.methods.ttrl import TTRL, TTRLConfig


@pytest.fixture(scope="module")
def tasks():
    tasks, scorer = load_benchmark("arith-shift", "test", limit=4)
    scorer.close()
    return tasks


@pytest.mark.parametrize("cls,cfg_cls", [(TTRL, TTRLConfig), (TTPO, TTPOConfig)])
def test_tiny_run_updates_lora_and_counts(cls, cfg_cls, tasks, tiny_settings):
    policy = load_policy("deciplane/tiny")
    ad = cls(policy, cfg_cls(**tiny_settings))
    params = [p for p in policy.model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    answers = ad.run(tasks)
    assert set(answers) == {t.id for t in tasks} and all(isinstance(a, str) for a in answers.values())
    assert any(not torch.equal(b, p) for b, p in zip(before, params)), "no parameter moved"
    for h in ad.records.history:
        assert all(math.isfinite(v) for v in h.values()), h
    b = ad.budget
    steps = len(ad.records.history)
    assert b.samples == ad.planned_samples(len(tasks)) == steps * 2 * 4 + len(tasks)
    assert b.optimizer_steps + b.skipped_steps == steps and b.optimizer_steps >= 1
    assert 0 < b.backward_tokens <= b.forward_tokens
    assert b.wall_time_s > 0 and b.generated_tokens >= b.samples
    if cls is TTRL:   # KL on: every trained sequence has one reference + one training forward
        assert b.forward_tokens == 2 * b.backward_tokens
    # checkpoint answers went to the eval budget, the final set is recorded last
    assert len(ad.records.checkpoints) == 2          # checkpoints=1: one intermediate + the final
    assert ad.eval_budget.samples == len(tasks) * len(ad.records.checkpoints[:-1])
    assert ad.records.checkpoints[-1] == (b.optimizer_steps, answers)


def test_full_finetune_moves_base_weights(tasks, tiny_settings):
    policy = load_policy("deciplane/tiny")
    ad = TTPO(policy, TTPOConfig(**{**tiny_settings, "finetune": "full", "lr": 1e-3}))
    w = policy.model.get_input_embeddings().weight
    before = w.detach().clone()
    ad.run(tasks)
    assert not policy.is_lora and not torch.equal(before, w)


def test_configs_validate_with_clear_errors():
    with pytest.raises(ConfigError, match="'greedy', 'majority'"):
        TTRLConfig(final_answer="best")
    with pytest.raises(ConfigError, match="train_samples"):
        TTRLConfig(votes=4, train_samples=8)
    with pytest.raises(ConfigError, match="answer"):
        TTPOConfig(hint_template="the majority says so")
    with pytest.raises(ConfigError, match="'current', 'frozen_base'"):
        TTPOConfig(teacher="other")
    paper = TTRLConfig.paper()
    assert (paper.votes, paper.train_samples, paper.loss.eps_low, paper.loss.kl_beta) == (
        64, 32, 0.2, 0.001)
    assert paper.changed_from_paper() == {}
    assert TTRLConfig().changed_from_paper()["votes"] == {"paper": 64, "used": 8}
    assert TTPOConfig.paper().loss.lam == 0.1 and TTPOConfig.paper().votes == 64


def test_adapter_rejects_labeled_inputs(tiny_settings):
    ad = TTRL(load_policy("deciplane/tiny"), TTRLConfig(**tiny_settings))
    with pytest.raises(ConfigError, match="UnlabeledTask"):
        ad.run([{"id": "a", "prompt": "p", "gold": "1"}])


def test_frozen_base_teacher_and_majority_answers(tasks, tiny_settings):
    """TTPO with the frozen initial policy as teacher (LoRA adapters off) and final answers
    by majority vote: runs, moves LoRA, counts the final votes as samples."""
    policy = load_policy("deciplane/tiny")
    cfg = TTPOConfig(**{**tiny_settings, "teacher": "frozen_base", "final_answer": "majority",
                        "final_votes": 3, "checkpoints": 0})
    ad = TTPO(policy, cfg)
    params = [p for p in policy.model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    answers = ad.run(tasks)
    assert len(answers) == len(tasks)
    assert any(not torch.equal(b, p) for b, p in zip(before, params))
    assert ad.budget.samples == ad.planned_samples(len(tasks)) == 2 * 2 * 4 + 3 * len(tasks)
    assert len(ad.records.checkpoints) == 1 and ad.eval_budget.samples == 0


def test_frozen_dtype_enters_the_baseline_key_and_lora_adapters_cast_their_base(tasks, tiny_settings):
    from deciplane.adapt.runner import _baseline_key

    cfg = TTRLConfig(**tiny_settings)
    args = ("deciplane/tiny", "arith-shift", "test", 4, None, None, cfg)
    assert _baseline_key(*args) == _baseline_key(*args, "float32")   # old fp32 caches stay valid
    assert _baseline_key(*args, "bfloat16") != _baseline_key(*args)
    policy = load_policy("deciplane/tiny")
    ad = TTRL(policy, TTRLConfig(**tiny_settings, trunk_dtype="bfloat16"))
    assert (ad.frozen_dtype, ad.frozen_linears_cast) == ("bfloat16", 14)
    trainable = [p for p in policy.model.parameters() if p.requires_grad]
    assert trainable and all(p.dtype == torch.float32 for p in trainable)
    before = [p.detach().clone() for p in trainable]
    ad.run(tasks)
    assert any(not torch.equal(b, p) for b, p in zip(before, trainable)), "no LoRA weight moved"
    full = TTRL(load_policy("deciplane/tiny"), TTRLConfig(**{**tiny_settings, "finetune": "full"},
                                                           trunk_dtype="bfloat16"))
    assert full.frozen_linears_cast == 0          # nothing is frozen under full fine-tuning


def test_compute_dtype_autocasts_a_full_finetune(tasks, tiny_settings):
    policy = load_policy("deciplane/tiny")
    ad = TTRL(policy, TTRLConfig(**{**tiny_settings, "finetune": "full"}, trunk_dtype="bfloat16",
                                 compute_dtype="bfloat16"))
    assert ad.frozen_dtype == "bfloat16+autocast-bfloat16" and ad.frozen_linears_cast == 0
    assert all(layer._deciplane_autocast == torch.bfloat16 for layer in policy.model.model.layers)
    before = [p.detach().clone() for p in policy.model.parameters()]
    ad.run(tasks)
    assert any(not torch.equal(b, p) for b, p in zip(before, policy.model.parameters()))
    assert all(p.dtype == torch.float32 for p in policy.model.parameters())


def test_each_adapter_embeds_its_loss_config_and_old_options_still_load():
    from deciplane.adapt.runner import build_config
    from deciplane.objectives import (PolicyLossConfig, TASCOLossConfig, TTPOLossConfig)

    ttrl, ttpo, tasco = build_config("ttrl"), build_config("ttpo"), build_config("tasco")
    assert ttrl.loss == PolicyLossConfig(kl_beta=0.001) and ttrl.grpo().loss is ttrl.loss
    assert ttpo.loss == TTPOLossConfig(lam=10.0)
    assert tasco.loss == TASCOLossConfig(sigma=0.05, rho=0.5)
    # a section given in part starts from the adapter's own default, not the class's
    assert build_config("ttrl", ["loss.eps_low=0.1"]).loss == PolicyLossConfig(eps_low=0.1,
                                                                                kl_beta=0.001)
    with pytest.warns(DeprecationWarning, match="kl_coef is now loss.kl_beta"):
        old = build_config("ttrl", ["kl_coef=0.0", "clip_eps=0.1", "preset=paper"])
    assert (old.loss.kl_beta, old.loss.eps_low, old.votes) == (0.0, 0.1, 64)
    with pytest.warns(DeprecationWarning, match="lam is now loss.lam"):
        assert build_config("ttpo", ["lam=0.5"]).loss.lam == 0.5
    with pytest.warns(DeprecationWarning, match="mu is now loss.mu"):
        assert build_config("tasco", ["mu=0"]).variant() == "confidence-only (mu=0)"
    assert TTPOConfig().changed_from_paper()["loss.lam"] == {"paper": 0.1, "used": 10.0}
