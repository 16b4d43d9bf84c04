#!/bin/bash
# usage: run.sh NAME [--set k=v ...]
name=$1; shift
cd /work/main
exec .venv/bin/deciplane train configs/quickstart_twx.yaml --run-dir /tmp/rlx/$name \
  --set max_wall_time_s=null --set iterations=9 --set model.threads=1 --set eval.workers=1 \
  --set eval.cache_baselines=false --set eval.zero_shot_labels=false --set eval.before=false \
  --set 'eval.final_splits=[valid]' --set eval.during_split=valid --set eval.episodes=40 \
  --set eval.during_episodes=40 --set eval.every=3 --set progress=false "$@" > /tmp/rlx/$name.log 2>&1
