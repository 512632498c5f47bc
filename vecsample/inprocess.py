"""The door: the worker's code, run by this process, with no process, pipe or handshake.

``_parent`` reaches the worker's code through this module and nowhere else (a plain import;
``tests/test_structure.py`` names this door and fails on a second one). Three things come
through it, all built on the worker's own ``BlockRunner`` (``_worker/runner.py``), so that a
block's rows, infos, autoresets and errors are the same whoever steps it:

* ``LocalBlock``: a block of the sampler's envs that the trainer's process serves itself
  (``Options.env_placement``, ``_parent/local.py``): built, stepped and commanded by direct
  calls, writing its rows where a worker process would;
* ``time_block``: what ``env_placement="auto"`` times to choose (``_parent/autoplace.py``);
* ``WorkerLoop``: one block stepped here, what ``vecsample bench`` times against a bare loop to
  give the in-worker efficiency E (``vecsample.tools.efficiency``).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from vecsample._wire.infos import InfoRecord, Signature
from vecsample._wire.protocol import Command, ErrorReport
from vecsample._wire.shm import SharedBuffers
from vecsample._wire.spaces import ActionWriter
from vecsample._wire.spec import WorkerSpec
from vecsample._worker.runner import BlockRunner
from vecsample.errors import EnvFactoryError
from vecsample.hosted import HostedVector
from vecsample.types import AutoresetMode, EnvFn

#: Steps ``time_block`` takes before it starts the clock (first steps warm caches up).
WARM_UP_STEPS = 3
#: Steps ``time_block`` times at most (it stops earlier when its budget is spent).
TIMED_STEPS = 30


#: A step of a block stepped here: the envs' info records left over (None: none), the info keys
#: proposed for columns, and the bitmasks of the step and reset info columns written.
Stepped = tuple[list[InfoRecord] | None, dict[str, Signature], int, int]


class LocalBlock:
    """A block of envs that this process serves itself: the worker's ``BlockRunner``, called
    directly. ``build``, ``step`` and ``run`` raise what the env raised (``report`` names it).
    Envs are not thread-safe: a ``close()`` from another thread waits for the step or command
    under way (a reentrant lock, so that the SIGTERM handler, which closes the samplers from
    whatever this thread was doing, cannot deadlock on it)."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.runner = BlockRunner(spec)
        self._lock = threading.RLock()
        self.closed = False

    def build(self) -> None:
        with self._lock:
            self.runner.build()

    def step(self, published: int) -> Stepped:
        """One step of the block, its actions read from its rows. Its infos go through the
        sampler's info columns in shared memory (``published`` of them exist), as a worker
        process's do, whether the block is an env block or a hosted batch env: the records
        left over (values no column takes), the keys proposed for new columns, and the
        bitmasks of the columns written. Every block's infos then reach ``VectorEnv`` as
        columns, whose vector infos are the columns themselves (``vector_infos.build``), not
        a dict built env by env (HalfCheetah-v5 x 4 with every env here: 42 µs a step
        before, 25 after, docs/lab/benchmarks.md)."""
        with self._lock:
            if self.closed:
                raise EnvFactoryError("this block of envs was closed (its sampler is closing)")
            writer = self.runner.infos
            writer.sync(published)
            records = self.runner.step()
            if not records and not any(writer.put_bits):
                return None, {}, 0, 0
            left, candidates, step_bits, reset_bits = writer.write(records or [])
            return left or None, candidates, step_bits, reset_bits

    def run(self, command: Command, payload: Any) -> Any:
        with self._lock:
            return self.runner.run(command, payload)

    def report(self, command: str) -> ErrorReport:
        """The exception being handled, as the report that names its env."""
        return self.runner.report(command)

    def close(self) -> None:
        with self._lock:
            if not self.closed:
                self.closed = True
                self.runner.close()


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
        self._block = LocalBlock(spec)
        try:
            self._block.build()
        except Exception as exc:
            report = self._block.report("BUILD")
            self._block.close()
            raise EnvFactoryError(f"env {report.env} could not be built in this process: "
                                  f"{report.exc_type}: {report.message}; check its factory."
                                  ) from exc
        self._block.run(Command.RESET, (list(seeds), None, None))
        self._ended = self._block.runner.block.ended
        #: DISABLED freezes ended envs: ``step`` resets them after the step, as its users do.
        self._reset_ended = autoreset_mode is AutoresetMode.DISABLED
        #: What closes the envs.
        self.close: Callable[[], None] = self._block.close
        self._buffers = buffers  # the views above live as long as the loop

    def step(self) -> None:
        """One step of the block, exactly as a worker runs it, with the actions written in
        ``action_leaves``."""
        self._block.step(0)
        if self._reset_ended and self._ended.any():
            self._block.run(Command.RESET, ([None] * len(self._ended), None,
                                            self._ended.copy()))


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


__all__ = ["LocalBlock", "Stepped", "WorkerLoop", "time_block"]
