"""The action wrapper pytorch-maml-rl puts on its MuJoCo task envs, and the factory that adds it."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import load_env_creator
from numpy.typing import NDArray

FloatArray = NDArray[np.float32]


class NormalizedActionWrapper(gym.ActionWrapper[Any, FloatArray, FloatArray]):
    """Exposes actions in ``[-scale, scale]`` and maps them linearly onto the env's bounds.

    Actions are first clipped to ``[-scale, scale]`` (a Gaussian policy's samples are unbounded),
    then mapped onto ``[low, high]`` and clipped there. Where the env's bounds are not finite the
    clipped action is passed through unchanged (rllab's ``NormalizedEnv`` behaviour).
    """

    def __init__(self, env: gym.Env[Any, FloatArray], scale: float = 1.0) -> None:
        super().__init__(env)
        if not isinstance(env.action_space, spaces.Box):
            raise TypeError(
                f"NormalizedActionWrapper needs a Box action space, got {env.action_space}; "
                "use it on continuous-control envs only."
            )
        self.scale = float(scale)
        self._low = env.action_space.low.astype(np.float64)
        self._high = env.action_space.high.astype(np.float64)
        self._bounded = bool(np.all(np.isfinite(self._low)) and np.all(np.isfinite(self._high)))
        self.action_space = spaces.Box(
            -self.scale, self.scale, shape=env.action_space.shape, dtype=np.float32
        )

    def action(self, action: FloatArray) -> FloatArray:
        clipped = np.clip(np.asarray(action, dtype=np.float64), -self.scale, self.scale)
        if self._bounded:
            span = self._high - self._low
            mapped = self._low + (clipped + self.scale) * span / (2.0 * self.scale)
            clipped = np.clip(mapped, self._low, self._high)
        return clipped.astype(np.float32)


def make_mujoco_task_env(
    entry_point: str, normalization_scale: float = 1.0, **kwargs: Any
) -> gym.Env[Any, Any]:
    """Builds ``entry_point(**kwargs)`` inside a ``NormalizedActionWrapper(normalization_scale)``.

    The registration passes ``max_episode_steps=200`` (pytorch-maml-rl's default), and
    ``gymnasium.make(..., max_episode_steps=100)`` overrides it, so their configs' ``env-kwargs``
    (``normalization_scale``, ``max_episode_steps``, ``low``, ``high``) work unchanged.
    """
    env = load_env_creator(entry_point)(**kwargs)
    if not isinstance(env, gym.Env):
        raise TypeError(f"{entry_point} built {type(env).__name__}, expected a gymnasium.Env.")
    return NormalizedActionWrapper(env, scale=normalization_scale)
