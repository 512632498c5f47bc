"""The physics of a batch: one ``MjData`` per env, stepped with ``mj_step`` as gymnasium steps it.

Why one ``MjData`` per env, and one call per env rather than one batched rollout: a gymnasium
v5 env keeps its ``MjData`` from step to step, and two things in it that ``mujoco.rollout``
neither takes in full nor gives back decide the next step to the last bit:

- ``qacc_warmstart``, where the constraint solver starts. ``rollout`` takes it in
  (``initial_warmstart``) but never returns the one the step ends with; started from zeros (or
  from a finite-difference estimate) HalfCheetah-v5 drifts from gymnasium's by 1e-11 after 50
  steps and by O(1) after 200 (measured, mujoco 3.3.0).
- The fields gymnasium reads after ``mj_step``: ``xpos`` (Ant's velocity), ``xipos`` (Humanoid's
  centre of mass), ``cinert``, ``cvel``, ``qfrc_actuator`` and ``cfrc_ext`` (after
  ``mj_rnePostConstraint``). Under RK4 they come from the last Runge-Kutta stage, a state that
  no rollout output (states or sensors) holds.

So each env's ``MjData`` persists, and each step is gymnasium's own: ``data.ctrl[:] = action``,
``mj_step(model, data, frame_skip)`` and, for an env that reads ``cfrc_ext``,
``mj_rnePostConstraint``. That ``MjData`` then holds exactly what gymnasium's holds. The Python
per env is those calls, as in the floor (``frame_skip`` × ``mj_step`` on one ``MjData``,
experiments/mujoco_floor.py); ``qpos``, ``qvel`` and the fields the env reads are gathered for
the whole batch by one ``np.concatenate`` each, over views of every ``MjData`` made once, and
observations, rewards and infos are computed for the batch in numpy.

(Until issue 34 each step was one ``Rollout.rollout`` call per env, with the same physics bit
for bit: its ten arguments, the state it sets and copies out at every physics step, the warm
start copied in and out, cost about 3.5 µs more per env step than ``mj_step`` on HalfCheetah × 32,
a tenth of the physics.)

Threads: ``mj_step`` releases the GIL. With more than one thread the envs are split into
contiguous blocks, one per thread; each thread steps its block's envs and then gathers its
block's rows, so one thread's gather (numpy, under the GIL) runs while the others are in
``mj_step``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from vecsample.envs.mujoco_batch.arrays import Array, Bools
from vecsample.extras import require

mujoco = require("mujoco", feature="the batch-native MuJoCo envs (HalfCheetahBatch-v5, ...)")
#: The state a reset sets: time, qpos, qvel, act, the warm start, the controls and applied
#: forces, mocap and user data (everything ``mj_step`` and ``mj_forward`` read).
INTEGRATION = mujoco.mjtState.mjSTATE_INTEGRATION.value
#: What a reset computes once the state is set (gymnasium's reset: ``mj_forward``): everything
#: (``"forward"``), the bodies' positions only (``"kinematics"``: ``xpos`` of every body, bit
#: for bit ``mj_forward``'s, which computes them with the same ``mj_kinematics``), or nothing
#: (``"none"``: an env that reads only qpos and qvel). ``mj_step`` reads none of what a reset
#: computes: it computes it all again from the state (its warm start included, which
#: ``mj_forward`` does not write), so the steps after a reset are the same to the bit whichever
#: an env needs (tests/test_mujoco_batch.py steps through resets).
RESET_STAGES: dict[str, Any] = {"forward": mujoco.mj_forward,
                                "kinematics": mujoco.mj_kinematics, "none": None}


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

    ``control`` holds the controls of the next step (one row per env); ``qpos``, ``qvel`` and
    ``fields`` (the ``Field``s) hold every env's, gathered after each step and reset.
    """

    def __init__(self, model_path: str, num_envs: int, frame_skip: int,
                 fields: Sequence[Field] = (), *, post_constraint: bool = False,
                 num_threads: int | None = None, reset_stage: str = "forward") -> None:
        self.model = mujoco.MjModel.from_xml_path(model_path)
        self.datas = [mujoco.MjData(self.model) for _ in range(num_envs)]
        self.num_envs, self.frame_skip = num_envs, frame_skip
        self.post_constraint = post_constraint  # gymnasium's mj_rnePostConstraint after a step
        # What a reset computes after it set the state (RESET_STAGES): "none" only where the
        # env reads nothing but qpos and qvel.
        assert reset_stage != "none" or not fields, "an env that reads fields needs a stage"
        self._settle = RESET_STAGES[reset_stage]
        self._initial_states(num_envs)
        m = self.model
        # What mj_resetData zeroes and mj_forward leaves alone: mj_rnePostConstraint's outputs
        # (zero for good in an env that never calls it).
        self._post_outputs = [(d.cacc, d.cfrc_int, d.cfrc_ext) if post_constraint else ()
                              for d in self.datas]
        self.qpos: Array = np.zeros((num_envs, m.nq))
        self.qvel: Array = np.zeros((num_envs, m.nv))
        self.control: Array = np.zeros((num_envs, m.nu))
        self.fields = {f.key: np.zeros((num_envs, *np.shape(f.view(self.datas[0]))))
                       for f in fields}
        #: (batch array, that array's view of each env's ``MjData``) for every gathered array.
        self.sources = [(self.qpos, [d.qpos for d in self.datas]),
                        (self.qvel, [d.qvel for d in self.datas]),
                        *((self.fields[f.key], [f.view(d) for d in self.datas]) for f in fields)]
        threads = max(1, min(num_threads or default_threads(), num_envs))
        self.blocks = [_Block(self, int(rows[0]), int(rows[-1]) + 1)
                       for rows in np.array_split(np.arange(num_envs), threads)]
        self._pool = ThreadPoolExecutor(threads - 1) if threads > 1 else None
        for block in self.blocks:
            block.gather()

    def _initial_states(self, num_envs: int) -> None:
        """The initial qpos and qvel (gymnasium's ``init_qpos``, ``init_qvel``), and the states
        a reset sets: a fresh ``MjData``'s (``mj_makeData`` resets it), one row per env reset,
        whose qpos and qvel (the only part ever written) a reset fills in."""
        m, data = self.model, self.datas[0]
        self.init_qpos, self.init_qvel = data.qpos.ravel().copy(), data.qvel.ravel().copy()
        self.init_state: Array = np.concatenate((self.init_qpos, self.init_qvel))  # qpos, qvel
        initial = np.zeros(mujoco.mj_stateSize(m, INTEGRATION))
        mujoco.mj_getState(m, data, initial, INTEGRATION)
        at = mujoco.mj_stateSize(m, mujoco.mjtState.mjSTATE_TIME.value)
        self._qposvel_at = slice(at, at + m.nq + m.nv)  # qpos, then qvel, in the state
        self._states = np.repeat(initial[None], num_envs, axis=0)

    @property
    def dt(self) -> float:
        """Seconds of simulated time per env step (gymnasium's ``MujocoEnv.dt``)."""
        return float(self.model.opt.timestep * self.frame_skip)

    @property
    def threads(self) -> int:
        """The threads that step the physics (one block of envs each)."""
        return len(self.blocks)

    def step(self, controls: Array, stepped: Bools | None = None) -> None:
        """Steps the envs of ``stepped`` (every env for None) by ``frame_skip`` physics steps
        with their rows of ``controls`` (cast to float64, as ``data.ctrl[:] = action`` does),
        and gathers every env's arrays."""
        np.copyto(self.control, controls)
        first, *others = self.blocks
        futures = [self._pool.submit(block.step, stepped) for block in others
                   if self._pool is not None]
        first.step(stepped)  # this thread steps the first block
        for future in futures:
            future.result()

    def reset(self, rows: Sequence[int], qposvel: Array) -> None:
        """gymnasium's ``MujocoEnv.reset`` + ``set_state`` for each env of ``rows``: the state
        ``mj_resetData`` leaves, with ``qpos`` and ``qvel`` (``qposvel``: one row per env of
        ``rows``, its qpos then its qvel), then
        what the env reads of ``mj_forward`` (``RESET_STAGES``); then the env's arrays are
        gathered. One ``mj_setState`` sets that state, and the outputs of
        ``mj_rnePostConstraint`` (which ``mj_forward`` does not compute) are zeroed:
        ``mj_resetData`` clears all of ``MjData``, 5-10 µs, where ``mj_step`` and ``mj_forward``
        read only this state (the tests compare every env after resets)."""
        model, datas, settle, set_state = self.model, self.datas, self._settle, mujoco.mj_setState
        states = self._states[:len(rows)]
        states[:, self._qposvel_at] = qposvel
        for state, i in zip(states, rows, strict=True):
            data = datas[i]
            set_state(model, data, state, INTEGRATION)
            for output in self._post_outputs[i]:
                output[:] = 0.0
            if settle is not None:
                settle(model, data)
                for target, views in self.sources:
                    target[i] = views[i]
        if settle is None:  # the env reads qpos and qvel only: the rows just set
            nq = self.model.nq
            self.qpos[rows] = qposvel[:, :nq]
            self.qvel[rows] = qposvel[:, nq:]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class _Block:
    """The envs ``lo`` to ``hi`` (excluded), which one thread steps: each env's ``MjData``
    with views of its ``ctrl`` and of its control row, and, for each gathered array, the views
    to concatenate and the batch rows they fill (flat views, made once)."""

    def __init__(self, physics: Physics, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        self.model, self.frame_skip = physics.model, physics.frame_skip
        self.post_constraint = physics.post_constraint
        self.envs = [(physics.datas[i], physics.datas[i].ctrl, physics.control[i])
                     for i in range(lo, hi)]
        self.gathers = [([view.reshape(-1) for view in views[lo:hi]], target[lo:hi].reshape(-1))
                        for target, views in physics.sources]

    def step(self, stepped: Bools | None) -> None:
        """Steps this block's envs (those of ``stepped``), then gathers its rows."""
        envs = self.envs if stepped is None else [
            self.envs[k] for k in np.flatnonzero(stepped[self.lo:self.hi]).tolist()]
        model, skip, step = self.model, self.frame_skip, mujoco.mj_step
        if self.post_constraint:
            post = mujoco.mj_rnePostConstraint
            for data, ctrl, control in envs:
                ctrl[:] = control
                step(model, data, skip)
                post(model, data)
        else:
            for data, ctrl, control in envs:
                ctrl[:] = control
                step(model, data, skip)
        self.gather()

    def gather(self) -> None:
        """Copies this block's envs' ``MjData`` fields into their batch rows."""
        for views, out in self.gathers:
            np.concatenate(views, out=out)
