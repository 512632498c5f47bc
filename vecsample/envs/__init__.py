"""Meta-RL task envs on gymnasium 1.x and MuJoCo v5. Importing this module registers them.

=====================  ============================================  ==================
id                     task distribution                             time limit (steps)
=====================  ============================================  ==================
2DNavigation-v0        goal uniform on [-0.5, 0.5]^2                 100
TabularMDP-v0          10 states, 5 actions, Dirichlet/N(1, 1)       10
Bandit-K{5,10,50}-v0   arm means uniform on [0, 1]                   1 (terminates)
HalfCheetahVel-v5      velocity uniform on [0, 2]                    200
HalfCheetahDir-v5      direction +1 or -1                            200
AntVel-v5              velocity uniform on [0, 3]                    200
AntDir-v5              direction +1 or -1                            200
AntPos-v5              position uniform on [-3, 3]^2                 200
=====================  ============================================  ==================

The MuJoCo ids wrap the env in ``NormalizedActionWrapper(normalization_scale)``; the shipped
configs pass ``normalization_scale=10`` and ``max_episode_steps=100``, as pytorch-maml-rl's do.
Every env has ``sample_tasks(n)`` and ``reset_task(task)`` on ``env.unwrapped`` and puts the task
in ``info["task"]`` at reset and at every step.

``HalfCheetahBatch-v5``, ``AntBatch-v5``, ... (``BATCH_IDS``) are batch-native vector envs equal
to gymnasium's v5 MuJoCo envs and to the task envs above (``vecsample.envs.mujoco_batch``,
docs/mujoco_batch.md).

``MetaWorld-v3`` (``benchmark``, ``split``, ``env_name`` keyword arguments) is the Meta-World+
ML1/ML10/ML25/ML45 benchmarks, in ``vecsample.envs.metaworld``; it needs the ``metaworld``
extra, which only building it imports.
"""

from __future__ import annotations

from gymnasium.envs.registration import register

from vecsample.envs.bandit import BernoulliBanditEnv
from vecsample.envs.base import Task, TaskEnv
from vecsample.envs.mdp import TabularMDPEnv
from vecsample.envs.mujoco_batch import BATCH_IDS, register_batch_envs
from vecsample.envs.navigation import Navigation2DEnv
from vecsample.envs.wrappers import NormalizedActionWrapper, make_mujoco_task_env

__all__ = [
    "BATCH_IDS",
    "METAWORLD_ENV_ID",
    "MUJOCO_TASK_ENVS",
    "TASK_ENV_IDS",
    "BernoulliBanditEnv",
    "Navigation2DEnv",
    "NormalizedActionWrapper",
    "TabularMDPEnv",
    "Task",
    "TaskEnv",
    "make_mujoco_task_env",
]

#: The MuJoCo task ids and the class behind each (classes live in vecsample.envs.mujoco).
MUJOCO_TASK_ENVS: dict[str, str] = {
    "HalfCheetahVel-v5": "vecsample.envs.mujoco:HalfCheetahVelEnv",
    "HalfCheetahDir-v5": "vecsample.envs.mujoco:HalfCheetahDirEnv",
    "AntVel-v5": "vecsample.envs.mujoco:AntVelEnv",
    "AntDir-v5": "vecsample.envs.mujoco:AntDirEnv",
    "AntPos-v5": "vecsample.envs.mujoco:AntPosEnv",
}

BANDIT_ARMS = (5, 10, 50)

#: Every id this module registers.
TASK_ENV_IDS: tuple[str, ...] = (
    "2DNavigation-v0",
    "TabularMDP-v0",
    *(f"Bandit-K{k}-v0" for k in BANDIT_ARMS),
    *MUJOCO_TASK_ENVS,
)


#: Meta-World+ benchmarks (vecsample.envs.metaworld; needs the metaworld extra). Not in
#: TASK_ENV_IDS: it takes its benchmark and split as make() arguments, and an optional package.
METAWORLD_ENV_ID = "MetaWorld-v3"

# String entry points keep every EnvSpec picklable, so a spawned worker can rebuild the env.
_HERE = "vecsample.envs"


def _register_all() -> None:
    for k in BANDIT_ARMS:
        register(
            f"Bandit-K{k}-v0", entry_point=f"{_HERE}.bandit:BernoulliBanditEnv", kwargs={"k": k}
        )
    register(
        "TabularMDP-v0",
        entry_point=f"{_HERE}.mdp:TabularMDPEnv",
        kwargs={"num_states": 10, "num_actions": 5},
        max_episode_steps=10,
    )
    register(
        "2DNavigation-v0", entry_point=f"{_HERE}.navigation:Navigation2DEnv", max_episode_steps=100
    )
    for env_id, class_path in MUJOCO_TASK_ENVS.items():
        register(
            env_id,
            entry_point=f"{_HERE}.wrappers:make_mujoco_task_env",
            kwargs={"entry_point": class_path},
            max_episode_steps=200,
        )
    # No TimeLimit: the env ends its own episodes (500 steps), with their success in the info.
    register(METAWORLD_ENV_ID, entry_point=f"{_HERE}.metaworld:MetaWorldTaskEnv")
    # Batch-native MuJoCo envs (vecsample.envs.mujoco_batch), vector entry points only.
    register_batch_envs()


_register_all()
