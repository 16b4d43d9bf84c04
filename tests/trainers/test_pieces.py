"""Pure pieces of the trainer against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deciplane.engine.optim import combine_gradients
from deciplane.objectives.distill import expert_distill_loss, policy_distill_loss
from deciplane.methods.rlid_ppo import group_advantages, menu_ids, pad_menu_log_probs
from deciplane.trainers.config import DistillConfig
from deciplane.trainers.rollout import (RolloutStats, collect_menu_episodes, make_vector_env,
                                        trajectory_rewards)
from deciplane.types import Menu, Trajectory, Turn

from .coinflip_env import CoinFlipEnv


def test_group_advantages_per_group():
    adv, gids = group_advantages("grpo", np.array([1.0, 0.0, 2.0, 2.0]), ["a", "a", "b", "b"])
    assert gids.tolist() == [0, 0, 1, 1]
    s = np.std([1.0, 0.0], ddof=1)
    assert adv[:2].tolist() == pytest.approx([0.5 / s, -0.5 / s], rel=1e-4)
    assert adv[2:].tolist() == [0.0, 0.0]  # degenerate group: zero advantage
    adv, _ = group_advantages("rloo", np.array([1.0, 0.0, 3.0]), ["a", "a", "a"])
    assert adv.tolist() == pytest.approx([1 - 1.5, 0 - 2.0, 3 - 0.5])


def test_trajectory_rewards_penalties():
    t = Trajectory([Turn("o", "a", 0.5), Turn("o", "b", 1.0, invalid=True)], "g", won=True)
    assert trajectory_rewards([t], "return", 0.1, 0.2)[0] == pytest.approx(1.5 - 0.2 - 0.2)
    assert trajectory_rewards([t], "won")[0] == 1.0


def test_pad_menu_log_probs_and_distill_losses():
    rows = [torch.log(torch.tensor([0.5, 0.5])), torch.log(torch.tensor([0.2, 0.3, 0.5]))]
    lp, mask = pad_menu_log_probs(rows)
    assert lp.shape == (2, 3) and mask.tolist() == [[True, True, False], [True, True, True]]
    s, n = expert_distill_loss(lp, [1, None])
    assert n == 1 and float(s) == pytest.approx(-np.log(0.5))
    teacher, _ = pad_menu_log_probs([torch.log(torch.tensor([0.5, 0.5])),
                                     torch.log(torch.tensor([0.2, 0.3, 0.5]))])
    assert float(policy_distill_loss(lp, teacher, mask)) == pytest.approx(0.0, abs=1e-6)
    assert menu_ids([("A", "B"), ("A", "B", "C"), ("A", "B")]).tolist() == [0, 1, 0]


def test_combine_gradients_modes():
    g1, g2 = torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])
    conflict, m = combine_gradients(g1, g2, DistillConfig(lam=1.0, combine="conflict"))
    assert conflict.tolist() == pytest.approx([1.0, 1.0])  # g2's part along -g1 removed
    assert m["cord/conflict"] == 1.0 and m["cord/projected"] == 1.0
    plain, m = combine_gradients(g1, g2, DistillConfig(lam=1.0, combine="sum"))
    assert plain.tolist() == [0.0, 1.0] and m["cord/projected"] == 0.0
    aligned, _ = combine_gradients(g1, torch.tensor([1.0, 1.0]),
                                   DistillConfig(lam=1.0, combine="always"))
    assert aligned.tolist() == pytest.approx([1.0, 1.0])  # parallel part removed too


class _FirstAction:
    """A deterministic stand-in *agent* (real Decision records, always index 0)."""

    def act(self, observations, menus, histories=None, seed=None):
        from deciplane.types import Decision

        out = []
        for m in menus:
            lp = torch.log_softmax(torch.zeros(len(m)), 0)
            out.append(Decision(menu=m, labels=tuple("ABC"[: len(m)]),
                                label_token_ids=torch.arange(len(m)), label_logits=torch.zeros(len(m)),
                                log_probs=lp, index=0, prompt_ids=torch.tensor([1, 2])))
        return out


def test_grouped_menu_rollout_records_groups_experts_and_steps():
    vec = make_vector_env([lambda: CoinFlipEnv(length=2, expert=True) for _ in range(4)])
    trajs, stats = collect_menu_episodes(_FirstAction(), vec, [11, 22], group_size=2,
                                         max_steps=5, seed=0)
    assert [t.group_id for t in trajs] == ["g11", "g11", "g22", "g22"]
    assert all(len(t) == 2 and t.turns[0].expert_index == 0 for t in trajs)
    assert stats.env_steps == 8 and stats.episodes == 4
    assert isinstance(stats.merge(RolloutStats(env_steps=1)), RolloutStats)
    assert stats.metrics()["rollout/episode_len"] == 2.0
    vec.close()


def test_lora_last_layers_only_adapts_the_top_layers():
    from deciplane.errors import ConfigError
    from deciplane.trainers.config import load_config
    from deciplane.trainers.run import build_policy

    cfg = load_config(data={"algorithm": "rlid_ppo",
                            "model": {"name": "deciplane/tiny", "lora_last_layers": 1}})
    policy = build_policy(cfg)
    names = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    assert names and all(".layers.1." in n and "lora_" in n for n in names)
    with pytest.raises(ConfigError, match="must be > 0"):
        load_config(data={"algorithm": "rlid_ppo", "model": {"lora_last_layers": 0}})
