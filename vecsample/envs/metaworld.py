"""Meta-World+ (``metaworld`` 3.1.1) benchmarks as one task env, ``MetaWorld-v3``.

``gymnasium.make("MetaWorld-v3", benchmark="ML10", split="train")`` builds a
``MetaWorldTaskEnv``: ``sample_tasks(n)`` draws ``metaworld.Task``s of that benchmark's split,
``reset_task(task)`` hands one to the Sawyer env of the task's class (``env.set_task``), building
that env first if the slot held another class. So ``MultiTaskSampler`` and
``VecSampler.reset_task`` send only the tasks (a few hundred bytes each) to the workers; the envs
are built there and never pickled.

Needs the ``metaworld`` extra (``pip install vecsample[metaworld]``), which pins mujoco 3.3.0.
Importing this module imports ``metaworld``; registering the id (``import vecsample.envs``) does
not. Over a mujoco 4 install, the import raises ``MissingExtraError`` naming the fix
(``vecsample.extras.METAWORLD_FIX``; docs/maml.md, "Meta-World and mujoco 4").
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vecsample.errors import ConfigError
from vecsample.extras import require_metaworld

metaworld = require_metaworld("MetaWorld-v3 (vecsample.envs.metaworld)")
env_dict: Any = metaworld.env_dict  # metaworld is untyped

Split = Literal["train", "test"]

#: The ML benchmarks: train and test classes (ML1: one class, train and test goals differ).
BENCHMARKS: dict[str, Any] = {
    "ML10": env_dict.ML10_V3,
    "ML25": env_dict.ML25_V3,
    "ML45": env_dict.ML45_V3,
}

#: Meta-World's episode length (``SawyerXYZEnv.max_path_length``).
MAX_PATH_LENGTH = 500

#: Observation and action of every Sawyer env. One space must fit every class a slot may hold,
#: so the observation space is unbounded (each env clips its own observations to its bounds).
OBSERVATION_SPACE = spaces.Box(-np.inf, np.inf, shape=(39,), dtype=np.float64)
ACTION_SPACE = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)


class MetaWorldTaskError(ConfigError):
    """A benchmark, split or task that does not belong to this env."""


def split_classes(benchmark: str, split: str, env_name: str | None = None) -> dict[str, type]:
    """The env classes of ``benchmark``'s ``split``, by name, in Meta-World's order."""
    if split not in ("train", "test"):
        raise MetaWorldTaskError(name="split", expected="'train' or 'test'", got=split)
    if benchmark == "ML1":
        if env_name is None or env_name not in env_dict.ALL_V3_ENVIRONMENTS:
            raise MetaWorldTaskError(
                name="env_name", expected="a Meta-World v3 env name for ML1, e.g. 'reach-v3'",
                got=env_name, fix=f"choose from {sorted(env_dict.ALL_V3_ENVIRONMENTS)}",
            )  # fmt: skip
        return {env_name: env_dict.ALL_V3_ENVIRONMENTS[env_name]}
    if benchmark not in BENCHMARKS:
        raise MetaWorldTaskError(
            name="benchmark", expected=f"one of {['ML1', *BENCHMARKS]}", got=benchmark
        )
    return dict(BENCHMARKS[benchmark][split])


@functools.lru_cache(maxsize=8)
def benchmark_tasks(benchmark: str, split: str, env_name: str | None, seed: int) -> tuple[Any, ...]:
    """Every task of the split (50 goals per class), built once per process.

    Meta-World makes them by resetting one env of each class 50 times (about 1 s for ML1, 8 s
    for ML10 on a loaded core), so only the process that samples tasks pays for it.
    """
    split_classes(benchmark, split, env_name)  # checks the names
    make: Any = getattr(metaworld, benchmark)  # metaworld.ML1, ML10, ... (untyped)
    bench = make(env_name, seed=seed) if benchmark == "ML1" else make(seed=seed)
    return tuple(bench.train_tasks if split == "train" else bench.test_tasks)


class MetaWorldTaskEnv(gym.Env[np.ndarray, np.ndarray]):
    """One Meta-World env slot: whichever class its current task needs, with its goal set.

    Args:
        benchmark: ``"ML1"``, ``"ML10"``, ``"ML25"`` or ``"ML45"``.
        split: ``"train"`` or ``"test"``: the tasks ``sample_tasks`` draws, and the classes
            ``reset_task`` accepts.
        env_name: The class of ML1 (``"reach-v3"``); unused by the others.
        benchmark_seed: Seeds Meta-World's goal generation (``metaworld.ML10(seed=...)``), so
            every process sees the same 50 goals per class. ML1's test goals use seed + 1
            (Meta-World's choice): its train and test goals differ, its class does not.
        max_path_length: Truncates episodes earlier than Meta-World's 500 steps (for short
            runs); at most 500. Not ``max_episode_steps``: ``gymnasium.make`` takes that one
            for its own ``TimeLimit``, whose truncation this env would not see.
        step_infos: False (the default): the info is empty except at an episode's last step,
            where it holds ``episode_success``, so a sampler with infos on pays for one small
            pickle per episode instead of one per step. True: Meta-World's own info at every step
            (``success``, ``near_object``, ...), plus ``episode_success`` at the last.

    ``episode_success`` is 1.0 if ``info["success"]`` was reached at any step of the episode:
    the success rate Meta-World's papers report. Actions are clipped to ``[-1, 1]``.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012  (gymnasium's attribute)
    #: Info keys a sampler collects at the end of each episode (see MultiTaskSampler).
    episode_info_keys: tuple[str, ...] = ("episode_success",)

    def __init__(
        self,
        benchmark: str = "ML1",
        split: Split = "train",
        env_name: str | None = None,
        benchmark_seed: int = 0,
        max_path_length: int = MAX_PATH_LENGTH,
        step_infos: bool = False,
    ) -> None:
        self.classes = split_classes(benchmark, split, env_name)
        if not 1 <= max_path_length <= MAX_PATH_LENGTH:
            raise MetaWorldTaskError(
                name="max_path_length", expected=f"an int in [1, {MAX_PATH_LENGTH}]",
                got=max_path_length,
            )  # fmt: skip
        self.benchmark, self.split, self.env_name = benchmark, split, env_name
        self.benchmark_seed = benchmark_seed
        self.max_path_length = max_path_length
        self.step_infos = step_infos
        self.observation_space = OBSERVATION_SPACE
        self.action_space = ACTION_SPACE
        self.task: Any = None
        self._env: Any = None  # the Sawyer env of the current task's class
        self._steps = 0
        self._success = False

    # --- tasks ----------------------------------------------------------------------------------

    def sample_tasks(self, num_tasks: int) -> list[Any]:
        """``num_tasks`` tasks of this split, balanced over its classes, classes interleaved.

        Class ``c`` gets ``num_tasks // C`` tasks (the first ``num_tasks % C`` classes one
        more), as Meta-World's baselines give every class ``meta_batch_size // C`` envs; their
        goals are drawn without replacement from the class's 50 by this env's ``np_random``
        (seeded by ``reset(seed=...)``). Task ``i`` is of class ``i % C``: a worker's block of
        envs then holds every class (their step costs differ, so the workers stay balanced),
        and env slot ``g`` of a ``MultiTaskSampler`` keeps its class from one meta-batch to the
        next, so its Sawyer env is built once.
        """
        tasks = self._tasks()
        per_class = []
        for c, name in enumerate(self.classes):
            pool = [t for t in tasks if t.env_name == name]
            count = num_tasks // len(self.classes) + (1 if c < num_tasks % len(self.classes) else 0)
            picks = self.np_random.choice(len(pool), size=count, replace=count > len(pool))
            per_class.append([pool[i] for i in picks])
        return [group[r] for r in range(len(per_class[0])) for group in per_class if r < len(group)]

    def reset_task(self, task: Any) -> None:
        """Gives this slot ``task``: builds the Sawyer env of its class if needed, ``set_task``."""
        name = getattr(task, "env_name", None)
        if name not in self.classes:
            raise MetaWorldTaskError(
                name="task", got=name,
                expected=f"a metaworld.Task of {self.benchmark}'s {self.split} classes "
                f"{list(self.classes)}",
                fix="sample tasks from an env of the same benchmark and split "
                "(train and test tasks do not mix)",
            )  # fmt: skip
        if self._env is None or self.task is None or self.task.env_name != name:
            if self._env is not None:
                self._env.close()
            self._env = self.classes[name]()
        self._env.set_task(task)
        self.task = task

    # --- gymnasium ------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)  # seeds np_random, which sample_tasks draws from
        if self._env is None:  # no task yet: the split's first (gymnasium's checks reset first)
            self.reset_task(self._tasks()[0])
        env = self._require_task()
        if seed is not None:
            env.seed(seed)  # Meta-World's envs ignore reset(seed=...)
        obs, _ = env.reset()
        self._steps, self._success = 0, False
        return obs, {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        env = self._require_task()
        clipped = np.clip(action, -1.0, 1.0).astype(np.float32)
        obs, reward, terminated, truncated, info = env.step(clipped)
        self._steps += 1
        self._success = self._success or bool(info["success"])
        truncated = bool(truncated) or self._steps >= self.max_path_length
        ended = bool(terminated) or truncated
        out: dict[str, Any] = dict(info) if self.step_infos else {}
        if ended:
            out["episode_success"] = float(self._success)
        return obs, float(reward), bool(terminated), truncated, out

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
        super().close()

    def _tasks(self) -> tuple[Any, ...]:
        return benchmark_tasks(self.benchmark, self.split, self.env_name, self.benchmark_seed)

    def _require_task(self) -> Any:
        if self._env is None:
            raise MetaWorldTaskError(
                name="the task", expected="set before reset() or step()", got=None,
                fix="call reset_task(task) or reset() first",
            )  # fmt: skip
        return self._env
