"""Bernoulli multi-armed bandits (Duan et al. 2016, RL^2): one pull per episode."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from vecsample.envs.base import Task, task_info

FloatArray = NDArray[np.float32]


class BernoulliBanditEnv(gym.Env[FloatArray, np.int64]):
    """``k`` arms; pulling arm ``i`` pays 1 with probability ``mean[i]``, else 0.

    The observation is a constant zero; every episode is one pull (terminated after the first
    step). Arm means are uniform on [0, 1], drawn per task.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's convention)

    def __init__(self, k: int, task: Task | None = None) -> None:
        super().__init__()
        self.k = k
        self.action_space = spaces.Discrete(k)
        self.observation_space = spaces.Box(0.0, 0.0, shape=(1,), dtype=np.float32)
        self.reset_task(task if task is not None else {"mean": np.full(k, 0.5)})

    def sample_tasks(self, num_tasks: int) -> list[Task]:
        means = self.np_random.random((num_tasks, self.k))
        return [{"mean": mean} for mean in means]

    def reset_task(self, task: Task) -> None:
        self._task = task
        self._means = np.asarray(task["mean"], dtype=np.float64)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[FloatArray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(1, dtype=np.float32), {"task": task_info(self._task)}

    def step(self, action: np.int64) -> tuple[FloatArray, float, bool, bool, dict[str, Any]]:
        reward = float(self.np_random.binomial(1, self._means[int(action)]))
        return np.zeros(1, dtype=np.float32), reward, True, False, {"task": task_info(self._task)}
