"""`deciplane adapt` end to end with the tiny model and a tiny budget."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from deciplane.cli import app

SETS = ["--set", "votes=4", "--set", "train_samples=2", "--set", "max_new_tokens=6",
        "--set", "prompts_per_step=2", "--set", "lr=1e-2", "--set", "temperature=1.5",
        "--set", "lora_rank=4"]


def test_adapt_ttrl_then_ttpo_write_summaries(tmp_path):
    runner = CliRunner()
    cache = tmp_path / "baselines"
    for method in ("ttrl", "ttpo"):
        out = tmp_path / method
        res = runner.invoke(app, ["adapt", method, "--benchmark", "arith-shift", "--split", "test",
                                  "--model", "deciplane/tiny", "--limit", "4", "--seed", "1",
                                  "--run-dir", str(out), "--baseline-cache", str(cache),
                                  "--threads", "1", *SETS])
        assert res.exit_code == 0, res.output
        s = json.loads((out / "summary.json").read_text())
        for key in ("before", "after", "baselines", "budget", "split_fingerprint", "seed",
                    "paper_values_changed", "diagnostics", "curve"):
            assert key in s, key
        assert s["seed"] == 1 and s["n_tasks"] == 4
        assert {"no_adaptation_greedy", "no_adaptation_sampled",
                "majority_vote_equal_budget", "best_of_n_equal_budget"} <= set(s["baselines"])
        assert s["paired_vs_baselines"]["majority_vote_equal_budget"]["n"] == 4
        maj = s["baselines"]["majority_vote_equal_budget"]
        assert maj["votes_per_task"] * 4 >= s["budget"]["samples"] == maj["adapter_samples"]
        for k in ("samples", "generated_tokens", "forward_tokens", "backward_tokens",
                  "optimizer_steps", "wall_time_s"):
            assert k in s["budget"]
        assert 0.0 <= s["after"]["accuracy"] <= 1.0
        assert "reward_accuracy" in s["diagnostics"]
        assert s["paper_values_changed"]["votes"] == {"paper": 64, "used": 4}
        assert (out / "accuracy_vs_steps.png").stat().st_size > 1000
        assert "accuracy" in res.output
        assert s["cpu_time_s"] > 0 and len(s["load_average_at_end"]) == 3
        assert "adapt 2/2" in res.output        # not a terminal: one log line per event
    assert sorted(p.name.split("-")[1] for p in cache.glob("baselines-*.json")) == ["greedy", "majority"]
    assert "baseline: majority vote (cached) 1/1" in res.output     # ttpo reused ttrl's baselines


def test_adapt_rejects_unknown_options(tmp_path):
    res = CliRunner().invoke(app, ["adapt", "ttrl", "--model", "deciplane/tiny", "--limit", "2",
                                   "--run-dir", str(tmp_path), "--set", "bogus=1"])
    assert res.exit_code == 2
    assert "unknown option(s) bogus" in res.output and "votes" in res.output


def test_adapt_options_lists_paper_values():
    res = CliRunner().invoke(app, ["adapt", "options", "ttpo"])
    assert res.exit_code == 0 and "lam = 10.0  [paper: 0.1]" in res.output
    assert "support_top_p = 0.9  [paper: None]" in res.output
    assert "votes = 8  [paper: 64]" in res.output and "teacher = " in res.output


def test_adapt_probe_erpo_on_easy_funcs_writes_summary(tmp_path):
    out = tmp_path / "perpo"
    sets = ["votes=4", "max_new_tokens=10", "prompts_per_step=2", "max_steps=1", "lr=1e-2",
            "temperature=1.5", "lora_rank=4", "model_probe_samples=1", "probe_max_new_tokens=10",
            "probe_timeout_s=0.5", "penalize_invalid=false"]
    res = CliRunner().invoke(app, ["adapt", "probe-erpo", "--benchmark", "easy-funcs",
                                   "--model", "deciplane/tiny", "--limit", "3", "--run-dir",
                                   str(out), "--threads", "1",
                                   *[x for s in sets for x in ("--set", s)]])
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert s["method"] == "probe-erpo" and s["benchmark"] == "easy-funcs" and s["n_tasks"] == 3
    assert {"no_adaptation_greedy", "no_adaptation_sampled",
            "consensus_selection_equal_budget"} == set(s["baselines"])
    cons = s["baselines"]["consensus_selection_equal_budget"]
    assert cons["votes_per_task"] * 3 >= s["budget"]["samples"] == cons["adapter_samples"]
    assert 0.0 <= s["before"]["accuracy"] <= 1.0 and 0.0 <= s["after"]["accuracy"] <= 1.0
    assert s["split_fingerprint"] and "ours" in s["note"] and s["probes"]["per_task_mean"] > 0
    assert s["budget"]["optimizer_steps"] + s["budget"]["skipped_steps"] == 1
    assert (out / "accuracy_vs_steps.png").stat().st_size > 1000
    answers = json.loads((out / "answers.json").read_text())
    assert set(answers["after"]) == set(answers["before_greedy"]) and len(answers["after"]) == 3
def test_adapt_default_benchmark_is_the_calibrated_one():
    import inspect

    from deciplane.adapt.runner import DEFAULT_BENCHMARK, run_adaptation
    from deciplane.benchmarks import split_names

    assert DEFAULT_BENCHMARK == "products-1d" and split_names(DEFAULT_BENCHMARK) == ("test",)
    assert inspect.signature(run_adaptation).parameters["benchmark"].default == DEFAULT_BENCHMARK
    res = CliRunner().invoke(app, ["adapt", "tasco", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "products-1d" in res.output
