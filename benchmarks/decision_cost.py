"""The cost account of a menu decision on the demo's settings, before and after reuse per row.

Runs the demo's config (``configs/quickstart_twx.yaml``: SmolLM2-135M, the items readout
at layer 18, twc, 30-step cap, the labels zero-shot, the warm start) as short whole runs
through ``deciplane train``, one process each, one torch thread, no evaluation helper and
no wall-time budget, for every setting asked:

* ``batch`` — one left-padded forward per batch with the batch's shared prefix computed
  once (the demo until now);
* ``blocks`` — row by row in fixed 32-token blocks with the prompt cache
  (``prompt_cache.mode: blocks``);

each with the trunk in ``float32`` and, where the CPU has native bf16, ``bfloat16``
(``model.trunk_dtype``). Per phase (zero-shot with the labels readout, warm start,
evaluations, rollouts; ``--bc-episodes`` expert episodes instead of the demo's 80, so
that a setting takes minutes) it reads ``summary.json``'s ``decision_cost``: decisions, prompt
tokens and tokens computed per decision, CPU-s per decision, and adds the FLOPs per
decision of the linear layers the forward runs (``2 x`` their weights per computed token,
plus the output layer at the last token for the labels readout; attention over <= 400
tokens adds < 8%) and the rate they ran at as a share of this CPU's one-thread matmul rate
in the trunk's dtype (:func:`deciplane.agents.precision.matmul_gflops`). The episodes
played must be the same between ``batch`` and ``blocks`` up to float rounding (greedy
decisions on near-ties may flip): the wins of each evaluation are printed side by side.

    python benchmarks/decision_cost.py --episodes 8 --out benchmarks/results/decision_cost.json
    python benchmarks/decision_cost.py --episodes 8 --cap-avx2 \
        --out benchmarks/results/decision_cost_avx2.json

Run it alone: the load average is recorded. ``--table FILE...`` prints the markdown table of
result files (batch against blocks per phase and precision). ``--cap-avx2`` runs every setting with
torch's kernels capped to AVX2 (``ATEN_CPU_CAPABILITY=avx2``, ``ONEDNN_MAX_CPU_ISA=AVX2``,
``MKL_ENABLE_INSTRUCTIONS=AVX2``), as on a CPU without AVX-512, and float32 only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
DEMO = "configs/quickstart_twx.yaml"
AVX2_CAP = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
            "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def linear_flops_per_token(config, depth: int) -> float:
    """``2 x`` the weights of ``depth`` decoder layers of a Llama-style config."""
    h, i = config.hidden_size, config.intermediate_size
    kv = config.num_key_value_heads * (h // config.num_attention_heads)
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * i
    return 2.0 * per_layer * depth


def run_setting(mode: str, dtype: str, episodes: int, iterations: int, bc_episodes: int,
                workdir: Path, env: dict[str, str]) -> dict:
    run = workdir / f"{mode}-{dtype}"
    sets = [f"prompt_cache.mode={mode}", f"model.trunk_dtype={dtype}", "model.threads=1",
            "eval.workers=1", f"eval.episodes={episodes}", "eval.every=0",
            "eval.cache_baselines=false", "max_wall_time_s=null", f"iterations={iterations}",
            f"bc.episodes={bc_episodes}", "progress=false"]
    cmd = [sys.executable, "-m", "deciplane.cli", "train", str(REPO / DEMO), "--run-dir",
           str(run)] + [x for s in sets for x in ("--set", s)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL)
    summary = json.loads((run / "summary.json").read_text())
    return {"wall_s": round(time.perf_counter() - t0, 1), "summary": summary}


def account(summary: dict, rates: dict[str, float], dtype: str) -> dict[str, dict]:
    """Per phase: the summary's decision cost with FLOPs and the share of the matmul rate."""
    from transformers import AutoConfig

    from deciplane.agents.loading import resolve_model

    folder, _ = resolve_model(summary["config"]["model"]["name"])
    cfg = AutoConfig.from_pretrained(folder)
    items_depth = summary["config"].get("readout_layer") or cfg.num_hidden_layers
    rows = {}
    for phase, row in summary["decision_cost"]["phases"].items():
        labels = phase == "eval_zero_shot_labels"
        depth = cfg.num_hidden_layers if labels else items_depth
        flops = row["computed_tokens_per_decision"] * linear_flops_per_token(cfg, depth)
        if labels:
            flops += 2.0 * cfg.hidden_size * cfg.vocab_size
        cpu = row["cpu_s_per_decision"]
        rate = flops / cpu / 1e9 if cpu > 0 else 0.0
        rows[phase] = {**{k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()},
                       "gflop_per_decision": round(flops / 1e9, 3),
                       "gflop_per_cpu_s": round(rate, 1),
                       "share_of_matmul_rate": round(rate / rates[dtype], 3)}
    return rows


def wins(summary: dict) -> dict[str, list[int]]:
    out = {}
    for stage in ("zero_shot_labels", "before", "after_warm_start", "eval"):
        res = (summary.get(stage) or {}).get("test")
        if res:
            out[stage] = res.get("episode_wins")
    return out


PHASES = ("eval_zero_shot_labels", "warm_start", "eval_after_warm_start", "rollouts",
          "eval_final")


def markdown_table(results: list[dict]) -> str:
    """One row per phase and setting of the given result files: tokens computed and CPU-s
    per decision, and ``blocks`` against ``batch`` of the same file and precision."""
    lines = ["| CPU kernels | trunk | phase | prompt tokens | computed: batch -> blocks | "
             "CPU-s per decision: batch -> blocks | CPU-s ratio | share of matmul rate: "
             "batch -> blocks |", "|---|---|---|---|---|---|---|---|"]
    for res in results:
        kernels = "AVX2 (capped)" if res["kernels_capped_to_avx2"] else "native"
        for dtype, rate in res["matmul_gflops_one_thread"].items():
            batch = res["settings"].get(f"batch/{dtype}")
            blocks = res["settings"].get(f"blocks/{dtype}")
            if batch is None or blocks is None:
                continue
            for phase in PHASES:
                a, b = batch["phases"].get(phase), blocks["phases"].get(phase)
                if a is None or b is None:
                    continue
                lines.append(
                    f"| {kernels} ({rate:.0f} GFLOP/s) | {dtype} | {phase} | "
                    f"{a['prompt_tokens_per_decision']:.0f} | "
                    f"{a['computed_tokens_per_decision']:.0f} -> "
                    f"{b['computed_tokens_per_decision']:.0f} | "
                    f"{a['cpu_s_per_decision']:.3f} -> {b['cpu_s_per_decision']:.3f} | "
                    f"{b['cpu_s_per_decision'] / a['cpu_s_per_decision']:.2f} | "
                    f"{a['share_of_matmul_rate']:.2f} -> {b['share_of_matmul_rate']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=10, help="test games per evaluation")
    ap.add_argument("--iterations", type=int, default=1, help="RL iterations (16 episodes each)")
    ap.add_argument("--bc-episodes", type=int, default=16,
                    help="expert episodes of the warm start (the demo: 80)")
    ap.add_argument("--modes", default="batch,blocks")
    ap.add_argument("--dtypes", default=None, help="default: float32, and bfloat16 where native")
    ap.add_argument("--cap-avx2", action="store_true")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/decision_cost.json"))
    ap.add_argument("--table", nargs="+", metavar="RESULT_JSON",
                    help="print the markdown table of these result files and stop")
    args = ap.parse_args(argv)
    if args.table:
        print(markdown_table([json.loads(Path(p).read_text()) for p in args.table]))
        return 0
    from deciplane.agents.precision import matmul_gflops, native_bf16

    env = dict(os.environ, PYTHONPATH=str(REPO))
    if args.cap_avx2:
        env.update(AVX2_CAP)
        os.environ.update(AVX2_CAP)   # the matmul rates below: capped the same way
    dtypes = (args.dtypes.split(",") if args.dtypes else
              ["float32"] + (["bfloat16"] if native_bf16() and not args.cap_avx2 else []))
    rates = {d: round(matmul_gflops(getattr(torch, d)), 1) for d in dtypes}
    load0 = os.getloadavg()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in dtypes:
            for mode in args.modes.split(","):
                print(f"{mode}, trunk {dtype} ...", flush=True)
                r = run_setting(mode, dtype, args.episodes, args.iterations, args.bc_episodes,
                                Path(tmp), env)
                s = r["summary"]
                results[f"{mode}/{dtype}"] = {
                    "wall_s": r["wall_s"], "cpu_s": round(s["cpu_time_s"], 1),
                    "trunk": s["machine"]["trunk"], "phases": account(s, rates, dtype),
                    "prompt_cache": s["decision_cost"]["prompt_cache"], "wins": wins(s)}
                for phase, row in results[f"{mode}/{dtype}"]["phases"].items():
                    print(f"  {phase}: {row['decisions']} decisions, "
                          f"{row['prompt_tokens_per_decision']:.0f} prompt / "
                          f"{row['computed_tokens_per_decision']:.0f} computed tokens, "
                          f"{row['cpu_s_per_decision']:.3f} CPU-s, "
                          f"{row['share_of_matmul_rate']:.2f} of the matmul rate", flush=True)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    out = {"command": "python benchmarks/decision_cost.py " + " ".join(
               sys.argv[1:] if argv is None else argv),
           "config": DEMO, "episodes": args.episodes, "iterations": args.iterations,
           "bc_episodes": args.bc_episodes,
           "date": time.strftime("%Y-%m-%d"), "cpu": cpu, "native_bf16": native_bf16(),
           "kernels_capped_to_avx2": args.cap_avx2, "matmul_gflops_one_thread": rates,
           "torch": torch.__version__, "load_average_start": [round(x, 2) for x in load0],
           "load_average_end": [round(x, 2) for x in os.getloadavg()], "settings": results}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
