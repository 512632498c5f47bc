"""InvertedPendulum, InvertedDoublePendulum, Reacher and Pusher at v5, computed for the whole batch.

The small models: one physics step of each costs about as much as a Python call, so here the
batch env's gain over gymnasium's env is the Python of gymnasium's step that it does once per
batch instead of once per env. As in locomotion.py, each class takes its v5 counterpart's
keywords with the same defaults (``DEFAULTS``) and repeats its floating point operations over
the batch (the same dtypes, the same order of operations), so that each row is bit for bit the
single env's (tests/test_mujoco_batch.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from vecsample.adapters.vector_infos import Columns
from vecsample.envs.mujoco_batch.arrays import Array, Bools, row_norm, scalar_square
from vecsample.envs.mujoco_batch.physics import Field
from vecsample.envs.mujoco_batch.vector import BatchMujocoEnv


class _Small(BatchMujocoEnv):
    """What the four share: nothing read before the step, no reset info (``MujocoEnv``'s
    default)."""

    def _before(self) -> None:
        return None

    def _reset_info(self) -> Columns:
        return {}


class InvertedPendulumBatchEnv(_Small):
    """``InvertedPendulum-v5`` × ``num_envs``: reward 1 while the pole stays within 0.2 rad of
    upright (an int, as gymnasium's ``reward_survive``); terminates when it leaves or the state
    is not finite."""

    DEFAULTS: ClassVar[dict[str, Any]] = {
        "xml_file": "inverted_pendulum.xml", "frame_skip": 2, "reset_noise_scale": 0.01}
    RESET_STAGE = "none"  # it reads qpos and qvel only (resets every 6 steps or so)

    def _observe(self) -> Array:
        return np.concatenate((self.physics.qpos, self.physics.qvel), axis=1)

    def _evaluate(self, actions: NDArray[Any], before: None) -> tuple[Array, Bools, Columns]:
        obs = self._observe()
        terminated = ~np.isfinite(obs).all(axis=1) | (np.abs(obs[:, 1]) > 0.2)
        survive = (~terminated).astype(int)
        return survive.astype(np.float64), terminated, {"reward_survive": survive}


class InvertedDoublePendulumBatchEnv(_Small):
    """``InvertedDoublePendulum-v5`` × ``num_envs``: reward = ``healthy_reward`` while the tip
    of the second pole stays above 1 - the tip's distance penalty - the hinges' velocity
    penalty; terminates when the tip falls to 1 or below."""

    DEFAULTS: ClassVar[dict[str, Any]] = {
        "xml_file": "inverted_double_pendulum.xml", "frame_skip": 5, "healthy_reward": 10.0,
        "reset_noise_scale": 0.1}
    QVEL_NOISE = "normal"

    def _fields(self) -> list[Field]:
        return [Field("site_xpos", "site_xpos"), Field("qfrc_constraint", "qfrc_constraint")]

    def _observe(self) -> Array:
        p = self.physics
        angles = p.qpos[:, 1:]
        parts = (p.qpos[:, :1], np.sin(angles), np.cos(angles), np.clip(p.qvel, -10, 10),
                 np.clip(p.fields["qfrc_constraint"], -10, 10)[:, :1])
        return np.concatenate(parts, axis=1)

    def _evaluate(self, actions: NDArray[Any], before: None) -> tuple[Array, Bools, Columns]:
        p = self.physics
        tip = p.fields["site_xpos"][:, 0]
        x, y = tip[:, 0], tip[:, 2]
        terminated = y <= 1
        # gymnasium squares numpy scalars here (pow), not arrays (x * x): scalar_square
        distance = 0.01 * scalar_square(x) + scalar_square(y - 2)
        velocity = 1e-3 * scalar_square(p.qvel[:, 1]) + 5e-3 * scalar_square(p.qvel[:, 2])
        survive = self.config["healthy_reward"] * (~terminated).astype(int)
        infos = {"reward_survive": survive, "distance_penalty": -distance,
                 "velocity_penalty": -velocity}
        return survive - distance - velocity, terminated, infos


def _env_by_env(rngs: list[np.random.Generator],
                draw: Callable[[np.random.Generator], tuple[Array, Array]]) -> Array:
    """``_reset_states`` of an env whose reset draws more than its noise (Reacher's and
    Pusher's targets, drawn until one fits): ``draw`` env by env."""
    return np.stack([np.concatenate(draw(rng)) for rng in rngs])


def _ctrl_reward(weight: float, actions: NDArray[Any]) -> NDArray[Any]:
    """``-np.square(action).sum() * weight`` per row, in the actions' dtype."""
    return -np.square(actions).sum(axis=1) * weight  # type: ignore[no-any-return]


class ReacherBatchEnv(_Small):
    """``Reacher-v5`` × ``num_envs``: reward = - the fingertip's distance to the target -
    the control's squared norm (each weighted); never terminates. A reset draws the arm's
    angles and, until one lies inside the disc of radius 0.2, the target."""

    DEFAULTS: ClassVar[dict[str, Any]] = {
        "xml_file": "reacher.xml", "frame_skip": 2, "reward_dist_weight": 1,
        "reward_control_weight": 1}
    RESET_STAGE = "kinematics"  # it reads bodies' positions only

    def _fields(self) -> list[Field]:
        return [Field("fingertip", "xpos", "fingertip"), Field("target", "xpos", "target")]

    def _to_target(self) -> Array:
        fields = self.physics.fields
        return fields["fingertip"] - fields["target"]

    def _observe(self) -> Array:
        p = self.physics
        theta = p.qpos[:, :2]
        parts = (np.cos(theta), np.sin(theta), p.qpos[:, 2:], p.qvel[:, :2],
                 self._to_target()[:, :2])
        return np.concatenate(parts, axis=1)

    def _evaluate(self, actions: NDArray[Any], before: None) -> tuple[Array, Bools, Columns]:
        c = self.config
        distance = -row_norm(self._to_target()) * c["reward_dist_weight"]
        ctrl = _ctrl_reward(c["reward_control_weight"], actions)
        infos = {"reward_dist": distance, "reward_ctrl": ctrl}
        return distance + ctrl, np.zeros(self.num_envs, dtype=np.bool_), infos

    def _reset_states(self, rngs: list[np.random.Generator]) -> Array:
        return _env_by_env(rngs, self._reset_state)

    def _reset_state(self, rng: np.random.Generator) -> tuple[Array, Array]:
        p = self.physics
        qpos = rng.uniform(low=-0.1, high=0.1, size=p.model.nq) + p.init_qpos
        while True:
            goal = rng.uniform(low=-0.2, high=0.2, size=2)
            if np.linalg.norm(goal) < 0.2:
                break
        qpos[-2:] = goal
        qvel = p.init_qvel + rng.uniform(low=-0.005, high=0.005, size=p.model.nv)
        qvel[-2:] = 0
        return qpos, qvel


class PusherBatchEnv(_Small):
    """``Pusher-v5`` × ``num_envs``: reward = - the object's distance to the goal - the arm
    tip's distance to the object - the control's squared norm (each weighted); never
    terminates. A reset draws the object's position until it lies more than 0.17 from the
    goal."""

    DEFAULTS: ClassVar[dict[str, Any]] = {
        "xml_file": "pusher_v5.xml", "frame_skip": 5, "reward_near_weight": 0.5,
        "reward_dist_weight": 1, "reward_control_weight": 0.1}
    BODIES = ("tips_arm", "object", "goal")
    RESET_STAGE = "kinematics"  # it reads bodies' positions only

    def _fields(self) -> list[Field]:
        return [Field(body, "xpos", body) for body in self.BODIES]

    def _observe(self) -> Array:
        p = self.physics
        parts = (p.qpos[:, :7], p.qvel[:, :7], *(p.fields[body] for body in self.BODIES))
        return np.concatenate(parts, axis=1)

    def _evaluate(self, actions: NDArray[Any], before: None) -> tuple[Array, Bools, Columns]:
        c, fields = self.config, self.physics.fields
        near = -row_norm(fields["object"] - fields["tips_arm"]) * c["reward_near_weight"]
        distance = -row_norm(fields["object"] - fields["goal"]) * c["reward_dist_weight"]
        ctrl = _ctrl_reward(c["reward_control_weight"], actions)
        infos = {"reward_dist": distance, "reward_ctrl": ctrl, "reward_near": near}
        return distance + ctrl + near, np.zeros(self.num_envs, dtype=np.bool_), infos

    def _reset_states(self, rngs: list[np.random.Generator]) -> Array:
        return _env_by_env(rngs, self._reset_state)

    def _reset_state(self, rng: np.random.Generator) -> tuple[Array, Array]:
        p = self.physics
        qpos, goal = p.init_qpos.copy(), np.asarray([0, 0])
        while True:
            cylinder = np.concatenate([rng.uniform(low=-0.3, high=0, size=1),
                                       rng.uniform(low=-0.2, high=0.2, size=1)])
            if np.linalg.norm(cylinder - goal) > 0.17:
                break
        qpos[-4:-2] = cylinder
        qpos[-2:] = goal
        qvel = p.init_qvel + rng.uniform(low=-0.005, high=0.005, size=p.model.nv)
        qvel[-4:] = 0
        return qpos, qvel
