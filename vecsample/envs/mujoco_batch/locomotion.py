"""HalfCheetah, Hopper, Walker2d, Ant, Humanoid, HumanoidStandup and Swimmer at v5, computed
for the whole batch.

Each class takes its gymnasium v5 counterpart's keywords, with the same defaults (``DEFAULTS``),
and computes what that env's ``step`` computes, over every env at once, in the same floating
point operations (the same dtypes, the same order of sums), so that each row is bit for bit the
single env's: the tests step both side by side (tests/test_mujoco_batch.py).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from vecsample.adapters.vector_infos import Columns
from vecsample.envs.mujoco_batch.arrays import Array, Bools, control_cost, row_norm
from vecsample.envs.mujoco_batch.physics import Field
from vecsample.envs.mujoco_batch.vector import BatchMujocoEnv


class HalfCheetahBatchEnv(BatchMujocoEnv):
    """``HalfCheetah-v5`` × ``num_envs``: reward = forward velocity - control cost."""

    DEFAULTS: ClassVar[dict[str, Any]] = {
        "xml_file": "half_cheetah.xml", "frame_skip": 5, "forward_reward_weight": 1.0,
        "ctrl_cost_weight": 0.1, "reset_noise_scale": 0.1,
        "exclude_current_positions_from_observation": True}
    QVEL_NOISE = "normal"

    def _observe(self) -> Array:
        skip = int(self.config["exclude_current_positions_from_observation"])
        return np.concatenate((self.physics.qpos[:, skip:], self.physics.qvel), axis=1)

    def _before(self) -> Array:
        return self.physics.qpos[:, 0].copy()

    def _evaluate(self, actions: NDArray[Any], before: Array) -> tuple[Array, Bools, Columns]:
        c = self.config
        x_after = self.physics.qpos[:, 0].copy()
        x_velocity = (x_after - before) / self.dt
        forward = c["forward_reward_weight"] * x_velocity
        ctrl = control_cost(c["ctrl_cost_weight"], actions)
        infos = {"x_position": x_after, "x_velocity": x_velocity, "reward_forward": forward,
                 "reward_ctrl": -ctrl}
        return forward - ctrl, np.zeros(self.num_envs, dtype=np.bool_), infos

    def _reset_info(self) -> Columns:
        return {"x_position": self.physics.qpos[:, 0].copy()}


class _PlanarWalker(BatchMujocoEnv):
    """Hopper and Walker2d: the same step, reward and infos; their health checks differ."""

    def _healthy(self) -> Bools:
        raise NotImplementedError

    def _observe(self) -> Array:
        skip = int(self.config["exclude_current_positions_from_observation"])
        velocity = np.clip(self.physics.qvel, -10, 10)
        return np.concatenate((self.physics.qpos[:, skip:], velocity), axis=1)

    def _before(self) -> Array:
        return self.physics.qpos[:, 0].copy()

    def _evaluate(self, actions: NDArray[Any], before: Array) -> tuple[Array, Bools, Columns]:
        c, qpos = self.config, self.physics.qpos
        x_after = qpos[:, 0].copy()
        x_velocity = (x_after - before) / self.dt
        forward = c["forward_reward_weight"] * x_velocity
        healthy = self._healthy()
        survive = healthy * c["healthy_reward"]
        ctrl = control_cost(c["ctrl_cost_weight"], actions)
        infos = {"x_position": x_after, "z_distance_from_origin": self._z_distance(),
                 "x_velocity": x_velocity, "reward_forward": forward, "reward_ctrl": -ctrl,
                 "reward_survive": survive}
        terminated = ~healthy & bool(c["terminate_when_unhealthy"])
        return forward + survive - ctrl, terminated, infos

    def _z_distance(self) -> Array:
        return self.physics.qpos[:, 1] - self.physics.init_qpos[1]  # type: ignore[no-any-return]

    def _reset_info(self) -> Columns:
        return {"x_position": self.physics.qpos[:, 0].copy(),
                "z_distance_from_origin": self._z_distance()}


def _between(low: float, x: Array, high: float) -> Bools:
    """``low < x < high`` per element."""
    return (low < x) & (x < high)


class HopperBatchEnv(_PlanarWalker):
    """``Hopper-v5`` × ``num_envs``."""

    DEFAULTS: ClassVar[dict[str, Any]] = {
        "xml_file": "hopper.xml", "frame_skip": 4, "forward_reward_weight": 1.0,
        "ctrl_cost_weight": 1e-3, "healthy_reward": 1.0, "terminate_when_unhealthy": True,
        "healthy_state_range": (-100.0, 100.0), "healthy_z_range": (0.7, float("inf")),
        "healthy_angle_range": (-0.2, 0.2), "reset_noise_scale": 5e-3,
        "exclude_current_positions_from_observation": True}

    def _healthy(self) -> Bools:
        c, p = self.config, self.physics
        state = np.concatenate((p.qpos[:, 2:], p.qvel), axis=1)
        (low, high), (z_low, z_high) = c["healthy_state_range"], c["healthy_z_range"]
        angle_low, angle_high = c["healthy_angle_range"]
        healthy: Bools = (np.all(_between(low, state, high), axis=1)
                          & _between(z_low, p.qpos[:, 1], z_high)
                          & _between(angle_low, p.qpos[:, 2], angle_high))
        return healthy


class Walker2dBatchEnv(_PlanarWalker):
    """``Walker2d-v5`` × ``num_envs``."""

    DEFAULTS: ClassVar[dict[str, Any]] = {
        "xml_file": "walker2d_v5.xml", "frame_skip": 4, "forward_reward_weight": 1.0,
        "ctrl_cost_weight": 1e-3, "healthy_reward": 1.0, "terminate_when_unhealthy": True,
        "healthy_z_range": (0.8, 2.0), "healthy_angle_range": (-1.0, 1.0),
        "reset_noise_scale": 5e-3, "exclude_current_positions_from_observation": True}

    def _healthy(self) -> Bools:
        c, qpos = self.config, self.physics.qpos
        return (_between(c["healthy_z_range"][0], qpos[:, 1], c["healthy_z_range"][1])
                & _between(c["healthy_angle_range"][0], qpos[:, 2],
                           c["healthy_angle_range"][1]))


class AntBatchEnv(BatchMujocoEnv):
    """``Ant-v5`` × ``num_envs``: the main body's velocity, health, control and contact costs."""

    DEFAULTS: ClassVar[dict[str, Any]] = {
        "xml_file": "ant.xml", "frame_skip": 5, "forward_reward_weight": 1,
        "ctrl_cost_weight": 0.5, "contact_cost_weight": 5e-4, "healthy_reward": 1.0,
        "main_body": 1, "terminate_when_unhealthy": True, "healthy_z_range": (0.2, 1.0),
        "contact_force_range": (-1.0, 1.0), "reset_noise_scale": 0.1,
        "exclude_current_positions_from_observation": True,
        "include_cfrc_ext_in_observation": True}
    QVEL_NOISE = "normal"
    POST_CONSTRAINT = True

    def _fields(self) -> list[Field]:
        return [Field("main_xpos", "xpos", self.config["main_body"]),
                Field("cfrc_ext", "cfrc_ext")]

    def _contact_forces(self) -> Array:
        low, high = self.config["contact_force_range"]
        return np.clip(self.physics.fields["cfrc_ext"], low, high)

    def _observe(self) -> Array:
        p = self.physics
        skip = 2 * int(self.config["exclude_current_positions_from_observation"])
        parts = [p.qpos[:, skip:], p.qvel]
        if self.config["include_cfrc_ext_in_observation"]:
            parts.append(self._contact_forces()[:, 1:].reshape(self.num_envs, -1))
        return np.concatenate(parts, axis=1)

    def _before(self) -> Array:
        return self.physics.fields["main_xpos"][:, :2].copy()

    def _healthy(self) -> Bools:
        p, (low, high) = self.physics, self.config["healthy_z_range"]
        finite = np.isfinite(p.qpos).all(axis=1) & np.isfinite(p.qvel).all(axis=1)
        return finite & (low <= p.qpos[:, 2]) & (p.qpos[:, 2] <= high)  # type: ignore[no-any-return]

    def _evaluate(self, actions: NDArray[Any], before: Array) -> tuple[Array, Bools, Columns]:
        c = self.config
        xy_velocity = (self._before() - before) / self.dt
        forward = xy_velocity[:, 0] * c["forward_reward_weight"]
        healthy = self._healthy()
        survive = healthy * c["healthy_reward"]
        ctrl = control_cost(c["ctrl_cost_weight"], actions)
        contact = c["contact_cost_weight"] * np.sum(
            np.square(self._contact_forces()).reshape(self.num_envs, -1), axis=1)
        infos = {**self._reset_info(), "x_velocity": xy_velocity[:, 0],
                 "y_velocity": xy_velocity[:, 1], "reward_forward": forward,
                 "reward_ctrl": -ctrl, "reward_contact": -contact, "reward_survive": survive}
        terminated = ~healthy & bool(c["terminate_when_unhealthy"])
        return (forward + survive) - (ctrl + contact), terminated, infos

    def _reset_info(self) -> Columns:
        qpos = self.physics.qpos
        return {"x_position": qpos[:, 0].copy(), "y_position": qpos[:, 1].copy(),
                "distance_from_origin": row_norm(qpos[:, 0:2])}


class _HumanoidBody(BatchMujocoEnv):
    """Humanoid and HumanoidStandup: the same observation (``qpos``, ``qvel`` and, each on
    request, cinert, cvel, qfrc_actuator and cfrc_ext), ``cfrc_ext`` after the step, and the
    tendons in the infos."""

    POST_CONSTRAINT = True
    #: The optional observation parts, in order: (keyword, field, first row kept).
    PARTS = (("include_cinert_in_observation", "cinert", 1),
             ("include_cvel_in_observation", "cvel", 1),
             ("include_qfrc_actuator_in_observation", "qfrc_actuator", 6),
             ("include_cfrc_ext_in_observation", "cfrc_ext", 1))
    #: The ``MjData`` fields read, beyond qpos and qvel.
    FIELDS: ClassVar[tuple[str, ...]] = ("cinert", "cvel", "qfrc_actuator", "cfrc_ext",
                                         "ten_length", "ten_velocity")

    def _fields(self) -> list[Field]:
        return [Field(name, name) for name in self.FIELDS]

    def _observe(self) -> Array:
        p = self.physics
        skip = 2 * int(self.config["exclude_current_positions_from_observation"])
        parts = [p.qpos[:, skip:], p.qvel]
        for keyword, name, first in self.PARTS:
            if self.config[keyword] is True:
                parts.append(p.fields[name][:, first:].reshape(self.num_envs, -1))
        return np.concatenate(parts, axis=1)

    def _contact_cost(self, weight: float, bounds: tuple[float, float]) -> Array:
        """``clip(weight * sum(cfrc_ext^2), *bounds)`` per row."""
        squares = np.square(self.physics.fields["cfrc_ext"]).reshape(self.num_envs, -1)
        return np.clip(weight * squares.sum(axis=1), *bounds)  # type: ignore[no-any-return]

    def _tendons(self) -> Columns:
        p = self.physics
        return {"tendon_length": p.fields["ten_length"].copy(),
                "tendon_velocity": p.fields["ten_velocity"].copy()}


class HumanoidBatchEnv(_HumanoidBody):
    """``Humanoid-v5`` × ``num_envs``: the centre of mass's velocity, health, control and
    contact costs; the observation adds cinert, cvel, qfrc_actuator and cfrc_ext."""

    DEFAULTS: ClassVar[dict[str, Any]] = {
        "xml_file": "humanoid.xml", "frame_skip": 5, "forward_reward_weight": 1.25,
        "ctrl_cost_weight": 0.1, "contact_cost_weight": 5e-7,
        "contact_cost_range": (-np.inf, 10.0), "healthy_reward": 5.0,
        "terminate_when_unhealthy": True, "healthy_z_range": (1.0, 2.0),
        "reset_noise_scale": 1e-2, "exclude_current_positions_from_observation": True,
        "include_cinert_in_observation": True, "include_cvel_in_observation": True,
        "include_qfrc_actuator_in_observation": True, "include_cfrc_ext_in_observation": True}
    FIELDS = ("xipos", *_HumanoidBody.FIELDS)

    def _before(self) -> Array:
        """gymnasium's ``mass_center``: the bodies' mass-weighted ``xipos``, x and y."""
        mass = self.physics.model.body_mass
        num = np.einsum("b,nbj->nj", mass, self.physics.fields["xipos"])
        return (num / mass.sum())[:, 0:2].copy()  # type: ignore[no-any-return]

    def _evaluate(self, actions: NDArray[Any], before: Array) -> tuple[Array, Bools, Columns]:
        c, p = self.config, self.physics
        xy_velocity = (self._before() - before) / self.dt
        forward = c["forward_reward_weight"] * xy_velocity[:, 0]
        low, high = c["healthy_z_range"]
        healthy = (low < p.qpos[:, 2]) & (p.qpos[:, 2] < high)
        survive = healthy * c["healthy_reward"]
        ctrl = c["ctrl_cost_weight"] * np.square(p.control).sum(axis=1)
        contact = self._contact_cost(c["contact_cost_weight"], c["contact_cost_range"])
        infos = {**self._reset_info(), "x_velocity": xy_velocity[:, 0],
                 "y_velocity": xy_velocity[:, 1], "reward_survive": survive,
                 "reward_forward": forward, "reward_ctrl": -ctrl, "reward_contact": -contact}
        terminated = ~healthy & bool(c["terminate_when_unhealthy"])
        return (forward + survive) - (ctrl + contact), terminated, infos

    def _reset_info(self) -> Columns:
        qpos = self.physics.qpos
        return {"x_position": qpos[:, 0].copy(), "y_position": qpos[:, 1].copy(),
                **self._tendons(), "distance_from_origin": row_norm(qpos[:, 0:2])}


class HumanoidStandupBatchEnv(_HumanoidBody):
    """``HumanoidStandup-v5`` × ``num_envs``: reward = the torso's height / timestep - control
    and impact costs + 1; never terminates. ``uph_cost_weight`` is taken and, as in gymnasium,
    not used."""

    DEFAULTS: ClassVar[dict[str, Any]] = {
        "xml_file": "humanoidstandup.xml", "frame_skip": 5, "uph_cost_weight": 1,
        "ctrl_cost_weight": 0.1, "impact_cost_weight": 0.5e-6,
        "impact_cost_range": (-np.inf, 10.0), "reset_noise_scale": 1e-2,
        "exclude_current_positions_from_observation": True,
        "include_cinert_in_observation": True, "include_cvel_in_observation": True,
        "include_qfrc_actuator_in_observation": True, "include_cfrc_ext_in_observation": True}

    def _before(self) -> None:
        return None

    def _evaluate(self, actions: NDArray[Any], before: None) -> tuple[Array, Bools, Columns]:
        c, p = self.config, self.physics
        uph = p.qpos[:, 2] / p.model.opt.timestep
        ctrl = c["ctrl_cost_weight"] * np.square(p.control).sum(axis=1)
        impact = self._contact_cost(c["impact_cost_weight"], c["impact_cost_range"])
        infos = {**self._reset_info(), "reward_linup": uph, "reward_quadctrl": -ctrl,
                 "reward_impact": -impact}
        return uph - ctrl - impact + 1, np.zeros(self.num_envs, dtype=np.bool_), infos

    def _reset_info(self) -> Columns:
        p = self.physics
        return {"x_position": p.qpos[:, 0].copy(), "y_position": p.qpos[:, 1].copy(),
                "z_distance_from_origin": p.qpos[:, 2] - p.init_qpos[2], **self._tendons()}


class SwimmerBatchEnv(BatchMujocoEnv):
    """``Swimmer-v5`` × ``num_envs``: reward = forward velocity - control cost; never
    terminates."""

    DEFAULTS: ClassVar[dict[str, Any]] = {
        "xml_file": "swimmer.xml", "frame_skip": 4, "forward_reward_weight": 1.0,
        "ctrl_cost_weight": 1e-4, "reset_noise_scale": 0.1,
        "exclude_current_positions_from_observation": True}

    def _observe(self) -> Array:
        skip = 2 * int(self.config["exclude_current_positions_from_observation"])
        return np.concatenate((self.physics.qpos[:, skip:], self.physics.qvel), axis=1)

    def _before(self) -> Array:
        return self.physics.qpos[:, 0:2].copy()

    def _evaluate(self, actions: NDArray[Any], before: Array) -> tuple[Array, Bools, Columns]:
        c = self.config
        after = self.physics.qpos[:, 0:2].copy()
        xy_velocity = (after - before) / self.dt
        forward = c["forward_reward_weight"] * xy_velocity[:, 0]
        ctrl = control_cost(c["ctrl_cost_weight"], actions)
        infos = {"x_position": after[:, 0], "y_position": after[:, 1],
                 "distance_from_origin": row_norm(after), "x_velocity": xy_velocity[:, 0],
                 "y_velocity": xy_velocity[:, 1], "reward_forward": forward,
                 "reward_ctrl": -ctrl}
        return forward - ctrl, np.zeros(self.num_envs, dtype=np.bool_), infos

    def _reset_info(self) -> Columns:
        qpos = self.physics.qpos
        return {"x_position": qpos[:, 0].copy(), "y_position": qpos[:, 1].copy(),
                "distance_from_origin": row_norm(qpos[:, 0:2])}
