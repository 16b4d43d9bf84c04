#!/bin/bash
cd /tmp/demo-a1
export DECIPLANE_HOME=/tmp/home-a1
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
echo "load at start: $(cat /proc/loadavg)"
start=$(date +%s)
make demo ARGS='--set model.trunk_dtype=float32'
rc=$?
end=$(date +%s)
echo "rc=$rc total_s=$((end-start)) load at end: $(cat /proc/loadavg)"
