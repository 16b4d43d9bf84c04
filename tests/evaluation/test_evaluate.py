"""The generic evaluator on real TextWorld games (and a non-menu Gymnasium env)."""

from __future__ import annotations

import numpy as np
import pytest

from deciplane.envs.textworld.games import make_game_suite
from deciplane.errors import ConfigError
from deciplane.evaluation.evaluate import (AGENT_FACTORIES, EpisodeResult, EvalAgent, EvalReport,
                                         ExpertAgent, RandomAgent, compare_paired,
                                         evaluate_agent, make_agent,
                                         plot_success, register_agent, success_by_family,
                                         summarize, task_family)

pytestmark = pytest.mark.filterwarnings("ignore::jericho.UnsupportedGameWarning")
ENV_ID = "deciplane/TextWorld-v0"


@pytest.fixture(scope="module")
def suite():
    return make_game_suite("embedded", "test")


def test_expert_wins_every_test_game_batched_or_not(suite):
    one = evaluate_agent(ENV_ID, ExpertAgent(), split="test", progress=False)
    two = evaluate_agent(ENV_ID, ExpertAgent(), split="test", num_envs=2, progress=True)
    assert one.episodes == len(suite) and one.success_rate == 1.0
    assert one.split_fingerprint == suite.fingerprint and one.agent == "expert"
    assert [r.task for r in one.per_episode] == suite.names  # every game exactly once
    assert [(r.won, r.steps, r.ret) for r in one.per_episode] == \
           [(r.won, r.steps, r.ret) for r in two.per_episode]
    assert one.invalid_action_rate == 0.0 and one.decisions_per_s > 0
    assert one.mean_return == pytest.approx(np.mean([r.ret for r in one.per_episode]))


def test_random_agent_is_seeded_and_worse_than_expert(suite):
    kw = dict(split="test", episodes=12, num_envs=3, progress=False,
              env_kwargs={"max_episode_steps": 30})
    a = evaluate_agent(ENV_ID, RandomAgent(7), **kw)
    b = evaluate_agent(ENV_ID, RandomAgent(7), **kw)
    assert a.per_episode == b.per_episode
    assert 0.0 < a.success_rate < 1.0 and a.invalid_action_rate == 0.0
    assert all(r.steps <= 30 for r in a.per_episode)
    assert {task_family(r.task) for r in a.per_episode} == set(success_by_family(a))


class MaskedAgent:
    """Always plays the last index of the space: masked, hence invalid."""

    def act_batch(self, observations, infos):
        return [len(info["action_mask"]) - 1 for info in infos]


class TextExpert:
    """A text agent: types the expert's command in capitals."""

    env_kwargs = {"expert": True, "action_mode": "text"}

    def act_batch(self, observations, infos):
        return [info["expert_command"].upper() for info in infos]


def test_protocol_text_agents_and_invalid_rate(suite):
    assert isinstance(TextExpert(), EvalAgent)
    rep = evaluate_agent(ENV_ID, TextExpert(), split="test", progress=False)
    assert rep.success_rate == 1.0 and rep.invalid_action_rate == 0.0
    bad = evaluate_agent(ENV_ID, MaskedAgent(), split="test", episodes=2, progress=False,
                         env_kwargs={"max_episode_steps": 5})
    assert bad.success_rate == 0.0 and bad.invalid_action_rate == 1.0
    assert all(r.truncated and r.steps == 5 for r in bad.per_episode)


def test_generic_env_without_tasks_or_menu():
    class Push:
        def act_batch(self, observations, infos):
            return [0 for _ in observations]

    rep = evaluate_agent("CartPole-v1", Push(), split=None, progress=False)
    assert rep.episodes == 20 and rep.split_fingerprint is None
    assert rep.success_rate == 1.0 and rep.mean_steps < 30  # positive return = success
    with pytest.raises(ConfigError, match="menu"):
        evaluate_agent("CartPole-v1", RandomAgent(0), split=None, episodes=1, progress=False)
    with pytest.raises(ConfigError, match=r"CartPole-v1 rejected the arguments "
                                          r"\['expert', 'split'\]"):
        evaluate_agent("CartPole-v1", ExpertAgent(), split="test", progress=False)


def test_agent_registry_and_errors():
    assert isinstance(make_agent("random", seed=3), RandomAgent)
    with pytest.raises(ConfigError, match="registered agents: expert, .*random"):
        make_agent("gpt")
    with pytest.raises(ConfigError, match="takes no options"):
        make_agent("expert", model="x")
    register_agent("always0", lambda seed=0, **o: MaskedAgent())
    try:
        assert isinstance(make_agent("always0"), MaskedAgent)
    finally:
        AGENT_FACTORIES.pop("always0")
    with pytest.raises(ConfigError, match="act_batch"):
        evaluate_agent(ENV_ID, object(), progress=False)

    class Short:
        def act_batch(self, observations, infos):
            return []

    with pytest.raises(ConfigError, match="returned 0 actions for 1"):
        evaluate_agent(ENV_ID, Short(), split="test", progress=False)


def test_summaries_and_plot(tmp_path):
    results = [EpisodeResult(0, "tw-simple-test-s60000", 0, True, 4, 3.0, 1, False),
               EpisodeResult(1, "tw-simple-test-s60001", 1, False, 6, 1.0, 0, True),
               EpisodeResult(2, "my-game", 2, True, 2, 1.0, 0, False)]
    s = summarize(results)
    assert s == {"success_rate": 2 / 3, "mean_steps": 4.0, "mean_return": 5 / 3,
                 "invalid_action_rate": 1 / 12}
    assert summarize([])["success_rate"] == 0.0
    assert task_family("tw-coin_collector-test-s60001") == "tw-coin_collector"
    assert task_family("my-game") == "my-game"
    rep = EvalReport(
        env_id="x", split="test", split_fingerprint="abc", agent="a", episodes=3,
        decisions_per_s=1.0, wall_s=1.0, per_episode=results, **s)
    assert success_by_family(rep) == {"my-game": 1.0, "tw-simple": 0.5}
    png = plot_success([rep, rep], tmp_path / "sub" / "chart.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_reports_carry_interval_provenance_and_pair_on_the_same_episodes(suite):
    kw = dict(split="test", episodes=12, progress=False, env_kwargs={"max_episode_steps": 4})
    expert = evaluate_agent(ENV_ID, ExpertAgent(), **kw)
    rand = evaluate_agent(ENV_ID, RandomAgent(3), **kw)
    lo, hi = expert.success_ci95
    assert lo < expert.success_rate <= hi <= 1.0
    assert expert.provenance["packages"]["textworld"] and "commit" in expert.provenance
    cmp = compare_paired(expert, rand)
    wins = [r.won for r in expert.per_episode], [r.won for r in rand.per_episode]
    assert cmp.n == 12 and cmp.only_a == sum(a and not b for a, b in zip(*wins))
    assert cmp.difference == pytest.approx(expert.success_rate - rand.success_rate)
    other = evaluate_agent(ENV_ID, RandomAgent(3), split="valid", episodes=2, progress=False)
    with pytest.raises(ConfigError, match="different splits"):
        compare_paired(expert, other)
