#!/bin/bash
cd /work/main
echo "=== round_trip $(git rev-parse --short HEAD) $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
PYTHONPATH=. /work/main/.venv/bin/python docs/lab/scripts/round_trip.py 2>&1 | grep -v Warning
for i in 1 2; do
echo "=== small_workloads run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
PYTHONPATH=. /work/main/.venv/bin/python experiments/small_workloads.py --env-ids CartPole-v1 HalfCheetah-v5 --num-envs 4 16 --rounds 3 --json /tmp/bench/sw_rt_$i.json 2>&1 | grep -v Warning
done
echo DONE
