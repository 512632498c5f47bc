#!/bin/bash
# The round's benchmarks, one after another, alone on the machine.
cd /work/wt/core
. /work/main/.venv/bin/activate
export PYTHONPATH=. OMP_NUM_THREADS=1
O=/tmp/bench/out; mkdir -p $O
echo "start $(date -u +%T) $(git rev-parse --short HEAD) load $(cat /proc/loadavg)" > $O/meta.txt
python experiments/small_workloads.py --env-ids CartPole-v1 HalfCheetah-v5 --num-envs 4 16 --rounds 5 --json $O/small_mlp.json > $O/small_mlp.txt 2>&1
echo "small_mlp done $(date -u +%T) load $(cat /proc/loadavg)" >> $O/meta.txt
python experiments/small_workloads.py --env-ids CartPole-v1 --num-envs 4 16 --rounds 5 --no-policy --json $O/small_nopolicy.json > $O/small_nopolicy.txt 2>&1
echo "small_nopolicy done $(date -u +%T) load $(cat /proc/loadavg)" >> $O/meta.txt
python experiments/rollout_vs_loop.py --envs CartPole-v1 --num-envs 64 --num-workers 2 --rounds 5 --json $O/rollout_cartpole.json > $O/rollout_cartpole.txt 2>&1
python experiments/rollout_vs_loop.py --envs straggler --num-envs 64 --num-workers 16 --rounds 5 --json $O/rollout_straggler.json > $O/rollout_straggler.txt 2>&1
echo "rollout done $(date -u +%T) load $(cat /proc/loadavg)" >> $O/meta.txt
for spec in "CartPole-v1 256" "HalfCheetah-v5 32" "ALE/Pong-v5 16"; do set -- $spec
  python -m vecsample bench --no-progress --envs $1 --num-envs $2 --workers 2 --backends machine vecsample vector_env --repeats 3 --latency-steps 0 --json $O/bench_$(echo $1 | tr '/' '_').json > $O/bench_$(echo $1 | tr '/' '_').txt 2>&1
done
echo "bench done $(date -u +%T) load $(cat /proc/loadavg)" >> $O/meta.txt
python experiments/handshake_floor.py --workers 16 64 --repeats 3 --straggler > $O/floor_straggler.txt 2>&1
python experiments/handshake_floor.py --workers 16 64 --repeats 3 > $O/floor_plain.txt 2>&1
echo "floor done $(date -u +%T) load $(cat /proc/loadavg)" >> $O/meta.txt
python docs/lab/scripts/futex_bell.py --workers 16 64 --repeats 3 > $O/futex_bell.txt 2>&1
echo "bell done $(date -u +%T) load $(cat /proc/loadavg)" >> $O/meta.txt
PYTHONPATH=/tmp/envpool_pkgs:. python -m vecsample bench --no-progress --vectorization vector_entry_point --envs HalfCheetah-v5 Hopper-v5 Ant-v5 --num-envs 32 --workers 2 --backends hosted_defaults hosted_no_infos envpool --repeats 5 --seconds 1.5 --latency-steps 0 --json $O/mujoco.json > $O/mujoco.txt 2>&1
echo "end $(date -u +%T) load $(cat /proc/loadavg)" >> $O/meta.txt
# before: e6fa9a2's own small_workloads and rollout-free bench rows, from its worktree
cd /work/wt/before
PYTHONPATH=. python experiments/small_workloads.py --env-ids CartPole-v1 HalfCheetah-v5 --num-envs 4 16 --rounds 5 --json $O/small_mlp_before.json > $O/small_mlp_before.txt 2>&1
echo "small before done $(date -u +%T) load $(cat /proc/loadavg)" >> $O/meta.txt
for spec in "CartPole-v1 256" "HalfCheetah-v5 32" "ALE/Pong-v5 16"; do set -- $spec
  PYTHONPATH=. python -m vecsample bench --no-progress --envs $1 --num-envs $2 --workers 2 --backends machine vecsample vector_env --repeats 3 --latency-steps 0 --json $O/before_bench_$(echo $1 | tr '/' '_').json > $O/before_bench_$(echo $1 | tr '/' '_').txt 2>&1
done
echo "before bench done $(date -u +%T) load $(cat /proc/loadavg)" >> $O/meta.txt
