"""The physics of a batch: one ``MjData`` per env, stepped through ``mujoco.rollout``.

Why one ``MjData`` per env, and one rollout call per env rather than one for the batch: a
gymnasium v5 env keeps its ``MjData`` from step to step, and two things in it that a rollout
neither takes in full nor gives back decide the next step to the last bit:

- ``qacc_warmstart``, where the constraint solver starts. ``rollout`` takes it in
  (``initial_warmstart``) but never returns the one the step ends with; started from zeros (or
  from a finite-difference estimate) HalfCheetah-v5 drifts from gymnasium's by 1e-11 after 50
  steps and by O(1) after 200 (measured, mujoco 3.3.0).
- The fields gymnasium reads after ``mj_step``: ``xpos`` (Ant's velocity), ``xipos`` (Humanoid's
  centre of mass), ``cinert``, ``cvel``, ``qfrc_actuator`` and ``cfrc_ext`` (after
  ``mj_rnePostConstraint``). Under RK4 they come from the last Runge-Kutta stage, a state that
  no rollout output (states or sensors) holds.

So each env's ``MjData`` persists, and each step is one ``Rollout.rollout`` call on it (the
physics in C, the GIL released), after which that ``MjData`` holds exactly what gymnasium's
holds. The per-env cost in Python is one call and a few copies; observations, rewards and infos
are then computed for the whole batch in numpy. With more than one core, the rows are split
among that many threads, each with its own ``Rollout``, stepping its rows while the others run.

A rollout stops stepping an env at the first MuJoCo warning (an unstable state, a bad control);
gymnasium's ``mj_step`` goes on. Such a row is finished with ``mj_step`` on its ``MjData``, so
it ends where gymnasium's does.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from vecsample.envs.mujoco_batch.arrays import Array
from vecsample.extras import require

mujoco = require("mujoco", feature="the batch-native MuJoCo envs (HalfCheetahBatch-v5, ...)")
# ruff: noqa: E402
from mujoco import rollout as mj_rollout

FULLPHYSICS = mujoco.mjtState.mjSTATE_FULLPHYSICS.value
CTRL = mujoco.mjtState.mjSTATE_CTRL.value


@dataclass(frozen=True)
class Field:
    """A field of ``MjData`` that the env reads after each step, gathered for the batch:
    ``data.<name>`` (or ``data.body(body).<name>``) of every env into ``Physics.fields[key]``,
    through a view of each env's ``MjData`` made once."""

    key: str
    name: str
    body: int | str | None = None  # a body's id or name: its row of the field; None: all

    def view(self, data: Any) -> Any:
        """This field of ``data``, a view into its memory."""
        holder = data if self.body is None else data.body(self.body)
        return getattr(holder, self.name)


def default_threads() -> int:
    """One thread per core this process may run on (its affinity mask; ``os.cpu_count()`` off
    Linux), at most ``OMP_NUM_THREADS`` where that is set: a vecsample worker sets it to its
    ``threads_per_worker`` (1 by default), so W unpinned workers on W cores do not each start a
    thread per core of the machine (measured: two workers of two threads on two cores step
    slower than of one).
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    cap = os.environ.get("OMP_NUM_THREADS", "")
    return min(cores, int(cap)) if cap.isdigit() and int(cap) > 0 else cores


class Physics:
    """``num_envs`` copies of one model, each with its own ``MjData``.

    ``state`` holds every env's full physics state (``mjSTATE_FULLPHYSICS``: time, qpos, qvel,
    act); ``qpos`` and ``qvel`` are views into it. ``fields`` holds the ``Field``s gathered after
    each step and reset.
    """

    def __init__(self, model_path: str, num_envs: int, frame_skip: int,
                 fields: Sequence[Field] = (), *, post_constraint: bool = False,
                 num_threads: int | None = None) -> None:
        self.model = mujoco.MjModel.from_xml_path(model_path)
        self.datas = [mujoco.MjData(self.model) for _ in range(num_envs)]
        self.num_envs, self.frame_skip = num_envs, frame_skip
        self.post_constraint = post_constraint  # gymnasium's mj_rnePostConstraint after a step
        self.init_qpos = self.datas[0].qpos.ravel().copy()
        self.init_qvel = self.datas[0].qvel.ravel().copy()
        m = self.model
        self.nstate = mujoco.mj_stateSize(m, FULLPHYSICS)
        self.state = np.zeros((num_envs, self.nstate))
        at = mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_TIME.value)
        self.qpos: Array = self.state[:, at:at + m.nq]
        self.qvel: Array = self.state[:, at + m.nq:at + m.nq + m.nv]
        self.control = np.zeros((num_envs, frame_skip, m.nu))
        self._out = np.zeros((num_envs, frame_skip, self.nstate))
        self._warm = np.zeros((num_envs, m.nv))
        self._specs = list(fields)
        self.fields = {f.key: np.zeros((num_envs, *np.shape(f.view(self.datas[0]))))
                       for f in self._specs}
        self._rows = [_RowViews(self, i) for i in range(num_envs)]
        self._threads = max(1, min(num_threads or default_threads(), num_envs))
        self._pool = ThreadPoolExecutor(self._threads - 1) if self._threads > 1 else None
        self._rollouts = [mj_rollout.Rollout(nthread=0) for _ in range(self._threads)]
        for i in range(num_envs):
            self._capture(i)

    @property
    def dt(self) -> float:
        """Seconds of simulated time per env step (gymnasium's ``MujocoEnv.dt``)."""
        return float(self.model.opt.timestep * self.frame_skip)

    def step(self, actions: NDArray[Any], rows: NDArray[np.intp]) -> None:
        """Steps the envs of ``rows`` by ``frame_skip`` physics steps with ``actions[rows]``
        as their controls (cast to float64, as ``data.ctrl[:] = action`` does)."""
        self.control[rows] = actions[rows, None, :]
        chunks = [c for c in np.array_split(rows, self._threads) if c.size]
        futures = [self._pool.submit(self._step_rows, self._rollouts[k + 1], chunk)
                   for k, chunk in enumerate(chunks[1:]) if self._pool is not None]
        if chunks:
            self._step_rows(self._rollouts[0], chunks[0])  # this thread steps the first rows
        for future in futures:
            future.result()
        self.state[rows] = self._out[rows, -1]

    def _step_rows(self, runner: Any, rows: NDArray[np.intp]) -> None:
        model, nstep, post = [self.model], self.frame_skip, self.post_constraint
        for i in rows.tolist():
            row = self._rows[i]
            np.copyto(row.warm[0], row.warm_source)
            runner.rollout(model, row.data, row.state0, row.control, control_spec=CTRL,
                           skip_checks=True, nstep=nstep, initial_warmstart=row.warm,
                           state=row.out, sensordata=None, chunk_size=None)
            if nstep > 1 and row.out[0, -1, 0] == row.out[0, -2, 0]:
                self._finish(i)  # the rollout stopped at a warning; gymnasium steps on
            if post:
                mujoco.mj_rnePostConstraint(self.model, row.data[0])
            for target, source in row.fields:
                np.copyto(target, source)

    def _finish(self, i: int) -> None:
        """Completes the step of env ``i`` that a rollout cut short at a warning (it repeats
        the state it stopped at), with ``mj_step`` as gymnasium does, and records its state."""
        times = self._out[i, :, 0]
        stopped = int(np.flatnonzero(times[1:] == times[:-1])[0]) + 1
        data = self.datas[i]
        mujoco.mj_step(self.model, data, nstep=self.frame_skip - stopped)
        mujoco.mj_getState(self.model, data, self._out[i, -1], FULLPHYSICS)

    def reset(self, rows: Sequence[int], qpos: Array, qvel: Array) -> None:
        """gymnasium's ``MujocoEnv.reset`` + ``set_state`` for each env of ``rows``:
        ``mj_resetData``, then ``qpos`` and ``qvel`` (one row per env of ``rows``) and
        ``mj_forward``."""
        for k, i in enumerate(rows):
            data = self.datas[i]
            mujoco.mj_resetData(self.model, data)
            data.qpos[:] = qpos[k]
            data.qvel[:] = qvel[k]
            mujoco.mj_forward(self.model, data)
            self._capture(i)

    def _capture(self, i: int) -> None:
        """Reads env ``i``'s state and fields from its ``MjData`` into the batch arrays."""
        row = self._rows[i]
        mujoco.mj_getState(self.model, row.data[0], self.state[i], FULLPHYSICS)
        for target, source in row.fields:
            np.copyto(target, source)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for runner in self._rollouts:
            runner.close()
        self._rollouts = []


class _RowViews:
    """What one env's rollout call reads and writes, made once: views into the batch arrays
    (rows of ``(1, ...)`` as a rollout of one env takes them) and into its ``MjData``."""

    def __init__(self, physics: Physics, i: int) -> None:
        data = physics.datas[i]
        self.data = [data]
        self.state0 = physics.state[i:i + 1]
        self.control = physics.control[i:i + 1]
        self.out = physics._out[i:i + 1]
        self.warm = physics._warm[i:i + 1]
        self.warm_source = data.qacc_warmstart
        self.fields = [(physics.fields[f.key][i], f.view(data)) for f in physics._specs]
