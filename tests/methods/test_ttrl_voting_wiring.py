"""TTRL's vote -> reward -> update wiring on real tiny-model samples, with the answer
extraction replaced by fixed predictions so each case is exact."""

from __future__ import annotations

import logging

import torch

import deciplane.methods.ttrl as ttrl_mod
from deciplane.adapt.base import vote
from deciplane.agents import load_policy
from deciplane.methods.ttrl import TTRL, TTRLConfig
from deciplane.objectives import PolicyLossConfig
from deciplane.types import UnlabeledTask

TASKS = [UnlabeledTask(id=f"t{i}", prompt=f"you see {i} keys") for i in range(2)]


def _adapter(tiny_settings, **kw):
    cfg = TTRLConfig(**{**tiny_settings, "votes": 5, "train_samples": 5, "max_steps": 1, **kw})
    return TTRL(load_policy("deciplane/tiny"), cfg)


def _fixed_answers(monkeypatch, answers):
    monkeypatch.setattr(ttrl_mod, "extract", lambda texts: list(answers)[:len(texts)])


def test_vote_drops_invalid_and_clusters_equivalent_answers():
    v = vote([None, "", "1/2", "3", "0.5"])
    assert v.answer == "1/2" and v.count == 2 and v.n_valid == 3
    assert v.agree == [False, False, True, False, True]
    assert vote([None, "", None]).answer is None
    t = vote(["2", "3", "3", "2"])                 # tie: the cluster seen first wins
    assert (t.answer, t.tie, t.tied) == ("2", True, ["3"])
    assert vote(["3", "2", "2", "3"]).answer == "3"


def test_rewards_follow_the_majority_cluster(monkeypatch, tiny_settings):
    _fixed_answers(monkeypatch, [None, "", "1/2", "3", "0.5"])
    ad = _adapter(tiny_settings)
    ad.run(TASKS)
    rec = ad.records.votes[0]
    assert rec.majority == "1/2"
    assert rec.rewards == [0.0, 0.0, 1.0, 0.0, 1.0]
    assert ad.budget.optimizer_steps == 1 and ad.records.skipped_prompts == 0


def test_all_invalid_prompts_are_skipped_without_update(monkeypatch, tiny_settings):
    _fixed_answers(monkeypatch, [None, "", None, None, ""])
    ad = _adapter(tiny_settings, loss=PolicyLossConfig(kl_beta=0.0), weight_decay=0.1)
    before = [p.detach().clone() for p in ad.update.optimizer.params]
    ad.run(TASKS)
    assert ad.records.skipped_prompts == 2
    assert ad.budget.optimizer_steps == 0 and ad.budget.skipped_steps == 1
    assert ad.budget.backward_tokens == 0
    assert all(torch.equal(b, p) for b, p in zip(before, ad.update.optimizer.params))


def test_ties_are_deterministic_and_logged(monkeypatch, caplog, tiny_settings):
    _fixed_answers(monkeypatch, ["2", "3", "3", "2", None])
    ad = _adapter(tiny_settings)
    with caplog.at_level(logging.INFO, logger="deciplane.methods.ttrl"):
        ad.run(TASKS)
    assert [v.majority for v in ad.records.votes] == ["2", "2"]
    assert ad.records.ties == 2
    assert "tie between ['2', '3']" in caplog.text
