#!/usr/bin/env bash
# Issue 25 item 3: Probe-ERPO in its regime on easy-funcs test (greedy 0.62, mid-range).
# One full pass over the 100 tasks (25 steps x 4 prompts, against the default 12 steps =
# 48 visits), negative-only (default) and with the positive side (reinforce_top).
# VARIANTS="steps25" runs only those (two can run side by side once the baselines are cached).
# Resumable: a run with summary.json is skipped, a cut run resumes.  THREADS torch threads
# (default 1; seed 1 of steps25_top ran alone with THREADS=2).
set -euo pipefail
cd "$(dirname "$0")/../../.."
RUNS=${RUNS:-runs/perpo-regime}
seed=${SEED:-0}
threads=${THREADS:-1}
for variant in ${VARIANTS:-steps25_top steps25}; do
  dir=$RUNS/$variant-s$seed
  [ -f "$dir/summary.json" ] && continue
  extra=(--set max_steps=25)
  [ "$variant" = steps25_top ] && extra+=(--set reinforce_top=true)
  resume=(); [ -d "$dir" ] && resume=(--resume)
  cat /proc/loadavg > "benchmarks/results/probe_erpo_regime/$variant-s$seed.load_start.txt"
  .venv/bin/deciplane adapt probe-erpo --benchmark easy-funcs --split test --seed "$seed" \
      --model deciplane/smollm2-135m-instruct --threads "$threads" "${extra[@]}" \
      --baseline-cache "$RUNS/cache" --run-dir "$dir" "${resume[@]}"
  cp "$dir/summary.json" "benchmarks/results/probe_erpo_regime/$variant-s$seed.summary.json"
  cat /proc/loadavg > "benchmarks/results/probe_erpo_regime/$variant-s$seed.load_end.txt"
done
