"""Whole TextWorld-v0 episodes with both agents and both built-in models, through the evaluator."""

from __future__ import annotations

import pytest

from deciplane.agents import MenuAgent, TextAgent
from deciplane.evaluation.agents import (EVAL_AGENT_FACTORIES, MenuEvalAgent, TextEvalAgent, _Histories,
                                         menu_factory)
from deciplane.errors import ConfigError
from deciplane.evaluation.evaluate import evaluate_agent

pytestmark = pytest.mark.filterwarnings("ignore::jericho.UnsupportedGameWarning")
ENV_ID = "deciplane/TextWorld-v0"


def run(agent, steps: int, episodes: int = 1, num_envs: int = 1):
    return evaluate_agent(ENV_ID, agent, split="test", episodes=episodes, num_envs=num_envs, seed=0,
                          env_kwargs={"games": "embedded", "max_episode_steps": steps}, progress=False)


def test_tiny_menu_agent_plays_full_episodes_in_lockstep(tiny):
    report = run(MenuEvalAgent(MenuAgent(tiny, temperature=1.0)), steps=25, episodes=3, num_envs=2)
    assert report.episodes == 3 and len(report.per_episode) == 3
    assert report.invalid_action_rate == 0.0                     # every menu decision is executable
    assert all(1 <= r.steps <= 25 for r in report.per_episode)
    assert report.split_fingerprint and report.decisions_per_s > 0


def test_tiny_text_agent_plays_a_full_episode_in_text_mode(tiny):
    agent = TextEvalAgent(TextAgent(tiny, style="react", max_new_tokens=8))
    report = run(agent, steps=4)
    assert report.per_episode[0].steps == 4 and report.per_episode[0].truncated
    assert agent.decisions == 4
    # the random-init tiny model produces no <action> tags: every step is invalid, and the env agrees
    assert report.invalid_action_rate == pytest.approx(agent.invalid / agent.decisions)


def test_smollm2_both_agents_play_an_episode(smol):
    menu = run(MenuEvalAgent(MenuAgent(smol, greedy=True, history=1)), steps=2)
    assert menu.per_episode[0].steps >= 1 and menu.invalid_action_rate == 0.0
    text = TextEvalAgent(TextAgent(smol, style="action", max_new_tokens=8, greedy=True, history=1))
    report = run(text, steps=2)
    assert report.per_episode[0].steps >= 1 and 0.0 <= report.invalid_action_rate <= 1.0


def test_histories_follow_episodes_across_rows():
    h = _Histories()
    infos = [{"game_name": "g1", "moves": 0}, {"game_name": "g2", "moves": 0}]
    hists = h.lookup(infos)
    assert hists == [[], []]
    h.record(infos, hists, ["o1", "o2"], ["a1", "a2"])
    # row order changed (an episode ended): histories follow their games
    nxt = [{"game_name": "g2", "moves": 1}, {"game_name": "g3", "moves": 0}]
    assert h.lookup(nxt) == [[("o2", "a2")], []]


def test_factories_build_agents_and_reject_unknown_options():
    assert set(EVAL_AGENT_FACTORIES) == {"menu", "text"}
    agent = menu_factory(model="deciplane/tiny", temperature=0.5)
    assert agent.agent.greedy and agent.agent.temperature == 0.5
    with pytest.raises(ConfigError, match="accepted --agent-option keys"):
        menu_factory(model="deciplane/tiny", style="react")


def test_cli_evaluate_with_a_model_agent(tmp_path):
    import json

    from typer.testing import CliRunner

    from deciplane.cli import app

    out = tmp_path / "report.json"
    res = CliRunner().invoke(app, ["evaluate", "--agent", "menu", "--model", "deciplane/tiny", "--episodes", "1",
                                   "-e", "max_episode_steps=3", "--json", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert report["episodes"] == 1 and report["invalid_action_rate"] == 0.0 and report["split_fingerprint"]
