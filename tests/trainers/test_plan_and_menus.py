"""The run's time plan, the trainer's menu defaults and the quickstart's shape.

* the planner's pure functions against hand-computed values;
* paired comparisons / the time breakdown of summary.json;
* the trainer's env suite builds TextWorld-Express and TextWorld envs with shuffled menus
  and the task text: same seed -> same order, the expert index follows its action, a
  group's episodes share the order, evaluation episode i is the i-th game of the test fold
  with menu seed i (what ``deciplane evaluate`` plays);
* a tiny-model run of configs/quickstart_twx.yaml under a small ``max_wall_time_s``
  finishes with at least one RL iteration, a checkpoint right after the warm start, the
  same held-out episodes in every evaluation, and the plan and phase times in summary.json.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from deciplane.engine.compare import paired_comparisons
from deciplane.engine.plan import (continue_epochs, eval_cut_reason, eval_episodes_that_fit,
                                   eval_share_of, room_for_iteration, time_breakdown)
from deciplane.trainers.config import EnvConfig
from deciplane.trainers.env_suite import EnvSuite, with_menu_defaults

REPO = Path(__file__).resolve().parents[2]
TWX = "deciplane/TextWorldExpress-v0"
needs_java = pytest.mark.skipif(shutil.which("java") is None,
                                reason="TextWorld-Express needs java (deciplane doctor)")


def test_eval_episodes_that_fit():
    # 25% of 1000 s over 3 evaluations at 2 s per episode: floor(250 / 6) = 41
    assert eval_episodes_that_fit(1000, 0.25, 2.0, 3, 50, 8) == 41
    assert eval_episodes_that_fit(1000, 0.25, 1.0, 3, 50, 8) == 50       # 83 fit: cap 50
    assert eval_episodes_that_fit(1000, 0.25, 10.0, 3, 50, 8) == 8       # 8.33 -> 8
    assert eval_episodes_that_fit(1000, 0.25, 100.0, 3, 50, 8) == 8      # floor: one batch
    assert eval_episodes_that_fit(1000, 0.25, 100.0, 3, 5, 8) == 5       # asked for fewer
    assert eval_episodes_that_fit(1000, 0.25, 0.0, 3, 50, 8) == 50       # nothing measured


def test_evaluations_get_their_episodes_before_rl_iterations():
    """A fake clock through the plan's decisions: 1,680 s, the warm start's 15%, 3.4
    evaluations of 50 episodes at 6 s each (1,020 s). Evaluations come first: all 50
    episodes, and RL gets the iterations that still fit beside the final evaluation."""
    budget, share = 1680.0, eval_share_of(None, 0.15)
    assert share == pytest.approx(0.85)
    assert eval_share_of(0.5, 0.15) == 0.5                       # a config's cap stays
    n = eval_episodes_that_fit(budget, share, 6.0, 3.4, 50, 8)
    assert n == 50 and eval_cut_reason(n, 50, 6.0, 3.4, budget, share) is None
    clock = 60.0 + 2.4 * 50 * 6.0 + 0.15 * budget    # load, evaluations before RL, warm start
    final = 50 * 6.0
    iterations = 0
    while room_for_iteration(clock, budget, 90.0, final):
        clock += 90.0
        iterations += 1
    assert iterations == 3 and clock + final <= budget
    # too slow for all of them: cut, and the reason says so in numbers
    n = eval_episodes_that_fit(budget, share, 10.0, 3.4, 50, 8)
    assert n == 42                                   # floor(1428 / 34)
    why = eval_cut_reason(n, 50, 10.0, 3.4, budget, share)
    assert "1700 s" in why and "85%" in why and "42 episodes fit" in why


def test_continue_epochs_and_room_for_iteration():
    assert continue_epochs(10.0, 20.0, 5.0)          # 15 <= 20
    assert continue_epochs(10.0, 15.0, 5.0)          # ends exactly at the deadline
    assert not continue_epochs(10.0, 14.0, 5.0)
    assert continue_epochs(10.0, None, 1e9)
    assert room_for_iteration(1e9, None, 1e9, 1e9)   # no budget
    assert room_for_iteration(100.0, 200.0, 50.0, 40.0)       # 190 <= 200
    assert not room_for_iteration(100.0, 200.0, 60.0, 41.0)   # 201 > 200
    assert room_for_iteration(150.0, 200.0, None, 50.0)       # first iteration: reserve only
    assert not room_for_iteration(151.0, 200.0, None, 50.0)


def test_paired_comparisons_and_time_breakdown():
    seeds = [0, 1, 2, 3]
    stages = {"zero_shot": {"test": {"episode_seeds": seeds, "episode_wins": [0, 0, 0, 1]}},
              "warm_start_only": {"test": {"episode_seeds": seeds, "episode_wins": [1, 0, 0, 1]}},
              "final": {"test": {"episode_seeds": seeds, "episode_wins": [1, 1, 1, 1]},
                        "valid": {"episode_seeds": [9], "episode_wins": [1]}}}
    out = paired_comparisons(stages)
    assert set(out) == {"test"}       # valid has no earlier stage to pair with
    c = out["test"]["final - warm_start_only"]
    assert (c["n"], c["both"], c["only_a"], c["only_b"], c["neither"]) == (4, 2, 2, 0, 0)
    assert c["difference"] == pytest.approx(0.5)
    assert set(out["test"]) == {"warm_start_only - zero_shot", "final - zero_shot",
                                "final - warm_start_only"}
    # different episodes are never paired
    stages["final"]["test"]["episode_seeds"] = [5, 6, 7, 8]
    assert "final - zero_shot" not in paired_comparisons(stages)["test"]

    t = time_breakdown({"rollouts": 30.0, "eval_before": 10.0}, 50.0)
    assert t["phases_s"] == {"rollouts": 30.0, "eval_before": 10.0, "other": 10.0}
    assert t["share_of_wall"]["rollouts"] == pytest.approx(0.6)


def test_with_menu_defaults_keeps_explicit_choices():
    acc = {"menu_order", "task_in_observation", "split"}
    assert with_menu_defaults({}, acc) == {"menu_order": "shuffled", "task_in_observation": True}
    assert with_menu_defaults({"menu_order": "sorted"}, acc)["menu_order"] == "sorted"
    assert with_menu_defaults({"x": 1}, {"x"}) == {"x": 1}   # an env without the options


def _menu_checks(env, seed: int) -> list[str]:
    obs, info = env.reset(seed=seed)
    assert info["menu_seed"] == seed
    menu = list(info["menu"])
    exp = info.get("expert_action")
    if exp is not None and "expert_command" in info:
        assert menu[exp] == info["expert_command"]        # the expert index follows it
    return menu


@needs_java
def test_twx_suite_shuffles_menus_and_evaluates_the_first_games_of_the_fold():
    cfg = EnvConfig(id=TWX, kwargs={"game": "twc", "game_params": {"numLocations": 2,
                                                                   "numItemsToPutAway": 2}},
                    max_episode_steps=5)
    suite = EnvSuite(cfg, expert=True)
    env = suite._make_env("test")()
    try:
        base = env.unwrapped
        assert base.menu_order == "shuffled" and base.task_in_observation
        a, b = _menu_checks(env, 3), _menu_checks(env, 3)
        assert a == b                                     # same seed -> same order
        orders = {tuple(_menu_checks(env, s)) for s in range(20)}
        assert len(orders) > 1
        # evaluation episode i: the i-th game of the fold, menu seed i
        for i in (0, 1, 7):
            obs, info = env.reset(seed=i)
            assert info["game_index"] == i and info["menu_seed"] == i
            assert obs.startswith(info["task"])           # the task text in the prompt
    finally:
        env.close()
        suite.close()


def test_textworld_suite_shuffles_menus_for_training_and_groups_share_them():
    from deciplane.engine.episodes import collect_expert_episodes  # noqa: F401 (layering)

    suite = EnvSuite(EnvConfig(kwargs={"games": "embedded"}, games_per_iteration=2,
                               group_size=2, max_episode_steps=3), expert=True)
    try:
        vec, seeds = suite.train_batch(11)
        assert vec.num_envs == 4 and len(seeds) == 2
        _, infos = vec.reset(seed=[s for s in seeds for _ in range(2)])
        menus = [tuple(infos["menu"][i]) for i in range(4)]
        assert menus[0] == menus[1] and menus[2] == menus[3]   # a group shares its menus
        orders = {tuple(suite._make_env("train")().reset(seed=s)[1]["menu"]) for s in (0, 5)}
        env = suite._make_env("test")()
        base = env.unwrapped
        assert base.menu_order == "shuffled" and base.task_in_observation
        env.close()
    finally:
        suite.close()


@needs_java
@pytest.mark.slow
def test_quickstart_shape_with_tiny_model_runs_rl_within_a_small_budget(tmp_path):
    """The quickstart config with deciplane/tiny and a 150 s budget: the plan cuts the
    evaluations and the warm start so that RL runs; nothing is lost."""
    from deciplane.evaluation.run_eval import resolve_checkpoint
    from deciplane.trainers.run import run_training

    run = tmp_path / "run"
    summary = run_training(REPO / "configs" / "quickstart_twx.yaml", run, overrides=[
        "model.name=deciplane/tiny", "model.threads=1", "progress=false",
        "readout_layer=null", "model.finetune=lora", "model.lora_last_layers=1",
        "eval.every=0", "bc.valid_fraction=0",
        "max_wall_time_s=150", "bc.episodes=8", "bc.epochs=2000", "eval.cache_baselines=false",
        "env.games_per_iteration=2", "env.group_size=2"])
    assert summary["iterations"] >= 1 and summary["optimizer_steps"] >= 1
    assert summary["wall_time_s"] <= 150 * 1.35      # the final eval was kept in reserve
    plan, phases = summary["plan"], summary["time"]["phases_s"]
    assert plan["eval_episodes"] is not None and 8 <= plan["eval_episodes"] <= 50
    ws = summary["warm_start"]
    assert ws["epochs_run"] < 2000                    # the warm start's share stopped it
    for k in ("model_load", "game_generation", "eval_zero_shot_labels", "eval_before",
              "warm_start", "eval_after_warm_start", "rollouts", "updates", "eval_final"):
        assert phases[k] > 0, k
    stages = [summary["zero_shot_labels"]["test"], summary["before"]["test"],
              summary["after_warm_start"]["test"], summary["eval"]["test"]]
    assert len({tuple(s["episode_seeds"]) for s in stages}) == 1   # the same episodes
    for s in stages:
        assert s["episodes"] == plan["eval_episodes"]
        lo, hi = s["success_ci95"]
        eps = 1e-12                           # Wilson bounds at 0 or 1 carry rounding
        assert -eps <= lo <= s["success_rate"] + eps <= hi + 2 * eps <= 1.0 + 3 * eps
        assert s["split_fingerprint"] == summary["split_fingerprints"]["test"]
    assert "final - warm_start_only" in summary["comparisons"]["test"]
    assert summary["provenance"]["packages"].get("torch")
    # trunk_dtype auto: bf16 below the LoRA layer (1 of the tiny model's 2) only where the
    # CPU has native bf16; the summary says which
    from deciplane.agents.precision import native_bf16
    machine = summary["machine"]
    assert machine["native_bf16"] == native_bf16()
    assert machine["trunk"] == ({"dtype": "bfloat16", "layers": 1} if native_bf16() else None)
    # the checkpoint written right after the warm start is there (keep_last may have
    # dropped it once later ones exist) and `deciplane evaluate RUN_DIR` finds one
    assert resolve_checkpoint(run).name.startswith("iter_")
    cfg = json.loads((run / "summary.json").read_text())["config"]
    assert cfg["env"]["kwargs"]["menu_order"] == "shuffled"


def test_evaluation_envs_do_not_ask_for_the_expert():
    """A suite built with the expert (for distillation / BC) evaluates on envs without it:
    evaluation never reads it, and a planner expert can cost seconds per step."""
    from deciplane.engine.episodes import RolloutStats

    suite = EnvSuite(EnvConfig(kwargs={"games": "embedded"}, max_episode_steps=2), expert=True)
    seen = []

    def collect(agent, vec, seeds, group, steps, seed=0):
        seen.append([e.unwrapped.expert for e in vec.envs])
        return [], RolloutStats()

    try:
        train_vec, _ = suite.train_batch(0)
        assert all(e.unwrapped.expert for e in train_vec.envs)
        suite.evaluate(None, "test", 3, collect, batch=2)
        assert seen == [[False, False], [False]]
    finally:
        suite.close()
