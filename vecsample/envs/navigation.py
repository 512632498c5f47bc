"""2D navigation (Finn et al. 2017, section 5.3): a point walks to a goal drawn per task."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from vecsample.envs.base import Task, task_info

FloatArray = NDArray[np.float32]


class Navigation2DEnv(gym.Env[FloatArray, FloatArray]):
    """A point at the origin moves by its action (a velocity clipped to [-0.1, 0.1]^2).

    The reward is minus the L2 distance to the task's goal; the episode terminates when the point
    is within 0.01 of the goal on both axes. Goals are uniform on ``[low, high]^2``. The time
    limit (100 steps) comes from the registration, as in pytorch-maml-rl.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's convention)

    def __init__(self, task: Task | None = None, low: float = -0.5, high: float = 0.5) -> None:
        super().__init__()
        self.low = low
        self.high = high
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Box(-0.1, 0.1, shape=(2,), dtype=np.float32)
        self._state = np.zeros(2, dtype=np.float32)
        self.reset_task(task if task is not None else {"goal": np.zeros(2, dtype=np.float32)})

    def sample_tasks(self, num_tasks: int) -> list[Task]:
        goals = self.np_random.uniform(self.low, self.high, size=(num_tasks, 2))
        return [{"goal": goal} for goal in goals]

    def reset_task(self, task: Task) -> None:
        self._task = task
        self._goal = np.asarray(task["goal"], dtype=np.float64)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[FloatArray, dict[str, Any]]:
        super().reset(seed=seed)
        self._state = np.zeros(2, dtype=np.float32)
        return self._state.copy(), {"task": task_info(self._task)}

    def step(self, action: FloatArray) -> tuple[FloatArray, float, bool, bool, dict[str, Any]]:
        velocity = np.clip(np.asarray(action, dtype=np.float32), -0.1, 0.1)
        self._state = self._state + velocity
        dx, dy = self._state - self._goal
        reward = -float(np.sqrt(dx**2 + dy**2))
        terminated = bool(abs(dx) < 0.01 and abs(dy) < 0.01)
        return self._state.copy(), reward, terminated, False, {"task": task_info(self._task)}
