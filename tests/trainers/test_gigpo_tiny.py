"""advantage=gigpo end to end: tiny-model runs of rlid_ppo and text_ppo on the demo's
TextWorld-Express twc settings (real games, the env's ``info["state_key"]``): weights move,
metrics are finite, the step-group share is recorded per iteration."""

from __future__ import annotations

import json
import math
import shutil

import pytest

import torch

from deciplane.errors import ConfigError
from deciplane.trainers.config import load_config
from deciplane.trainers.run import build_algorithm, build_policy

from .test_algorithms_tiny import BASE, _records, _train

pytest.importorskip("textworld_express")
pytestmark = pytest.mark.skipif(shutil.which("java") is None,
                                reason="TextWorld-Express needs java (deciplane doctor)")

TWC = {"id": "deciplane/TextWorldExpress-v0",
       "kwargs": {"game": "twc", "game_params": {"numLocations": 2, "numItemsToPutAway": 2},
                  "menu_order": "shuffled", "observation": "state", "drop_penalised": True},
       "games_per_iteration": 1, "group_size": 4, "max_episode_steps": 6}
EVAL = {"every": 0, "final_splits": ["test"], "episodes": 1, "before": False}


def _check(tmp_path, iterations):
    recs = _records(tmp_path)
    for r in recs:
        for k, v in r.items():
            if isinstance(v, float):
                assert math.isfinite(v), (k, v)
    shares = [r["rollout/step_group_share"] for r in recs if "rollout/step_group_share" in r]
    assert len(shares) == iterations and all(0.0 <= x <= 1.0 for x in shares)
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["step_group_share"] == [round(x, 4) for x in shares]
    # 4 episodes of one game from one start share at least their first state
    assert min(shares) > 0
    return recs


def test_rlid_ppo_gigpo_tiny(tmp_path):
    data = dict(BASE, algorithm="rlid_ppo", iterations=2, history=0, advantage="gigpo",
                gamma=0.95, env=TWC, eval=EVAL)
    summary, changed = _train(data, tmp_path)
    assert changed, "no parameter changed"
    _check(tmp_path, 2)


def test_text_ppo_gigpo_tiny(tmp_path):
    """The untrained tiny model writes no valid command: every turn stays in the start
    state with return 0, so the batch is degenerate and the step is skipped (as grpo's)."""
    data = dict(BASE, algorithm="text_ppo", iterations=1, history=0, advantage="gigpo",
                max_new_tokens=4, gamma=0.95, env=dict(TWC, max_episode_steps=3), eval=EVAL)
    summary, changed = _train(data, tmp_path)
    recs = _check(tmp_path, 1)
    assert recs[-1]["rollout/step_group_share"] == 1.0 and recs[-1]["optim/skipped_steps"] >= 1
    assert not changed


def test_text_ppo_per_turn_advantages_reach_each_turns_tokens():
    """The loss with per-turn advantages (gigpo's ``(B, M)``) equal to each trajectory's
    one value is the loss with the per-trajectory ``(B,)`` form; different turn values
    change it."""
    cfg = load_config(data=dict(BASE, algorithm="text_ppo", history=0, advantage="gigpo",
                                max_new_tokens=3, env=dict(TWC, max_episode_steps=2)))
    policy = build_policy(cfg)
    algo = build_algorithm(cfg, policy)
    try:
        batch = algo.rollout(0, 0)
    finally:
        algo.close()
    rows = list(range(batch.n_units))
    per_traj = torch.tensor([1.0, -1.0, 0.5, -0.5])[:batch.n_units]             # (B,)
    m = batch.data.advantages.shape[1]
    batch.data.advantages = per_traj[:, None].expand(-1, m).clone()              # (B, M)
    same = algo.loss(batch, rows).task
    batch.data.advantages = per_traj
    assert torch.allclose(same, algo.loss(batch, rows).task)
    turns = torch.zeros(batch.n_units, m)
    turns[:, 0] = 1.0                                                            # (B, M)
    batch.data.advantages = turns
    assert not torch.allclose(same, algo.loss(batch, rows).task)


def test_text_ppo_gigpo_refuses_tlm_dre():
    with pytest.raises(ConfigError, match="tlm_dre.enabled: false"):
        load_config(data=dict(BASE, algorithm="text_ppo", advantage="gigpo",
                              tlm_dre={"enabled": True}))
