"""Batch-native MuJoCo envs: every gymnasium v5 MuJoCo env and the meta-RL task envs, one
``gymnasium.vector.VectorEnv`` per batch, equal to gymnasium's envs step by step.

==============================  ===============================  ============================
batch id                        equal to                         time limit (steps)
==============================  ===============================  ============================
HalfCheetahBatch-v5             HalfCheetah-v5                   1000
HopperBatch-v5                  Hopper-v5                        1000
Walker2dBatch-v5                Walker2d-v5                      1000
AntBatch-v5                     Ant-v5                           1000
HumanoidBatch-v5                Humanoid-v5                      1000
HumanoidStandupBatch-v5         HumanoidStandup-v5               1000
SwimmerBatch-v5                 Swimmer-v5                       1000
InvertedPendulumBatch-v5        InvertedPendulum-v5              1000
InvertedDoublePendulumBatch-v5  InvertedDoublePendulum-v5        1000
ReacherBatch-v5                 Reacher-v5                       50
PusherBatch-v5                  Pusher-v5                        100
HalfCheetahVelBatch-v5          HalfCheetahVel-v5                200
HalfCheetahDirBatch-v5          HalfCheetahDir-v5                200
AntVelBatch-v5                  AntVel-v5                        200
AntDirBatch-v5                  AntDir-v5                        200
AntPosBatch-v5                  AntPos-v5                        200
==============================  ===============================  ============================

The time limits are the registrations' of the envs they equal (gymnasium's, and vecsample's
for the task envs). The task envs (the last five) take one task per env through
``reset_task(tasks)``, in row order, and ``normalization_scale`` as their single envs do.

Each id is a vector entry point only: ``gymnasium.make_vec(id, num_envs,
vectorization_mode="vector_entry_point")`` builds one, and ``vecsample.HostedVector(id)`` hosts
one per worker; ``gymnasium.make(id)`` has no single env to build. ``ENVS`` holds one row per
env; ``BATCH_IDS`` maps each gymnasium (or vecsample) id to its batch id: the one-line switch
of a workload, and ``batch_id_for(env_id, kwargs)`` says whether a workload with those keywords
can switch. What they guarantee, and why the physics is stepped as it is, is in
docs/mujoco_batch.md.

Importing this package registers nothing and needs no mujoco; ``vecsample.envs`` registers the
ids (by name: building one, or ``batch_id_for``, imports mujoco).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gymnasium.envs.registration import register

_HERE = "vecsample.envs.mujoco_batch"


@dataclass(frozen=True)
class BatchEnvSpec:
    """One batch-native env: the id it equals, its own id, its class (``module:Class`` in this
    package) and its time limit (the registration's of ``gym_id``)."""

    gym_id: str
    batch_id: str
    entry_point: str
    max_episode_steps: int

    def load(self) -> Any:
        """The class (importing it imports mujoco)."""
        module, name = self.entry_point.split(":")
        return getattr(importlib.import_module(f"{_HERE}.{module}"), name)


#: Every batch-native env, one row each.
ENVS: tuple[BatchEnvSpec, ...] = (
    BatchEnvSpec("HalfCheetah-v5", "HalfCheetahBatch-v5", "locomotion:HalfCheetahBatchEnv", 1000),
    BatchEnvSpec("Hopper-v5", "HopperBatch-v5", "locomotion:HopperBatchEnv", 1000),
    BatchEnvSpec("Walker2d-v5", "Walker2dBatch-v5", "locomotion:Walker2dBatchEnv", 1000),
    BatchEnvSpec("Ant-v5", "AntBatch-v5", "locomotion:AntBatchEnv", 1000),
    BatchEnvSpec("Humanoid-v5", "HumanoidBatch-v5", "locomotion:HumanoidBatchEnv", 1000),
    BatchEnvSpec("HumanoidStandup-v5", "HumanoidStandupBatch-v5",
                 "locomotion:HumanoidStandupBatchEnv", 1000),
    BatchEnvSpec("Swimmer-v5", "SwimmerBatch-v5", "locomotion:SwimmerBatchEnv", 1000),
    BatchEnvSpec("InvertedPendulum-v5", "InvertedPendulumBatch-v5",
                 "small:InvertedPendulumBatchEnv", 1000),
    BatchEnvSpec("InvertedDoublePendulum-v5", "InvertedDoublePendulumBatch-v5",
                 "small:InvertedDoublePendulumBatchEnv", 1000),
    BatchEnvSpec("Reacher-v5", "ReacherBatch-v5", "small:ReacherBatchEnv", 50),
    BatchEnvSpec("Pusher-v5", "PusherBatch-v5", "small:PusherBatchEnv", 100),
    BatchEnvSpec("HalfCheetahVel-v5", "HalfCheetahVelBatch-v5", "tasks:HalfCheetahVelBatchEnv",
                 200),
    BatchEnvSpec("HalfCheetahDir-v5", "HalfCheetahDirBatch-v5", "tasks:HalfCheetahDirBatchEnv",
                 200),
    BatchEnvSpec("AntVel-v5", "AntVelBatch-v5", "tasks:AntVelBatchEnv", 200),
    BatchEnvSpec("AntDir-v5", "AntDirBatch-v5", "tasks:AntDirBatchEnv", 200),
    BatchEnvSpec("AntPos-v5", "AntPosBatch-v5", "tasks:AntPosBatchEnv", 200),
)

#: The batch id of each gymnasium (or vecsample) id, the one-line switch of a workload.
BATCH_IDS: dict[str, str] = {spec.gym_id: spec.batch_id for spec in ENVS}


def batch_id_for(env_id: str, kwargs: Mapping[str, Any]) -> str | None:
    """``env_id``'s batch id if it has one whose constructor takes every keyword of
    ``kwargs`` (the task batch envs refuse the v5 reward keywords that their single envs take
    and ignore; rendering is refused); else None. Imports mujoco when ``env_id`` has one."""
    for spec in ENVS:
        if spec.gym_id == env_id:
            return spec.batch_id if spec.load().takes(kwargs) else None
    return None


def register_batch_envs() -> None:
    """Registers every batch id with gymnasium (as a vector entry point, with the time limit
    of the env it equals)."""
    for spec in ENVS:
        register(spec.batch_id, vector_entry_point=f"{_HERE}.{spec.entry_point}",
                 max_episode_steps=spec.max_episode_steps)


__all__ = ["BATCH_IDS", "ENVS", "BatchEnvSpec", "batch_id_for", "register_batch_envs"]
