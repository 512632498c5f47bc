"""Random tabular MDPs (Duan et al. 2016, RL^2): one-hot states, Gaussian rewards."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from vecsample.envs.base import Task, task_info

FloatArray = NDArray[np.float32]


class TabularMDPEnv(gym.Env[FloatArray, np.int64]):
    """``num_states`` states, ``num_actions`` actions; every episode starts in state 0.

    Per task, the transition rows are drawn from a flat Dirichlet and the mean rewards from
    N(1, 1); a step pays N(mean[s, a], 1). The env never terminates: the registration's time limit
    (10 steps) ends the episode, as in pytorch-maml-rl.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's convention)

    def __init__(self, num_states: int, num_actions: int, task: Task | None = None) -> None:
        super().__init__()
        self.num_states = num_states
        self.num_actions = num_actions
        self.action_space = spaces.Discrete(num_actions)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(num_states,), dtype=np.float32)
        self._state = 0
        if task is None:
            uniform = np.full((num_states, num_actions, num_states), 1.0 / num_states)
            task = {"transitions": uniform, "rewards_mean": np.zeros((num_states, num_actions))}
        self.reset_task(task)

    def sample_tasks(self, num_tasks: int) -> list[Task]:
        shape = (num_tasks, self.num_states, self.num_actions)
        transitions = self.np_random.dirichlet(np.ones(self.num_states), size=shape)
        rewards_mean = self.np_random.normal(1.0, 1.0, size=shape)
        return [
            {"transitions": transition, "rewards_mean": reward_mean}
            for transition, reward_mean in zip(transitions, rewards_mean, strict=True)
        ]

    def reset_task(self, task: Task) -> None:
        self._task = task
        self._transitions = np.asarray(task["transitions"], dtype=np.float64)
        self._rewards_mean = np.asarray(task["rewards_mean"], dtype=np.float64)

    def _observation(self) -> FloatArray:
        observation = np.zeros(self.num_states, dtype=np.float32)
        observation[self._state] = 1.0
        return observation

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[FloatArray, dict[str, Any]]:
        super().reset(seed=seed)
        self._state = 0
        return self._observation(), {"task": task_info(self._task)}

    def step(self, action: np.int64) -> tuple[FloatArray, float, bool, bool, dict[str, Any]]:
        a = int(action)
        reward = float(self.np_random.normal(self._rewards_mean[self._state, a], 1.0))
        next_state = self.np_random.choice(self.num_states, p=self._transitions[self._state, a])
        self._state = int(next_state)
        return self._observation(), reward, False, False, {"task": task_info(self._task)}
