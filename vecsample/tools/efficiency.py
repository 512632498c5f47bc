"""In-worker efficiency E: the bare loop's time per env step ÷ the worker loop's, in one process.

No process, pipe or handshake: the loop a worker runs for one step (an autoreset mode, infos on
or off) is timed against the plainest loop over the same envs (step; reset when an episode
ends), the two taking turns, each timed on this thread's CPU clock (a core taken away by other
work on the machine does not count against either). E below 1 is the worker's own cost per env
step: writing results to shared memory, gathering infos. With the worker utilization U it
predicts the share of the machine limit a sampler reaches on any number of cores
(docs/lab/benchmarks.md).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from vecsample.inprocess import WorkerLoop
from vecsample.tools.bench_backends import bare_steps
from vecsample.tools.policies import ActionTable
from vecsample.types import AutoresetMode

EnvFns = Sequence[Callable[[], gym.Env[Any, Any]]]


@dataclass
class Efficiency:
    """E for one env, env count, autoreset mode and infos setting: medians of the repeats."""

    mode: str
    infos: bool
    envs: int
    bare_us: float  # per env step
    worker_us: float  # per env step
    efficiency: float  # bare_us / worker_us
    repeats: list[float] = field(default_factory=list)  # E of each repeat


def measure(fns: EnvFns, mode: AutoresetMode, infos: bool, seconds: float = 0.1,
            repeats: int = 15) -> Efficiency:
    """E of the worker loop of ``mode`` over the envs of ``fns`` (one block, one process)."""
    bare = [fn() for fn in fns]
    for i, env in enumerate(bare):
        env.reset(seed=i)
    space = bare[0].action_space
    loop = WorkerLoop(fns, mode, infos, list(range(len(fns))), bare[0].observation_space, space)
    table = ActionTable(space, len(fns)).batches
    bare_us, worker_us = [], []
    for _ in range(repeats):
        steps, spent = bare_steps(bare, table, seconds, clock=time.thread_time)
        bare_us.append(spent / steps * 1e6)
        worker_us.append(_worker(loop.step, loop.actions, table, seconds))
    for env in bare:
        env.close()
    ratios = [b / w for b, w in zip(bare_us, worker_us, strict=True)]
    return Efficiency(mode.value, infos, len(fns), statistics.median(bare_us),
                      statistics.median(worker_us), statistics.median(ratios), ratios)


def _worker(step: Callable[[], object], view: np.ndarray, table: list[np.ndarray],
            seconds: float) -> float:
    """µs per env step of the worker's loop; only the step is timed, not writing actions."""
    steps, k, busy = 0, 0, 0.0
    while busy < seconds:
        k = (k + 1) % len(table)
        view[:] = table[k]
        t0 = time.thread_time()
        step()
        busy += time.thread_time() - t0
        steps += len(view)
    return busy / steps * 1e6
