"""Pure helpers of the ALFWorld package: names, command versions, goals."""

from __future__ import annotations

import pytest

from deciplane.envs.alfworld import pddl
from deciplane.envs.alfworld.env import per_task_type, strip_welcome
from deciplane.errors import GameError


def test_entity_names_number_each_type_from_the_highest_down_like_alfworld():
    ids = ["apple_bar_1", "apple_bar_2", "sink_bar_1_bar_sinkbasin", "agent1",
           "countertop_bar_9", "appletype", "loc_bar_3"]
    names = pddl.entity_names(ids)
    # sorted: apple_bar_1 < apple_bar_2 -> numbered 2, 1 (ALFWorld pops the last number)
    assert names["apple_bar_1"] == "apple 2" and names["apple_bar_2"] == "apple 1"
    assert names["sink_bar_1_bar_sinkbasin"] == "sinkbasin 1"
    assert names["countertop_bar_9"] == "countertop 1"
    assert names["agent1"] == "agent1" and names["appletype"] == "appletype"
    assert names["loc_bar_3"] == "loc 1"


def test_command_style_is_detected_and_an_unknown_grammar_is_an_error():
    _, grammar = pddl.domain_and_grammar()
    assert pddl.command_style(grammar) == "move"  # alfworld 0.4.2's grammar
    old = pddl.restyle_grammar(grammar, "put")
    assert pddl.command_style(old) == "put"
    assert "You put the {o.name} in/on the {r.name}." in old
    assert pddl.restyle_grammar(old, "move") == grammar
    with pytest.raises(GameError, match="neither"):
        pddl.command_style(grammar.replace(pddl.MOVE_TEMPLATE, "drop {o} on {r}"))


def test_translate_command_between_versions():
    assert pddl.translate_command("put apple 1 in/on table 1", "move") == "move apple 1 to table 1"
    assert pddl.translate_command("move apple 1 to table 1", "put") == "put apple 1 in/on table 1"
    assert pddl.translate_command("go to table 1", "move") is None
    assert pddl.translate_command("move apple 1 to table 1", "move") is None


def test_goal_from_traj_uses_alfworld_templates():
    traj = {"task_type": "pick_heat_then_place_in_recep",
            "pddl_params": {"object_target": "Potato", "parent_target": "CounterTop",
                            "toggle_target": ""}}
    assert pddl.goal_from_traj(traj) == "put a hot potato in countertop"
    traj = {"task_type": "look_at_obj_in_light",
            "pddl_params": {"object_target": "Pen", "toggle_target": "DeskLamp"}}
    assert pddl.goal_from_traj(traj) == "look at pen under the desklamp"
    with pytest.raises(GameError, match="unknown ALFWorld task type"):
        pddl.goal_from_traj({"task_type": "pick_and_place_with_movable_recep"})


def test_strip_welcome_and_per_task_type():
    assert strip_welcome("-= Welcome to TextWorld, ALFRED! =-\n\nYou are") == "You are"
    assert strip_welcome("You are") == "You are"

    class R:
        def __init__(self, won):
            self.won = won

    out = per_task_type([R(True), R(False), R(True)],
                        ["pick_and_place_simple", "pick_and_place_simple", "look_at_obj_in_light"])
    assert out["pick_and_place_simple"] == {"episodes": 2, "won": 1, "success_rate": 0.5}
    assert out["look_at_obj_in_light"]["success_rate"] == 1.0


def test_per_task_type_report_groups_episodes_by_game_name():
    from deciplane.envs.alfworld.results import per_task_type_report, task_type_of

    assert task_type_of("pick_two_obj_and_place-Pen-None-Desk-6/trial_T6") == "pick_two_obj_and_place"
    assert task_type_of("pick_and_place_simple-valid_unseen-0000-4bc51c39") == "pick_and_place_simple"
    report = {"per_episode": [
        {"task": "pick_and_place_simple-valid_unseen-0000-aa", "won": True},
        {"task": "pick_and_place_simple-valid_unseen-0006-bb", "won": False},
        {"task": "look_at_obj_in_light-valid_unseen-0001-cc", "won": True}]}
    out = per_task_type_report(report)
    assert out["pick_and_place_simple"]["won"] == 1 and out["pick_and_place_simple"]["episodes"] == 2
    assert out["all"]["success_rate"] == pytest.approx(2 / 3)
    assert "pick_two_obj_and_place" not in out
    lo, hi = out["pick_and_place_simple"]["ci95"]  # Wilson, 1 of 2: 0.5 -+ 0.4055
    assert lo == pytest.approx(0.0945, abs=1e-3) and hi == pytest.approx(0.9055, abs=1e-3)


def test_training_eval_report_names_games_by_seed():
    from deciplane.envs.alfworld.results import per_task_type_report, training_eval_report

    tasks = {"split_fingerprint": "generated-x", "per_episode": [
        {"seed": 0, "task": "pick_and_place_simple-valid_unseen-0000-aa", "won": True},
        {"seed": 1, "task": "look_at_obj_in_light-valid_unseen-0001-bb", "won": True}]}
    evaluation = {"split_fingerprint": "generated-x", "episode_seeds": [1, 0],
                  "episode_wins": [1, 0]}
    report = training_eval_report(evaluation, tasks)
    assert [e["task"][:4] for e in report["per_episode"]] == ["look", "pick"]
    out = per_task_type_report(report)
    assert out["look_at_obj_in_light"]["won"] == 1 and out["pick_and_place_simple"]["won"] == 0
    with pytest.raises(ValueError, match="fingerprints differ"):
        training_eval_report({**evaluation, "split_fingerprint": "generated-y"}, tasks)
    with pytest.raises(ValueError, match="seed"):
        training_eval_report({**evaluation, "episode_seeds": [0, 5]}, tasks)
