"""What makes a menu run learn: the BC warm start's early stopping on held-out expert
episodes, the share of groups with a learning signal, and an RL run with the items
readout on the state view (tiny model, real TextWorld games), evaluated from its run dir."""

from __future__ import annotations

import json

import pytest
import torch

from deciplane.objectives.advantages import varied_group_share
from deciplane.trainers.config import load_config
from deciplane.methods.rlid_ppo import bc_valid_episodes
from deciplane.trainers.warm_start import EarlyStopping, run_bc_epochs


def test_early_stopping_on_a_hand_built_curve():
    stop = EarlyStopping(patience=2, initial=-4.0)
    assert [stop.update(v) for v in (-3.0, -2.0, -2.5, -2.1)] == [True, True, True, False]
    assert stop.best_epoch == 2 and stop.best == -2.0
    never = EarlyStopping(patience=1, initial=0.0)
    assert never.update(-1.0) is False and never.best_epoch == 0
    with pytest.raises(ValueError):
        EarlyStopping(patience=0)


def test_run_bc_epochs_stops_on_the_validation_curve_and_keeps_the_best_weights():
    """The test builds the validation curve: it peaks after epoch 2, so with patience 2 the
    loop stops after epoch 4 and the weights of epoch 2 come back."""
    w = torch.nn.Parameter(torch.zeros(3))
    scripted = iter([-5.0, -3.0, -1.0, -2.0, -4.0, -0.5, -0.1])   # epoch 0, 1, 2, ...
    snapshots = []

    def validate():
        snapshots.append(w.detach().clone())
        return next(scripted)

    curve = []
    losses = run_bc_epochs(4, lambda part: ((w - 1.0) ** 2).sum() * len(part) / 4, [w],
                           lr=0.1, epochs=10, micro_batch_size=2, max_grad_norm=0.0, seed=0,
                           validate=validate, patience=2, curve=curve)
    assert [row["epoch"] for row in curve] == [0, 1, 2, 3, 4]
    assert [row["valid"] for row in curve] == [-5.0, -3.0, -1.0, -2.0, -4.0]
    assert len(losses) == 4 * 2                      # 4 epochs of 2 micro-batches ran
    torch.testing.assert_close(w.detach(), snapshots[2])   # the best epoch's weights
    assert not torch.equal(snapshots[2], snapshots[4])


def test_bc_valid_episodes():
    assert bc_valid_episodes(40, 0.0) == 0
    assert bc_valid_episodes(40, 0.2) == 8
    assert bc_valid_episodes(3, 0.1) == 1
    assert bc_valid_episodes(1, 0.5) == 0           # nothing left to fit on otherwise
    assert bc_valid_episodes(2, 0.9) == 1


def test_varied_group_share_on_hand_built_groups():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.5, 0.5])
    g = torch.tensor([7, 7, 3, 3, 9, 9])
    assert varied_group_share(r, g) == pytest.approx(1 / 3)
    assert varied_group_share(torch.tensor([0.2, 0.3]), torch.tensor([0, 0])) == 1.0
    assert varied_group_share(torch.zeros(0), torch.zeros(0, dtype=torch.long)) == 0.0


def test_bc_config_checks():
    from deciplane.errors import ConfigError

    with pytest.raises(ConfigError, match="valid_fraction"):
        load_config(data={"algorithm": "rlid_ppo", "bc": {"valid_fraction": 1.0}})
    with pytest.raises(ConfigError, match="dagger_rounds"):
        load_config(data={"algorithm": "rlid_ppo", "bc": {"dagger_rounds": -1}})
    with pytest.raises(ConfigError, match="readout"):
        load_config(data={"algorithm": "rlid_ppo", "readout": "letters"})


@pytest.mark.parametrize("layer,finetune", [(None, "lora"), (1, "lora"), (1, "head")])
def test_items_readout_run_learns_on_the_state_view_and_evaluates_from_its_run_dir(
        tmp_path, layer, finetune):
    """RLiD-PPO with the items readout (a head on the final output with LoRA, a head at
    layer 1 with LoRA in layer 0 below it, or the head alone on frozen layer-1 states), the
    state view and an early-stopped warm start, on the
    embedded TextWorld suite: the head and weights move, metrics are finite, the summary
    reports the validation curve and the groups with signal, and `deciplane evaluate
    RUN_DIR` rebuilds the same policy (head included) from the checkpoint."""
    from deciplane.evaluation.run_eval import eval_agent_for, load_trained_policy
    from deciplane.trainers.run import run_training

    torch.set_num_threads(1)
    data = {"progress": False, "seed": 0, "algorithm": "rlid_ppo", "iterations": 2, "history": 0,
            "readout": "items", "readout_layer": layer,
            "model": {"name": "deciplane/tiny", "finetune": finetune, "lora_rank": 4,
                      "lora_alpha": 8, "lora_last_layers": 1, "threads": 1},
            "env": {"kwargs": {"observation": "state"}, "games_per_iteration": 2,
                    "group_size": 2, "max_episode_steps": 4},
            "bc": {"episodes": 4, "epochs": 3, "lr": 1e-2, "valid_fraction": 0.25, "patience": 2,
                   # the head-only run also does a round of DAgger (the planner labels the
                   # states the agent visits)
                   "dagger_rounds": int(finetune == "head"), "dagger_episodes": 2},
            "optim": {"lr": 1e-3, "micro_batch_size": 4, "epochs": 1},
            "eval": {"every": 1, "during_split": "test", "during_episodes": 2,
                     "final_splits": ["test"], "zero_shot_labels": layer is None}}
    run = tmp_path / "run"
    summary = run_training(load_config(data=data), run)
    # a point of the held-out curve between the warm start and the end, on fewer episodes
    assert [d["iteration"] for d in summary["during"]] == [1]
    assert summary["during"][0]["episodes"] == 2
    if layer is None:       # the untrained model with RLiD's letters, on the same episodes
        zl = summary["zero_shot_labels"]["test"]
        assert zl["episodes"] == 6 and zl["episode_seeds"] == summary["before"]["test"]["episode_seeds"]
        assert "final - zero_shot_labels" in summary["comparisons"]["test"]
    else:
        assert summary["zero_shot_labels"] is None
    ws = summary["warm_start"]
    assert ws["valid_episodes"] == 1 and ws["episodes"] == 4
    assert ws["valid_curve"][0]["epoch"] == 0 and 0 <= ws["best_epoch"] <= 3
    assert 0.0 <= ws["valid_agreement"] <= 1.0
    if finetune == "head":
        (row,) = ws["dagger"]
        assert row["episodes"] == 2 and row["states"] >= 2
        assert row["decisions_total"] == ws["decisions"] + row["states"]
        assert 0.0 <= row["on_policy_agreement"] <= 1.0 and "valid_agreement" in row
        assert ws["kind"].endswith("then 1 DAgger rounds")
    else:
        assert "dagger" not in ws
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(0.0 <= r["rollout/groups_with_signal"] <= 1.0 for r in recs[1:])
    assert summary["eval"]["test"]["episodes"] == 6
    trained = load_trained_policy(run)
    head = trained.policy.item_head
    assert head is not None and head.layer == (layer or 2)
    assert float(head.key.weight.abs().sum()) > 0     # trained: K left its zero init
    agent = eval_agent_for(trained).agent
    assert agent.readout == "items" and agent.head is head
