"""Batch-native MuJoCo envs: gymnasium v5 locomotion and the meta-RL task envs, one
``gymnasium.vector.VectorEnv`` per batch, equal to gymnasium's envs step by step.

=========================  ===========================  ============================
batch id                   equal to                     time limit (steps)
=========================  ===========================  ============================
HalfCheetahBatch-v5        HalfCheetah-v5               1000
HopperBatch-v5             Hopper-v5                    1000
Walker2dBatch-v5           Walker2d-v5                  1000
AntBatch-v5                Ant-v5                       1000
HumanoidBatch-v5           Humanoid-v5                  1000
HalfCheetahVelBatch-v5     HalfCheetahVel-v5            200
HalfCheetahDirBatch-v5     HalfCheetahDir-v5            200
AntVelBatch-v5             AntVel-v5                    200
AntDirBatch-v5             AntDir-v5                    200
AntPosBatch-v5             AntPos-v5                    200
=========================  ===========================  ============================

The task envs (the last five) take one task per env through ``reset_task(tasks)``, in row
order, and ``normalization_scale`` as their single envs do.

Each id is a vector entry point only: ``gymnasium.make_vec(id, num_envs,
vectorization_mode="vector_entry_point")`` builds one, and ``vecsample.HostedVector(id)`` hosts
one per worker; ``gymnasium.make(id)`` has no single env to build. ``BATCH_IDS`` maps each
gymnasium (or vecsample) id to its batch id: the one-line switch of a workload. What they
guarantee, and why the physics is stepped as it is, is in docs/mujoco_batch.md.

Importing this package registers nothing and needs no mujoco; ``vecsample.envs`` registers the
ids (by name: building one imports mujoco).
"""

from __future__ import annotations

from gymnasium.envs.registration import register

#: The gymnasium id each batch id equals, step by step.
BATCH_IDS: dict[str, str] = {
    "HalfCheetah-v5": "HalfCheetahBatch-v5",
    "Hopper-v5": "HopperBatch-v5",
    "Walker2d-v5": "Walker2dBatch-v5",
    "Ant-v5": "AntBatch-v5",
    "Humanoid-v5": "HumanoidBatch-v5",
    "HalfCheetahVel-v5": "HalfCheetahVelBatch-v5",
    "HalfCheetahDir-v5": "HalfCheetahDirBatch-v5",
    "AntVel-v5": "AntVelBatch-v5",
    "AntDir-v5": "AntDirBatch-v5",
    "AntPos-v5": "AntPosBatch-v5",
}

_CLASSES: dict[str, str] = {
    "HalfCheetahBatch-v5": "locomotion:HalfCheetahBatchEnv",
    "HopperBatch-v5": "locomotion:HopperBatchEnv",
    "Walker2dBatch-v5": "locomotion:Walker2dBatchEnv",
    "AntBatch-v5": "locomotion:AntBatchEnv",
    "HumanoidBatch-v5": "locomotion:HumanoidBatchEnv",
    "HalfCheetahVelBatch-v5": "tasks:HalfCheetahVelBatchEnv",
    "HalfCheetahDirBatch-v5": "tasks:HalfCheetahDirBatchEnv",
    "AntVelBatch-v5": "tasks:AntVelBatchEnv",
    "AntDirBatch-v5": "tasks:AntDirBatchEnv",
    "AntPosBatch-v5": "tasks:AntPosBatchEnv",
}

#: The time limit of each batch id: its single env's (pytorch-maml-rl's 200 for the task envs).
_LIMITS = {batch_id: 200 if target.startswith("tasks:") else 1000
           for batch_id, target in _CLASSES.items()}

_HERE = "vecsample.envs.mujoco_batch"


def register_batch_envs() -> None:
    """Registers every batch id with gymnasium (as a vector entry point, with the time limit
    of the env it equals)."""
    for batch_id, target in _CLASSES.items():
        register(batch_id, vector_entry_point=f"{_HERE}.{target}",
                 max_episode_steps=_LIMITS[batch_id])


__all__ = ["BATCH_IDS", "register_batch_envs"]
