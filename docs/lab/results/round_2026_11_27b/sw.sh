#!/bin/bash
# Alternates the checkout before (b166be6) and after (80a743a): small_workloads, MLP in the loop.
for i in 1 2; do
  for tree in base main; do
    cd /work/wt/$tree 2>/dev/null || cd /work/$tree
    echo "=== $tree $(git rev-parse --short HEAD) run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    PYTHONPATH=. /work/main/.venv/bin/python experiments/small_workloads.py --env-ids CartPole-v1 HalfCheetah-v5 --num-envs 4 16 --rounds 3 --json /tmp/bench/sw_${tree}_$i.json 2>&1 | grep -v Warning
  done
done
echo DONE
