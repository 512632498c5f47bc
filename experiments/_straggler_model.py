"""The straggler model of experiments/handshake_floor.py (docs/lab/straggler_model.md).

A module that the script imports, not a script (hence the underscore). A 16-core machine stepped
blocks of about 1.1 ms that now and then took 1.5–2× as long (issue 38): a full batch waits for
the slowest of W workers. This stands in for it on 2 cores, with sleeps. Block ``k`` (counted
from 0 at the env's reset) of slot ``s`` (a step-API worker: one per process, two with
``pipeline``) sleeps ``base × factor`` nanoseconds, where the factor is a function of
``(seed, s, k)`` only: with probability ``p`` it is uniform in [1.5, 2], else uniform in
[1 − jitter, 1 + jitter]. Both draws come from splitmix64's step applied three times,
``h = mix(mix(mix(seed) ^ s) ^ k)``: ``h`` decides whether the block straggles and ``mix(h)``
draws its factor, each as its top 53 bits over 2**53. handshake_floor.c computes the same
integers and the same doubles in the same order, so the C floor and vecsample's sleep envs sleep
the same time at the same block of the same slot (``handshake_floor schedule`` prints them;
tests/test_scaling.py checks that the two agree).

``p = jitter = 0`` is the model off: every block sleeps exactly ``base``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

MASK = (1 << 64) - 1
#: A straggling block takes this many times its base, drawn uniformly in between.
SLOW = (1.5, 2.0)


def mix(x: int) -> int:
    """splitmix64's step: ``x`` plus the golden gamma, then its output function (mod 2**64)."""
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def unit(h: int) -> float:
    """The top 53 bits of ``h`` as a double in [0, 1)."""
    return (h >> 11) * 2.0**-53


@dataclass(frozen=True)
class Stragglers:
    """The schedule: ``p`` the chance that a block straggles, ``jitter`` the spread of the
    others, ``seed`` the stream. ``OFF`` (p = jitter = 0) sleeps every block its base."""

    p: float = 0.1
    jitter: float = 0.05
    seed: int = 0

    def factor(self, slot: int, batch: int) -> float:
        h = mix(mix(mix(self.seed & MASK) ^ slot) ^ batch)
        draw = unit(mix(h))
        if unit(h) < self.p:
            return SLOW[0] + (SLOW[1] - SLOW[0]) * draw
        return 1.0 + self.jitter * (2.0 * draw - 1.0)

    def delay_ns(self, base_ns: int, slot: int, batch: int) -> int:
        """What block ``batch`` of ``slot`` sleeps, in whole nanoseconds (truncated, as C's
        cast does)."""
        return int(float(base_ns) * self.factor(slot, batch))


OFF = Stragglers(p=0.0, jitter=0.0)


class ScheduledSleepEnv(gym.Env[np.ndarray, np.int64]):
    """The env that sleeps for its slot's block: step ``k`` since the last reset sleeps
    ``model.delay_ns(base_ns, slot, k)``; ``base_ns`` 0 returns at once (the block's other envs).
    Never ends an episode, uses no CPU, as ``vecsample.testing.SleepEnv``."""

    observation_space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, slot: int, base_ns: int, model: Stragglers) -> None:
        self.slot, self.base_ns, self.model = slot, base_ns, model
        self.obs = np.zeros(4, dtype=np.float32)
        self.batch = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None,
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.batch = 0  # the schedule restarts: block 0 of this slot comes next
        return self.obs, {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.base_ns:
            time.sleep(self.model.delay_ns(self.base_ns, self.slot, self.batch) * 1e-9)
        self.batch += 1
        return self.obs, 0.0, False, False, {}


def scheduled_fns(num_envs: int, slots: int, block_ns: int, model: Stragglers,
                  slots_per_process: int = 1) -> list[Callable[[], gym.Env[Any, Any]]]:
    """``num_envs`` factories over ``slots`` equal blocks: the first env of each slot's block
    sleeps the schedule of its slot, with base ``block_ns // slots_per_process`` (a pipelined
    process's two halves share its block time), the others return at once."""
    per = num_envs // slots
    base = block_ns // slots_per_process
    return [functools.partial(ScheduledSleepEnv, i // per, base if i % per == 0 else 0, model)
            for i in range(num_envs)]
