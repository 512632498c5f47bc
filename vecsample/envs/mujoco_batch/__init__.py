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
=========================  ===========================  ============================

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
}

_CLASSES: dict[str, str] = {
    "HalfCheetahBatch-v5": "locomotion:HalfCheetahBatchEnv",
    "HopperBatch-v5": "locomotion:HopperBatchEnv",
    "Walker2dBatch-v5": "locomotion:Walker2dBatchEnv",
    "AntBatch-v5": "locomotion:AntBatchEnv",
    "HumanoidBatch-v5": "locomotion:HumanoidBatchEnv",
}

_HERE = "vecsample.envs.mujoco_batch"


def register_batch_envs() -> None:
    """Registers every batch id with gymnasium (as a vector entry point, with the time limit
    of the env it equals)."""
    for batch_id, target in _CLASSES.items():
        register(batch_id, vector_entry_point=f"{_HERE}.{target}", max_episode_steps=1000)


__all__ = ["BATCH_IDS", "register_batch_envs"]
