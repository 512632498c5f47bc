"""HalfCheetah and Ant task envs on gymnasium's v5 MuJoCo envs (pytorch-maml-rl's rewards).

Each class keeps the v5 model, ``frame_skip`` (5, so ``dt`` = 0.05 s) and reset noise, and
replaces the observation and the reward with the ones pytorch-maml-rl used on ``-v2``:

* HalfCheetah: ``qpos[1:]``, ``qvel`` and the torso's position (20 floats); reward = task term
  ``- 0.05 * |a|^2``; never terminates.
* Ant: ``qpos``, ``qvel``, the clipped ``cfrc_ext`` of every body, the torso's rotation matrix and
  position (125 floats); reward = task term ``- 0.005 * |a|^2 - 0.0005 * |clip(cfrc_ext)|^2 +
  0.05``; terminates when the torso's height leaves [0.2, 1.0] or the state is not finite.

The differences that v5 physics forces are listed in docs/maml.md. Build these through
``gymnasium.make`` with the ids registered by ``vecsample.envs``, which add the normalized action
wrapper and the time limit.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from gymnasium import spaces, utils

from vecsample.extras import require

require("mujoco", feature="the MuJoCo task envs (HalfCheetahVel-v5, AntDir-v5, ...)")

# The imports below come after the check, so a missing mujoco is one error that names the extra.
# ruff: noqa: E402
from gymnasium.envs.mujoco.ant_v5 import AntEnv as AntV5
from gymnasium.envs.mujoco.half_cheetah_v5 import HalfCheetahEnv as HalfCheetahV5
from numpy.typing import NDArray

from vecsample.envs.base import Task, task_info

FloatArray = NDArray[np.float32]
StepReturn = tuple[FloatArray, float, bool, bool, dict[str, Any]]

# Coefficients of pytorch-maml-rl's rewards (rllab's values), not gymnasium's v5 defaults.
CHEETAH_CTRL_COST = 0.5 * 1e-1
ANT_CTRL_COST = 0.5 * 1e-2
ANT_CONTACT_COST = 0.5 * 1e-3
ANT_SURVIVE_REWARD = 0.05
ANT_HEALTHY_Z = (0.2, 1.0)


def _float_box(size: int) -> spaces.Box:
    return spaces.Box(-np.inf, np.inf, shape=(size,), dtype=np.float32)


class _VelocityTasks:
    """Tasks of the Vel envs: a target velocity, uniform on ``[low, high]``."""

    low: float
    high: float
    np_random: np.random.Generator
    _task: Task

    def sample_tasks(self, num_tasks: int) -> list[Task]:
        velocities = self.np_random.uniform(self.low, self.high, size=(num_tasks,))
        return [{"velocity": velocity} for velocity in velocities]

    def reset_task(self, task: Task) -> None:
        self._task = task
        self._goal_velocity = float(task["velocity"])


class _DirectionTasks:
    """Tasks of the Dir envs: forward (+1) or backward (-1), each with probability 1/2."""

    np_random: np.random.Generator
    _task: Task

    def sample_tasks(self, num_tasks: int) -> list[Task]:
        directions = 2 * self.np_random.binomial(1, p=0.5, size=(num_tasks,)) - 1
        return [{"direction": direction} for direction in directions]

    def reset_task(self, task: Task) -> None:
        self._task = task
        self._goal_direction = float(task["direction"])


class _HalfCheetahTaskEnv(HalfCheetahV5):
    """HalfCheetah with pytorch-maml-rl's observation; subclasses define the task term.

    ``args`` are the subclass's own arguments (before ``kwargs``), so that a pickled copy is
    rebuilt through the subclass.
    """

    def __init__(self, task: Task, args: tuple[Any, ...], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._task = task
        self.observation_space = _float_box(self.model.nq - 1 + self.model.nv + 3)
        utils.EzPickle.__init__(self, *args, **kwargs)
        self.reset_task(task)

    def reset_task(self, task: Task) -> None:
        raise NotImplementedError

    def _get_obs(self) -> FloatArray:
        parts = (self.data.qpos[1:], self.data.qvel, self.data.body("torso").xpos)
        return np.concatenate(parts).astype(np.float32)

    def _task_reward(self, forward_velocity: float) -> float:
        raise NotImplementedError

    # Our observations are float32 (pytorch-maml-rl's), where MujocoEnv.step declares float64.
    def step(self, action: FloatArray) -> StepReturn:  # type: ignore[override]
        x_before = float(self.data.qpos[0])
        self.do_simulation(action, self.frame_skip)
        forward_velocity = (float(self.data.qpos[0]) - x_before) / self.dt
        forward_reward = self._task_reward(forward_velocity)
        ctrl_cost = CHEETAH_CTRL_COST * float(np.sum(np.square(action)))
        info = {
            "reward_forward": forward_reward,
            "reward_ctrl": -ctrl_cost,
            "task": task_info(self._task),
        }
        return self._get_obs(), forward_reward - ctrl_cost, False, False, info

    def _get_reset_info(self) -> dict[str, Any]:
        return {"task": task_info(self._task)}


class HalfCheetahVelEnv(_VelocityTasks, _HalfCheetahTaskEnv):
    """Run at a target velocity, uniform on ``[low, high]`` (default [0, 2]).

    Task term: ``-|v_x - v_goal|``.
    """

    def __init__(
        self, task: Task | None = None, low: float = 0.0, high: float = 2.0, **kwargs: Any
    ) -> None:
        self.low, self.high = low, high
        default = {"velocity": 0.0}
        super().__init__(task if task is not None else default, (task, low, high), **kwargs)

    def _task_reward(self, forward_velocity: float) -> float:
        return -abs(forward_velocity - self._goal_velocity)


class HalfCheetahDirEnv(_DirectionTasks, _HalfCheetahTaskEnv):
    """Run forward (+1) or backward (-1), each with probability 1/2. Task term: ``dir * v_x``."""

    def __init__(self, task: Task | None = None, **kwargs: Any) -> None:
        default = {"direction": 1}
        super().__init__(task if task is not None else default, (task,), **kwargs)

    def _task_reward(self, forward_velocity: float) -> float:
        return self._goal_direction * forward_velocity


class _AntTaskEnv(AntV5):
    """Ant with pytorch-maml-rl's observation, costs and termination (``args``: as for
    ``_HalfCheetahTaskEnv``)."""

    def __init__(self, task: Task, args: tuple[Any, ...], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._task = task
        torso_pose = 9 + 3  # rotation matrix and position of the torso
        size = self.model.nq + self.model.nv + self.data.cfrc_ext.size + torso_pose
        self.observation_space = _float_box(size)
        box = cast(spaces.Box, self.action_space)
        self._action_scaling = 0.5 * (box.high - box.low)
        utils.EzPickle.__init__(self, *args, **kwargs)
        self.reset_task(task)

    def reset_task(self, task: Task) -> None:
        raise NotImplementedError

    def _contact_forces(self) -> NDArray[np.float64]:
        forces: NDArray[np.float64] = np.clip(self.data.cfrc_ext, -1.0, 1.0)
        return forces

    def _get_obs(self) -> FloatArray:
        torso = self.data.body("torso")
        parts = (self.data.qpos, self.data.qvel, self._contact_forces().ravel())
        return np.concatenate((*parts, torso.xmat.ravel(), torso.xpos)).astype(np.float32)

    def _alive(self) -> bool:
        state = self.state_vector()
        low, high = ANT_HEALTHY_Z
        return bool(np.isfinite(state).all() and low <= state[2] <= high)

    def _task_reward(self, xy_before: NDArray[np.float64]) -> tuple[str, float]:
        raise NotImplementedError

    # Our observations are float32 (pytorch-maml-rl's), where MujocoEnv.step declares float64.
    def step(self, action: FloatArray) -> StepReturn:  # type: ignore[override]
        xy_before = self.data.body("torso").xpos[:2].copy()
        self.do_simulation(action, self.frame_skip)
        name, task_reward = self._task_reward(xy_before)
        ctrl_cost = ANT_CTRL_COST * float(np.sum(np.square(action / self._action_scaling)))
        contact_cost = ANT_CONTACT_COST * float(np.sum(np.square(self._contact_forces())))
        reward = task_reward - ctrl_cost - contact_cost + ANT_SURVIVE_REWARD
        info = {
            name: task_reward,
            "reward_ctrl": -ctrl_cost,
            "reward_contact": -contact_cost,
            "reward_survive": ANT_SURVIVE_REWARD,
            "task": task_info(self._task),
        }
        return self._get_obs(), reward, not self._alive(), False, info

    def _get_reset_info(self) -> dict[str, Any]:
        return {"task": task_info(self._task)}

    def _forward_velocity(self, xy_before: NDArray[np.float64]) -> float:
        return (float(self.data.body("torso").xpos[0]) - float(xy_before[0])) / self.dt


class AntVelEnv(_VelocityTasks, _AntTaskEnv):
    """Walk forward at a target velocity, uniform on ``[low, high]`` (default [0, 3]).

    Task term: ``1 - |v_x - v_goal|``.
    """

    def __init__(
        self, task: Task | None = None, low: float = 0.0, high: float = 3.0, **kwargs: Any
    ) -> None:
        self.low, self.high = low, high
        default = {"velocity": 0.0}
        super().__init__(task if task is not None else default, (task, low, high), **kwargs)

    def _task_reward(self, xy_before: NDArray[np.float64]) -> tuple[str, float]:
        velocity = self._forward_velocity(xy_before)
        return "reward_forward", 1.0 - abs(velocity - self._goal_velocity)


class AntDirEnv(_DirectionTasks, _AntTaskEnv):
    """Walk forward (+1) or backward (-1), each with probability 1/2. Task term: ``dir * v_x``."""

    def __init__(self, task: Task | None = None, **kwargs: Any) -> None:
        default = {"direction": 1}
        super().__init__(task if task is not None else default, (task,), **kwargs)

    def _task_reward(self, xy_before: NDArray[np.float64]) -> tuple[str, float]:
        return "reward_forward", self._goal_direction * self._forward_velocity(xy_before)


class AntPosEnv(_AntTaskEnv):
    """Walk to a goal position, uniform on ``[low, high]^2`` (default [-3, 3]^2).

    Task term: ``4 - |xy - goal|_1`` (the torso's position after the step).
    """

    def __init__(
        self, task: Task | None = None, low: float = -3.0, high: float = 3.0, **kwargs: Any
    ) -> None:
        self.low, self.high = low, high
        default = {"position": np.zeros(2)}
        super().__init__(task if task is not None else default, (task, low, high), **kwargs)

    def sample_tasks(self, num_tasks: int) -> list[Task]:
        positions = self.np_random.uniform(self.low, self.high, size=(num_tasks, 2))
        return [{"position": position} for position in positions]

    def reset_task(self, task: Task) -> None:
        self._task = task
        self._goal_position = np.asarray(task["position"], dtype=np.float64)

    def _task_reward(self, xy_before: NDArray[np.float64]) -> tuple[str, float]:
        distance = float(np.sum(np.abs(self.data.body("torso").xpos[:2] - self._goal_position)))
        return "reward_goal", 4.0 - distance
