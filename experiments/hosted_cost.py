"""Where a hosted vector env's step goes (docs/lab/benchmarks.md, "Past the bare loop").

Steps ``VecSampler(HostedVector(env_id))`` with full batches for ``--seconds`` and reports, per
batch step, the wall time and the CPU time (user and system, from ``/proc``) of the parent and
of each worker, beside the CPU one batch of a worker's size costs when stepped in this process.
The difference is the hosting's overhead: the parent's send and collect, the handshake, the
wake-ups, the copies into shared memory, and (on a loaded machine) cold caches.

Run: ``python experiments/hosted_cost.py --num-envs 4096 --workers 2 --spin-us 0``
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import tyro

from vecsample import HostedVector, VecSampler


@dataclass
class Args:
    env_id: str = "CartPole-v1"
    """a gymnasium id with a vector entry point"""
    num_envs: int = 4096
    """envs of all workers together"""
    workers: int = 2
    """worker processes (each hosts num_envs / workers envs)"""
    spin_us: float | None = None
    """the sampler's spin_us (None: its default)"""
    seconds: float = 3.0
    """how long each measurement steps"""
    json: str | None = None
    """optional path for the results"""


@dataclass
class Cost:
    """Microseconds per batch step."""

    wall_us: float
    parent_user_us: float
    parent_system_us: float
    worker_user_us: list[float]
    worker_system_us: list[float]
    #: The worker's own clock around its step (actions read to rows written), spin excluded.
    worker_step_us: float
    in_process_block_cpu_us: float


def _ticks(pid: int) -> tuple[int, int]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])  # utime, stime


def hosted(args: Args, actions: list[np.ndarray]) -> tuple[float, float, float, list[float],
                                                            list[float], float]:
    with VecSampler(HostedVector(args.env_id), num_envs=args.num_envs, num_workers=args.workers,
                    autoreset_mode="NextStep", infos=False, spin_us=args.spin_us) as sampler:
        sampler.reset(seed=0)
        pids = sampler.worker_pids()
        before, parent_before = [_ticks(p) for p in pids], os.times()
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            sampler.step(actions[steps % len(actions)])
            steps += 1
        wall = time.perf_counter() - start
        after, parent_after = [_ticks(p) for p in pids], os.times()
        step_s = sampler.stats()["env_step_s"] / args.workers  # reset() is not counted
    tick, per = os.sysconf("SC_CLK_TCK"), 1e6 / steps
    return (wall * per, (parent_after.user - parent_before.user) * per,
            (parent_after.system - parent_before.system) * per,
            [(b[0] - a[0]) / tick * per for a, b in zip(before, after, strict=True)],
            [(b[1] - a[1]) / tick * per for a, b in zip(before, after, strict=True)],
            step_s * per)


def in_process(args: Args, actions: list[np.ndarray]) -> float:
    """CPU µs of one batch of a worker's size, stepped here."""
    block = args.num_envs // args.workers
    env = gym.make_vec(args.env_id, num_envs=block, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    steps, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < args.seconds:
        env.step(actions[steps % len(actions)][:block])
        steps += 1
    env.close()
    return (time.process_time() - cpu) / steps * 1e6


def main(args: Args) -> Cost:
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, 2, args.num_envs) for _ in range(16)]
    wall, user, system, workers_user, workers_system, step = hosted(args, actions)
    cost = Cost(wall, user, system, workers_user, workers_system, step,
                in_process(args, actions))
    print(f"{args.env_id}, {args.num_envs} envs on {args.workers} workers, µs per batch step: "
          f"wall {cost.wall_us:.0f}; parent user {user:.0f} + system {system:.0f}; workers "
          + ", ".join(f"{u:.0f} + {s:.0f}" for u, s in zip(workers_user, workers_system,
                                                            strict=True))
          + f" (their own clock around a step: {step:.0f} wall); one block stepped in this "
          f"process: {cost.in_process_block_cpu_us:.0f} CPU")
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(cost), indent=2))
    return cost


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line)."""
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    main(parse_args())
