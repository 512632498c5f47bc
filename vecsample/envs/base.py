"""What every meta-RL task env offers, as a Protocol, so samplers can check for it."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

#: A task: a small dict of named parameters (a goal, a velocity, a direction, arm means...).
Task = dict[str, Any]


@runtime_checkable
class TaskEnv(Protocol):
    """A gymnasium env (the unwrapped one) whose task can be sampled and set.

    ``sample_tasks`` draws from the env's own ``np_random``, so seeding the env with
    ``env.reset(seed=...)`` makes the task sequence reproducible.
    """

    def sample_tasks(self, num_tasks: int) -> list[Task]: ...

    def reset_task(self, task: Task) -> None: ...


def task_info(task: Task) -> Task:
    """A copy of ``task`` for ``info["task"]``: gymnasium requires that no two calls return
    shared objects (its ``check_env`` asserts it), and users keep infos. Tasks are flat dicts of
    arrays and numbers, so copying the arrays is enough, and costs about a microsecond.
    """
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in task.items()}
