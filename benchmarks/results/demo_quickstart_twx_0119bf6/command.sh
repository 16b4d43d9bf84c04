#!/bin/bash
cd /tmp/demo-g1
export DECIPLANE_HOME=/tmp/home-g1
echo "load at start: $(cat /proc/loadavg)"
start=$(date +%s)
make demo
rc=$?
end=$(date +%s)
echo "rc=$rc total_s=$((end-start)) load at end: $(cat /proc/loadavg)"
