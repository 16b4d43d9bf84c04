"""Suites of environments (``envs:``): the group draws, the config's entries, the per-env
results and paired comparisons, and a whole tiny-model run on a plug-in env beside a
TextWorld-Express game."""

from __future__ import annotations

import json
import math

import pytest

from deciplane.engine.compare import paired, paired_comparisons, per_env_comparisons
from deciplane.errors import ConfigError
from deciplane.trainers.config import env_entries, load_config
from deciplane.trainers.env_suite import (MultiEnvSuite, apportion, draw_group_envs,
                                          macro_average, per_env_rollout_metrics)
from deciplane.trainers.run import run_training

from .coinflip_env import register as register_coinflip

COINFLIP = register_coinflip()
TWC = {"game": "twc", "game_params": {"numLocations": 1, "numItemsToPutAway": 1}}


def _suite(*entries, **top):
    return load_config(data={"algorithm": "rlid_ppo", "model": {"name": "deciplane/tiny"},
                             "envs": list(entries), **top})


# ---- the group draws ----------------------------------------------------------------------

def test_groups_are_drawn_by_weight_within_a_binomial_interval():
    n = 4000
    picks = draw_group_envs([3.0, 1.0], n, seed=11)
    first = picks.count(0)
    sd = math.sqrt(n * 0.75 * 0.25)
    assert abs(first - 0.75 * n) < 4 * sd          # 4 sd: fails once in ~16,000 seeds
    assert set(picks) == {0, 1}
    assert draw_group_envs([3.0, 1.0], 50, seed=11) == picks[:50]   # seeded, a prefix
    assert draw_group_envs([3.0, 1.0], 50, seed=12) != picks[:50]
    with pytest.raises(ValueError, match="weight > 0"):
        draw_group_envs([1.0, 0.0], 4, seed=0)


def test_apportion_by_largest_remainders():
    assert apportion(10, [2, 1, 1]) == [5, 3, 2]    # 5, 2.5, 2.5: the tie goes to the first
    assert apportion(7, [1, 1, 1]) == [3, 2, 2]
    assert apportion(80, [1]) == [80]
    assert apportion(3, [1, 1, 1, 1]) == [1, 1, 1, 0]
    assert sum(apportion(17, [0.3, 0.2, 0.5])) == 17


def test_macro_average_counts_each_env_once():
    assert macro_average([1.0, 0.0, 0.5]) == 0.5


# ---- the config ---------------------------------------------------------------------------

def test_entries_take_what_they_leave_out_from_env():
    cfg = _suite({"id": COINFLIP, "weight": 2}, {"id": "deciplane/TextWorldExpress-v0",
                                                  "kwargs": TWC, "max_episode_steps": 5},
                 env={"games_per_iteration": 3, "group_size": 2, "max_episode_steps": 9})
    a, b = cfg.envs
    assert (a.name, a.weight, a.max_episode_steps, a.group_size) == ("CoinFlip-v0", 2.0, 9, 2)
    assert (b.name, b.max_episode_steps, b.games_per_iteration, b.kwargs) == ("twc", 5, 3, TWC)
    assert env_entries(cfg) == cfg.envs
    one = load_config(data={"algorithm": "rlid_ppo", "env": {"id": COINFLIP}})
    assert [e.name for e in env_entries(one)] == ["CoinFlip-v0"] and one.envs == []


@pytest.mark.parametrize("entries,message", [
    ([{"id": COINFLIP, "weight": 0}], "weight"),
    ([{"id": COINFLIP, "group_size": 3}], "the iteration's shape is the suite's"),
    ([{"id": COINFLIP}, {"id": COINFLIP}], "named 'CoinFlip-v0'"),
    ([{"id": COINFLIP, "name": "a/b"}], "without '/' or ':'"),
    ([{"kwargs": {}}], "has no id"),
])
def test_bad_entries_are_refused_when_the_config_is_read(entries, message):
    with pytest.raises(ConfigError, match=message):
        _suite(*entries)


def test_what_a_suite_cannot_do_yet_is_refused():
    with pytest.raises(ConfigError, match="DAgger plays one env"):
        _suite({"id": COINFLIP}, bc={"episodes": 2, "dagger_rounds": 1})
    with pytest.raises(ConfigError, match="backend: ray with envs"):
        _suite({"id": COINFLIP}, env_workers={"backend": "ray"})


def test_an_unknown_env_id_is_refused_before_the_model_loads(tmp_path):
    cfg = _suite({"id": COINFLIP}, {"id": "nobody/Nothing-v0"})
    with pytest.raises(ConfigError, match="'nobody/Nothing-v0' is not registered"):
        run_training(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


# ---- per-env results ----------------------------------------------------------------------

def _result(wins):
    return {"episode_wins": wins, "episode_seeds": list(range(len(wins))),
            "success_rate": sum(wins) / len(wins)}


def test_per_env_paired_comparisons_on_a_hand_built_case():
    a_bc, a_rl = [0, 0, 1, 0], [1, 1, 1, 0]
    b_bc, b_rl = [1, 1, 0], [1, 0, 0]
    stages = {"warm_start_only": {"test": {"per_env": {"a": _result(a_bc), "b": _result(b_bc)}}},
              "final": {"test": {"per_env": {"a": _result(a_rl), "b": _result(b_rl)}}}}
    got = per_env_comparisons(stages)
    assert set(got) == {"a", "b"}
    assert got["a"]["test"]["final - warm_start_only"] == paired(
        [bool(x) for x in a_rl], [bool(x) for x in a_bc])
    assert got["b"]["test"]["final - warm_start_only"]["difference"] == pytest.approx(-1 / 3)
    assert per_env_comparisons({"final": {"test": _result([1, 0])}}) == {}
    # the pooled comparison pairs every episode of every env
    pooled = {k: {"test": {"episode_wins": v["test"]["per_env"]["a"]["episode_wins"]
                           + v["test"]["per_env"]["b"]["episode_wins"],
                           "episode_seeds": ["a:0", "a:1", "a:2", "a:3", "b:0", "b:1", "b:2"]}}
              for k, v in stages.items()}
    assert paired_comparisons(pooled)["test"]["final - warm_start_only"]["difference"] == \
        pytest.approx((4 - 3) / 7)      # RL won 3 + 1 of 7, BC 1 + 2


def test_member_limits_share_the_plan_in_proportion():
    cfg = _suite({"id": COINFLIP, "name": "a"}, {"id": COINFLIP, "name": "b"})
    suite = MultiEnvSuite(cfg.envs)
    try:
        assert suite._member_limits({"a": 40, "b": 20}) == {"a": 40, "b": 20}
        suite._limit = 30
        assert suite._member_limits({"a": 40, "b": 20}) == {"a": 20, "b": 10}
        suite._limit = 1                  # every env plays at least one episode
        assert suite._member_limits({"a": 40, "b": 20}) == {"a": 1, "b": 1}
        assert suite.eval_seeds("test", 2) == ["a:0", "a:1", "b:0", "b:1"]
    finally:
        suite.close()


def test_rollout_metrics_per_env():
    class T:
        def __init__(self, env, won):
            self.meta, self.won = {"env": env}, won
    got = per_env_rollout_metrics([T("a", True), T("a", False), T("b", True)])
    assert got == {"rollout/a/episodes": 2.0, "rollout/a/success": 0.5,
                   "rollout/b/episodes": 1.0, "rollout/b/success": 1.0}


# ---- a whole run --------------------------------------------------------------------------

@pytest.mark.slow
def test_a_tiny_run_on_a_plugin_env_beside_a_twx_game(tmp_path):
    """rlid_ppo with deciplane/tiny on the plug-in CoinFlip env and twc: every env is drawn,
    the warm start takes expert episodes from both, each evaluation has a row per env and
    the macro average, and the paired comparisons are per env too."""
    cfg = _suite({"id": COINFLIP, "name": "coinflip", "weight": 1, "eval_episodes": 3},
                 {"id": "deciplane/TextWorldExpress-v0", "kwargs": TWC, "weight": 1,
                  "eval_episodes": 2},
                 seed=1, iterations=2, progress=False, readout="items", readout_layer=1,
                 model={"name": "deciplane/tiny", "finetune": "head", "threads": 1},
                 env={"games_per_iteration": 3, "group_size": 2, "max_episode_steps": 3},
                 bc={"episodes": 4, "epochs": 1},
                 eval={"every": 1, "during_split": "test", "final_splits": ["test"],
                       "workers": 1, "cache_baselines": False},
                 checkpoint={"every": 1, "keep_last": 1})
    summary = run_training(cfg, tmp_path / "run")
    recs = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    drawn = {k.split("/")[1] for r in recs for k in r if k.endswith("/episodes")
             and k.startswith("rollout/") and k.count("/") == 2}
    assert drawn == {"coinflip", "twc"}
    final = summary["eval"]["test"]
    assert set(final["per_env"]) == {"coinflip", "twc"}
    assert final["per_env"]["coinflip"]["episodes"] == 3 and final["per_env"]["twc"]["episodes"] == 2
    assert final["episodes"] == 5 and final["episode_seeds"][0] == "coinflip:0"
    assert final["macro_success_rate"] == pytest.approx(
        (final["per_env"]["coinflip"]["success_rate"] + final["per_env"]["twc"]["success_rate"]) / 2)
    assert set(summary["comparisons_per_env"]) == {"coinflip", "twc"}
    assert "final - zero_shot" in summary["comparisons_per_env"]["twc"]["test"]
    assert summary["warm_start"]["per_env_episodes"] == {"coinflip": 2, "twc": 2}
    assert summary["during"][0]["per_env"]["twc"]["episodes"] == 2
    assert any("eval/test/twc/success_rate" in r for r in recs)
