"""``vecsample.VectorEnv``: a ``gymnasium.vector.VectorEnv`` on top of ``VecSampler``.

A drop-in for ``gymnasium.vector.AsyncVectorEnv`` (docs/gymnasium.md): its keywords, its
asynchronous API (``reset_async``/``reset_wait``, ``step_async``/``step_wait``,
``call_async``/``call_wait``), gymnasium's three autoreset modes, its seeding convention (int seed
-> env i gets ``seed + i``), its vector-info format and its error types. Given the same
``env_fns`` and seed it returns exactly what ``SyncVectorEnv`` returns.
"""

from __future__ import annotations

import contextlib
import numbers
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn

import gymnasium as gym
import numpy as np
from gymnasium import logger, spaces
from gymnasium.vector.utils import batch_space

from vecsample import errors, hosted
from vecsample._wire.spaces import copy_tree
from vecsample.adapters import errors as adapter_errors
from vecsample.adapters import vector_infos
from vecsample.factories import EnvMaker, Envs
from vecsample.hosted import HostedVector
from vecsample.machine import usable_cores
from vecsample.options import Options, adapted, check_int
from vecsample.results import StepResult
from vecsample.sampler import VecSampler
from vecsample.types import AutoresetMode, EnvFn, Space

#: Spaces whose values have one fixed shape and dtype.
FIXED_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
#: What ``AsyncVectorEnv(shared_memory=True)`` accepts: the fixed spaces, ``Text`` (up to its
#: ``max_length``), and ``Dict``/``Tuple``/``OneOf`` nestings of them.
SHARED_MEMORY_SPACES = (*FIXED_SPACES, spaces.Text)
#: Spaces whose values change shape from one sample to the next: no shared memory can hold them.
DYNAMIC_SPACES = (spaces.Graph, spaces.Sequence)
#: A pending asynchronous call: its name ("reset", "step", "call") and its arguments.
Pending = tuple[str, tuple[Any, ...]]


class _Parts:
    """What ``step_wait`` adds to the sampler's step, timed on every step: building gymnasium's
    vector infos from the info columns (``vector_infos``) and copying the observations
    (``obs_copy``, ``copy=True``); ``stats()`` shows them (``vector_infos_s``, ...)."""

    def __init__(self) -> None:
        self.vector_infos = self.obs_copy = 0.0

    def totals(self) -> dict[str, float]:
        return {"vector_infos": self.vector_infos, "obs_copy": self.obs_copy}


class VectorEnv(gym.vector.VectorEnv):
    """gymnasium's vector API over vecsample's workers and shared memory.

    A drop-in for ``gymnasium.vector.AsyncVectorEnv``: replace the class, keep the arguments
    (docs/gymnasium.md). ``sampler`` is the ``VecSampler`` underneath, for partial batches
    (``step_send``/``step_recv``) and ``stats()``.

    Args:
        env_fns: One factory per env, each returning a ``gymnasium.Env``; all envs must share
            the first one's spaces. The first is also called once in the parent, to read the
            spaces, ``metadata`` and ``render_mode`` (as AsyncVectorEnv does).
        num_workers: How many worker processes step the envs; each steps a contiguous block of
            envs one after another (blocks differ by at most one env). ``None``: one per usable
            core, at most one per env and at most ``max_concurrency`` (one with
            ``env_placement="parent"``, which starts no worker process).
        shared_memory: As in AsyncVectorEnv: ``True`` refuses an observation space that shared
            memory cannot hold (``SharedMemorySpaceError``); ``False`` returns copies.
        copy: Return copies of the observations (as gymnasium does). ``False`` (with
            ``shared_memory=True``) returns views of shared memory, valid until the next call.
        context: The multiprocessing start method; ``None``: vecsample's default.
        daemon: Accepted; workers are always daemonic (``False`` warns, docs/gymnasium.md).
        worker: Must be ``None``: a custom worker function cannot run in vecsample's workers.
        observation_mode: ``"same"`` only (``UnsupportedOptionError`` otherwise).
        autoreset_mode: ``AutoresetMode`` (ours or gymnasium's) or its string value; when
            neither this nor ``options`` sets it, ``NEXT_STEP``, as in gymnasium.
        max_concurrency: At most this many envs run at once: caps the number of workers.
        num_envs: With a ``HostedVector``, how many envs (or give it to the HostedVector).
        observation_space: Skip building env 0 in the parent to read the spaces (then
            ``metadata`` and ``render_mode`` are read in a worker).
        action_space: Likewise, for the action space.
        options: The ``VecSampler`` underneath's ``vecsample.Options`` (``deadline``,
            ``restart``, ``check_actions``, ``cpu_affinity``, ``record``, ``replay``, ...;
            ``env_placement="auto"`` for a small job: the envs step where they cost least,
            in this process if a round trip to workers does not pay, docs/semantics.md).
            ``infos`` is always on here; ``uneven_split`` is on and ``autoreset_mode``
            ``NEXT_STEP`` unless ``options`` (or the keywords) set them. The arguments above
            that share a name with a field (``num_workers``, ``context``, ``autoreset_mode``)
            replace its value when given.
        **overrides: ``Options`` fields by name, applied on top of ``options``
            (``deadline=5, restart=True``); an unknown name is a ``ConfigError`` naming the
            closest field.

    Raises:
        vecsample.errors.ConfigError: a bad setting (worker count, autoreset mode, ...);
            ``UnsupportedOptionError`` for a ``worker`` or an ``observation_mode`` other than
            ``"same"``.
        vecsample.errors.EnvFactoryError: a factory raises, or builds envs whose spaces differ.
        vecsample.errors.UnsupportedSpaceError: a space vecsample cannot carry;
            ``SharedMemorySpaceError`` for one shared memory cannot hold.

    The one intended difference from AsyncVectorEnv: actions are checked against the action
    space before anything is sent (``check_actions=False`` turns it off). Errors are vecsample's
    typed errors, which also derive from the ones gymnasium raises (docs/gymnasium.md).

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
        env_fns: Sequence[EnvFn] | HostedVector,
        num_workers: int | None = None,
        *,
        shared_memory: bool = True,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        worker: Any = None,
        observation_mode: Any = "same",
        autoreset_mode: str | Any | None = None,
        max_concurrency: int | None = None,
        num_envs: int | None = None,
        observation_space: Space | None = None,
        action_space: Space | None = None,
        options: Options | None = None,
        **overrides: Any,
    ) -> None:
        _check_options(worker, observation_mode, daemon)
        chosen = _vector_options(options, overrides, context, autoreset_mode)
        envs, chosen = _envs_and_workers(env_fns, num_envs, num_workers, max_concurrency, chosen)
        obs_space, act_space, probed = _probe(envs, chosen, observation_space, action_space)
        if shared_memory:
            _check_shared_memory(obs_space)
        fns = envs.hosted or list(envs.fns)  # as resolved: VecSampler checks nothing twice
        s = self._sampler = VecSampler(fns, num_envs=envs.count, observation_space=obs_space,
                                       action_space=act_space, options=chosen)
        self.env_fns, self.num_envs, self.context = fns, s.num_envs, s.context
        self.shared_memory, self.copy, self.daemon = bool(shared_memory), bool(copy), True
        self.worker, self.observation_mode, self.max_concurrency = None, "same", max_concurrency
        self._describe(obs_space, act_space, probed)
        self._ended, self._pickled = np.zeros(s.num_envs, bool), _has_pickled_leaf(obs_space)
        self._pending: Pending | None = None
        self._received: list[StepResult] = []  # steps a timed-out step_wait already received
        self._parts = _Parts()  # what VectorEnv adds to a step: shown by stats()
        s.add_phases(self._parts)

    def _describe(self, obs_space: Space, act_space: Space,
                  probed: tuple[dict[str, Any], str | None] | None) -> None:
        """What gymnasium's vector API says of the envs: the autoreset mode, ``metadata`` and
        ``render_mode`` (env 0's, read here or in its worker), the single and batched spaces."""
        self.mode = self._sampler.autoreset_mode  # ours; autoreset_mode: gymnasium's enum
        self.autoreset_mode = gym.vector.AutoresetMode(self.mode.value)
        metadata, self.render_mode = probed if probed else self._first_env_metadata()
        self.metadata = {**metadata, "autoreset_mode": self.autoreset_mode}
        self.single_observation_space, self.single_action_space = obs_space, act_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    @property
    def sampler(self) -> VecSampler:
        """The VecSampler underneath, for step_send/step_recv and stats()."""
        return self._sampler

    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]
        """Each env's ``np_random_seed``, read from the envs."""
        return self.get_attr("np_random_seed")

    @property  # type: ignore[misc]  # gymnasium's has a setter; the envs' own cannot be set
    def np_random(self) -> tuple[np.random.Generator, ...]:  # type: ignore[override]
        """Each env's random generator (a copy: the envs live in the workers)."""
        return self.get_attr("np_random")

    # --- reset -----------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Resets the envs (those in ``options["reset_mask"]``, if given); (obs, infos)."""
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def reset_async(
        self, seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        """Checks and records a reset; ``reset_wait`` runs it (the workers reset on request)."""
        self._expect_idle("reset_async")
        seeds = _seeds(seed, self.num_envs)
        options, mask = _split_reset_mask(options, self.num_envs)
        self._pending = ("reset", (seeds, options, mask))

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """Runs the reset recorded by ``reset_async``, in at most ``timeout`` seconds."""
        seeds, options, mask = self._take("reset")
        with _env_errors():  # the timeout bounds the whole call, restarts included
            obs, env_infos = self._sampler.reset(seeds, options, mask=mask, deadline=timeout)
        infos: dict[str, Any] = {}
        for i, info in enumerate(env_infos):
            if mask is None or mask[i]:
                infos = self._add_info(infos, info, i)
        self._ended[slice(None) if mask is None else mask] = False
        return self._observations(obs), infos

    # --- step ------------------------------------------------------------------------------------

    def step(
        self, actions: Any
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Steps every env with its row of ``actions``; (obs, rewards, terminated, truncated,
        infos). What ``step_async`` then ``step_wait`` do, in one call to the sampler
        (``VecSampler.step``): a step past its deadline leaves its late workers pending for
        ``step_wait``, as a ``step_wait`` that timed out does."""
        self._check_step(actions)
        try:
            v = self._sampler.step(actions)
        except errors.DeadlineExceededError as exc:
            self._pending, self._received = ("step", ()), list(exc.results)
            raise
        except errors.WorkerError as exc:
            failures = [exc, *exc.others]  # every worker lost in the wait, each read once
            raise _reported(failures) from failures[-1].__cause__
        return self._stepped(v)

    def _check_step(self, actions: Any) -> None:
        """What a step checks before anything is sent: no call pending, a batch of actions,
        and (autoreset disabled) no env left ended."""
        self._expect_idle("step_async")
        _check_action_batch(actions, self.num_envs)
        if self.mode is AutoresetMode.DISABLED and self._ended.any():
            raise errors.PendingCallError(
                f"envs {np.nonzero(self._ended)[0].tolist()} ended and autoreset is disabled; "
                f"call reset(options={{'reset_mask': mask}}) for them before stepping.",
                name="reset")

    def step_async(self, actions: Any) -> None:
        """Checks ``actions``, writes them to shared memory and starts every worker."""
        self._check_step(actions)
        try:  # as _env_errors(), without a context manager's calls on every step
            self._sampler.send_all(actions)
        except errors.WorkerError as exc:
            raise _reported([exc]) from exc.__cause__
        self._pending, self._received = ("step", ()), []

    def step_wait(
        self, timeout: float | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Waits for the step started by ``step_async``, at most ``timeout`` seconds.

        A timeout leaves the late workers' steps pending: the next ``step_wait`` returns them.
        """
        self._expect_pending("step")
        try:
            v = _recv_batch(self._sampler, timeout, self._received)
        except errors.DeadlineExceededError as exc:
            self._received.extend(exc.results)
            raise
        except BaseException:
            self._pending = None
            raise
        self._pending = None
        self._received = []
        return self._stepped(v)

    def _stepped(self, v: StepResult) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray,
                                                dict[str, Any]]:
        """gymnasium's five values of the step ``v``: copies, and its vector infos."""
        infos = self._vector_infos(v)
        started = time.perf_counter()
        obs = self._observations(v.obs)
        self._parts.obs_copy += time.perf_counter() - started
        self._ended = v.terminated | v.truncated
        return obs, v.rewards.copy(), v.terminated.copy(), v.truncated.copy(), infos

    def _vector_infos(self, v: StepResult) -> dict[str, Any]:
        """gymnasium's vector infos of the step ``v``: a plain ``dict``, as gymnasium's own
        (its vector tests compare the type), built now from the step's info columns, and
        ``{}`` at once where the step has none; the build's time goes to ``stats()``'s
        ``vector_infos``."""
        started = time.perf_counter()
        space, finals = self.single_observation_space, v.final_obs
        built = vector_infos.build(v.infos, v.reset_infos, self.mode, v.has_final_obs,
                                   lambda i: _unbatch(space, finals, i), self._add_info)
        self._parts.vector_infos += time.perf_counter() - started
        return built

    def _observations(self, obs: Any) -> Any:
        if self.copy or not self.shared_memory:
            obs = copy_tree(obs)
        return _as_tuples(self.single_observation_space, obs) if self._pickled else obs

    # --- calls -----------------------------------------------------------------------------------

    def call_async(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        """Records a call of ``name`` on every env; ``call_wait`` runs it."""
        self._expect_idle("call_async")
        self._pending = ("call", (name, args, kwargs))

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """Runs the call recorded by ``call_async``, in at most ``timeout`` seconds."""
        name, args, kwargs = self._take("call")
        with _env_errors():  # the timeout bounds the whole call, restarts included
            return tuple(self._sampler.call_with(name, args, kwargs, deadline=timeout))

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Calls ``name`` on every env (or reads it, if not callable); one result per env."""
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """``call(name)``, as gymnasium defines it: a method is called, an attribute read."""
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Sets ``name`` on every env: a list or tuple gives one value per env."""
        self._expect_idle("set_attr")
        with _env_errors():
            self._sampler.set_attr(name, values)

    def render(self) -> tuple[Any, ...] | None:
        """Every env's ``render()``, as ``call("render")``."""
        return self.call("render")

    # --- state -----------------------------------------------------------------------------------

    def _expect_idle(self, call: str) -> None:
        if self.closed:
            raise errors.ClosedError(what="VectorEnv")
        if self._pending is not None:
            name = self._pending[0]
            raise adapter_errors.AlreadyPendingError(
                f"Calling `{call}` while waiting for a pending call to `{name}` to complete; "
                f"call `{name}_wait()` first.", name=name)

    def _expect_pending(self, name: str) -> tuple[Any, ...]:
        if self.closed:
            raise errors.ClosedError(what="VectorEnv")
        if self._pending is None or self._pending[0] != name:
            other = f" (`{self._pending[0]}` is pending)" if self._pending else ""
            raise errors.NoPendingError(
                f"Calling `{name}_wait` without any prior call to `{name}_async`.{other} Call "
                f"`{name}_async(...)` first, or `{name}(...)` to do both.", name=name)
        return self._pending[1]

    def _take(self, name: str) -> tuple[Any, ...]:
        args = self._expect_pending(name)
        self._pending = None  # a failed or timed-out call is over, as in gymnasium
        return args

    def _first_env_metadata(self) -> tuple[dict[str, Any], str | None]:
        """env 0's metadata and render_mode, read in its worker (no env was built here)."""
        metadata, mode = (self._sampler.call(name)[0] for name in ("metadata", "render_mode"))
        return dict(metadata), mode

    def close_extras(self, timeout: float | None = None, terminate: bool = False,
                     **kwargs: Any) -> None:
        """Stops the workers: waits up to ``timeout`` s (5 by default, 0 with ``terminate``)."""
        if self._pending is not None:
            logger.warn(f"Calling `close` while waiting for a pending call to "
                        f"`{self._pending[0]}` to complete.", stacklevel=3)
            self._pending = None
        if hasattr(self, "_sampler"):
            self._sampler.close(0.0 if terminate else 5.0 if timeout is None else timeout)

    def __reduce__(self) -> NoReturn:
        raise errors.SamplerPicklingError(
            what="vecsample.VectorEnv", fix="Pass what builds one instead, its env factories "
            "(env.env_fns) and its options (env.sampler.options), and build it where it runs: "
            "VectorEnv(env_fns, options=options)")

    def __repr__(self) -> str:
        return f"vecsample.VectorEnv({self.num_envs} envs, {self._sampler!r})"


# --- constructor helpers -------------------------------------------------------------------------


def _vector_options(options: Options | None, overrides: dict[str, Any], context: str | None,
                    autoreset_mode: Any) -> Options:
    """The sampler's Options but ``num_workers``: gymnasium's defaults (NEXT_STEP) and
    vecsample's for any env count (uneven_split) where neither an argument nor ``options``
    sets them; infos always on (gymnasium's vector infos need them)."""
    named = {"context": context, "autoreset_mode": autoreset_mode}
    given = {**overrides, **{name: value for name, value in named.items() if value is not None}}
    defaults = {"uneven_split": True, "autoreset_mode": AutoresetMode.NEXT_STEP}
    return adapted(options, given, where="vecsample.VectorEnv", defaults=defaults,
                   fixed={"infos": (True, "gymnasium's vector infos are built from them")})


def _envs_and_workers(env_fns: Sequence[EnvFn] | HostedVector, num_envs: int | None,
                      num_workers: Any, max_concurrency: Any,
                      chosen: Options) -> tuple[Envs, Options]:
    """The envs, and ``chosen`` with the worker count for that many envs."""
    envs = Envs.of(env_fns, num_envs)
    workers = _worker_count(envs.count, num_workers, max_concurrency, chosen)
    return envs, chosen.replace(num_workers=workers)


def _check_options(worker: Any, observation_mode: Any, daemon: Any) -> None:
    """Refuses the AsyncVectorEnv options vecsample's workers cannot honour; warns on daemon."""
    if worker is not None:
        raise adapter_errors.UnsupportedOptionError(
            name="worker", expected="None", got=worker,
            fix="a custom worker function cannot run in vecsample's workers, which each step a "
            "block of envs through shared memory with their own protocol. Put the custom "
            "per-env logic in a gymnasium.Wrapper applied inside env_fns, or use "
            "gymnasium.vector.AsyncVectorEnv for it")
    if isinstance(observation_mode, str) and observation_mode not in ("same", "different"):
        raise errors.ConfigError(
            name="observation_mode", expected="'same'", got=observation_mode,
            fix="vecsample batches identical observation spaces only")
    if not (isinstance(observation_mode, str) and observation_mode == "same"):
        raise adapter_errors.UnsupportedOptionError(
            name="observation_mode", expected="'same'", got=observation_mode,
            fix="vecsample's workers need every env's observation space to equal the first "
            "env's (one shared-memory layout). Make the spaces equal (e.g. with a wrapper "
            "that rescales or pads), or use gymnasium.vector.AsyncVectorEnv for such envs")
    if not daemon:
        warnings.warn(
            "VectorEnv(daemon=False) has no effect: vecsample's workers are always daemonic, so "
            "that no worker outlives a parent that exits without close(). An env cannot start "
            "processes of its own in them (see docs/gymnasium.md).", UserWarning, stacklevel=3)


def _probe(
    envs: Envs, options: Options, obs: Space | None, act: Space | None
) -> tuple[Space, Space, tuple[dict[str, Any], str | None] | None]:
    """The spaces (those given, else env 0's) and, if env 0 was built here, its metadata and
    render_mode."""
    if envs.hosted is not None:  # probed like VecSampler's; metadata read in a worker
        obs, act, _ = hosted.probe_spaces(envs.hosted, options.autoreset_mode, obs, act)
        return obs, act, None
    if obs is not None and act is not None:
        return obs, act, None
    try:
        env = envs.fns[0]()
    except Exception as exc:
        raise errors.EnvFactoryError(
            f"env_fns[0]() raised {type(exc).__name__}: {exc}; fix the factory (it is called "
            f"once in the parent to read the spaces, metadata and render_mode)."
        ) from exc
    try:
        return (env.observation_space if obs is None else obs,
                env.action_space if act is None else act,
                (dict(env.metadata), env.render_mode))
    finally:
        env.close()


def _unfixed_part(space: Any, path: str = "") -> tuple[str, Any] | None:
    """The path and space of the first part of ``space`` that shared memory cannot hold."""
    if isinstance(space, SHARED_MEMORY_SPACES):
        return None
    if isinstance(space, spaces.Dict):
        items: Iterator[tuple[Any, Any]] = iter(space.spaces.items())
    elif isinstance(space, (spaces.Tuple, spaces.OneOf)):
        items = enumerate(space.spaces)
    else:
        return path, space
    for key, sub in items:
        found = _unfixed_part(sub, f"{path}/{key}" if path else str(key))
        if found is not None:
            return found
    return None


def _check_shared_memory(space: Space) -> None:
    """``shared_memory=True``: the observation space must have one fixed layout."""
    found = _unfixed_part(space)
    if found is None:
        return
    path, part = found
    what = type(part).__name__ + (f" (at {path})" if path else "")
    if isinstance(part, DYNAMIC_SPACES):
        reason = f"{what} has a dynamic shape so its not possible to make a static shared memory."
    else:
        reason = f"{what} is a custom space, which a fixed shared-memory layout cannot hold."
    raise adapter_errors.SharedMemorySpaceError(
        f"shared_memory=True with observation space {space}: {reason} Pass "
        f"shared_memory=False to send these observations through the pipes (pickled), as "
        f"AsyncVectorEnv does.")


def _worker_count(num_envs: int, num_workers: Any, max_concurrency: Any,
                  options: Options) -> int:
    """``num_workers``, else ``options``' if set, else one per usable core; checked against
    ``max_concurrency``."""
    if isinstance(num_workers, bool):
        raise errors.ConfigError(
            name="num_workers", expected="None or an int >= 1", got=num_workers,
            fix="VectorEnv's second positional argument is num_workers (AsyncVectorEnv's is "
            "shared_memory): pass shared_memory= and the other AsyncVectorEnv options by keyword")
    if num_workers is not None:  # checked as Options checks it, with its words
        num_workers = options.replace(num_workers=num_workers).num_workers
    elif "num_workers" in options.given:
        num_workers = options.num_workers
    elif options.env_placement == "parent":
        return 1  # no worker process: one block, as a second one only costs its bookkeeping
    limit = usable_cores()
    if max_concurrency is not None:
        cap = check_int(max_concurrency, "max_concurrency", fix="None puts no limit")
        if num_workers is not None and num_workers > cap:
            raise errors.ConfigError(
                f"num_workers={num_workers} would run more than max_concurrency={cap} envs at "
                f"once (each worker runs one env at a time); pass num_workers <= {cap}.")
        limit = min(limit, cap)
    return max(1, min(num_envs, limit)) if num_workers is None else num_workers


# --- call helpers --------------------------------------------------------------------------------


def _seeds(seed: Any, num_envs: int) -> list[int | None]:
    """gymnasium's convention: None, an int (env i gets ``seed + i``) or one seed per env."""
    if seed is None:
        return [None] * num_envs
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        return [int(seed) + i for i in range(num_envs)]
    if isinstance(seed, (list, tuple)):
        if len(seed) != num_envs:
            raise errors.ConfigError(
                f"seed: a list needs one seed per env, expected {num_envs}, got {len(seed)}; "
                f"pass {num_envs} seeds (None leaves an env unseeded) or one int.")
        return list(seed)
    raise errors.ConfigError(
        name="seed", expected="None, an int or a list of one seed per env", got=seed)


def _split_reset_mask(
    options: dict[str, Any] | None, num_envs: int
) -> tuple[dict[str, Any] | None, np.ndarray | None]:
    """``options`` without ``"reset_mask"`` (the caller's dict is left alone), and the mask,
    checked as gymnasium checks it. Only a mapping can hold a mask: other options (an int, a
    string, a list) reach the envs' ``reset`` as they are, as gymnasium passes them."""
    if not isinstance(options, Mapping) or "reset_mask" not in options:
        return options, None
    options = dict(options)
    mask = options.pop("reset_mask")
    where = "`options['reset_mask']`"
    if not isinstance(mask, np.ndarray):
        raise errors.ResetMaskError(
            f"{where} must be a numpy array, got {type(mask)}; pass np.array([...], "
            f"dtype=bool) with one entry per env.")
    if mask.shape != (num_envs,):
        raise errors.ResetMaskError(
            f"{where} must have shape `({num_envs},)`, got {mask.shape}; pass one bool per env.")
    if mask.dtype != np.bool_:
        raise errors.ResetMaskError(
            f"{where} must have `dtype=np.bool_`, got {mask.dtype}; convert it with "
            f"mask.astype(bool).")
    if not mask.any():
        raise errors.ResetMaskError(
            f"{where} must contain a boolean array with at least one True value, got "
            f"reset_mask={mask}; to reset no env, do not call reset.")
    return options, mask


def _check_action_batch(actions: Any, num_envs: int) -> None:
    """A single scalar is not a batch (the shapes themselves are checked by the sampler)."""
    if type(actions) is np.ndarray and actions.ndim:
        return  # the common call, decided before the slower checks of an abstract Mapping
    if isinstance(actions, (Mapping, list, tuple)) or np.ndim(actions) > 0:
        return
    raise adapter_errors.ActionCountError(
        f"actions: expected a batch of {num_envs} actions (one per env, along the first axis), "
        f"got the single value {actions!r}; pass e.g. envs.action_space.sample() or an array "
        f"with {num_envs} rows.")


def _has_pickled_leaf(space: Any) -> bool:
    """Whether ``space`` has a part with no fixed shape (the sampler pickles those values)."""
    if isinstance(space, spaces.Dict):
        return any(_has_pickled_leaf(sub) for sub in space.spaces.values())
    if isinstance(space, spaces.Tuple):
        return any(_has_pickled_leaf(sub) for sub in space.spaces)
    return not isinstance(space, FIXED_SPACES)


def _as_tuples(space: Any, tree: Any) -> Any:
    """A batch as gymnasium batches it: a tuple of values (not an object array) for each part
    with no fixed shape (``Text``, ``Graph``, ``Sequence``, ``OneOf``, custom spaces)."""
    if isinstance(space, spaces.Dict):
        return {key: _as_tuples(sub, tree[key]) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_as_tuples(sub, part) for sub, part in zip(space.spaces, tree, strict=True))
    return tree if isinstance(space, FIXED_SPACES) else tuple(tree)


def _unbatch(space: Any, tree: Any, i: int) -> Any:
    """Env ``i``'s value in a batch, as the env returns it: a copy of its array, a Python int
    for ``Discrete`` (not a 0-d array), dicts and tuples for ``Dict`` and ``Tuple``."""
    if isinstance(space, spaces.Dict):
        return {key: _unbatch(sub, tree[key], i) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_unbatch(sub, part, i) for sub, part in zip(space.spaces, tree, strict=True))
    value = tree[i]
    if isinstance(space, spaces.Discrete):
        return int(value)
    if isinstance(space, FIXED_SPACES):
        return np.array(value, copy=True)
    return value


@contextlib.contextmanager
def _env_errors() -> Iterator[None]:
    """An env's exception, as AsyncVectorEnv reports it (``_reported``)."""
    try:
        yield
    except errors.WorkerError as exc:
        raise _reported([exc]) from exc.__cause__


def _recv_batch(sampler: VecSampler, timeout: float | None,
                received: list[StepResult]) -> StepResult:
    """Every pending worker's step, with those a timed-out ``step_wait`` already received, as
    one StepResult. If envs raise, the other workers' steps are read too (none is left in
    flight), and every error is reported as AsyncVectorEnv reports them."""
    try:
        if not received:
            return sampler.recv_batch(deadline=timeout)
        return sampler.batch([*received, *sampler.step_recv(None, deadline=timeout)])
    except errors.WorkerError as exc:
        failures = [exc, *exc.others]  # every worker lost in the wait, each read once
    raise _reported(failures) from failures[-1].__cause__


def _reported(failures: list[errors.WorkerError]) -> errors.WorkerError:
    """The last of ``failures``, after logging each through gymnasium's logger as
    AsyncVectorEnv does, made an instance of the env's own exception type too
    (``adapter_errors.as_env_exception``)."""
    raised = [exc for exc in failures if exc.exc_type and exc.env is not None]  # not a death
    for exc in raised:
        logger.error(f"Received the following error from Worker-{exc.env} - Shutting it down")
        logger.error(exc.remote_traceback)
    if raised:
        logger.error("Raising the last exception back to the main process.")
    return adapter_errors.as_env_exception(failures[-1])


def make_vec(
    env_id: str,
    num_envs: int,
    num_workers: int | None = None,
    *,
    env_kwargs: dict[str, Any] | None = None,
    vectorization_mode: str | None = None,
    **kwargs: Any,
) -> VectorEnv:
    """``gymnasium.make_vec`` for vecsample: ``num_envs`` copies of ``env_id`` in workers.

    Each env is the picklable ``EnvMaker(env_id, env_kwargs)``. There is no ``vector_kwargs`` or
    ``wrappers``: wrap envs in a factory of your own.

    Args:
        env_id: A registered gymnasium id (``vecsample.envs`` ids register on first use).
        num_envs: How many copies, an int >= 1.
        num_workers: As for :class:`VectorEnv` (``None``: one per usable core).
        env_kwargs: Keyword arguments for every ``gymnasium.make`` call (not ``**kwargs``).
        vectorization_mode: ``"vector_entry_point"`` or ``"sync"``: one vector env per worker
            (gymnasium's keyword); None: one env per row.
        **kwargs: Passed on to :class:`VectorEnv` (``autoreset_mode``, ``copy``,
            ``shared_memory``, ``options``, ``deadline``, ...).

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
    return VectorEnv(_make_vec_fns(env_id, num_envs, dict(env_kwargs or {}), vectorization_mode),
                     num_workers, **kwargs)


def _make_vec_fns(env_id: str, num_envs: object, kwargs: dict[str, Any],
                  vectorization_mode: str | None) -> list[EnvFn] | HostedVector:
    """make_vec's envs: ``num_envs`` makers of ``env_id`` or, with ``vectorization_mode``, one
    vector env per worker (``HostedVector``, docs/lab/benchmarks.md "Past the bare loop")."""
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise errors.ConfigError(f"num_envs must be an int >= 1, got {num_envs!r}.")
    if vectorization_mode is not None:
        return HostedVector(env_id, vectorization_mode, kwargs, num_envs=num_envs)
    return [EnvMaker(env_id, kwargs)] * num_envs
