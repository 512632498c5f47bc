"""The parent's spin with ``env_placement="share"``, against SyncVectorEnv (docs/lab/benchmarks.md).

With "share" the parent steps the last block itself between its post and its wait, so a
sampler of W workers runs W - 1 worker processes beside the parent. Whether the parent spins
before it sleeps in that wait (``Layout.parent_spin_s``) decides whether the one worker's step,
done while the parent stepped its own block, is seen at once or after a scheduler wake-up.
This script times ``VecSampler.step`` on CartPole-v1 (fixed actions, no policy) for "share"
with the automatic spin, "share" with ``spin_us=200`` (the parent spins too), "parent" and
"workers", each ÷ gymnasium's ``SyncVectorEnv`` in the same round: medians of ``--rounds``
interleaved rounds of ``--seconds`` each.

Run from the checkout: ``PYTHONPATH=. python docs/lab/scripts/share_spin.py``
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import tyro

from vecsample import VecSampler

#: The samplers timed: their options beside num_envs, num_workers=2 and the seed.
CONFIGS: dict[str, dict[str, Any]] = {
    "share": {"env_placement": "share"},
    "share, spin_us=200": {"env_placement": "share", "spin_us": 200},
    "parent": {"env_placement": "parent"},
    "workers": {"env_placement": "workers"},
}


@dataclass
class Args:
    num_envs: list[int] = field(default_factory=lambda: [4, 16])
    """envs per sampler (two workers)"""
    rounds: int = 7
    """interleaved rounds; the medians are over them"""
    seconds: float = 0.7
    """how long each configuration steps in a round"""


def rate(step: Callable[[], object], n: int, seconds: float) -> float:
    """Env steps per second of ``step`` (``n`` envs a call), called for ``seconds``."""
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        calls += 1
    return calls * n / (time.perf_counter() - start)


def measure(n: int, args: Args) -> dict[str, list[float]]:
    """Every configuration's env steps per second, round by round, with Sync's first."""
    sync = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n)
    samplers = {k: VecSampler("CartPole-v1", num_envs=n, num_workers=2, seed=0, **v)
                for k, v in CONFIGS.items()}
    try:
        actions = np.zeros(n, dtype=np.int64)
        sync.reset(seed=0)
        steps: dict[str, Callable[[], object]] = {"sync": lambda: sync.step(actions)}
        for name, sampler in samplers.items():
            sampler.reset(seed=0)
            steps[name] = stepper(sampler, actions)
        rounds: dict[str, list[float]] = {k: [] for k in steps}
        for _ in range(args.rounds):
            for name, step in steps.items():
                rounds[name].append(rate(step, n, args.seconds))
        return rounds
    finally:
        for sampler in samplers.values():
            sampler.close()
        sync.close()


def stepper(sampler: VecSampler, actions: np.ndarray) -> Callable[[], object]:
    return lambda: sampler.step(actions)


def main(args: Args) -> None:
    print("envs  config               steps/s  ÷ sync")
    for n in args.num_envs:
        rounds = measure(n, args)
        for name, rates in rounds.items():
            ratio = statistics.median(r / s for r, s in zip(rates, rounds["sync"], strict=True))
            print(f"{n:>4}  {name:<19} {statistics.median(rates):>8,.0f}  {ratio:6.3f}")


def parse_args(argv: Sequence[str] | None = None) -> Args:
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        main(parse_args())
