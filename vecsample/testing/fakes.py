"""Fake envs for vecsample's tests and for yours: counting, slow, straggling, raising, hanging,
dying, sleeping envs, and a policy that returns its weights.

Every class is defined at module top level, so ``functools.partial(CountingEnv, ...)`` is a
picklable factory under every start method. ``fns(cls, n, **kwargs)`` builds ``n`` of them,
giving each its env index as ``env_index``; ``sleep_fns`` builds the sleep-env scenario.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


def fns(cls: Callable[..., gym.Env[Any, Any]], n: int, **kwargs: Any) -> list[Callable[[], Any]]:
    """``n`` picklable factories of ``cls``, env i built with ``env_index=i``."""
    return [functools.partial(cls, env_index=i, **kwargs) for i in range(n)]


class CountingEnv(gym.Env[np.ndarray, np.int64]):
    """Observation ``[env_index, t, episode, last_action]``; reward = action; ends at ``length``.

    The counters make lost, duplicated or misrouted steps visible: after k steps of env i since
    its reset, the observation is exactly ``[i, k, episode, action]``.
    """

    def __init__(
        self, env_index: int = 0, length: int = 10, truncate: bool = False, info: bool = False
    ) -> None:
        self.env_index = env_index
        self.length = length
        self.truncate = truncate
        self.with_info = info
        self.observation_space = spaces.Box(-np.inf, np.inf, (4,), np.float64)
        self.action_space = spaces.Discrete(4)
        self.t = 0
        self.episode = -1

    def process_info(self) -> dict[str, Any]:
        """Facts about the worker process this env lives in (for tests of process settings)."""
        affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        return {"pid": os.getpid(), "omp": os.environ.get("OMP_NUM_THREADS"),
                "affinity": affinity}

    def _obs(self, action: float) -> np.ndarray:
        return np.array([self.env_index, self.t, self.episode, action], dtype=np.float64)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        self.episode += 1
        return self._obs(-1.0), ({"episode_index": self.episode} if self.with_info else {})

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        done = self.t >= self.length
        terminated, truncated = (False, done) if self.truncate else (done, False)
        info = {"t": self.t, "noise": float(self.np_random.random())} if self.with_info else {}
        return self._obs(float(action)), float(action), terminated, truncated, info


class SlowEnv(CountingEnv):
    """A CountingEnv whose step sleeps, like a remote simulator; the sleep releases the CPU.

    ``step_time`` is the median sleep. ``tail`` picks the spread: ``"none"`` (constant),
    ``"uniform"`` (±``spread``) or ``"heavy"`` (a Pareto tail: most steps fast, a few very slow).
    The sleeps are drawn from ``seed`` and the env index; ``seed=None`` draws them from the OS's
    entropy, so the arrival order differs from run to run (the observations never depend on it).
    """

    def __init__(
        self,
        env_index: int = 0,
        step_time: float = 0.001,
        tail: str = "none",
        spread: float = 0.5,
        length: int = 1_000_000,
        seed: int | None = 0,
        info: bool = False,
    ) -> None:
        super().__init__(env_index=env_index, length=length, info=info)
        if tail not in ("none", "uniform", "heavy"):
            raise ValueError(f"tail must be 'none', 'uniform' or 'heavy', got {tail!r}")
        self.step_time = step_time
        self.tail = tail
        self.spread = spread
        self._rng = np.random.default_rng(None if seed is None else [seed, env_index])

    def draw_delay(self) -> float:
        """The next step's sleep in seconds, drawn from this env's own stream (advances it)."""
        if self.tail == "uniform":
            return self.step_time * (1.0 + self.spread * (2.0 * self._rng.random() - 1.0))
        if self.tail == "heavy":
            return self.step_time * float(self._rng.pareto(1.5) + 0.5)
        return self.step_time

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        time.sleep(self.draw_delay())
        return super().step(action)


class StragglerEnv(SlowEnv):
    """The straggler env: a SlowEnv with the heavy tail by default.

    A step sleeps ``step_time * (Pareto(1.5) + 0.5)``: the median is about 1.09 * ``step_time``,
    the mean 2.5 * ``step_time``, and one step in 100 takes 20 times the median or more. Partial
    batches pay here (docs/timeout.md).
    """

    def __init__(self, env_index: int = 0, step_time: float = 0.001, tail: str = "heavy",
                 spread: float = 0.5, length: int = 1_000_000, seed: int | None = 0,
                 info: bool = False) -> None:
        super().__init__(env_index=env_index, step_time=step_time, tail=tail, spread=spread,
                         length=length, seed=seed, info=info)


class RaisingEnv(CountingEnv):
    """Raises ``RuntimeError`` in ``step`` at step ``at_step``, or in ``reset``.

    Only the env with ``env_index == bad_index`` raises (all of them when ``bad_index`` is None).
    """

    def __init__(
        self,
        env_index: int = 0,
        where: str = "step",
        at_step: int = 3,
        bad_index: int | None = None,
        length: int = 1000,
    ) -> None:
        super().__init__(env_index=env_index, length=length)
        self.where = where
        self.at_step = at_step
        self.bad = bad_index is None or bad_index == env_index

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if self.bad and self.where == "reset":
            raise RuntimeError(f"injected failure in reset of env {self.env_index}")
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.bad and self.where == "step" and self.t + 1 >= self.at_step:
            raise RuntimeError(f"injected failure in step {self.t + 1} of env {self.env_index}")
        return super().step(action)


class HangingEnv(CountingEnv):
    """Sleeps forever in ``step`` from step ``at_step`` on (only env ``bad_index``, if given)."""

    def __init__(
        self, env_index: int = 0, at_step: int = 1, bad_index: int | None = None
    ) -> None:
        super().__init__(env_index=env_index, length=1_000_000)
        self.at_step = at_step
        self.bad = bad_index is None or bad_index == env_index

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.bad and self.t + 1 >= self.at_step:
            while True:
                time.sleep(3600)
        return super().step(action)


class DyingEnv(CountingEnv):
    """Kills its process with ``os._exit(exitcode)`` at step ``at_step``, as a segfault would."""

    def __init__(
        self, env_index: int = 0, at_step: int = 1, bad_index: int | None = None, exitcode: int = 3
    ) -> None:
        super().__init__(env_index=env_index, length=1_000_000)
        self.at_step = at_step
        self.exitcode = exitcode
        self.bad = bad_index is None or bad_index == env_index

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.bad and self.t + 1 >= self.at_step:
            os._exit(self.exitcode)
        return super().step(action)


class SpaceEnv(gym.Env[Any, Any]):
    """Any observation/action spaces; observations are drawn from the env's seeded RNG.

    Deterministic for a given reset seed, so two backends can be compared bit for bit. The
    reward is a hash of the action, so misrouted actions show up in the rewards.
    """

    def __init__(
        self,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        env_index: int = 0,
        length: int = 7,
    ) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.env_index = env_index
        self.length = length
        self.t = 0

    def _sample(self) -> Any:
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        return self.observation_space.sample()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        flat = np.asarray(spaces.flatten(self.action_space, action), dtype=np.float64)
        reward = float(np.sum(flat * np.arange(1, flat.size + 1)))
        return self._sample(), reward, self.t >= self.length, False, {}


class FixedActionPolicy:
    """A fake policy (for ``vecsample.ray``): every env gets action ``weights``; extras carry
    the weights seen, so a test can tell which weights sampled which step."""

    def __init__(self, action: int = 0) -> None:
        self.action = action

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        actions = np.full(len(obs), self.action, dtype=np.int64)
        return actions, {"weights_seen": actions.copy()}

    def set_weights(self, weights: Any) -> None:
        self.action = int(weights)


class CloseRecordingEnv(SlowEnv):
    """A SlowEnv that appends ``"<env_index> <pid>\\n"`` to the file ``marker`` when closed.

    Tells a clean shutdown (the worker got CLOSE and closed its envs) from a kill, which leaves
    no line.
    """

    def __init__(self, env_index: int = 0, marker: str = "", step_time: float = 0.001) -> None:
        super().__init__(env_index=env_index, step_time=step_time)
        self.marker = marker

    def close(self) -> None:
        if self.marker:
            with open(self.marker, "a") as f:
                f.write(f"{self.env_index} {os.getpid()}\n")
        super().close()


class SleepEnv(gym.Env[np.ndarray, np.int64]):
    """An env that uses no CPU: it sleeps ``seconds`` per step (0: returns at once).

    ``sleep_fns`` gives one sleeper per worker block, so a worker's batch takes ``seconds``
    while its core stays free: with many workers on few cores, what limits the rate is the
    parent (``vecsample bench --sleep-env``, docs/lab/benchmarks.md). Never ends an episode."""

    observation_space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.obs = np.zeros(4, dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None,
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return self.obs, {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.seconds:
            time.sleep(self.seconds)
        return self.obs, 0.0, False, False, {}


def sleep_fns(num_envs: int, num_workers: int, seconds: float) -> list[Callable[[], Any]]:
    """``num_envs`` SleepEnv factories: the first env of each worker's block sleeps
    ``seconds`` per step, the others not at all (``num_envs`` a multiple of the workers)."""
    block = num_envs // num_workers
    return [functools.partial(SleepEnv, seconds if i % block == 0 else 0.0)
            for i in range(num_envs)]
