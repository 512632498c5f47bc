"""A worker's step loop run in this process, with no process, pipe or handshake around it.

``WorkerLoop(env_fns, autoreset_mode, infos, seeds)`` builds the envs here and resets them, and
``step()`` runs exactly what a worker runs for one step of its block (the env loop of the
autoreset mode, the writes to shared memory, the infos), reading the actions from ``actions``.
It is what ``vecsample bench`` times against a bare loop to give the in-worker efficiency E
(``vecsample.tools.efficiency``), so that E measures the worker's own code and nothing else.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from vecsample._wire.shm import SharedBuffers
from vecsample._wire.spec import WorkerSpec
from vecsample._worker.main import local_step
from vecsample.types import AutoresetMode, EnvFn


class WorkerLoop:
    """One worker's block of ``env_fns``, stepped in this process (see the module docstring).

    Args:
        env_fns: one factory per env of the block.
        autoreset_mode: the worker loop to run.
        infos: whether the loop collects the envs' infos, as ``Options.infos``.
        seeds: one seed per env for the reset made here.
        observation_space, action_space: the spaces (default: built env 0's).
    """

    def __init__(self, env_fns: Sequence[EnvFn], autoreset_mode: AutoresetMode, infos: bool,
                 seeds: Sequence[int | None], observation_space: gym.Space[Any] | None = None,
                 action_space: gym.Space[Any] | None = None) -> None:
        if observation_space is None or action_space is None:
            probe = env_fns[0]()
            observation_space = observation_space or probe.observation_space
            action_space = action_space or probe.action_space
            probe.close()
        buffers = SharedBuffers(observation_space, action_space, len(env_fns), 1)
        spec = WorkerSpec(index=0, env_fns=list(env_fns), env_offset=0, count=len(env_fns),
                          buffers=buffers, autoreset_mode=autoreset_mode, infos=infos,
                          threads=None, cpu_affinity=None, parent_pid=os.getpid(),
                          pdeathsig=False)
        #: The block's actions, one row per env: write them, then call ``step``.
        self.actions: np.ndarray = buffers.views().action_leaves[0]
        #: One step of the block (DISABLED resets ended envs after it, as its users do).
        self.step: Callable[[], object] = local_step(spec, list(seeds))
        self._buffers = buffers  # the views above live as long as the loop


__all__ = ["WorkerLoop"]
