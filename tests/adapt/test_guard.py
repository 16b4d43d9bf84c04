"""The collapse guard: its signals and rule on hand-computed values, a constructed collapse
of a real tiny-model TTRL run (the guard stops it and rolls back), and the signals of real
SmolLM2 runs replayed through it (TTPO's collapse fires it, TTRL's healthy run does not)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from deciplane.adapt.guard import CollapseGuard, collapse_reasons, step_signals
from deciplane.agents import load_policy
from deciplane.envs import load_benchmark
from deciplane.errors import ConfigError
from deciplane.methods.ttrl import TTRL, TTRLConfig

RUNS = Path(__file__).parent / "data" / "guard_signals.json"


def test_step_signals_by_hand():
    s = step_signals(120, 8, [["7", "7", None, "8"], ["3", "3", "3", "3"]])
    assert s["mean_tokens"] == 15.0
    assert s["extractable"] == 7 / 8
    assert s["agreement"] == pytest.approx((2 / 4 + 4 / 4) / 2)
    assert step_signals(0, 0) == {"mean_tokens": None, "extractable": None, "agreement": None}
    assert step_signals(10, 2, [[None, None]])["agreement"] == 0.0


def test_collapse_reasons_thresholds():
    ref = {"mean_tokens": 16.0, "extractable": 0.9}
    assert collapse_reasons(ref, {"mean_tokens": 10.0, "extractable": 0.95}, 0.4, 0.3) == []
    short = collapse_reasons(ref, {"mean_tokens": 6.0, "extractable": 0.9}, 0.4, 0.3)
    assert len(short) == 1 and "6.0 tokens long" in short[0]
    lost = collapse_reasons(ref, {"mean_tokens": 16.0, "extractable": 0.5}, 0.4, 0.3)
    assert len(lost) == 1 and "50%" in lost[0]
    assert collapse_reasons({"mean_tokens": None}, {"mean_tokens": 1.0}, 0.4, 0.3) == []


def test_guard_waits_for_patience_and_keeps_the_last_healthy_parameters():
    g = CollapseGuard(length_ratio=0.5, extractable_drop=0.3, patience=2)
    params = [{"w": torch.full((2,), float(k))} for k in range(6)]
    signals = [{"mean_tokens": t, "extractable": 1.0} for t in (10, 9, 4, 8, 3, 2)]
    assert not g.observe(0, signals[0], params[0], 0)        # the starting state: reference
    assert not g.observe(1, signals[1], params[1], 1)        # healthy: params[1] kept
    assert not g.observe(2, signals[2], params[2], 2)        # unhealthy, streak 1
    assert not g.observe(3, signals[3], params[3], 3)        # healthy again: streak reset
    assert torch.equal(g.healthy["w"], params[3]["w"]) and g.streak == 0
    assert not g.observe(4, signals[4], params[4], 4)
    assert g.observe(5, signals[5], params[5], 5)
    assert g.fired["step"] == 5 and g.fired["rolled_back_to_optimizer_steps"] == 3
    assert g.fired["unhealthy_steps"] == 2 and torch.equal(g.healthy["w"], params[3]["w"])
    off = CollapseGuard(length_ratio=0.5, patience=1, enabled=False)
    off.observe(1, signals[0], {}, 0)
    assert not off.observe(2, signals[5], {}, 1) and off.fired == {} and off.streak == 1


def test_guard_options_are_checked():
    with pytest.raises(ConfigError, match="guard_length_ratio"):
        TTRLConfig(guard_length_ratio=0.0)
    with pytest.raises(ConfigError, match="guard_patience"):
        TTRLConfig(guard_patience=0)


class ShrinkingTTRL(TTRL):
    """Real TTRL on the tiny model whose answers are cut to one token from step 3 on (a
    constructed collapse: samples and the guard's probe answers alike), recording the
    parameters after every step."""

    def adapt_step(self, tasks, step):
        if step >= 3:
            self.config.max_new_tokens = 1
        out = super().adapt_step(tasks, step)
        self.after.append({n: p.detach().clone() for n, p in self.trainable_named_parameters().items()})
        return out


@pytest.mark.parametrize("guard", [True, False])
def test_a_constructed_collapse_stops_the_run_and_rolls_back(guard, tiny_settings):
    tasks, scorer = load_benchmark("arith-shift", "test", limit=4)
    scorer.close()
    settings = dict(tiny_settings, max_steps=6, epochs=3, prompts_per_step=2, checkpoints=0,
                    guard=guard, guard_patience=2, guard_probe=2)
    ad = ShrinkingTTRL(load_policy("deciplane/tiny"), TTRLConfig(**settings))
    ad.after = []
    ad.run(tasks)
    steps = [h["step"] for h in ad.records.history]
    tokens = [h["signal/mean_tokens"] for h in ad.records.history]
    assert tokens[:2] == [6.0, 6.0] and all(t == 1.0 for t in tokens[2:])
    if not guard:
        assert steps == [1, 2, 3, 4, 5, 6] and ad.guard.fired == {}
        assert ad.status == "completed"
        assert ad.guard_budget.samples == 0 and "guard/probe_mean_tokens" not in ad.records.history[0]
        return
    probe = [h["guard/probe_mean_tokens"] for h in ad.records.history]
    assert probe[:2] == [6.0, 6.0] and probe[2:] == [1.0, 1.0]
    # the states after steps 3 and 4 are unhealthy: the run stops after step 4 and its
    # parameters are those after step 2 (the last healthy state)
    assert steps == [1, 2, 3, 4] and ad.guard.fired["step"] == 4
    assert ad.status.startswith("stopped by the collapse guard at step 4 (")
    assert ad.guard.fired["rolled_back_to_optimizer_steps"] == ad.records.history[1]["optimizer_steps"]
    now = ad.trainable_named_parameters()
    assert all(torch.equal(now[n], ad.after[1][n]) for n in now)
    assert ad.guard_budget.samples == 5 * 2          # the start + 4 states, 2 probe tasks


def test_real_runs_replayed_through_the_guard():
    """Per-step signals of SmolLM2-135M runs on products-1d (test, seed 0, CLI defaults;
    their commands are in the file): TTPO's collapse fires the default guard, TTRL's and
    TASCO's healthy runs never do."""
    runs = json.loads(RUNS.read_text())
    fired = {}
    for name, run in runs["runs"].items():
        g = CollapseGuard()
        fired[name] = None
        for step, s in enumerate(run["probe"]):         # step 0: the starting state
            if g.observe(step, s, {}, step):
                fired[name] = step
                break
    assert fired.pop("ttpo") is not None
    assert all(v is None for v in fired.values()), fired
