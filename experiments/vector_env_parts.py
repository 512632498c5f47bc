"""Where VectorEnv's ``step`` spends its parent time in the live loop (docs/lab/benchmarks.md).

One ``VectorEnv`` with gymnasium's defaults (NextStep, infos, ``copy=True``) is stepped with
actions sampled once. The sampler's part is timed on its own clock, step by step (its public
``step`` wrapped on the instance); VectorEnv's own parts, the vector infos and the
observation copy, come from ``sampler.stats()`` (``vector_infos_s``, ``obs_copy_s``: their total
time over the timed steps, so their mean per step, with no median). The parts
that cost VectorEnv more than ``VecSampler.step`` are the vector infos, the observation copy
and the action-count check; the rest of ``step`` (posting, waiting, reading) is the sampler's
own. Timed here, right after the wait, the parts run with cold caches: they cost several times
what a loop over the same call in isolation shows (docs/lab/benchmarks.md, "Where the time goes").

Run: ``python experiments/vector_env_parts.py --env-id ALE/Pong-v5 --num-envs 16``
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import tyro

from vecsample import VectorEnv

#: The sampler's part of a step, timed call by call: (label, its public method's name).
#: ``VectorEnv.step`` is one ``VecSampler.step`` (check, copy, post, wait, read every row).
PARTS = (("VecSampler.step: post, wait, read", "step"),)
#: VectorEnv's own parts, as ``stats()`` reports them: (label, phase).
PHASES = (("vector infos from the columns", "vector_infos"),
          ("observation copy (copy=True)", "obs_copy"))


@dataclass
class Args:
    env_id: str = "HalfCheetah-v5"
    """a gymnasium id (ALE/ ids need ale-py, the bench extra)"""
    num_envs: int = 32
    """envs in the VectorEnv"""
    workers: int = 2
    """worker processes"""
    steps: int = 2000
    """timed steps, after 200 untimed ones"""


def _timed(obj: Any, name: str, times: list[float]) -> None:
    """Replaces ``obj.name`` (on the instance) with a wrapper that appends each call's time."""
    inner: Callable[..., Any] = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        result = inner(*args, **kwargs)
        times.append(time.perf_counter() - start)
        return result

    setattr(obj, name, wrapper)


def measure(envs: VectorEnv, steps: int) -> dict[str, list[float]]:
    """µs per step of every part and of the whole ``step`` (200 warm-up steps not kept)."""
    times: dict[str, list[float]] = {label: [] for label, _ in PARTS}
    for label, name in PARTS:
        _timed(envs.sampler, name, times[label])
    space = envs.single_action_space
    space.seed(0)
    actions = np.stack([space.sample() for _ in range(envs.num_envs)])
    envs.reset(seed=0)
    whole = []
    for k in range(200 + steps):
        if k == 200:
            before = envs.sampler.stats()
        start = time.perf_counter()
        envs.step(actions)
        whole.append(time.perf_counter() - start)
    after = envs.sampler.stats()
    out = {label: [t * 1e6 for t in values[200:]] for label, values in times.items()}
    for label, phase in PHASES:  # one value: the mean per step
        out[label] = [(after[f"{phase}_s"] - before[f"{phase}_s"]) / steps * 1e6]
    out["the whole step()"] = [t * 1e6 for t in whole[200:]]
    return out


def main(args: Args) -> None:
    if args.env_id.startswith("ALE/"):
        import ale_py

        gym.register_envs(ale_py)
    envs = VectorEnv([lambda: gym.make(args.env_id) for _ in range(args.num_envs)],
                     num_workers=args.workers)
    try:
        times = measure(envs, args.steps)
    finally:
        envs.close()
    print(f"{args.env_id} × {args.num_envs}, {args.workers} workers, {args.steps} steps")
    print(f"{'part of VectorEnv.step':<40}{'median µs':>11}{'mean µs':>10}")
    for label, values in times.items():
        median = f"{statistics.median(values):>11.1f}" if len(values) > 1 else f"{'—':>11}"
        print(f"{label:<40}{median}{statistics.mean(values):>10.1f}")


def parse_args(argv: Sequence[str] | None = None) -> Args:
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    main(parse_args())
