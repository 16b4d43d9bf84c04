"""The baseline cache: metrics from episodes (hand-computed), what the key depends on, and
a second run reading its zero-shot evaluations (and planning its time) from the cache."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from deciplane.engine.episodes import episodes_of, summarize_episodes
from deciplane.engine.baselines import cut_evaluation, weights_fingerprint

REPO = Path(__file__).resolve().parents[2]
needs_java = pytest.mark.skipif(shutil.which("java") is None,
                                reason="TextWorld-Express needs java (deciplane doctor)")

EPISODES = [{"won": 1, "steps": 3, "return": 1.0, "invalid": 0},
            {"won": 0, "steps": 5, "return": 0.25, "invalid": 1},
            {"won": 1, "steps": 2, "return": 0.75, "invalid": 0},
            {"won": 0, "steps": 10, "return": 0.0, "invalid": 2}]


def test_summarize_episodes_by_hand():
    r = summarize_episodes([7, 8, 9, 10, 11], EPISODES, "fp")
    assert r["episode_seeds"] == [7, 8, 9, 10]                 # cut to the episodes played
    assert (r["won"], r["episodes"], r["success_rate"]) == (2, 4, 0.5)
    assert r["env_steps"] == 20 and r["mean_steps"] == 5.0
    assert r["mean_return"] == pytest.approx(2.0 / 4)
    assert r["invalid_rate"] == pytest.approx(3 / 20)
    assert r["split_fingerprint"] == "fp"
    assert episodes_of(r) == EPISODES


def test_cut_evaluation_recomputes_the_metrics():
    r = summarize_episodes([0, 1, 2, 3], EPISODES)
    c = cut_evaluation(r, 2)
    assert (c["episodes"], c["won"], c["env_steps"], c["episode_seeds"]) == (2, 1, 8, [0, 1])
    assert c["mean_return"] == pytest.approx(0.625) and c["invalid_rate"] == pytest.approx(1 / 8)
    assert cut_evaluation(r, 4) is r and cut_evaluation(r, 9) is r


def test_weights_fingerprint_follows_every_tensor():
    torch.manual_seed(0)
    a = torch.nn.Linear(4, 3)
    b = torch.nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    assert weights_fingerprint(a) == weights_fingerprint(b)
    with torch.no_grad():
        b.bias[1] += 1e-6
    assert weights_fingerprint(a) != weights_fingerprint(b)
    assert weights_fingerprint(a) != weights_fingerprint(a.to(torch.bfloat16))


def _overrides(tmp_path, *extra):
    return ["model.name=deciplane/tiny", "model.threads=1", "progress=false",
            "readout_layer=null", "model.finetune=lora", "model.lora_last_layers=1",
            "bc.episodes=0", "distill.enabled=false", "iterations=1", "eval.every=0",
            "env.games_per_iteration=1", "env.group_size=2", "env.max_episode_steps=3",
            "eval.episodes=8", "eval.workers=1", "max_wall_time_s=null", *extra]


@needs_java
def test_key_follows_the_agent_and_the_episodes(tmp_path, monkeypatch):
    from deciplane.trainers.config import load_config
    from deciplane.trainers.run import build_algorithm, build_policy

    def key(*extra):
        cfg = load_config(REPO / "configs" / "quickstart_twx.yaml", _overrides(tmp_path, *extra))
        algo = build_algorithm(cfg, build_policy(cfg))
        try:
            return algo.baseline_key("labels", "test"), algo.baseline_key("trained", "test")
        finally:
            algo.close()

    base = key()
    assert base == key()                                   # same config, same seed
    assert base[0] != base[1]                              # labels vs the run's agent
    for extra in ("history=1", "eval.episodes=9", "env.max_episode_steps=4",
                  "env.kwargs.observation=feedback", "seed=1"):
        assert key(extra)[1] != base[1], extra


@needs_java
def test_second_run_reads_its_zero_shot_evaluations_from_the_cache(tmp_path, monkeypatch):
    from deciplane.trainers.run import run_training

    monkeypatch.setenv("DECIPLANE_HOME", str(tmp_path / "home"))
    config = REPO / "configs" / "quickstart_twx.yaml"
    first = run_training(config, tmp_path / "a", overrides=_overrides(tmp_path))
    assert "baseline_cache" not in first
    assert len(list((tmp_path / "home" / "baselines").glob("*.json"))) == 2
    second = run_training(config, tmp_path / "b",
                          overrides=_overrides(tmp_path, "max_wall_time_s=900"))
    assert set(second["baseline_cache"]) == {"labels/test", "trained/test"}
    for stage in ("zero_shot_labels", "before"):
        a, b = first[stage]["test"], second[stage]["test"]
        assert {k: a[k] for k in a} == {k: b[k] for k in a}, stage
    plan = second["plan"]
    assert plan["eval_probe"] == "baseline cache" and plan["eval_episodes"] == 8
    assert second["time"]["phases_s"]["eval_zero_shot_labels"] < \
        first["time"]["phases_s"]["eval_zero_shot_labels"]
    # off: played again
    third = run_training(config, tmp_path / "c",
                         overrides=_overrides(tmp_path, "eval.cache_baselines=false"))
    assert "baseline_cache" not in third
    assert third["zero_shot_labels"]["test"]["episode_wins"] == \
        first["zero_shot_labels"]["test"]["episode_wins"]
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["baseline_cache"]["labels/test"]
