"""Probe-ERPO: probes are inputs only (model-written calls and type-driven fuzzing), the
adapter has no path to hidden tests, consensus / rank mask / entropy ceiling against
hand-computed cases, hanging candidates do not stall a step, and a tiny-model run moves
parameters with finite metrics."""

from __future__ import annotations

import ast
import math
import time
from pathlib import Path

import pytest
import torch

from deciplane.adapt.runner import build_config
from deciplane.methods.probe_erpo import (ProbeERPO, ProbeERPOConfig, consensus_choice,
                                         consensus_pcr, fuzz_probes, is_valid_signature,
                                         merge_probes, parse_model_probes, parse_signature,
                                         probe_prompt)
from deciplane.agents import load_policy
from deciplane.envs import load_benchmark
from deciplane.errors import ConfigError
from deciplane.objectives.erpo import ERPOLossConfig, erpo_advantages, erpo_loss
from deciplane.types import UnlabeledTask

TINY = dict(votes=6, max_new_tokens=12, prompts_per_step=3, max_steps=1, lr=1e-2,
            temperature=1.5, lora_rank=4, lora_alpha=8, model_probe_samples=1,
            probe_max_new_tokens=12, probe_timeout_s=0.5)


# ------------------------------------------------------------------------ probes --

def test_model_probes_keep_inputs_only_and_drop_unparsable():
    text = ("add_3(4)\n>>> add_3(-2)\nassert add_3(10) == 13\nprint(add_3(0))  # -> 3\n"
            "add_3(x=1)\nadd_3(foo)\nadd_3(1, 2)\nadd_3((\nadd_3(4)\n"
            "add_3(__import__('os').system('x'))\nresult = add_3([1, 2])")
    assert parse_model_probes(text, "add_3", n_args=1) == ["(4,)", "(-2,)", "(10,)", "(0,)",
                                                           "([1, 2],)"]
    # the expected outputs written next to the calls (13, 3) never become probes
    assert all("13" not in p for p in parse_model_probes(text, "add_3", 1))
    assert parse_model_probes("no calls here", "add_3") == []
    assert parse_model_probes("f(1, 'a')\nf(2)", "f") == ["(1, 'a')", "(2,)"]


def test_fuzz_probes_follow_the_signature():
    stmt = ('from typing import List, Optional, Tuple, Dict\n\n'
            'def g(xs: List[int], s: str, flag: bool, t: Tuple[int, str], d: Dict[str, int],'
            ' o: Optional[float], u: int | None, v) -> int:\n    """Doc."""\n')
    params = parse_signature(stmt, "g")
    assert [n for n, _ in params] == ["xs", "s", "flag", "t", "d", "o", "u", "v"]
    probes = fuzz_probes(stmt, "g", 8, seed=0)
    assert probes == fuzz_probes(stmt, "g", 8, seed=0) and len(probes) == 8
    assert probes != fuzz_probes(stmt, "g", 8, seed=1)
    for p in probes:
        xs, s, flag, t, d, o, u, v = ast.literal_eval(p)
        assert isinstance(xs, list) and all(isinstance(x, int) for x in xs)
        assert isinstance(s, str) and isinstance(flag, bool)
        assert isinstance(t, tuple) and isinstance(t[0], int) and isinstance(t[1], str)
        assert isinstance(d, dict) and all(isinstance(k, str) for k in d)
        assert o is None or isinstance(o, float)
        assert u is None or isinstance(u, int)
        assert isinstance(v, int)
    assert fuzz_probes("not python (", "g", 4, 0) == []
    assert merge_probes(["(1,)", "(2,)"], ["(2,)", "(3,)", "(4,)"], 3) == ["(1,)", "(2,)", "(3,)"]


def test_probe_prompt_is_the_statement_only():
    tasks, scorer = load_benchmark("easy-funcs", "test", limit=3)
    scorer.close()
    for t in tasks:
        text = probe_prompt(t.prompt, t.meta["entry_point"], 4)
        assert text.startswith(t.prompt.rstrip()) and "assert" not in text


def test_adapter_has_no_path_to_hidden_tests():
    """Nothing Probe-ERPO imports leads to labelled items, the scorer or the judge."""
    src = Path(__import__("deciplane.methods.probe_erpo", fromlist=["x"]).__file__).read_text()
    mods = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ImportFrom):
            mods.add(node.module)
        elif isinstance(node, ast.Import):
            mods.update(a.name for a in node.names)
    assert not any(m and m.startswith(("deciplane.benchmarks", "deciplane.envs.code.benchmarks",
                                       "deciplane.envs.code.easy_funcs")) for m in mods), mods
    for banned in ("load_labeled", "judge", "run_hidden_tests", "gold"):
        assert banned not in src, banned
    import inspect
    assert list(inspect.signature(ProbeERPO.__init__).parameters) == ["self", "policy", "config",
                                                                      "progress"]


# ------------------------------------------------------------------------ consensus --

def test_pcr_rank_mask_and_choice_hand_computed():
    sigs = [("1", "2"), ("1", "2"), ("1", "3"), ("1", "2"), ("!no_code", "!no_code"),
            ("9", "!timeout")]
    valid = [is_valid_signature(s) for s in sigs]
    assert valid == [True, True, True, True, False, True]
    pcr = consensus_pcr(sigs, valid)
    assert torch.allclose(pcr, torch.tensor([3, 3, 1, 3, 0, 1]) / 6)
    # median of [.5,.5,1/6,.5,0,1/6] = (1/6 + 1/2)/2 = 1/3: the three below get -1
    assert erpo_advantages(pcr).tolist() == [0, 0, -1, 0, -1, -1]
    margin = erpo_advantages(pcr, form="margin")
    assert torch.allclose(margin, torch.tensor([0, 0, 1 / 6 - 1 / 3, 0, -1 / 3, 1 / 6 - 1 / 3]))
    assert consensus_choice(sigs, valid) == (0, [0, 1, 3])
    # without the invalid penalty the no-code candidate keeps its share (1/6)
    assert torch.allclose(consensus_pcr(sigs, valid, penalize_invalid=False)[4], torch.tensor(1 / 6))
    # ties: the cluster that appears first; invalid-only sets fall back to everyone
    assert consensus_choice([("a",), ("b",), ("b",), ("a",)]) == (0, [0, 3])
    assert consensus_choice([("!x",), ("!y",), ("!y",)], [False] * 3) == (1, [1, 2])


def test_collapsed_consensus_gets_no_gradient_and_no_positive_reward():
    same = [("1", "2")] * 5
    pcr = consensus_pcr(same, [True] * 5)
    assert erpo_advantages(pcr).tolist() == [0.0] * 5
    # even with reinforce_top, a collapsed set (everyone at the threshold) is not rewarded
    assert erpo_advantages(pcr, reinforce_top=True).tolist() == [0.0] * 5
    # collapsed on invalid behaviour (every candidate crashes): nothing either
    bad = consensus_pcr([("!define:SyntaxError",)] * 4, [False] * 4)
    assert erpo_advantages(bad, reinforce_top=True).tolist() == [0.0] * 4
    # reinforce_top off by default in the adapter config
    assert ProbeERPOConfig().loss.reinforce_top is False


def test_entropy_ceiling_in_the_loss_hand_computed():
    cfg = ERPOLossConfig(alpha=0.5, h_max=1.0)
    logp = torch.log(torch.tensor([[0.5, 0.25], [0.5, 0.5]]))
    ent = torch.tensor([[2.0, 3.0], [1.0, 0.0]])      # mean 1.5 -> ceiling 0.5 * 0.5
    mask = torch.ones(2, 2, dtype=torch.bool)
    out = erpo_loss(cfg, logp, None, torch.tensor([-1.0, 0.0]), mask, ent)
    # on-policy ratio 1: policy term = -mean(A * 1) over tokens = -(-1 -1 + 0 + 0)/4 = 0.5
    assert math.isclose(out.metrics["loss/policy"], 0.5, rel_tol=1e-6)
    assert math.isclose(out.metrics["erpo/entropy_ceiling"], 0.25, rel_tol=1e-6)
    below = erpo_loss(cfg, logp, None, torch.tensor([-1.0, 0.0]), mask, ent * 0.5)  # mean 0.75
    assert below.metrics["erpo/entropy_ceiling"] == 0.0


# ------------------------------------------------------------------------ adapter --

@pytest.fixture(scope="module")
def code_tasks():
    tasks, scorer = load_benchmark("easy-funcs", "test", limit=3)
    scorer.close()
    return tasks


def test_hanging_candidates_are_timeouts_and_do_not_stall(code_tasks):
    ad = ProbeERPO(load_policy("deciplane/tiny"), ProbeERPOConfig(**TINY))
    task = code_tasks[0]
    entry = task.meta["entry_point"]
    probes = fuzz_probes(task.prompt, entry, 4, 0)
    hang = f"```python\ndef {entry}(*a):\n    while True:\n        pass\n```"
    sleepy = f"```python\ndef {entry}(*a):\n    import time\n    time.sleep(60)\n```"
    good = f"```python\ndef {entry}(*a):\n    return 1\n```"
    t0 = time.monotonic()
    cs = ad.evaluate_candidates(task, [hang, sleepy, good, good], probes)
    assert time.monotonic() - t0 < 30
    assert cs.signatures[0] == ("!timeout",) * 4 and cs.signatures[1] == ("!timeout",) * 4
    assert cs.valid == [False, False, True, True]
    assert consensus_choice(cs.signatures, cs.valid)[0] == 2


def test_tiny_run_changes_parameters_with_finite_metrics(code_tasks):
    policy = load_policy("deciplane/tiny")
    # the tiny model writes no code: every candidate is invalid, so the invalid penalty
    # would leave nothing to rank; without it, different crashes still form clusters
    ad = ProbeERPO(policy, ProbeERPOConfig(**TINY, penalize_invalid=False))
    params = [p for p in policy.model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    answers = ad.run(code_tasks)
    assert set(answers) == {t.id for t in code_tasks}
    hist = ad.records.history
    assert hist and all(math.isfinite(v) for h in hist for v in h.values())
    assert ad.budget.optimizer_steps == 1 and hist[0]["erpo/negative_rows"] >= 1
    assert any(not torch.equal(b, p) for b, p in zip(before, params)), "no parameter moved"
    assert ad.budget.samples == ad.planned_samples(len(code_tasks))
    assert all(len(v.answers) == 6 for v in ad.records.votes)
    assert sum(ad.probe_stats[k] for k in ad.probe_stats if k.startswith("run_status/")) == 18


def test_config_validation_and_non_code_tasks():
    with pytest.raises(ConfigError, match="votes"):
        ProbeERPOConfig(votes=1)
    with pytest.raises(ConfigError, match="both 0"):
        ProbeERPOConfig(fuzz_probes=0, model_probe_samples=0)
    with pytest.raises(ConfigError, match="'constant', 'margin'"):
        ProbeERPOConfig(loss=ERPOLossConfig(advantage="rank"))
    with pytest.warns(DeprecationWarning, match="clip_eps is now loss.eps_low and loss.eps_high"):
        old = build_config("probe-erpo", ["clip_eps=0.3", "entropy_max=2.0", "fraction=0.25"])
    assert (old.loss.eps_low, old.loss.eps_high, old.loss.h_max, old.loss.fraction) == (
        0.3, 0.3, 2.0, 0.25)
    ad = ProbeERPO(load_policy("deciplane/tiny"), ProbeERPOConfig(**TINY))
    with pytest.raises(ConfigError, match="entry_point"):
        ad.run([UnlabeledTask("a", "What is 2 + 2?", {})])
