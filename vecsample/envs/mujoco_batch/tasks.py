"""The meta-RL task envs of ``vecsample.envs`` (HalfCheetahVel/Dir, AntVel/Dir/Pos), batched.

Each equals its single env as ``gymnasium.make("HalfCheetahVel-v5", ...)`` builds it
(vecsample/envs/mujoco.py inside ``NormalizedActionWrapper``): the same action normalization
(``normalization_scale``), physics, observation (float32), reward, termination and infos (the
task in ``info["task"]``), with one task per env, set in row order by ``reset_task(tasks)``
(how ``vecsample.HostedVector`` passes a sampler's ``reset_task`` on). As with single task
envs, a new task applies from the next reset on.

The keywords are those that change something in the single env: ``task``, ``low``/``high``
(the task distribution), ``normalization_scale``, ``reset_noise_scale``, ``frame_skip`` and
``xml_file``. The single env also takes the v5 reward and observation keywords, and ignores
them (its reward and observation are pytorch-maml-rl's); here they are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from numpy.typing import NDArray

from vecsample.adapters.vector_infos import Columns
from vecsample.envs.base import Task, task_info
from vecsample.envs.mujoco import (
    ANT_CONTACT_COST,
    ANT_CTRL_COST,
    ANT_HEALTHY_Z,
    ANT_SURVIVE_REWARD,
    CHEETAH_CTRL_COST,
)
from vecsample.envs.mujoco_batch.arrays import Array, Bools
from vecsample.envs.mujoco_batch.errors import TaskCountError
from vecsample.envs.mujoco_batch.physics import Field
from vecsample.envs.mujoco_batch.vector import BatchMujocoEnv


class _TaskBatchEnv(BatchMujocoEnv):
    """Tasks (one per env), normalized actions and float32 observations."""

    OBS_DTYPE = np.float32
    #: The task's key, and the task of an env that was given none.
    KEY: ClassVar[str] = ""
    DEFAULT_TASK: ClassVar[Task] = {}

    def __init__(self, num_envs: int = 1, **kwargs: Any) -> None:
        super().__init__(num_envs, **kwargs)
        task = self.config["task"]
        self.reset_task([dict(self.DEFAULT_TASK) if task is None else task] * num_envs)

    def reset_task(self, tasks: Sequence[Task]) -> None:
        """Gives env ``i`` the task ``tasks[i]``, from its next reset on."""
        if len(tasks) != self.num_envs:
            raise TaskCountError(env=type(self).__name__, expected=self.num_envs,
                                 got=len(tasks))
        self._tasks = list(tasks)
        self._goals = np.asarray([np.asarray(t[self.KEY], dtype=np.float64) for t in tasks])
        copies = [task_info(t) for t in self._tasks]
        # info["task"] of every env, as columns, built once per reset_task: a step copies them.
        self._task_info = {key: np.asarray([t[key] for t in copies]) for key in copies[0]}

    def sample_tasks(self, num_tasks: int) -> list[Task]:
        """Tasks drawn from env 0's generator, as its single env's ``sample_tasks`` draws."""
        raise NotImplementedError

    def _control_space(self) -> gym.spaces.Box:
        inner = super()._control_space()
        self._low, self._high = inner.low.astype(np.float64), inner.high.astype(np.float64)
        scale = float(self.config["normalization_scale"])
        return gym.spaces.Box(-scale, scale, shape=inner.shape, dtype=np.float32)

    def _controls(self, actions: NDArray[Any]) -> NDArray[Any]:
        """``NormalizedActionWrapper.action`` of each row: clipped to the scale, mapped onto
        the actuators' ranges, clipped there, float32."""
        scale = float(self.config["normalization_scale"])
        clipped = np.clip(np.asarray(actions, dtype=np.float64), -scale, scale)
        mapped = self._low + (clipped + scale) * (self._high - self._low) / (2.0 * scale)
        return np.clip(mapped, self._low, self._high).astype(np.float32)

    def _task_columns(self) -> Columns:
        """``info["task"]`` of every env, as columns (fresh copies of those of ``reset_task``:
        a step's infos are the caller's to keep)."""
        return {"task": {key: column.copy() for key, column in self._task_info.items()}}

    def _reset_info(self) -> Columns:
        return self._task_columns()


def _velocity_tasks(rng: np.random.Generator, low: float, high: float, n: int) -> list[Task]:
    return [{"velocity": v} for v in rng.uniform(low, high, size=(n,))]


def _direction_tasks(rng: np.random.Generator, n: int) -> list[Task]:
    return [{"direction": d} for d in 2 * rng.binomial(1, p=0.5, size=(n,)) - 1]


_CHEETAH = {"xml_file": "half_cheetah.xml", "frame_skip": 5, "reset_noise_scale": 0.1,
            "normalization_scale": 1.0, "task": None}
_ANT = {"xml_file": "ant.xml", "frame_skip": 5, "reset_noise_scale": 0.1,
        "normalization_scale": 1.0, "task": None}


class _CheetahTaskBatch(_TaskBatchEnv):
    """HalfCheetah's task envs: ``qpos[1:]``, ``qvel`` and the torso's position; reward =
    task term - 0.05 |a|^2; never terminates."""

    QVEL_NOISE = "normal"

    def _fields(self) -> list[Field]:
        return [Field("torso", "xpos", "torso")]

    def _observe(self) -> NDArray[np.float32]:
        p = self.physics
        parts = (p.qpos[:, 1:], p.qvel, p.fields["torso"])
        return np.concatenate(parts, axis=1).astype(np.float32)

    def _before(self) -> Array:
        return self.physics.qpos[:, 0].copy()

    def _term(self, velocity: Array) -> Array:
        raise NotImplementedError

    def _evaluate(self, actions: NDArray[Any], before: Array) -> tuple[Array, Bools, Columns]:
        velocity = (self.physics.qpos[:, 0] - before) / self.dt
        forward = self._term(velocity)
        ctrl = CHEETAH_CTRL_COST * np.sum(np.square(actions), axis=1).astype(np.float64)
        infos = {"reward_forward": forward, "reward_ctrl": -ctrl, **self._task_columns()}
        return forward - ctrl, np.zeros(self.num_envs, dtype=np.bool_), infos


class HalfCheetahVelBatchEnv(_CheetahTaskBatch):
    """``HalfCheetahVel-v5`` × ``num_envs``: task term ``-|v_x - v_goal|``."""

    DEFAULTS: ClassVar[dict[str, Any]] = {**_CHEETAH, "low": 0.0, "high": 2.0}
    KEY, DEFAULT_TASK = "velocity", {"velocity": 0.0}

    def sample_tasks(self, num_tasks: int) -> list[Task]:
        return _velocity_tasks(self._generator(0), self.config["low"], self.config["high"],
                               num_tasks)

    def _term(self, velocity: Array) -> Array:
        return -np.abs(velocity - self._goals)  # type: ignore[no-any-return]


class HalfCheetahDirBatchEnv(_CheetahTaskBatch):
    """``HalfCheetahDir-v5`` × ``num_envs``: task term ``direction * v_x``."""

    DEFAULTS: ClassVar[dict[str, Any]] = dict(_CHEETAH)
    KEY, DEFAULT_TASK = "direction", {"direction": 1}

    def sample_tasks(self, num_tasks: int) -> list[Task]:
        return _direction_tasks(self._generator(0), num_tasks)

    def _term(self, velocity: Array) -> Array:
        return self._goals * velocity


class _AntTaskBatch(_TaskBatchEnv):
    """Ant's task envs: ``qpos``, ``qvel``, the clipped ``cfrc_ext`` of every body, the torso's
    rotation matrix and position; reward = task term - ctrl and contact costs + 0.05;
    terminates when the torso's height leaves [0.2, 1.0] or the state is not finite."""

    QVEL_NOISE = "normal"
    POST_CONSTRAINT = True

    def _fields(self) -> list[Field]:
        return [Field("torso", "xpos", "torso"), Field("torso_xmat", "xmat", "torso"),
                Field("cfrc_ext", "cfrc_ext")]

    def _forces(self) -> Array:
        return np.clip(self.physics.fields["cfrc_ext"], -1.0, 1.0)

    def _observe(self) -> NDArray[np.float32]:
        p, n = self.physics, self.num_envs
        parts = (p.qpos, p.qvel, self._forces().reshape(n, -1), p.fields["torso_xmat"],
                 p.fields["torso"])
        return np.concatenate(parts, axis=1).astype(np.float32)

    def _before(self) -> Array:
        return self.physics.fields["torso"][:, :2].copy()

    def _term(self, before: Array) -> tuple[str, Array]:
        raise NotImplementedError

    def _velocity(self, before: Array) -> Array:
        return (self.physics.fields["torso"][:, 0] - before[:, 0]) / self.dt

    def _evaluate(self, actions: NDArray[Any], before: Array) -> tuple[Array, Bools, Columns]:
        name, term = self._term(before)
        scaling = 0.5 * (self._high.astype(np.float32) - self._low.astype(np.float32))
        ctrl = ANT_CTRL_COST * np.sum(np.square(actions / scaling), axis=1).astype(np.float64)
        contact = ANT_CONTACT_COST * np.sum(np.square(self._forces()).reshape(
            self.num_envs, -1), axis=1)
        infos = {name: term, "reward_ctrl": -ctrl, "reward_contact": -contact,
                 "reward_survive": np.full(self.num_envs, ANT_SURVIVE_REWARD),
                 **self._task_columns()}
        return term - ctrl - contact + ANT_SURVIVE_REWARD, ~self._alive(), infos

    def _alive(self) -> Bools:
        p, (low, high) = self.physics, ANT_HEALTHY_Z
        finite = np.isfinite(p.qpos).all(axis=1) & np.isfinite(p.qvel).all(axis=1)
        alive: Bools = finite & (low <= p.qpos[:, 2]) & (p.qpos[:, 2] <= high)
        return alive


class AntVelBatchEnv(_AntTaskBatch):
    """``AntVel-v5`` × ``num_envs``: task term ``1 - |v_x - v_goal|``."""

    DEFAULTS: ClassVar[dict[str, Any]] = {**_ANT, "low": 0.0, "high": 3.0}
    KEY, DEFAULT_TASK = "velocity", {"velocity": 0.0}

    def sample_tasks(self, num_tasks: int) -> list[Task]:
        return _velocity_tasks(self._generator(0), self.config["low"], self.config["high"],
                               num_tasks)

    def _term(self, before: Array) -> tuple[str, Array]:
        return "reward_forward", 1.0 - np.abs(self._velocity(before) - self._goals)


class AntDirBatchEnv(_AntTaskBatch):
    """``AntDir-v5`` × ``num_envs``: task term ``direction * v_x``."""

    DEFAULTS: ClassVar[dict[str, Any]] = dict(_ANT)
    KEY, DEFAULT_TASK = "direction", {"direction": 1}

    def sample_tasks(self, num_tasks: int) -> list[Task]:
        return _direction_tasks(self._generator(0), num_tasks)

    def _term(self, before: Array) -> tuple[str, Array]:
        return "reward_forward", self._goals * self._velocity(before)


class AntPosBatchEnv(_AntTaskBatch):
    """``AntPos-v5`` × ``num_envs``: task term ``4 - |xy - goal|_1`` (after the step)."""

    DEFAULTS: ClassVar[dict[str, Any]] = {**_ANT, "low": -3.0, "high": 3.0}
    KEY, DEFAULT_TASK = "position", {"position": np.zeros(2)}

    def sample_tasks(self, num_tasks: int) -> list[Task]:
        positions = self._generator(0).uniform(self.config["low"], self.config["high"],
                                               size=(num_tasks, 2))
        return [{"position": position} for position in positions]

    def _term(self, before: Array) -> tuple[str, Array]:
        distance = np.sum(np.abs(self.physics.fields["torso"][:, :2] - self._goals), axis=1)
        return "reward_goal", 4.0 - distance
