"""What each lane costs per step (docs/semantics.md, "Spaces and their lanes").

The same sampler (2 workers × 8 envs, full batches through ``step``) is timed with observation
and action spaces that live in shared memory, that are pickled through the pipe (Text), and
mixed (a Dict with both). The envs return one fixed observation and do no work, so the
differences are the lanes' own costs. The spaces are interleaved repeat by repeat, so the
ratios are measured side by side; the table gives the median µs per batch and per env step.

Run: ``python experiments/lane_cost.py --seconds 2 --repeats 5``
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import tyro
from gymnasium import spaces

from vecsample import VecSampler

SPACES: dict[str, tuple[spaces.Space[object], spaces.Space[object]]] = {
    "shared (Box obs, Discrete act)": (spaces.Box(-1, 1, (8,)), spaces.Discrete(4)),
    "pickled (Text obs, Text act)": (spaces.Text(8), spaces.Text(4)),
    "mixed (Dict of Box and Text obs, Discrete act)": (
        spaces.Dict({"x": spaces.Box(-1, 1, (8,)), "tag": spaces.Text(8)}), spaces.Discrete(4)),
}


class FixedEnv(gym.Env[Any, Any]):
    """Returns one observation sampled at construction; a step costs next to nothing."""

    def __init__(self, observation_space: spaces.Space[Any], action_space: spaces.Space[Any]):
        self.observation_space, self.action_space = observation_space, action_space
        observation_space.seed(0)
        self.obs = observation_space.sample()

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        return self.obs, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        return self.obs, 0.0, False, False, {}


@dataclass
class Args:
    seconds: float = 2.0
    """duration of one measurement"""
    repeats: int = 5
    """measurements per space; the median is reported"""
    workers: int = 2
    """worker processes"""
    envs_per_worker: int = 8
    """envs in each worker's block"""


def measure(sampler: VecSampler, seconds: float) -> float:
    """Seconds per full batch of ``sampler``, stepped with actions sampled once."""
    space = sampler.single_action_space
    space.seed(0)
    actions = [space.sample() for _ in range(sampler.num_envs)]
    batch = tuple(actions) if isinstance(space, spaces.Text) else np.asarray(actions)
    sampler.reset(seed=0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        sampler.step(batch)
        steps += 1
    return (time.perf_counter() - start) / steps


def main(args: Args) -> None:
    n = args.workers * args.envs_per_worker
    samplers = {
        name: VecSampler([functools.partial(FixedEnv, obs, act) for _ in range(n)],
                         num_workers=args.workers, infos=False)
        for name, (obs, act) in SPACES.items()
    }
    times: dict[str, list[float]] = {name: [] for name in SPACES}
    try:
        for _ in range(args.repeats):
            for name, sampler in samplers.items():
                times[name].append(measure(sampler, args.seconds))
    finally:
        for sampler in samplers.values():
            sampler.close()
    base = statistics.median(times[next(iter(SPACES))])
    print(f"{'spaces':<48}{'µs/batch':>10}{'µs/env step':>13}{'× shared':>10}")
    for name, values in times.items():
        t = statistics.median(values)
        print(f"{name:<48}{t * 1e6:>10.1f}{t * 1e6 / n:>13.2f}{t / base:>10.2f}")


def parse_args(argv: Sequence[str] | None = None) -> Args:
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    main(parse_args())
