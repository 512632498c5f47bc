"""VecSampler full batches against a one-process bare loop of its envs (docs/lab/benchmarks.md).

The core issue's figure in docs/lab/benchmarks.md (VecSampler 2 x 64 against one bare loop of 128)
comes from here. Prints the medians of interleaved repeats and the ratio to the machine limit
estimate (cores × the one-process bare loop).

Run: ``python -m experiments.core_throughput --repeats 5``
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import tyro

from vecsample import VecSampler


@dataclass
class Args:
    env_id: str = "CartPole-v1"
    """gymnasium id with a Discrete action space"""
    num_envs: int = 128
    """envs in the bare loop and in the sampler"""
    num_workers: int = 2
    """VecSampler workers (the machine limit is this many bare loops' worth)"""
    seconds: float = 2.0
    """duration of one measurement"""
    repeats: int = 5
    """interleaved repeats; medians are reported"""


def bare_loop(envs: list[gym.Env], seconds: float) -> float:
    """Steps/s of one process stepping every env in turn, resetting ended ones."""
    k, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        action = k % 2
        for env in envs:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        k += 1
    return k * len(envs) / (time.perf_counter() - start)


def sampler_loop(sampler: VecSampler, seconds: float) -> float:
    """Steps/s of full-batch ``step`` calls."""
    actions = np.zeros(sampler.num_envs, dtype=np.int64)
    k, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        actions[:] = k % 2
        sampler.step(actions)
        k += 1
    return k * sampler.num_envs / (time.perf_counter() - start)


def main(args: Args) -> None:
    envs = [gym.make(args.env_id) for _ in range(args.num_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    bare, sampled = [], []
    with VecSampler(args.env_id, num_envs=args.num_envs, num_workers=args.num_workers,
                    infos=False, seed=0) as sampler:
        sampler.reset()
        for _ in range(args.repeats):
            bare.append(bare_loop(envs, args.seconds))
            sampled.append(sampler_loop(sampler, args.seconds))
    b, s = statistics.median(bare), statistics.median(sampled)
    print(f"bare loop, {args.num_envs} envs in 1 process: {b:,.0f} steps/s")
    print(f"VecSampler {args.num_workers} x {args.num_envs // args.num_workers}, full batches: "
          f"{s:,.0f} steps/s")
    print(f"ratio to one bare loop: {s / b:.3f}; to {args.num_workers} x the bare loop: "
          f"{s / (args.num_workers * b):.3f}")


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line)."""
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    main(parse_args())
