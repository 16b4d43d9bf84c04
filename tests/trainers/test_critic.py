"""The critic of ``advantage: gae`` (deciplane/trainers/critic.py) and its wiring in RLiDPPO.

Real components throughout: deciplane/tiny with LoRA, the MenuAgent's own scoring forward,
the embedded TextWorld suite, the trainer's optimizer and checkpoints.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from deciplane.errors import ConfigError
from deciplane.objectives.rlid import rlid_loss
from deciplane.engine import checkpoint as ckpt
from deciplane.methods.rlid_ppo import RLiDPPOConfig, menu_ids, pad_menu_log_probs
from deciplane.trainers.config import describe_config, load_config
from deciplane.trainers.critic import (Critic, LastHidden, ValueHead, explained_variance,
                                       flat_to_turns, gae_advantages, turn_rewards,
                                       value_loss)
from deciplane.trainers.rollout import trajectory_rewards
from deciplane.trainers.algorithm import RolloutBatch
from deciplane.trainers.run import build_algorithm, build_policy
from deciplane.trainers.trainer import Trainer
from deciplane.types import Menu, Trajectory, Turn

TINY = {"name": "deciplane/tiny", "finetune": "lora", "lora_rank": 4, "lora_alpha": 8,
        "threads": 1}
GAE_RUN = {"algorithm": "rlid_ppo", "progress": False, "seed": 0, "iterations": 2,
           "history": 0, "advantage": "gae", "model": TINY,
           "env": {"games_per_iteration": 2, "group_size": 2, "max_episode_steps": 3},
           "optim": {"lr": 0.01, "epochs": 2, "micro_batch_size": 4},
           "eval": {"every": 0, "final_splits": [], "before": False}}

OBS = ["You are in a kitchen. There is a fridge.", "A dark cellar with a ladder.",
       "The garden is sunny; a gate leads west.", "An attic full of boxes and a lamp."]
MENUS = [Menu(("open fridge", "go north")), Menu(("climb ladder", "look", "go east")),
         Menu(("go west", "take shovel")), Menu(("take lamp", "open boxes", "go down"))]


# ---------------------------------------------------------------------------------------
# pure pieces
# ---------------------------------------------------------------------------------------


def test_value_loss_plain_and_clipped_by_hand():
    v, old, r = torch.tensor([0.6, 0.9]), torch.tensor([0.5, 0.5]), torch.tensor([1.0, 1.0])
    assert float(value_loss(v, old, r)) == pytest.approx((0.16 + 0.01) / 2)
    # clip 0.2: V_clip = [0.6, 0.7] -> errors [0.16, 0.09]; max with [0.16, 0.01]
    assert float(value_loss(v, old, r, clip=0.2)) == pytest.approx((0.16 + 0.09) / 2)
    # inside the clip range the clipped loss is the plain one
    assert float(value_loss(v, old, r, clip=1.0)) == pytest.approx(0.085)
    with pytest.raises(ConfigError, match=r"\(N,\)"):
        value_loss(v, old, r[:1])


def test_turn_rewards_sum_to_trajectory_rewards():
    trajs = [Trajectory([Turn("o", "a", 0.0), Turn("o", "b", 0.5, invalid=True),
                         Turn("o", "c", 1.0)], "g", won=True),
             Trajectory([Turn("o", "a", 0.25)], "g", won=False, truncated=True)]
    for kind in ("return", "won"):
        r, m = turn_rewards(trajs, kind, step_penalty=0.1, invalid_penalty=0.3)
        assert m.tolist() == [[True, True, True], [True, False, False]]
        assert r[~m].tolist() == [0.0, 0.0]
        want = trajectory_rewards(trajs, kind, 0.1, 0.3)
        assert r.sum(1).tolist() == pytest.approx(want.tolist())
    r, _ = turn_rewards(trajs, "won")
    assert r.tolist() == [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]  # the win on the last turn
    with pytest.raises(ConfigError, match="allowed values"):
        turn_rewards(trajs, "score")


def test_gae_advantages_normalise_valid_turns_only():
    rewards = torch.tensor([[0.0, 1.0], [0.5, 0.0]])
    mask = torch.tensor([[True, True], [True, False]])
    adv, ret = gae_advantages(rewards, torch.zeros(2, 2), mask, gamma=1.0, lam=1.0)
    assert adv.tolist() == [[1.0, 1.0], [0.5, 0.0]] and torch.equal(adv, ret)
    norm, ret2 = gae_advantages(rewards, torch.zeros(2, 2), mask, 1.0, 1.0, normalize=True)
    valid = norm[mask]
    assert float(valid.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(valid.std()) == pytest.approx(1.0, abs=1e-5)
    assert float(norm[1, 1]) == 0.0 and torch.equal(ret2, ret)  # targets not normalised


def test_flat_to_turns_and_explained_variance():
    out = flat_to_turns(torch.tensor([1.0, 2.0, 3.0, 4.0]), [3, 1])
    assert out.tolist() == [[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]]
    with pytest.raises(ConfigError, match="one per turn"):
        flat_to_turns(torch.ones(3), [3, 1])
    r = torch.tensor([0.0, 1.0, 2.0])
    assert explained_variance(r, r) == pytest.approx(1.0)
    assert explained_variance(torch.zeros(3), r) == pytest.approx(0.0)
    assert math.isnan(explained_variance(torch.zeros(3), torch.ones(3)))


# ---------------------------------------------------------------------------------------
# value head on the real tiny policy
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lora_policy():
    cfg = load_config(data=dict(GAE_RUN))
    return build_policy(cfg)


def _decisions(policy, n=4):
    from deciplane.agents import MenuAgent

    agent = MenuAgent(policy, history=0)
    return agent, agent.act(OBS[:n], MENUS[:n], seed=0)


def test_score_reuses_the_menu_forward(lora_policy):
    agent, decs = _decisions(lora_policy)
    critic = Critic(lora_policy)
    lps, values = critic.score(agent, decs)
    assert values.shape == (4,) and torch.equal(values, torch.zeros(4))  # zero-initialised
    for lp, d in zip(lps, decs):  # the same log-probs the rollout stored
        assert torch.allclose(lp.detach(), d.log_probs, atol=1e-5)
    with LastHidden(lora_policy.model) as cap:
        agent.menu_log_probs(decs)
        agent.menu_log_probs(decs)
    with pytest.raises(RuntimeError, match="one forward"):
        cap.hidden


@pytest.mark.parametrize("detach", [True, False])
def test_value_head_fits_fixed_returns(lora_policy, detach):
    """The value loss falls when the head is fitted to fixed returns; its gradient reaches
    the LoRA weights only without ``detach_trunk``."""
    agent, decs = _decisions(lora_policy)
    critic = Critic(lora_policy, detach_trunk=detach)
    returns = torch.tensor([1.0, 0.0, 0.5, -0.5])
    lora = [p for p in lora_policy.model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(critic.head.parameters(), lr=0.02, weight_decay=0.0)
    losses = []
    for step in range(80):
        _, v = critic.score(agent, decs)
        loss = value_loss(v, v.detach(), returns)
        opt.zero_grad()
        for p in lora:
            p.grad = None
        loss.backward()
        if step == 1:  # (at step 0 the zero-initialised head passes no gradient back)
            reached = any(p.grad is not None and p.grad.abs().sum() > 0 for p in lora)
            assert reached is (not detach)
        opt.step()
        losses.append(float(loss.detach()))
    for p in lora:
        p.grad = None
    assert losses[0] == pytest.approx(float((returns ** 2).mean()))  # V = 0 at start
    # prompt-end states of different prompts are close (same cue tokens): the fit is slow
    # but steady (measured: 0.375 -> ~0.04 in 80 steps)
    assert losses[-1] < 0.25 * losses[0], losses[::10]
    assert losses[-1] < losses[40] < losses[10], losses[::10]


def test_value_head_reads_rms_normalised_features():
    head = ValueHead(4)
    with torch.no_grad():
        head.linear.weight.copy_(torch.tensor([[1.0, -1.0, 0.5, 0.0]]))
    h = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.5, 0.5, -0.5, 0.1]])
    rms = h.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
    want = (h / rms) @ torch.tensor([1.0, -1.0, 0.5, 0.0])
    assert head(h).tolist() == pytest.approx(want.tolist(), rel=1e-5)
    assert head(20 * h).tolist() == pytest.approx(head(h).tolist(), rel=1e-5)  # scale-free


def test_value_head_shape_errors():
    with pytest.raises(ConfigError, match="> 0"):
        ValueHead(0)
    with pytest.raises(ConfigError, match="lm_head"):
        LastHidden(torch.nn.Linear(2, 2))


# ---------------------------------------------------------------------------------------
# plumbing: hand-computed GAE through RLiDPPO
# ---------------------------------------------------------------------------------------


def test_hand_computed_turn_advantages_reach_the_loss_unchanged(lora_policy):
    """A 3-turn episode (rewards 0, 0, 1) and a 1-turn truncated one (reward 0), V = 0.5
    everywhere, gamma 0.9, lambda 0.8, no normalisation:
    deltas: t2 = 1 - 0.5 = 0.5, t1 = t0 = 0.9*0.5 - 0.5 = -0.05;
    A2 = 0.5, A1 = -0.05 + 0.72*0.5 = 0.31, A0 = -0.05 + 0.72*0.31 = 0.1732; the 1-turn
    episode: A = 0 - 0.5 = -0.5. Returns = A + V."""
    cfg = load_config(data=dict(GAE_RUN, gamma=0.9, gae_lambda=0.8, gae_normalize=False,
                                value_clip=None))
    algo = build_algorithm(cfg, lora_policy)
    try:
        with torch.no_grad():
            algo.critic.head.linear.bias.fill_(0.5)
        decs = algo.agent.act(OBS, MENUS, seed=1)
        turns = [Turn(OBS[i], decs[i].action, r, decision=decs[i])
                 for i, r in enumerate([0.0, 0.0, 1.0, 0.0])]
        trajs = [Trajectory(turns[:3], "g1", won=True), Trajectory(turns[3:], "g2",
                                                                   truncated=True)]
        data, metrics = algo.gae_batch(trajs)
        want_adv = [0.1732, 0.31, 0.5, -0.5]
        assert data.advantages.tolist() == pytest.approx(want_adv, abs=1e-6)
        assert data.returns.tolist() == pytest.approx([a + 0.5 for a in want_adv], abs=1e-6)
        assert data.old_values.tolist() == pytest.approx([0.5] * 4)
        assert data.episode_ids.tolist() == [0, 0, 0, 1]
        assert metrics["critic/value_mean"] == pytest.approx(0.5)

        batch = RolloutBatch(n_units=4, data=data)
        obj = algo.loss(batch, [0, 1, 2, 3])  # unscaled: a mean over the 4 decisions
        lp, mask = pad_menu_log_probs([d.log_probs for d in decs])  # weights unchanged yet
        direct = rlid_loss(algo.rlid, lp, data.actions, data.old_logp,
                           torch.tensor(want_adv), data.episode_ids, mask,
                           menu_ids(data.menu_keys), weights=data.weights)
        assert obj.metrics["loss/policy"] == pytest.approx(direct.metrics["loss/policy"],
                                                           abs=1e-5)
        want_v = float(np.mean(np.square(want_adv)))  # (V - R)^2 = A^2
        assert obj.metrics["loss/value"] == pytest.approx(want_v, abs=1e-5)
        assert float(obj.task) == pytest.approx(float(direct.loss) + 0.5 * want_v, abs=1e-5)
    finally:
        algo.close()


# ---------------------------------------------------------------------------------------
# a tiny advantage=gae run: finite metrics, the head moves, checkpoints, exact resume
# ---------------------------------------------------------------------------------------


def _run(data, run_dir, resume=False):
    cfg = load_config(data=data)
    policy = build_policy(cfg)
    algo = build_algorithm(cfg, policy)
    head0 = {k: v.clone() for k, v in algo.critic.head.state_dict().items()}
    try:
        trainer = Trainer(cfg, run_dir, algo, resume=resume)
        summary = trainer.train()
    finally:
        algo.close()
    return summary, algo, trainer, head0


def _records(run_dir):
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in recs]


@pytest.fixture(scope="module")
def gae_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("gae") / "run"
    summary, algo, trainer, head0 = _run(dict(GAE_RUN), run_dir)
    return run_dir, summary, algo, trainer, head0


def test_gae_run_finite_and_head_trained(gae_run):
    run_dir, summary, algo, trainer, head0 = gae_run
    recs = _records(run_dir)
    assert [r["iteration"] for r in recs] == [1, 2]
    for r in recs:
        for k, v in r.items():
            if isinstance(v, float) and k != "critic/explained_variance":
                assert math.isfinite(v), (k, v)
        assert {"loss/value", "loss/policy", "critic/value_mean",
                "critic/explained_variance", "optim/grad_norm",
                "optim/grad_norm_value_head"} <= set(r)  # clipped separately
    assert summary["optimizer_steps"] == 4 and summary["skipped_steps"] == 0
    assert recs[0]["critic/value_mean"] == 0.0          # the zero-initialised head
    assert recs[1]["critic/value_mean"] != 0.0          # ... has been trained
    head = algo.critic.head.state_dict()
    assert any(not torch.equal(head[k], head0[k]) for k in head)
    # one AdamW, the value head in its own parameter group, with optimizer state
    groups = trainer.optimizer.param_groups
    assert len(groups) == 2 and groups[1]["params"] == list(algo.critic.head.parameters())
    assert all(p in trainer.optimizer.state for p in groups[1]["params"])


def test_gae_checkpoint_round_trips_the_value_head(gae_run):
    run_dir, _, algo, trainer, _ = gae_run
    last = ckpt.latest_checkpoint(run_dir)
    fresh = ValueHead(algo.critic.head.linear.in_features)
    ckpt.load_modules({"value_head": fresh},
                      torch.load(last / "state.pt", weights_only=False)["modules"], last)
    for k, v in algo.critic.head.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v)
    # a run without the head (advantage=grpo) cannot resume from it, and vice versa
    with pytest.raises(Exception, match="value head"):
        ckpt.load_checkpoint(last, algo.policy.model, None, modules={})
    with pytest.raises(Exception, match="lacks"):
        ckpt.load_checkpoint(last, algo.policy.model, None,
                             modules={"value_head": fresh, "other": ValueHead(2)})


def test_gae_resume_matches_uninterrupted_run(gae_run, tmp_path):
    """Stop after 1 of 2 iterations, resume: the same metrics as the uninterrupted run —
    including iteration 2's critic values, which need the restored (trained) head and its
    AdamW state (a re-initialised head would give value_mean 0)."""
    run_dir, *_ = gae_run
    part = tmp_path / "part"
    _run(dict(GAE_RUN, iterations=1), part)
    _run(dict(GAE_RUN), part, resume=True)
    assert _records(part) == _records(run_dir)


@pytest.mark.parametrize("case", ["head@frozen", "lora_below_head"])
def test_gae_with_the_items_readout_reads_the_item_heads_decision_state(tmp_path, case):
    """The items readout stops its forward at the head's layer (no output layer runs): the
    value head reads the decision state the item head reads — kept by the rollout for a
    head at a frozen layer (the demo's shape, with the MLP head here), from the update's
    forward with LoRA below the head."""
    model = (dict(TINY, finetune="head") if case == "head@frozen"
             else dict(TINY, lora_last_layers=1))
    data = dict(GAE_RUN, model=model, readout="items", readout_layer=1, value_lr=5e-3,
                **({"readout_head": "mlp", "readout_mlp_hidden": 8}
                   if case == "head@frozen" else {}))
    summary, algo, _, head0 = _run(data, tmp_path / "run")
    assert algo.agent.keep_readout == (case == "head@frozen")
    recs = _records(tmp_path / "run")
    assert [r["iteration"] for r in recs] == [1, 2]
    for r in recs:
        assert math.isfinite(r["loss/value"]) and math.isfinite(r["loss/policy"])
    assert recs[0]["critic/value_mean"] == 0.0 and recs[1]["critic/value_mean"] != 0.0
    head = algo.critic.head.state_dict()
    assert any(not torch.equal(head[k], head0[k]) for k in head)
    assert algo.critic.head.linear.in_features == algo.policy.item_head.hidden_size
    assert summary["optimizer_steps"] == 4


def test_gae_with_bc_warm_start_and_cord_distillation(tmp_path):
    """The value head also trains when the task gradient goes through CORD's full-batch
    buffers (its teacher gradient is zero) and after a behaviour-cloning warm start."""
    data = dict(GAE_RUN, iterations=1, distill={"enabled": True, "lam": 0.5},
                bc={"episodes": 1, "epochs": 1})
    summary, algo, _, head0 = _run(data, tmp_path / "run")
    rec = _records(tmp_path / "run")[-1]
    assert {"cord/cosine", "loss/distill", "loss/value"} <= set(rec)
    assert math.isfinite(rec["loss/value"]) and summary["optimizer_steps"] == 2
    assert summary["warm_start"]["decisions"] > 0
    head = algo.critic.head.state_dict()
    assert any(not torch.equal(head[k], head0[k]) for k in head)


# ---------------------------------------------------------------------------------------
# config
# ---------------------------------------------------------------------------------------


def test_gae_config_fields_documented_and_validated():
    rows = {r[0]: r for r in describe_config(RLiDPPOConfig)}
    assert "gae" in rows["advantage"][1]
    for key in ("gamma", "gae_lambda", "value_coef", "value_clip", "value_lr",
                "value_detach_trunk", "gae_normalize"):
        assert rows[key][3], key  # a docstring for --help-config
    base = {"algorithm": "rlid_ppo", "advantage": "gae"}
    with pytest.raises(ConfigError, match=r"gamma = 1.5 must be in \[0, 1\]"):
        load_config(data=dict(base, gamma=1.5))
    with pytest.raises(ConfigError, match="gae_lambda"):
        load_config(data=dict(base, gae_lambda=-0.1))
    with pytest.raises(ConfigError, match="value head would never learn"):
        load_config(data=dict(base, value_coef=0))
    with pytest.raises(ConfigError, match="value_clip"):
        load_config(data=dict(base, value_clip=0))
    with pytest.raises(ConfigError, match="value_lr"):
        load_config(data=dict(base, value_lr=-1))
    with pytest.raises(ConfigError, match="allowed values"):
        load_config(data={"algorithm": "rlid_ppo", "advantage": "gea"})
    assert load_config(data=dict(base, value_clip=None)).value_clip is None
