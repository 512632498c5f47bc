"""A worker's step loop run in this process, with no process, pipe or handshake around it.

``WorkerLoop(env_fns, autoreset_mode, infos, seeds)`` builds the envs here and resets them, and
``step()`` runs exactly what a worker runs for one step of its block (the env loop of the
autoreset mode, the writes to shared memory, the infos), reading the actions from ``actions``.
It is what ``vecsample bench`` times against a bare loop to give the in-worker efficiency E
(``vecsample.tools.efficiency``), so that E measures the worker's own code and nothing else.

The same code serves the blocks the trainer's process steps itself (``Options.env_placement``):
``ServedInParent`` is a worker of the sampler, handshake and replies included, that the parent
runs in its own process; ``time_block`` is what ``env_placement="auto"`` times to choose. The
parent's code reaches both through the entry points of ``_wire/spec.py`` (``IN_PARENT``,
``TIME_BLOCK``), as it reaches a worker process's ``worker_main``: it never imports the
worker's modules itself.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from vecsample._wire.shm import SharedBuffers
from vecsample._wire.spaces import ActionWriter
from vecsample._wire.spec import WorkerSpec
from vecsample._worker.main import ServedInParent, local_step
from vecsample.hosted import HostedVector
from vecsample.types import AutoresetMode, EnvFn

#: Steps ``time_block`` takes before it starts the clock (first steps warm caches up).
WARM_UP_STEPS = 3
#: Steps ``time_block`` times at most (it stops earlier when its budget is spent).
TIMED_STEPS = 30


class WorkerLoop:
    """One worker's block of ``env_fns``, stepped in this process (see the module docstring).

    Args:
        env_fns: one factory per env of the block (ignored with ``hosted``).
        autoreset_mode: the worker loop to run.
        infos: whether the loop collects the envs' infos, as ``Options.infos``.
        seeds: one seed per env for the reset made here (their number is the block's size).
        observation_space, action_space: the spaces (default: built env 0's).
        hosted: one batch-native vector env for the whole block instead of ``env_fns``.
    """

    def __init__(self, env_fns: Sequence[EnvFn], autoreset_mode: AutoresetMode, infos: bool,
                 seeds: Sequence[int | None], observation_space: gym.Space[Any] | None = None,
                 action_space: gym.Space[Any] | None = None, *,
                 hosted: HostedVector | None = None) -> None:
        if observation_space is None or action_space is None:
            probe = env_fns[0]()
            observation_space = observation_space or probe.observation_space
            action_space = action_space or probe.action_space
            probe.close()
        count = len(seeds)
        buffers = SharedBuffers(observation_space, action_space, count, 1)
        spec = WorkerSpec(index=0, env_fns=[] if hosted else list(env_fns), env_offset=0,
                          count=count, buffers=buffers, autoreset_mode=autoreset_mode,
                          infos=infos, threads=None, cpu_affinity=None, parent_pid=os.getpid(),
                          pdeathsig=False, hosted=hosted)
        #: The block's actions: every leaf of the action space, one row per env (write them,
        #: then call ``step``); ``actions`` is the first.
        self.action_leaves: list[np.ndarray] = buffers.views().action_leaves
        self.actions: np.ndarray = self.action_leaves[0]
        #: One step of the block (DISABLED resets ended envs after it, as its users do), and
        #: what closes its envs.
        self.step: Callable[[], object]
        self.close: Callable[[], None]
        self.step, self.close = local_step(spec, list(seeds))
        self._buffers = buffers  # the views above live as long as the loop


def time_block(envs: Sequence[EnvFn] | HostedVector, autoreset_mode: AutoresetMode,
               spaces: tuple[gym.Space[Any], gym.Space[Any]], seeds: Sequence[int | None],
               budget: float) -> float:
    """The median seconds of one step of a block of ``envs`` (factories, or one hosted vector
    env of ``len(seeds)`` envs), stepped here by the worker's own loop with random actions
    from the action space, after ``WARM_UP_STEPS``, for up to ``TIMED_STEPS`` or ``budget``
    seconds. The envs are closed before it returns."""
    hosted = envs if isinstance(envs, HostedVector) else None
    fns = [] if hosted is not None else list(envs)  # type: ignore[arg-type]
    loop = WorkerLoop(fns, autoreset_mode, True, seeds, *spaces, hosted=hosted)
    try:
        n, writer = len(seeds), ActionWriter(spaces[1], False)
        batch = gym.vector.utils.batch_space(spaces[1], n)
        batch.seed(0)
        actions = [batch.sample() for _ in range(4)]
        times: list[float] = []
        end = time.perf_counter() + budget
        for i in range(WARM_UP_STEPS + TIMED_STEPS):
            writer.write(actions[i % len(actions)], loop.action_leaves, n)
            started = time.perf_counter()
            loop.step()
            if i >= WARM_UP_STEPS:
                times.append(time.perf_counter() - started)
            if times and time.perf_counter() > end:
                break
        return statistics.median(times)
    finally:
        loop.close()


__all__ = ["ServedInParent", "WorkerLoop", "time_block"]
