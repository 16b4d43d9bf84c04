"""`deciplane evaluate RUN_DIR`: score a trained run's checkpoint later.

Real components throughout: tiny runs trained by the real trainer (deciplane/tiny + LoRA on
the embedded TextWorld suite; math GRPO on arith with the held-out scorer), evaluated
through the CLI (typer's CliRunner) and compared with the same checkpoint evaluated
in-process.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from typer.testing import CliRunner

from deciplane.cli import app
from deciplane.errors import CheckpointError
from deciplane.trainers.config import load_config
from deciplane.evaluation.evaluate import evaluate_agent
from deciplane.evaluation.run_eval import (eval_agent_for, load_trained_policy, read_policy_state,
                                         resolve_checkpoint, run_env_kwargs)
from deciplane.trainers.run import build_policy, run_training

pytestmark = pytest.mark.filterwarnings("ignore::jericho.UnsupportedGameWarning")
runner = CliRunner()

TINY = {"name": "deciplane/tiny", "finetune": "lora", "lora_rank": 4, "threads": 1}
# advantage=gae: the checkpoints also hold a value head, which evaluation must leave alone
ENV_RUN = {"algorithm": "rlid_ppo", "progress": False, "seed": 0, "iterations": 2, "history": 0,
           "advantage": "gae", "model": TINY, "optim": {"lr": 1e-2, "epochs": 1},
           "env": {"kwargs": {"games": "embedded"}, "games_per_iteration": 2, "group_size": 2,
                   "max_episode_steps": 4},
           "eval": {"every": 0, "final_splits": ["test"], "before": False},
           "checkpoint": {"every": 1, "keep_last": 2}}
MATH_RUN = {"algorithm": "math_grpo", "progress": False, "seed": 0, "iterations": 1,
            "model": TINY, "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4,
            "eval_problems": 4, "eval_max_new_tokens": 4,
            "eval": {"every": 0, "final_splits": ["test"], "before": False}}
TIMING = {"decisions_per_s", "wall_s"}


TEXT_RUN = {"algorithm": "text_ppo", "progress": False, "seed": 0, "iterations": 1,
            "history": 1, "style": "action", "max_new_tokens": 3, "model": TINY,
            "optim": {"lr": 1e-2, "epochs": 1},
            "env": {"kwargs": {"games": "embedded"}, "games_per_iteration": 1, "group_size": 2,
                    "max_episode_steps": 2},
            "eval": {"every": 0, "final_splits": [], "before": False}}


@pytest.fixture(scope="module")
def env_run(tmp_path_factory):
    """A 2-iteration RLiD-PPO run (checkpoints iter_000001 and iter_000002)."""
    run = tmp_path_factory.mktemp("runs") / "rlid"
    summary = run_training(load_config(data=ENV_RUN), run_dir=run)
    return run, summary


def _strip(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in TIMING | {"run_dir", "checkpoint"}}


def _cli(*args):
    """Run ``deciplane evaluate ARGS``; the output's line wrapping is undone (rich wraps
    long messages at the terminal width)."""
    res = runner.invoke(app, ["evaluate", *map(str, args)])
    res.text = " ".join(res.output.replace("│", " ").split())
    return res


def test_cli_scores_the_checkpoint_like_the_in_process_evaluation(env_run, tmp_path):
    run, summary = env_run
    out = tmp_path / "report.json"
    res = _cli(run, "--no-progress", "--threads", "1", "--json", out)
    assert res.exit_code == 0, res.output
    cli = json.loads(out.read_text())
    assert cli["run_dir"] == str(run) and cli["checkpoint"] == "iter_000002"
    assert cli["split"] == "test" and cli["env_id"] == "deciplane/TextWorld-v0"
    assert cli["split_fingerprint"] == summary["split_fingerprints"]["test"]
    assert cli["split_fingerprint"] in res.text and "iter_000002" in res.text
    assert cli["episodes"] == summary["eval"]["test"]["episodes"] == 6  # every test game

    # in-process: the same checkpoint through the reusable loader and evaluate_agent
    trained = load_trained_policy(run, "latest", threads=1)
    assert trained.checkpoint_name == "iter_000002" and trained.iteration == 2
    split, kwargs = run_env_kwargs(trained.config, "test")
    # the trainer's menu defaults (shuffled, task text) travel with the run
    assert kwargs == {"games": "embedded", "max_episode_steps": 4, "menu_order": "shuffled",
                      "task_in_observation": True}
    ref = evaluate_agent(trained.config.env.id, eval_agent_for(trained), split=split,
                         env_kwargs=kwargs, progress=False).to_dict()
    assert _strip(cli) == _strip(ref)
    assert all(ep["steps"] <= 4 for ep in cli["per_episode"])  # the run's max_episode_steps
    # the same episodes and menus as the trainer's final evaluation: the same outcomes
    final = summary["eval"]["test"]
    assert [int(ep["won"]) for ep in cli["per_episode"]] == final["episode_wins"]
    assert [ep["steps"] for ep in cli["per_episode"]] == final["episode_steps"]


def test_loader_reads_the_chosen_checkpoints_trained_weights(env_run):
    run, _ = env_run
    last = load_trained_policy(run, "latest", threads=1)
    first = load_trained_policy(run, "iter_1", threads=1)
    assert first.checkpoint == resolve_checkpoint(run, "1") == run / "checkpoints/iter_000001"
    saved, _ = read_policy_state(first.checkpoint)
    fresh = dict(build_policy(last.config).model.named_parameters())
    p1, p2 = dict(first.policy.model.named_parameters()), dict(last.policy.model.named_parameters())
    assert set(saved) and all(torch.equal(p1[n], t) for n, t in saved.items())
    # LoRA B starts at zero: training moved it, and the two checkpoints differ
    moved = [n for n in saved if not torch.equal(p1[n], fresh[n])]
    assert moved and any(not torch.equal(p1[n], p2[n]) for n in saved)
    assert not first.policy.model.training
    payload = torch.load(first.checkpoint / "state.pt", weights_only=False)
    assert "value_head" in payload["modules"]  # a checkpoint with more than the policy


def test_text_agent_run(tmp_path):
    """text_ppo: the free-text agent is rebuilt with the run's style, token budget and
    history, and plays the text-action environment (the game judges its commands)."""
    run = tmp_path / "text"
    run_training(load_config(data=TEXT_RUN), run_dir=run)
    out = tmp_path / "t.json"
    res = _cli(run, "--episodes", "2", "--no-progress", "--json", out)
    assert res.exit_code == 0, res.output
    cli = json.loads(out.read_text())
    assert cli["agent"] == "text-action[deciplane/tiny]" and cli["episodes"] == 2
    assert cli["checkpoint"] == "iter_000001"
    trained = load_trained_policy(run, threads=1)
    agent = eval_agent_for(trained)
    assert (agent.agent.style, agent.agent.max_new_tokens, agent.agent.history) == \
        ("action", 3, 1)
    assert agent.env_kwargs == {"action_mode": "text"}
    split, kwargs = run_env_kwargs(trained.config, "test")
    ref = evaluate_agent(trained.config.env.id, agent, split=split, episodes=2,
                         env_kwargs=kwargs, progress=False).to_dict()
    assert _strip(cli) == _strip(ref)
    assert all(ep["steps"] <= 2 for ep in cli["per_episode"])


def test_cli_picks_an_older_checkpoint(env_run, tmp_path):
    run, _ = env_run
    out = tmp_path / "r.json"
    res = _cli(run, "--checkpoint", "iter_1", "--episodes", "2", "--no-progress", "--json", out)
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    assert rep["checkpoint"] == "iter_000001" and rep["episodes"] == 2
    assert "note:" not in res.text  # the split is the one the run was evaluated on


def test_a_changed_split_is_flagged(env_run, tmp_path):
    """summary.json recorded another fingerprint for the split: the CLI says so."""
    run, summary = env_run
    moved = tmp_path / "moved"
    shutil.copytree(run, moved)
    summary = dict(summary, split_fingerprints={"test": "0123456789abcdef"})
    (moved / "summary.json").write_text(json.dumps(summary))
    res = _cli(moved, "--episodes", "1", "--no-progress")
    assert res.exit_code == 0, res.output
    assert "recorded fingerprint 0123456789abcdef for split test" in res.text


def test_errors_say_what_to_do(env_run, tmp_path):
    run, _ = env_run
    res = _cli(tmp_path)  # an empty folder
    assert res.exit_code == 2 and "not a run directory" in res.text
    res = _cli(tmp_path / "missing")
    assert res.exit_code == 2 and "does not exist" in res.text

    bare = tmp_path / "bare"  # a config but no checkpoint yet
    bare.mkdir()
    shutil.copy(run / "config.yaml", bare / "config.yaml")
    res = _cli(bare)
    assert res.exit_code == 2 and "has no checkpoint" in res.text and "--resume" in res.text

    res = _cli(run, "--checkpoint", "iter_7")
    assert res.exit_code == 2 and "iter_000001, iter_000002" in res.text
    res = _cli(run, "--checkpoint", "best")
    assert res.exit_code == 2 and "'latest', 'iter_N' or N" in res.text
    res = _cli(run, "--benchmark", "arith")
    assert res.exit_code == 2 and "not a benchmark run" in res.text
    res = _cli(run, "--agent", "random")
    assert res.exit_code == 2 and "cannot be combined with RUN_DIR" in res.text
    res = _cli(run, "--env", "coin")      # names an env of a suite run only
    assert res.exit_code == 2 and "names an env of a suite run" in res.text
    res = _cli("--benchmark", "arith")
    assert res.exit_code == 2 and "RUN_DIR" in res.text

    edited = tmp_path / "edited"  # weights that do not fit the (edited) config
    shutil.copytree(run, edited)
    cfg = (edited / "config.yaml").read_text().replace("lora_rank: 4", "lora_rank: 8")
    (edited / "config.yaml").write_text(cfg)
    with pytest.raises(CheckpointError, match="edited after training"):
        load_trained_policy(edited)

    corrupt = tmp_path / "corrupt"
    shutil.copytree(run, corrupt)
    (corrupt / "checkpoints/iter_000002/state.pt").write_bytes(b"not a checkpoint")
    res = _cli(corrupt)
    assert res.exit_code == 2 and "cannot be read" in res.text and "--checkpoint" in res.text


def test_math_run_on_its_benchmark(tmp_path):
    """A 1-iteration math GRPO run: --benchmark arith --limit 4 reproduces the run's own
    held-out evaluation (same prompt, token budget, first 4 test tasks)."""
    from deciplane.envs import load_benchmark
    from deciplane.methods.math_grpo import MathGRPO
    from deciplane.engine.generation import generate_texts

    run = tmp_path / "math"
    summary = run_training(load_config(data=MATH_RUN), run_dir=run)
    out = tmp_path / "m.json"
    res = _cli(run, "--benchmark", "arith", "--limit", "4", "--json", out)
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    assert rep["run_dir"] == str(run) and rep["checkpoint"] == "iter_000001"
    assert rep["benchmark"] == rep["trained_on"] == "arith" and rep["split"] == "test"
    assert rep["split_fingerprint"] == summary["split_fingerprints"]["test"]
    assert rep["count"] == summary["eval"]["test"]["count"] == 4
    assert rep["accuracy"] == summary["eval"]["test"]["accuracy"]
    assert rep["split_fingerprint"] in res.text

    trained = load_trained_policy(run, threads=1)
    tasks, scorer = load_benchmark("arith", "test", limit=4)
    scorer.close()
    algo = MathGRPO(trained.config, trained.policy)  # the training-time prompt
    try:
        texts = generate_texts(trained.policy, [algo.prompt(t.prompt) for t in tasks],
                               max_new_tokens=4, greedy=True)
    finally:
        algo.close()
    assert [p["id"] for p in rep["per_task"]] == [t.id for t in tasks]
    assert [p["answer"] for p in rep["per_task"]] == texts

    res = _cli(run, "--episodes", "3")
    assert res.exit_code == 2 and "--benchmark NAME" in res.text
    res = _cli(run, "--benchmark", "no-such-bench")
    assert res.exit_code == 2 and "no-such-bench" in res.text


def test_trunk_dtype_override(env_run, tmp_path):
    """--trunk-dtype sets the frozen layers' precision of the rebuilt run (here LoRA is in
    every layer of the tiny model: nothing is frozen, so bfloat16 casts nothing and scores
    the same); a bad value is refused by name; without RUN_DIR the flag is refused."""
    from deciplane.agents.precision import trunk_dtype_of

    run, summary = env_run
    trained = load_trained_policy(run, "latest", threads=1, trunk_dtype="bfloat16")
    assert trained.config.model.trunk_dtype == "bfloat16"
    assert trunk_dtype_of(trained.policy.model) is None      # no frozen layer to cast
    out = tmp_path / "bf16.json"
    res = _cli(run, "--no-progress", "--threads", "1", "--trunk-dtype", "bfloat16", "--json", out)
    assert res.exit_code == 0, res.output
    wins = [int(ep["won"]) for ep in json.loads(out.read_text())["per_episode"]]
    assert wins == summary["eval"]["test"]["episode_wins"]
    bad = _cli(run, "--no-progress", "--trunk-dtype", "int8")
    assert bad.exit_code != 0 and "trunk_dtype must be one of" in bad.text
    assert _cli("--trunk-dtype", "bfloat16").exit_code != 0
