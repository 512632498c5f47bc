"""``vecsample.VectorEnv``: a ``gymnasium.vector.VectorEnv`` on top of ``VecSampler``.

A drop-in for ``gymnasium.vector.AsyncVectorEnv``: ``env_fns`` first, gymnasium's three autoreset
modes, gymnasium's seeding convention (int seed -> env i gets ``seed + i``) and its vector-info
format. Given the same ``env_fns`` and seed it returns exactly what ``SyncVectorEnv`` returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from vecsample import errors
from vecsample.protocol import AutoresetMode, EnvFn
from vecsample.results import StepResult
from vecsample.sampler import EnvMaker, VecSampler, usable_cores
from vecsample.spaces import copy_tree, index_tree


class VectorEnv(gym.vector.VectorEnv):
    """gymnasium's vector API over vecsample's workers and shared memory.

    A drop-in for ``gymnasium.vector.AsyncVectorEnv``: given the same ``env_fns`` and seed it
    returns exactly what ``SyncVectorEnv`` returns (observations, rewards, flags and vector
    infos) in all three autoreset modes. ``sampler`` is the ``VecSampler`` underneath, for
    partial batches (``step_send``/``step_recv``) and ``stats()``.

    Args:
        env_fns: One factory per env, each returning a ``gymnasium.Env``; all envs must share
            the first one's spaces. Under the default ``context="forkserver"`` (and ``"spawn"``)
            the factories must be picklable: ``functools.partial``, module-level functions or
            ``vecsample.EnvMaker``, not lambdas.
        num_workers: How many worker processes step the envs; each steps
            ``len(env_fns) // num_workers`` envs one after another, so it must divide
            ``len(env_fns)``. ``None``: the largest divisor not above the usable cores.
        autoreset_mode: ``AutoresetMode`` (ours or gymnasium's) or its string value
            (``"NextStep"``, ``"SameStep"``, ``"Disabled"``); ``NEXT_STEP`` by default, as in
            gymnasium. With ``SAME_STEP`` the ended episode's last observation is in
            ``infos["final_obs"]``.
        copy: Return copies of the observations (as gymnasium does). ``False`` returns views of
            shared memory, valid until the next ``step`` or ``reset``.
        **sampler_kwargs: Passed on to ``VecSampler``: ``seed``, ``context``, ``deadline``,
            ``restart``, ``max_restarts``, ``check_actions``, ``cpu_affinity``, ... (``infos``
            is always on here: passing it is a ``TypeError``).

    Raises:
        vecsample.errors.ConfigError: ``num_workers`` does not divide the number of envs (the
            message lists the divisors), an unknown ``autoreset_mode``, or another bad setting.
        vecsample.errors.EnvFactoryError: a factory cannot be pickled under forkserver or spawn,
            or raises (in the parent, where the first env is built to read the spaces, or in
            a worker).
        vecsample.errors.UnsupportedSpaceError: a space that cannot live in shared memory
            (``Text``, ``Graph``, ``Sequence``, ...).

    What differs from ``AsyncVectorEnv``:

    * Envs are grouped into ``num_workers`` processes instead of one process per env.
    * The default start method is forkserver, not the platform's default (fork on Linux): a
      script must create the envs under ``if __name__ == "__main__":``, and factories must be
      picklable (AsyncVectorEnv cloudpickles them, so lambdas work there).
    * Actions are checked before anything is sent (``check_actions=True``): a wrong shape,
      dtype or an action outside the space raises an ``ActionError`` subclass.
    * A worker that dies or raises is a typed ``WorkerError`` naming the worker and the env;
      ``step_wait(timeout)`` raises ``DeadlineExceededError`` (a builtin ``TimeoutError``, not
      ``multiprocessing.TimeoutError``), every call is bounded by ``deadline`` (300 s by
      default) and the late step stays pending, so the next ``step_wait`` can still return it.
    * ``reset(seed=s)`` follows gymnasium (env ``i`` gets ``s + i``), unlike ``VecSampler``,
      whose ``seed`` gives env ``i`` child ``i`` of ``SeedSequence(s)``.
    * ``call``/``get_attr`` return tuples, as gymnasium does; ``render`` is not supported.

    Example:
        >>> import numpy as np
        >>> from vecsample import EnvMaker, VectorEnv
        >>> envs = VectorEnv([EnvMaker("CartPole-v1")] * 2, num_workers=2)
        >>> obs, infos = envs.reset(seed=0)
        >>> obs.shape, obs.dtype
        ((2, 4), dtype('float32'))
        >>> obs, rewards, terminated, truncated, infos = envs.step(np.array([0, 1]))
        >>> rewards, terminated, truncated
        (array([1., 1.]), array([False, False]), array([False, False]))
        >>> envs.close()
    """

    def __init__(
        self,
        env_fns: Sequence[EnvFn],
        num_workers: int | None = None,
        *,
        autoreset_mode: str | Any = AutoresetMode.NEXT_STEP,
        copy: bool = True,
        **sampler_kwargs: Any,
    ) -> None:
        fns = list(env_fns)
        workers = _default_workers(len(fns)) if num_workers is None else num_workers
        self._sampler = VecSampler(fns, num_workers=workers, autoreset_mode=autoreset_mode,
                                   infos=True, **sampler_kwargs)
        s = self._sampler
        self.num_envs = s.num_envs
        self.copy = copy
        self.mode = s.autoreset_mode
        self.single_observation_space = s.single_observation_space
        self.single_action_space = s.single_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {**getattr(self, "metadata", {}),
                         "autoreset_mode": gym.vector.AutoresetMode(self.mode.value)}
        self.render_mode = None
        self._ended = np.zeros(self.num_envs, dtype=bool)
        self._pending = False

    @property
    def sampler(self) -> VecSampler:
        """The VecSampler underneath, for step_send/step_recv and stats()."""
        return self._sampler

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, int) and not isinstance(seed, bool):
            seeds = [seed + i for i in range(self.num_envs)]  # gymnasium's convention
        elif isinstance(seed, list):
            seeds = list(seed)
        else:
            raise errors.ConfigError(
                f"seed must be None, an int or a list of one seed per env, got {seed!r}."
            )
        options = dict(options) if options else None
        mask = options.pop("reset_mask", None) if options else None
        obs, env_infos = self._sampler.reset(seeds, options or None, mask=mask)
        infos: dict[str, Any] = {}
        for i in range(self.num_envs):
            if mask is None or mask[i]:
                infos = self._add_info(infos, env_infos[i], i)
        self._ended[mask if mask is not None else slice(None)] = False
        return (copy_tree(obs) if self.copy else obs), infos

    def step_async(self, actions: Any) -> None:
        if self.mode is AutoresetMode.DISABLED and self._ended.any():
            raise errors.PendingCallError(
                f"envs {np.nonzero(self._ended)[0].tolist()} ended and autoreset is disabled; "
                f"call reset(options={{'reset_mask': mask}}) for them before stepping."
            )
        self._sampler.send_all(actions)
        self._pending = True

    def step_wait(
        self, timeout: float | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if not self._pending:
            raise errors.NoPendingError("step_wait() without a prior step_async(actions).")
        results = self._sampler.step_recv(None, deadline=timeout)
        self._pending = False
        v = self._sampler.batch(results)
        infos = self._vector_infos(v)
        self._ended = v.terminated | v.truncated
        obs = copy_tree(v.obs) if self.copy else v.obs
        return obs, v.rewards.copy(), v.terminated.copy(), v.truncated.copy(), infos

    def step(
        self, actions: Any
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        self.step_async(actions)
        return self.step_wait()

    def _vector_infos(self, v: StepResult) -> dict[str, Any]:
        step_infos, reset_infos = v.infos, v.reset_infos
        infos: dict[str, Any] = {}
        for i in range(self.num_envs):
            info = step_infos.get(i, {})
            if self.mode is AutoresetMode.SAME_STEP and v.has_final_obs[i]:
                final = copy_tree(index_tree(v.final_obs, i))
                infos = self._add_info(infos, {"final_obs": final, "final_info": info}, i)
                info = reset_infos.get(i, {})
            elif self.mode is AutoresetMode.NEXT_STEP and i in reset_infos:
                info = reset_infos[i]
            infos = self._add_info(infos, info, i)
        return infos

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        return tuple(self._sampler.call(name, *args, **kwargs))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return tuple(self._sampler.get_attr(name))

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        self._sampler.set_attr(name, values)

    def close_extras(self, **kwargs: Any) -> None:
        self._sampler.close()

    def __repr__(self) -> str:
        return f"vecsample.VectorEnv({self.num_envs} envs, {self._sampler!r})"


def _default_workers(num_envs: int) -> int:
    """The largest divisor of num_envs that does not exceed the cores we may use."""
    limit = max(1, min(num_envs, usable_cores()))
    return max(d for d in range(1, limit + 1) if num_envs % d == 0)


def make_vec(
    env_id: str,
    num_envs: int,
    num_workers: int | None = None,
    *,
    autoreset_mode: str | Any = AutoresetMode.NEXT_STEP,
    copy: bool = True,
    env_kwargs: dict[str, Any] | None = None,
    **sampler_kwargs: Any,
) -> VectorEnv:
    """``gymnasium.make_vec`` for vecsample: ``num_envs`` copies of ``env_id`` in workers.

    Each env is the picklable ``EnvMaker(env_id, env_kwargs)``. Unlike gymnasium's, there is no
    ``vectorization_mode``, ``vector_kwargs`` or ``wrappers``: wrap envs in a factory of your own.

    Args:
        env_id: A registered gymnasium id (``vecsample.envs`` ids register on first use).
        num_envs: How many copies, an int >= 1.
        num_workers: As for :class:`VectorEnv`; must divide ``num_envs``.
        autoreset_mode: As for :class:`VectorEnv` (``NEXT_STEP`` by default).
        copy: As for :class:`VectorEnv` (``False``: views of shared memory).
        env_kwargs: Keyword arguments for every ``gymnasium.make`` call (not ``**kwargs``).
        **sampler_kwargs: Passed on to ``VecSampler`` (``seed``, ``context``, ``deadline``, ...).

    Raises:
        vecsample.errors.ConfigError: a bad ``num_envs``, ``num_workers`` or other setting.
        vecsample.errors.EnvFactoryError: ``gymnasium.make`` fails (unknown id, bad kwargs).
        vecsample.errors.UnsupportedSpaceError: a space that cannot live in shared memory.

    Example:
        >>> import vecsample
        >>> envs = vecsample.make_vec("CartPole-v1", 2, num_workers=1)
        >>> _ = envs.reset(seed=0); envs.step(envs.action_space.sample())[1]
        array([1., 1.])
        >>> envs.close()
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise errors.ConfigError(f"num_envs must be an int >= 1, got {num_envs!r}.")
    fns = [EnvMaker(env_id, dict(env_kwargs or {}))] * num_envs
    return VectorEnv(fns, num_workers, autoreset_mode=autoreset_mode, copy=copy, **sampler_kwargs)
