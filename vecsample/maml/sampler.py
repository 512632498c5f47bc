"""``MultiTaskSampler``: pytorch-maml-rl's sampler API on top of ``vecsample.VecSampler``.

One ``sample_async(tasks)`` runs ``num_steps + 1`` rounds over ``len(tasks) * batch_size`` envs
spread over the workers (env ``g`` plays task ``g // batch_size``): the train rounds with the
pre-adaptation and then the adapted parameters, and the valid round. Autoreset is disabled, so
each env plays exactly one episode per round; a round ends when every env has ended.

The rounds run in one background thread of the main process. It owns the ``VecSampler``, does
the policy inference per task (one forward per group of envs that share parameters, per worker
reply), fits the baseline, computes the advantages and the first-order inner update, and
resolves the asyncio futures on the main thread's event loop as each round ends. So a
metalearner that awaits the futures (pytorch-maml-rl's ``MAMLTRPO``) runs while the sampler is
still sampling, and awaits them as often as it likes.

The policy's parameters are copied when ``sample_async`` is called: a line search that rewrites
the policy's weights while sampling is under way does not change what is sampled.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import math
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import gymnasium as gym
import numpy as np
import torch
from numpy.typing import NDArray
from torch.distributions import Categorical, Distribution, Independent, Normal

import vecsample.envs  # noqa: F401  (registers the task envs, so their ids work out of the box)
from vecsample import errors
from vecsample.envs.base import Task, TaskEnv
from vecsample.envs.mujoco_batch import batch_id_for
from vecsample.hosted import HostedVector
from vecsample.maml.episodes import BatchEpisodes, EpisodeSteps
from vecsample.maml.errors import TaskEnvError
from vecsample.maml.losses import reinforce_loss
from vecsample.maml.policies import NormalMLPPolicy
from vecsample.options import (
    DEFAULT_CONTEXT,
    DEFAULT_DEADLINE,
    DEFAULTS,
    Options,
    adapted,
    check_int,
)
from vecsample.results import StepResult
from vecsample.sampler import VecSampler
from vecsample.seeding import SeedStream
from vecsample.types import AutoresetMode

Params = Mapping[str, torch.Tensor]
Futures = tuple[list[list["asyncio.Future[BatchEpisodes]"]], list["asyncio.Future[BatchEpisodes]"]]

#: How long one wait on the workers lasts before the thread checks whether close() was called.
POLL_S = 0.25


class MetaPolicy(Protocol):
    """What the sampler needs of a policy: pytorch-maml-rl's ``Policy`` interface."""

    def __call__(self, input: torch.Tensor, params: Params | None = None) -> Distribution: ...

    def named_parameters(self) -> Any: ...

    def update_params(
        self,
        loss: torch.Tensor,
        params: Params | None = None,
        step_size: float = 0.5,
        first_order: bool = False,
    ) -> Params: ...


class FittableBaseline(Protocol):
    """``fit(episodes)`` then ``baseline(episodes) -> (T, B)`` values."""

    def fit(self, episodes: BatchEpisodes) -> None: ...

    def __call__(self, episodes: BatchEpisodes) -> torch.Tensor: ...


@dataclass
class _Request:
    """One sample_async call: what to sample and where its results go."""

    tasks: list[Task]
    num_steps: int
    fast_lr: float
    gamma: float
    gae_lambda: float
    device: torch.device
    params: Params
    train: list[list[asyncio.Future[BatchEpisodes]]]
    valid: list[asyncio.Future[BatchEpisodes]]
    #: One action-noise generator per worker (seeded runs only): each worker's envs draw in
    #: their own order, whichever worker replies first.
    generators: list[torch.Generator] | None = None

    def settle(
        self, loop: asyncio.AbstractEventLoop, step: int, k: int, episodes: BatchEpisodes
    ) -> None:
        """Resolves task ``k``'s future of round ``step`` (after the train rounds, the valid
        round) on ``loop``, from any thread."""
        future = self.valid[k] if step == self.num_steps else self.train[step][k]

        def settle() -> None:
            if not future.done():
                future.set_result(episodes)

        loop.call_soon_threadsafe(settle)

    def fail(self, loop: asyncio.AbstractEventLoop, exc: BaseException) -> None:
        """Sets ``exc`` on every future not resolved yet, on ``loop``, from any thread."""

        def fail() -> None:
            for future in [*(f for step in self.train for f in step), *self.valid]:
                if not future.done():
                    future.set_exception(exc)

        if not loop.is_closed():
            loop.call_soon_threadsafe(fail)


def _main_loop() -> asyncio.AbstractEventLoop:
    """The main thread's event loop, made and set if there is none (as their code expects)."""
    with warnings.catch_warnings():
        # get_event_loop() warns where it would create a loop (3.12+); we create it ourselves.
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = asyncio.get_event_loop()
        except RuntimeError:
            loop = None
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
    return loop


def _draw(loc: torch.Tensor, scale: torch.Tensor,
          generator: torch.Generator | None) -> torch.Tensor:
    """A sample of ``Normal(loc, scale)`` (``scale`` broadcast to ``loc``), from ``generator``
    where there is one, as ``_sample`` draws it, else as ``Normal.sample()`` does."""
    if generator is None:
        return torch.normal(loc, scale.expand(loc.shape))
    noise = torch.randn(loc.shape, generator=generator, device=loc.device)
    return loc + scale * noise


def _stacks(policy: MetaPolicy) -> bool:
    """Whether ``policy`` is a ``NormalMLPPolicy`` whose forward is its own, so that
    ``policy.stacked`` gives what its forward per group gives (a subclass that overrides
    ``forward`` gets a forward per group)."""
    return isinstance(policy, NormalMLPPolicy) and (
        type(policy).forward is NormalMLPPolicy.forward)


def _snapshot(policy: MetaPolicy, device: torch.device) -> Params:
    """Detached copies of the policy's parameters, leaves that can take gradients."""
    return OrderedDict(
        (name, p.detach().clone().to(device).requires_grad_(p.requires_grad))
        for name, p in policy.named_parameters()
    )


def _sample(pi: Distribution, generator: torch.Generator | None) -> torch.Tensor:
    """``pi.sample()``, drawn from the sampler's own generator where the type allows it."""
    base = pi.base_dist if isinstance(pi, Independent) else pi
    if generator is None:
        return pi.sample()
    if isinstance(base, Normal):
        return _draw(base.loc, base.scale, generator)
    if isinstance(base, Categorical):
        return torch.multinomial(base.probs, 1, generator=generator).squeeze(-1)
    return pi.sample()


class MultiTaskSampler:
    """Drop-in for ``maml_rl.samplers.MultiTaskSampler`` (same signature and methods).

    ``sample_async(tasks)`` plays ``batch_size`` episodes of every task per round on a
    ``VecSampler``, in a background thread, and returns asyncio futures of ``BatchEpisodes``;
    ``sample_wait`` (or ``sample``) waits for them.

    Args:
        env_name: A gymnasium id (``import vecsample.envs`` registers the task envs) whose
            unwrapped env has ``sample_tasks`` and ``reset_task``. The workers rebuild it from
            its pickled ``EnvSpec``, under any start method.
        env_kwargs: Keyword arguments of ``gymnasium.make``, for ``env`` and every worker's
            envs; None or ``{}`` for none.
        batch_size: Episodes per task and round (the envs of one task), an int >= 1.
        policy: The meta-policy (pytorch-maml-rl's ``Policy`` interface, see ``MetaPolicy``).
            Its parameters are copied when ``sample_async`` is called: changing its weights
            while a sample is under way (a line search) does not change what is sampled.
        baseline: Fitted to every batch before its advantages are computed. The sampler fits a
            deep copy of its own, in its thread, so the object passed in is never touched.
        env: The env that samples the tasks and gives the spaces; default
            ``gymnasium.make(env_name, **env_kwargs)``. It is seeded, then closed here:
            ``sample_tasks`` only uses its random generator.
        seed: Seeds the task sampler, every env and the action noise (each from its own child
            of ``np.random.SeedSequence(seed)``), so a seeded run repeats whatever the number of
            workers. None: seeds from the OS.
        num_workers: Worker processes, an int >= 1. Never more than the envs of a sample (the
            tasks times ``batch_size``); the envs are padded to a multiple of the workers and
            the spare envs' steps are dropped.
        context: The ``multiprocessing`` start method of the workers.
        deadline: Seconds a worker may stay silent before ``DeadlineExceededError``; None waits
            forever.
        options: More of the ``VecSampler`` underneath's ``vecsample.Options`` (``restart``,
            ``threads_per_worker``, ``cpu_affinity``, ``startup_deadline``, ...). ``seed``,
            ``num_workers``, ``context`` and ``deadline`` above are the fields of the same
            names, checked by ``Options`` with its words: each given here (not at its default)
            replaces ``options``' value. This sampler sets ``autoreset_mode`` ('Disabled': one
            episode per env and round), ``check_actions`` (off: Gaussian actions are clipped by
            the envs), ``infos`` (on only for ``episode_info_keys``) and the VecSampler's seed
            (drawn from ``seed``), and ``spin_us`` where you leave it unset (0: the workers
            step for milliseconds while this process infers, so a spin would only take their
            cores); ``record`` and ``replay`` are refused.
        batch_envs: Whether to sample the batch-native form of ``env_name`` where it has one
            (``vecsample.envs.BATCH_IDS``: HalfCheetahVel/Dir, AntVel/Dir/Pos, docs/
            mujoco_batch.md): each worker then steps one ``HostedVector`` of its block (one
            ``MjData`` per env, observations and rewards computed over the block in numpy)
            instead of one gymnasium env per row. The
            episodes are the same, bit for bit, for the same seed [``test_mujoco_maml.py``].
            ``env_kwargs`` that only the single envs take (the v5 reward keywords, which they
            ignore) keep the single envs. False: single envs always. The attribute
            ``batch_id`` names the batch id the workers build (None: single envs).

    Raises:
        TaskEnvError: The env has no ``sample_tasks`` / ``reset_task`` (not a task env).
        ConfigError: ``batch_size``, ``num_workers``, ``seed``, ``context``, ``deadline`` or
            an option is out of range or of the wrong type.
        gymnasium.error.Error: ``env_name`` is not registered.

    The workers start with the first ``sample_async``, and are rebuilt when the number of tasks
    changes or after a failure. Failures reach ``sample_wait`` and every future: a worker that
    dies raises ``WorkerDiedError``, one that hangs ``DeadlineExceededError``. One sample runs
    at a time: ``sample_async`` again before ``sample_wait`` raises ``PendingCallError``. The
    futures belong to the main thread's event loop (made and set if there is none).

    Example:
        >>> import gymnasium as gym
        >>> from vecsample.maml import (LinearFeatureBaseline, MultiTaskSampler,
        ...                             get_input_size, get_policy_for_env)
        >>> env = gym.make("TabularMDP-v0")  # 10 states, episodes of 10 steps
        >>> policy = get_policy_for_env(env, hidden_sizes=(8,))
        >>> baseline = LinearFeatureBaseline(get_input_size(env))
        >>> with MultiTaskSampler("TabularMDP-v0", {}, batch_size=2, policy=policy,
        ...                       baseline=baseline, seed=0, num_workers=2) as sampler:
        ...     tasks = sampler.sample_tasks(num_tasks=2)
        ...     train, valid = sampler.sample(tasks, num_steps=1)
        ...     workers = len(sampler.worker_pids())
        >>> len(train), len(train[0]), len(valid), workers  # steps x tasks, tasks, workers
        (1, 2, 2, 2)
        >>> tuple(valid[0].observations.shape)  # (steps, batch_size, observation size)
        (10, 2, 10)
    """

    def __init__(
        self,
        env_name: str,
        env_kwargs: dict[str, Any],
        batch_size: int,
        policy: MetaPolicy,
        baseline: FittableBaseline,
        env: gym.Env[Any, Any] | None = None,
        seed: int | None = None,
        num_workers: int = 1,
        *,
        context: str = DEFAULT_CONTEXT,
        deadline: float | None = DEFAULT_DEADLINE,
        options: Options | None = None,
        batch_envs: bool = True,
    ) -> None:
        self.env_name, self.env_kwargs = env_name, dict(env_kwargs or {})
        self.batch_id = _batch_form(env_name, self.env_kwargs) if batch_envs else None
        self.batch_size = check_int(batch_size, "batch_size")
        chosen = _sampler_options(options, seed=seed, num_workers=num_workers, context=context,
                                  deadline=deadline)
        self.policy, self.baseline = policy, copy.deepcopy(baseline)  # fitted by our thread
        # Seeds drawn in order (task sampler, envs, action noise): 32-bit children of seed.
        self._seeds = SeedStream(chosen.seed, dtype=np.uint32)
        self.seed = self._seeds.seed
        self.env = _task_env(env_name, self.env_kwargs, env, self._seeds.draw())
        #: Info keys the env reports at each episode's end (``episode_info_keys`` on the
        #: unwrapped env, e.g. Meta-World's ``episode_success``), logged per task in
        #: ``BatchEpisodes.logs[key]``: one value per episode, NaN where an episode had none.
        self.episode_info_keys = tuple(getattr(self.env.unwrapped, "episode_info_keys", ()))
        # Infos cost a pickle per reply that has any; the task envs' (their task) go unread: on
        # only for episode-end keys (Meta-World's success), whose infos come once per episode.
        self._options = chosen.replace(infos=bool(self.episode_info_keys))
        # gym.make on the pickled EnvSpec: a spawned worker rebuilds any registered env (its
        # entry point is imported, which registers vecsample.envs' ids too).
        self._factory = functools.partial(gym.make, gym.spec(env_name), **self.env_kwargs)
        self._loop = _main_loop()
        self._vec: VecSampler | None = None
        self._thread: threading.Thread | None = None
        self._stop, self._waiting, self.closed = threading.Event(), False, False

    @property
    def options(self) -> Options:
        """The options of the VecSampler underneath (its seed and worker count are drawn and
        capped per sample: see ``num_workers``)."""
        return self._options

    @property
    def num_workers(self) -> int:
        return self._options.num_workers

    @property
    def context(self) -> str:
        return self._options.context

    @property
    def deadline(self) -> float | None:
        return self._options.deadline

    # --- the API of pytorch-maml-rl ----------------------------------------------------------

    def sample_tasks(self, num_tasks: int) -> list[Task]:
        task_env = cast(TaskEnv, self.env.unwrapped)  # checked in __init__
        return task_env.sample_tasks(num_tasks)

    def sample_async(
        self,
        tasks: Sequence[Task],
        num_steps: int = 1,
        fast_lr: float = 0.5,
        gamma: float = 0.95,
        gae_lambda: float = 1.0,
        device: str | torch.device = "cpu",
    ) -> Futures:
        """Starts sampling; returns ``(train_futures[num_steps][num_tasks], valid_futures)``."""
        self._check_open()
        if self._waiting:
            raise errors.PendingCallError(
                "sample_async() called while a previous sample is pending; call "
                "sample_wait(futures) before sampling again."
            )
        tasks = list(tasks)
        if not tasks:
            raise errors.ConfigError("sample_async() needs at least one task, got none.")
        self._ensure_vec(len(tasks))
        request = self._request(tasks, num_steps, fast_lr, gamma, gae_lambda, torch.device(device))
        self._stop.clear()
        # daemon=True: a script that exits without close() must not wait on this thread; the
        # workers are still ended by VecSampler's finalizer.
        self._thread = threading.Thread(
            target=self._run, args=(request,), name="vecsample-maml-sampler", daemon=True
        )
        self._waiting = True
        self._thread.start()
        return request.train, request.valid

    def sample_wait(
        self, episodes_futures: Futures
    ) -> tuple[list[list[BatchEpisodes]], list[BatchEpisodes]]:
        """Waits for every future of ``sample_async``; returns (train, valid) episodes."""
        if not self._waiting:
            raise errors.PendingCallError(
                "sample_wait() called without a pending sample_async(); call sample_async first."
            )
        train_futures, valid_futures = episodes_futures

        async def gather() -> tuple[list[list[BatchEpisodes]], list[BatchEpisodes]]:
            futures = [*(f for step in train_futures for f in step), *valid_futures]
            # Retrieve every outcome, so no failed future is left unretrieved (asyncio logs it).
            done = await asyncio.gather(*futures, return_exceptions=True)
            failures = [r for r in done if isinstance(r, BaseException)]
            if failures:
                raise failures[0]
            train = [[f.result() for f in step] for step in train_futures]
            return train, [f.result() for f in valid_futures]

        try:
            return self._loop.run_until_complete(gather())
        finally:
            self._join()

    def sample(
        self, tasks: Sequence[Task], **kwargs: Any
    ) -> tuple[list[list[BatchEpisodes]], list[BatchEpisodes]]:
        """``sample_wait(sample_async(tasks, **kwargs))``."""
        return self.sample_wait(self.sample_async(tasks, **kwargs))

    def worker_pids(self) -> list[int]:
        """The worker processes' ids, in worker order (those of the inner ``VecSampler``).

        Empty before the first ``sample_async`` and after ``close()``; new ids once the workers
        are rebuilt (another number of tasks, or after a failure).
        """
        return [] if self._vec is None else self._vec.worker_pids()

    def stats(self) -> dict[str, float]:
        """The workers' ``VecSampler.stats()`` (env step time, sends, waits) since they started.

        Empty before the first ``sample_async`` and after ``close()``; the counters restart when
        the workers are rebuilt (another number of tasks, or after a failure).
        """
        return {} if self._vec is None else self._vec.stats()

    def close(self) -> None:
        """Stops a sample under way, ends the workers. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self._stop.set()
        self._join()
        if self._vec is not None:
            self._vec.close()
            self._vec = None

    def __enter__(self) -> MultiTaskSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- setup ------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed:
            raise errors.ClosedError("This MultiTaskSampler is closed; create a new one.")

    def _ensure_vec(self, num_tasks: int) -> None:
        """(Re)builds the VecSampler for ``num_tasks * batch_size`` envs, padded to the workers."""
        num_envs = num_tasks * self.batch_size
        workers = min(self.num_workers, num_envs)
        padded = math.ceil(num_envs / workers) * workers
        if self._vec is not None and self._vec.num_envs == padded:
            return
        if self._vec is not None:
            self._vec.close()
            self._vec = None
        self._vec = _vec_sampler(self, padded, workers)

    def _request(
        self,
        tasks: list[Task],
        num_steps: int,
        fast_lr: float,
        gamma: float,
        gae_lambda: float,
        device: torch.device,
    ) -> _Request:
        return _Request(
            tasks=tasks,
            num_steps=check_int(num_steps, "num_steps", minimum=0),
            fast_lr=fast_lr,
            gamma=gamma,
            gae_lambda=gae_lambda,
            device=device,
            params=_snapshot(self.policy, device),
            train=[[self._loop.create_future() for _ in tasks] for _ in range(num_steps)],
            valid=[self._loop.create_future() for _ in tasks],
            generators=_generators(self._seeds, 0 if self._vec is None else
                                   self._vec.num_slots, device),
        )

    # --- the sampling thread ----------------------------------------------------------------

    def _run(self, request: _Request) -> None:
        # One intra-op thread for this thread's forwards: they are tiny (a task's envs), and
        # OpenMP's parallel regions stall for milliseconds when the workers hold the cores
        # (measured: a 10x20 @ 20x32 linear took 1 ms instead of 4 us). With the OpenMP backend
        # of the PyPI wheels the setting is per thread, so the caller's threads keep theirs.
        torch.set_num_threads(1)
        try:
            self._run_rounds(request)
        except BaseException as exc:  # every failure reaches the futures, never a hang
            request.fail(self._loop, exc)
            if self._vec is not None:
                # A broken sampler is rebuilt by the next sample_async. A short timeout: a hung
                # worker will not answer the close command either, it is terminated.
                self._vec.close(timeout=1.0)
                self._vec = None

    def _run_rounds(self, request: _Request) -> None:
        vec = self._vec
        if vec is None:
            raise errors.ClosedError("The workers were closed before sampling started.")
        num_real = len(request.tasks) * self.batch_size
        spare = [request.tasks[0]] * (vec.num_envs - num_real)
        vec.reset_task([t for t in request.tasks for _ in range(self.batch_size)] + spare)
        params: list[Params] = [request.params] * len(request.tasks)
        for step in range(request.num_steps + 1):
            rollout = _Rollout(self, vec, request, params)
            batches = rollout.run()
            for k, episodes in enumerate(batches):
                self.baseline.fit(episodes)
                episodes.compute_advantages(self.baseline, request.gae_lambda, normalize=True)
                if step < request.num_steps:
                    params[k] = _adapt(self.policy, episodes, params[k], request.fast_lr)
                request.settle(self._loop, step, k, episodes)

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._waiting = False


class _Rollout:
    """One round: every env plays one episode; per-task BatchEpisodes come out.

    Each worker is sent again as soon as its reply is read (partial batches: every worker done
    at the first arrival, read as one result and sent again in one call), so the inference for
    one worker's envs overlaps the other workers' env steps; with ``pipeline`` the halves of a
    process's block overlap too.
    """

    def __init__(
        self,
        sampler: MultiTaskSampler,
        vec: VecSampler,
        request: _Request,
        params: list[Params],
    ) -> None:
        self.sampler = sampler
        self.vec = vec
        self.request = request
        self.params = params
        self.batch_size = sampler.batch_size
        self.num_real = len(request.tasks) * self.batch_size
        self.steps = EpisodeSteps(self.num_real)  # every env's episode, cut per task at the end
        space = vec.single_action_space
        self.actions = np.zeros((vec.num_envs, *(space.shape or ())), dtype=space.dtype)
        self.active = np.zeros(vec.num_envs, dtype=bool)
        self.active[: self.num_real] = True
        self.obs = np.zeros(0, dtype=np.float32)
        self.sent_at: dict[int, float] = {}  # pending workers and when each was sent
        self.ends = {key: np.full(self.num_real, np.nan) for key in sampler.episode_info_keys}

    def run(self) -> list[BatchEpisodes]:
        obs, _ = self.vec.reset()
        self.obs = np.array(obs, dtype=np.float32)  # a copy: the shm view changes on every step
        self._send(range(self.vec.num_slots))
        while self.sent_at:
            self._send(self._record(self._receive()))
        size, request = self.batch_size, self.request
        batches = [self.steps.batch(k * size, (k + 1) * size, request.gamma, request.device)
                   for k in range(len(request.tasks))]
        for key, values in self.ends.items():
            for k, episodes in enumerate(batches):
                episodes.log(key, values[k * size : (k + 1) * size])
        return batches

    def _receive(self) -> list[StepResult]:
        """A partial batch (one result, or the per-worker results an expired slice carried);
        polls in slices of POLL_S so that close() is noticed."""
        while True:
            if self.sampler._stop.is_set():
                raise errors.ClosedError("The MultiTaskSampler was closed while sampling.")
            slice_s = max(0.0, min(POLL_S, self._left()))
            try:
                return [self.vec.recv_batch(0.0, deadline=slice_s)]
            except errors.DeadlineExceededError as exc:
                if exc.results:
                    return list(exc.results)
                if self._left() <= 0:
                    raise errors.DeadlineExceededError(
                        hung_workers=exc.hung_workers, deadline=self.sampler.deadline,
                        fix="no worker replied and they look hung. Raise the deadline for "
                        "slow envs, or find what blocks the env",
                    ) from exc

    def _left(self) -> float:
        """Seconds until the longest-waiting pending worker passes the deadline."""
        if self.sampler.deadline is None:
            return math.inf
        return min(self.sent_at.values()) + self.sampler.deadline - time.monotonic()

    def _send(self, workers: Iterable[int]) -> None:
        """Acts for each of ``workers`` with an env still in its episode and sends them all
        again in one call (``step_send_many``: their rows one block after another)."""
        going, blocks = [], []
        for w in workers:
            ids = self.vec.worker_env_ids(w)
            if not self.active[ids.start : ids.stop].any():
                continue
            self._act(ids, None if self.request.generators is None
                      else self.request.generators[w])
            going.append(w)
            blocks.append(np.arange(ids.start, ids.stop))
        if not going:
            return
        self.vec.step_send_many(np.array(going), self.actions[np.concatenate(blocks)])
        now = time.monotonic()
        for w in going:
            self.sent_at[w] = now

    def _act(self, ids: range, generator: torch.Generator | None) -> None:
        """Actions for the active envs of ``ids``: one forward per shared parameter set (the
        rows of its tasks, in task order; the sets in the order of their first task)."""
        active = self._active_rows(ids)
        per_task = np.split(active, np.flatnonzero(np.diff(active // self.batch_size)) + 1)
        sets: dict[int, tuple[Params, list[NDArray[np.int64]]]] = {}
        for task_rows in per_task:
            params = self.params[int(task_rows[0]) // self.batch_size]
            sets.setdefault(id(params), (params, []))[1].append(task_rows)
        groups = [(params, chunks[0] if len(chunks) == 1 else np.concatenate(chunks))
                  for params, chunks in sets.values()]
        policy, device = self.sampler.policy, self.request.device
        with torch.no_grad():
            if len(groups) > 1 and _stacks(policy):
                self._act_stacked(cast(NormalMLPPolicy, policy), groups, generator)
                return
            for params, rows in groups:
                pi = policy(torch.as_tensor(self.obs[rows], device=device), params=params)
                self.actions[rows] = _sample(pi, generator).cpu().numpy()

    def _act_stacked(self, policy: NormalMLPPolicy, groups: list[tuple[Params, NDArray[np.int64]]],
                     generator: torch.Generator | None) -> None:
        """``_act``'s forwards for a ``NormalMLPPolicy``: the groups of as many rows in one
        stacked forward (``policy.stacked``), the noise drawn per group in ``_act``'s order."""
        by_size: dict[int, list[int]] = {}
        for g, (_, rows) in enumerate(groups):
            by_size.setdefault(rows.size, []).append(g)
        gaussians: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for members in by_size.values():
            x = np.stack([self.obs[groups[g][1]] for g in members])
            loc, scale = policy.stacked(torch.as_tensor(x, device=self.request.device),
                                        [groups[g][0] for g in members])
            gaussians.update({g: (loc[k], scale[k]) for k, g in enumerate(members)})
        for g, (_, rows) in enumerate(groups):
            self.actions[rows] = _draw(*gaussians[g], generator).cpu().numpy()

    def _active_rows(self, ids: range) -> NDArray[np.int64]:
        """The envs of ``ids`` still in their episode (never a spare env), in order."""
        return ids.start + np.flatnonzero(self.active[ids.start : ids.stop])

    def _record(self, results: list[StepResult]) -> list[int]:
        """Appends the step of every env that was active, retires those that ended; the
        workers received, idle again."""
        received: list[int] = []
        for result in results:
            workers = (result.workers.tolist() if result.workers is not None
                       else [result.worker] if result.worker is not None else [])
            for w in workers:
                del self.sent_at[w]
            received += workers
            ids = np.asarray(result.env_ids)
            active = self.active[ids]
            if active.any():
                rows = ids[active]
                self.steps.append(rows, self.obs[rows], self.actions[rows],
                                  np.asarray(result.rewards)[active])
            for g, info in result.infos.items():  # only envs whose episode ended have one
                for key, values in self.ends.items():
                    if g < self.num_real and self.active[g] and key in info:
                        values[g] = info[key]
            self.active[ids] &= ~(np.asarray(result.terminated) | np.asarray(result.truncated))
            self.obs[ids] = result.obs
        return received


def _vec_sampler(sampler: MultiTaskSampler, num_envs: int, num_workers: int) -> VecSampler:
    """The VecSampler of ``num_envs`` copies of the sampler's env: one batch-native vector env
    per worker (``batch_id``), else one gymnasium env per row."""
    env_fns: list[Any] | HostedVector = [sampler._factory] * num_envs
    if sampler.batch_id is not None:
        # Built in the sampler's DISABLED mode (fixed above): the sampler gives it its mode.
        env_fns = HostedVector(sampler.batch_id, env_kwargs=sampler.env_kwargs)
    return VecSampler(
        env_fns,
        num_envs=num_envs,
        observation_space=sampler.env.observation_space,
        action_space=sampler.env.action_space,
        options=sampler.options.replace(num_workers=num_workers, seed=sampler._seeds.draw()),
    )


def _batch_form(env_name: str, env_kwargs: dict[str, Any]) -> str | None:
    """``env_name``'s batch-native id, if it has one that takes every keyword of
    ``env_kwargs`` (the batch task envs refuse the v5 reward keywords that their single envs
    take and ignore); else None."""
    return batch_id_for(env_name, env_kwargs)


#: The options this sampler sets itself: (value, why).
_FIXED: dict[str, tuple[Any, str]] = {
    # One episode per env and round: an ended env stays frozen until the next reset.
    "autoreset_mode": (AutoresetMode.DISABLED, "one episode per env and round"),
    # Gaussian samples are unbounded; the task envs clip them, as pytorch-maml-rl's do.
    "check_actions": (False, "the task envs clip Gaussian actions"),
    "record": (None, "its VecSampler is rebuilt when the number of tasks changes"),
    "replay": (None, "its VecSampler is rebuilt when the number of tasks changes"),
}


#: The options this sampler chooses where you leave them at Options' default.
_CHOSEN: dict[str, Any] = {
    # No spin: a worker steps its block for milliseconds while this process infers and records
    # for the other; a spin (200 us per wait, on both sides) only takes a core from them.
    "spin_us": 0.0,
}


def _sampler_options(options: Options | None, **named: Any) -> Options:
    """``options`` with the named arguments that differ from their defaults (Options' own)."""
    given = {name: value for name, value in named.items()
             if not _is_default(value, getattr(DEFAULTS, name))}
    return adapted(options, given, where="MultiTaskSampler", defaults=_CHOSEN, fixed=_FIXED)


def _is_default(value: Any, default: Any) -> bool:
    try:
        return type(value) is type(default) and bool(value == default)
    except Exception:  # an odd value compares strangely: it is checked as given
        return False


def _generators(
    seeds: SeedStream, count: int, device: torch.device
) -> list[torch.Generator] | None:
    """``count`` action-noise generators (one per worker) from the next seeds; None unseeded."""
    drawn = [seeds.draw() for _ in range(count)]
    made = [torch.Generator(device=device).manual_seed(s) for s in drawn if s is not None]
    return made or None


def _adapt(policy: MetaPolicy, episodes: BatchEpisodes, params: Params, fast_lr: float) -> Params:
    """The first-order inner update: one REINFORCE gradient step from ``params``."""
    loss = reinforce_loss(policy, episodes, params=params)
    return policy.update_params(loss, params=params, step_size=fast_lr, first_order=True)


def _task_env(
    env_name: str, env_kwargs: dict[str, Any], env: gym.Env[Any, Any] | None, seed: int | None
) -> gym.Env[Any, Any]:
    """The env that samples the tasks (``env``, or one made here): checked, seeded, closed."""
    env = env if env is not None else gym.make(env_name, **env_kwargs)
    if not isinstance(env.unwrapped, TaskEnv):
        raise TaskEnvError(
            f"{env_name} is not a meta-RL task env: expected sample_tasks(n) and "
            f"reset_task(task) on env.unwrapped, got {type(env.unwrapped).__name__}. "
            "See vecsample.envs for the registered task envs."
        )
    if seed is not None:
        env.reset(seed=seed)  # seeds sample_tasks
    env.close()
    return env


__all__ = ["FittableBaseline", "MetaPolicy", "MultiTaskSampler"]
