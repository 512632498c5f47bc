"""``RaySampler``: vecsample samplers on every node of a Ray cluster (docs/distributed.md).

The driver side. Each actor (actor.py) owns a local ``VecSampler`` and a policy copy and answers
each request with a rollout chunk; this module starts the actors, keeps each topped up with
requests, and hands their chunks back.

* Weights: ``set_weights(w)`` puts ``w`` in the object store once and bumps the version; the ref
  travels with every later request and each chunk says which version it was sampled under.
* Receiving: every actor is topped up to ``in_flight`` requests at each ``recv`` and
  ``set_weights`` (double buffering with 2: it works on one chunk while the trainer
  updates). ``recv()`` waits for one chunk from every live actor
  (full); ``recv(min_chunks, max_wait=s)`` returns whichever chunks are ready (partial, through
  ``ray.wait``). Refs not returned stay pending and come back from a later ``recv``: nothing is
  dropped or returned twice.
* Faults: an actor that dies loses only its in-flight chunks (counted in ``stats()``); Ray
  restarts it (``actor_restarts``) and the next request carries the weights again; a chunk
  whose request raised (an env's or the policy's error) is counted lost and raised, with the
  chunks taken beside it. fleet.py keeps these books. Crashes of env processes inside an actor
  stay the local VecSampler's job.

This package is the only one that imports ``ray``; ``import vecsample`` never does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import ray
from ray.exceptions import RayActorError

from vecsample import errors
from vecsample.factories import env_factories
from vecsample.options import (
    DEFAULT_DEADLINE,
    Options,
    adapted,
    check_int,
    check_seconds,
    check_seed,
)
from vecsample.ray.actor import ActorInfo, ActorSpec, Chunk, Policy, WeightsSpec, remote_actor_class
from vecsample.ray.errors import RayShutdownError, WeightsError
from vecsample.ray.fleet import Fleet, LostChunk, Slot
from vecsample.seeding import child_seeds
from vecsample.types import AutoresetMode, EnvFn

__all__ = ["RaySampler"]

#: How often Ray may rebuild each dead actor, by default (``RaySampler(actor_restarts=)``).
ACTOR_RESTARTS = 3


# --- the driver side ---------------------------------------------------------------------------


def _fixed(workers_per_actor: int) -> dict[str, tuple[Any, str]]:
    """The actors' VecSampler options this class sets itself: (value, why)."""
    return {
        "num_workers": (workers_per_actor, "it is workers_per_actor"),
        "autoreset_mode": (AutoresetMode.SAME_STEP, "a Chunk's rows are SameStep transitions"),
        "seed": (None, "each actor seeds its envs from its own child of RaySampler's seed"),
    }


def _start_actor(spec: ActorSpec, actor_restarts: int) -> Any:
    """Asks Ray for the actor of ``spec`` (its handle); it builds itself in the background."""
    return remote_actor_class().options(
        # num_cpus = the env processes it spawns: they are the load Ray must not oversubscribe
        # (the actor's own process, running the policy, is not counted).
        num_cpus=spec.options.num_workers,
        # SPREAD (best effort): one actor per node when there are as many actors as nodes.
        scheduling_strategy="SPREAD",
        # Ray rebuilds a dead actor (same spec) up to actor_restarts times...
        max_restarts=actor_restarts,
        # ...but never re-runs a chunk that was in flight: it is dropped and counted instead.
        max_task_retries=0,
    ).remote(spec)


class RaySampler:
    """Spreads ``num_actors`` local VecSamplers over a Ray cluster and returns their chunks.

    Each actor owns a ``VecSampler`` (autoreset SAME_STEP) and a policy copy, and answers each
    request with a ``Chunk`` of ``chunk_length`` steps of all its envs. The constructor returns
    once every actor has built its envs; nothing is sampled until the first ``recv`` or
    ``set_weights``.

    Args:
        env_fns: The envs of *one* actor: picklable factories, or a gymnasium id together with
            ``num_envs``. Every actor builds the same list, split among its
            ``workers_per_actor`` processes, so the cluster runs ``num_actors`` times as many.
            Observation and action spaces must be single arrays (Box, Discrete, MultiDiscrete,
            MultiBinary).
        policy_fn: Builds the actor's policy (see ``Policy`` and ``TorchPolicy``). It is
            pickled to the actors and called there, on the actor's CPU, once per actor life.
        num_envs: With an env id, how many envs per actor; with factories, their count (a check).
        env_kwargs: With an env id, keyword arguments of ``gymnasium.make``.
        num_actors: How many actors; default one per alive node of the cluster.
        workers_per_actor: Env processes per actor; must divide the envs of an actor (unless
            ``uneven_split``; checked before Ray starts). Each actor reserves that many CPUs
            from Ray (``num_cpus``), so a node with fewer free CPUs never gets it: the actors
            then never start and the constructor raises after ``actor_deadline``.
        chunk_length: Steps of every env in one chunk.
        weights: Initial weights for the actors' policies, sent as with ``set_weights``
            (version 1); None keeps the weights ``policy_fn`` built (version 0).
        seed: Actor ``i`` seeds its envs from child ``i`` of ``SeedSequence(seed)``, so a run
            repeats. An actor that Ray restarts draws fresh seeds from the OS instead: replaying
            its first life's seeds would sample the same episodes again. None: OS seeds.
        in_flight: Requests kept queued per actor (2: the actor samples the next chunk while
            the trainer works on this one). Chunks already queued finish under the weights they
            were sent with; each chunk's ``version`` says which.
        actor_restarts: How often **Ray** may rebuild each dead **actor** (Ray's actor option
            ``max_restarts``). The chunks in flight on a dead actor are lost and counted in
            ``stats()``, never re-run. A restart in progress is not a death: the actor gets no
            request until Ray says it is back, however long that takes; it is retired only
            when Ray says it cannot come back (``actors_alive`` drops). Not
            ``Options.max_restarts``, which bounds how often each actor's VecSampler respawns
            one of its env processes (with ``restart=True``): set that one in ``options``.
        actor_deadline: How long the actors may keep the driver waiting, in seconds: to start
            (all built), or for a full ``recv`` (restarting actors included); None waits
            forever. Not ``Options.deadline`` (each actor's VecSampler's bound on its env
            processes) nor ``Options.startup_deadline`` (each env process's build).
        options: Each actor's ``VecSampler``'s ``vecsample.Options`` (``context``, ``infos``,
            ``restart``, ...). This class sets ``num_workers`` (``workers_per_actor``),
            ``autoreset_mode`` ('SameStep') and ``seed`` (per actor, from ``seed``): setting
            them here is a ConfigError.
        **overrides: ``Options`` fields by name, applied on top of ``options`` (as
            ``VecSampler(env_fns, options=..., **overrides)`` takes them); an unknown name is a
            ConfigError naming the closest field. ``max_restarts`` and ``deadline`` are those
            fields too, each actor's VecSampler's: not ``actor_restarts`` and
            ``actor_deadline``, which are this class's own.

    Raises:
        ConfigError: An argument or option has the wrong type or range (a count below 1, a
            negative ``actor_restarts`` or ``actor_deadline``, an env id without ``num_envs``,
            an unknown option, ...), before Ray is started.
        DeadlineExceededError: The actors were not all built within ``actor_deadline`` (not
            enough free CPUs on the cluster, or slow env builds). Every actor started is killed.
        ray.exceptions.RayActorError: An actor failed to build (an env factory or
            ``policy_fn`` raised, or a space is not a single array); the message carries the
            actor's traceback.

    Ray is initialised if it is not (``ray.init()``: it joins a cluster started on this
    machine, else starts a local one); on a cluster call ``ray.init(address="auto")`` first.
    Chunks from Ray are read-only numpy arrays: copy one before writing to it.

    Example:
        >>> import ray
        >>> from vecsample.ray import RaySampler
        >>> from vecsample.testing import FixedActionPolicy  # action = its weights (0 at first)
        >>> _ = ray.init(num_cpus=2, include_dashboard=False)
        >>> with RaySampler("CartPole-v1", FixedActionPolicy, num_envs=2, num_actors=1,
        ...                 chunk_length=4, seed=0) as sampler:
        ...     chunks = sampler.recv()  # one chunk from every actor
        ...     version = sampler.set_weights(1)  # requests from now on carry version 1
        >>> len(chunks), chunks[0].obs.shape, chunks[0].rewards.shape
        (1, (4, 2, 4), (4, 2))
        >>> chunks[0].version, version, chunks[0].env_steps
        (0, 1, 8)
        >>> ray.shutdown()
    """

    def __init__(
        self,
        env_fns: Sequence[EnvFn] | str,
        policy_fn: Callable[[], Policy],
        *,
        num_envs: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        num_actors: int | None = None,
        workers_per_actor: int = 1,
        chunk_length: int = 128,
        weights: Any = None,
        seed: int | None = None,
        in_flight: int = 2,
        actor_restarts: int = ACTOR_RESTARTS,
        actor_deadline: float | None = DEFAULT_DEADLINE,
        options: Options | None = None,
        **overrides: Any,
    ) -> None:
        self._closed = True  # until the actors are up
        # Everything is checked before Ray is started (a ConfigError costs no cluster).
        fns = env_factories(env_fns, num_envs, env_kwargs)
        self.chunk_length = check_int(chunk_length, "chunk_length")
        self.in_flight = check_int(in_flight, "in_flight")
        self.actor_restarts = check_int(actor_restarts, "actor_restarts", minimum=0)
        self.workers_per_actor = check_int(workers_per_actor, "workers_per_actor")
        self.actor_deadline = check_seconds(actor_deadline, "actor_deadline")
        self.options = adapted(options, overrides, where="RaySampler",
                               fixed=_fixed(self.workers_per_actor))
        _check_split(len(fns), self.workers_per_actor, self.options.uneven_split)
        num_actors = None if num_actors is None else check_int(num_actors, "num_actors")
        self._start(fns, policy_fn, num_actors, None if seed is None else check_seed(seed))
        if weights is not None:
            self.set_weights(weights)

    def _start(self, fns: list[EnvFn], policy_fn: Callable[[], Policy], num_actors: int | None,
               seed: int | None) -> None:
        """Starts Ray if it is not, then the actors; returns once every actor is built."""
        if not ray.is_initialized():
            ray.init()  # joins a cluster started on this machine (`ray start`), else a local one
        self._ray = _ray_instance()  # the Ray the actors live in: gone after ray.shutdown()
        self.num_actors, self.envs_per_actor = _num_actors(num_actors), len(fns)
        self._version = 0
        self._weights_ref: Any = None
        self._weights_spec: WeightsSpec | None = None
        specs = [ActorSpec(i, fns, policy_fn, actor_seed, self.options)
                 for i, actor_seed in enumerate(_actor_seeds(seed, self.num_actors))]
        self._fleet = Fleet([_start_actor(spec, self.actor_restarts) for spec in specs],
                            self.actor_restarts)
        self._closed = False
        self._await_ready()

    def _await_ready(self) -> None:
        slots = self._fleet.slots
        refs = [slot.handle.ready.remote() for slot in slots]
        try:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.actor_deadline)
            if len(ready) < len(refs):
                raise errors.DeadlineExceededError(
                    hung_workers=[i for i, r in enumerate(refs) if r not in ready],
                    deadline=self.actor_deadline, who="Ray actors (starting)",
                    fix=f"check `ray status` for free CPUs (each actor asks for "
                    f"num_cpus={self.workers_per_actor})",
                )
            infos: list[ActorInfo] = ray.get(refs)
            for slot, info in zip(slots, infos, strict=True):
                slot.node_id = info.node_id
            self._weights_spec = infos[0].weights_spec  # every actor runs the same policy_fn
        except BaseException:
            self.close()
            raise

    # --- weights -------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """The current weights version: 0 before any ``set_weights``, then 1, 2, ..."""
        return self._version

    def set_weights(self, weights: Any) -> int:
        """Puts ``weights`` in the object store once; requests sent from now on carry them.

        Chunks already in flight finish under their old version (their ``version`` says so).
        Actors are topped up to ``in_flight`` requests here and at the start of ``recv``, not
        when a chunk is received: with ``in_flight=1``, ``recv``, update, ``set_weights``
        samples strictly on-policy. Returns the new version. Weights that do not fit the
        policy's ``weights_spec()`` (``TorchPolicy`` has one) raise ``WeightsError`` here, and
        the version does not change.
        """
        self._check_open()
        _check_weights(weights, self._weights_spec)
        self._weights_ref = ray.put(weights)
        self._version += 1
        self._settle_probes()
        self._fill()  # actors with a free slot start on the new weights now
        return self._version

    # --- receiving -----------------------------------------------------------------------------

    def recv(self, min_chunks: int | None = None, *,
             max_wait: float | None = None) -> list[Chunk]:
        """Full (no arguments): one chunk from every actor that is up, waiting (within
        ``actor_deadline``) for a restarting one when none is. Partial (either argument): waits
        for ``min_chunks`` chunks (default 1), for at most ``max_wait`` seconds (None: no cap),
        then returns every chunk ready by then, possibly none: the cap running out is no error.
        Chunks not returned stay pending.

        A request that raised (an env's or the policy's error, from the actor) is counted lost
        and its error is raised, carrying the chunks taken in this call (``results``) and the
        actor (``actor_id``). After a KeyboardInterrupt, the chunks this call had taken come
        back from the next one, as VecSampler's results do.
        """
        self._check_open()
        start = time.perf_counter()
        try:
            self._settle_probes()
            self._fill()
            if max_wait is None and min_chunks is None:
                self._recv_full()
            else:
                self._recv_partial(1 if min_chunks is None else min_chunks, max_wait)
        finally:
            self._fleet.stats["wait_s"] += time.perf_counter() - start
        return self._fleet.hand_over()

    def _recv_full(self) -> None:
        end = _end(self.actor_deadline)
        while True:
            self._fill()  # an actor back from a restart gets its requests here
            up = self._fleet.up()
            if not up:  # every live actor is restarting: wait for one to be back
                if not self._await_restart(end):
                    raise self._late(self._fleet.restarting(), "restarting")
                continue
            firsts = [slot.pending[0][0] for slot in up]
            ready, _ = ray.wait(firsts, num_returns=len(firsts), timeout=_left(end))
            taken = self._fleet.take(ready)
            if len(ready) < len(firsts):
                raise self._late([s for s in up if s.pending and s.pending[0][0] in firsts], "")
            if taken:  # else every actor waited for died meanwhile: wait for their restarts
                return

    def _recv_partial(self, min_chunks: int, max_wait: float | None) -> None:
        min_chunks, max_wait = check_int(min_chunks, "min_chunks"), check_seconds(max_wait,
                                                                                 "max_wait")
        end = _end(max_wait)
        if not self._fleet.up() and self._await_restart(end):  # every live actor is restarting
            self._fill()
        refs = [ref for slot in self._fleet.live() for ref, _ in slot.pending]
        if refs:
            ray.wait(refs, num_returns=min(min_chunks, len(refs)), timeout=_left(end))
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            self._fleet.take(ready)

    def _await_restart(self, end: float | None) -> bool:
        """Waits until a restarting actor's probe answers (or ``end``), and reads the answers;
        False if none answered in time."""
        probes = [slot.probe for slot in self._fleet.restarting()]
        ready, _ = ray.wait(probes, num_returns=1, timeout=_left(end))
        self._settle_probes()
        return bool(ready)

    def _settle_probes(self) -> None:
        """Reads every probe answered by now (actors back, still restarting, or gone)."""
        probes = [slot.probe for slot in self._fleet.restarting()]
        if probes:
            ready, _ = ray.wait(probes, num_returns=len(probes), timeout=0)
            self._fleet.settle(ready)

    def _late(self, slots: list[Slot], restarting: str) -> errors.DeadlineExceededError:
        """The error of a full recv past ``actor_deadline``; the chunks taken ride on it."""
        if restarting:
            fix = (f"Ray is restarting them and no node took them back in time (each asks for "
                   f"num_cpus={self.workers_per_actor}); add nodes or free CPUs, or raise "
                   f"`actor_deadline`. They stay restarting")
        else:
            fix = "their requests stay pending. Raise `actor_deadline` or shorten `chunk_length`"
        return errors.DeadlineExceededError(
            hung_workers=[slot.actor_id for slot in slots], deadline=self.actor_deadline,
            who=f"Ray actors{' (restarting)' if restarting else ''}", fix=fix,
            results=self._fleet.release())

    def _fill(self) -> None:
        """Tops every actor that is up to ``in_flight`` requests, carrying the current weights."""
        self._fleet.fill(self.in_flight, lambda slot: slot.handle.sample.remote(
            self.chunk_length, self._version, [self._weights_ref]))

    # --- stats and lifetime --------------------------------------------------------------------

    def actor_nodes(self) -> list[str]:
        """The Ray node id of each actor, by actor id: where it runs (while it restarts: where
        it last ran). A restart on another node shows here with its first chunk or once Ray
        says it is back."""
        return [slot.node_id for slot in self._fleet.slots]

    def actor(self, actor_id: int) -> Any:
        """The Ray handle of actor ``actor_id`` (to inspect it, or to kill it in a test)."""
        return self._fleet.slots[actor_id].handle

    def pending(self) -> int:
        """Chunks requested but not yet returned by ``recv``."""
        return self._fleet.pending()

    @property
    def losses(self) -> list[LostChunk]:
        """The chunks lost (the last 1000), oldest first: each one's actor and why it was
        lost (the actor died, its request raised, the sampler was closed, ...)."""
        return list(self._fleet.losses)

    def stats(self) -> dict[str, float]:
        """Totals since construction: chunks requested, chunks and env steps received, chunks
        lost (``losses`` says why), actor deaths, seconds waited in ``recv``, actors alive (not
        gone for good) and restarting, weights version.
        ``requests == chunks + chunks_lost + pending()`` always holds."""
        out = dict(self._fleet.stats)
        out["actors_alive"] = float(len(self._fleet.live()))
        out["actors_restarting"] = float(len(self._fleet.restarting()))
        out["version"] = float(self._version)
        return out

    def _check_open(self) -> None:
        """Refuses a call on a sampler that cannot answer it, before any Ray call (one would
        start a new Ray instance behind the user's back)."""
        if self._closed:
            raise errors.ClosedError(what="RaySampler")
        if not _same_ray(self._ray):
            raise RayShutdownError()
        lost = self._fleet.lost_error()
        if lost is not None:
            raise lost

    @property
    def closed(self) -> bool:
        return self._closed

    # 10 s, not VecSampler's 5: this bounds the wait for every actor's close, which runs after
    # the actor's chunks in flight (one task at a time) and then takes up to its VecSampler's
    # own close() (5 s + 0.5 s). docs/semantics.md, "What each timeout and deadline bounds".
    def close(self, timeout: float = 10.0) -> None:
        """Asks each actor to close its VecSampler, waits up to ``timeout`` seconds for them all,
        then kills every actor for good. Idempotent; after ``ray.shutdown()``, which took the
        actors with it, it only marks the sampler closed."""
        fleet: Fleet | None = getattr(self, "_fleet", None)
        self._closed = True
        if fleet is None:
            return
        # Not ray.cancel: cancelling queued actor tasks stalled the close() queued behind them
        # for the whole timeout (Ray 2.60); the chunks in flight just finish unread.
        up = fleet.up()
        fleet.close()
        if not _same_ray(getattr(self, "_ray", None)):
            return
        closing = [slot.handle.close.remote() for slot in up]
        if closing:
            with contextlib.suppress(RayActorError):
                ray.wait(closing, num_returns=len(closing), timeout=timeout)
        for slot in fleet.slots:
            ray.kill(slot.handle, no_restart=True)

    def __enter__(self) -> RaySampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (f"RaySampler({self.num_actors} actors x {self.envs_per_actor} envs, "
                f"chunk_length={self.chunk_length}, version={self._version}, {state})")


def _ray_instance() -> str:
    """Which Ray instance this driver is connected to: its own worker id, new at each init."""
    return str(ray.get_runtime_context().get_worker_id())


def _same_ray(instance: str | None) -> bool:
    """Whether Ray is still the instance ``instance`` (asked without starting one)."""
    return instance is not None and ray.is_initialized() and _ray_instance() == instance


def _end(seconds: float | None) -> float | None:
    return None if seconds is None else time.monotonic() + seconds


def _left(end: float | None) -> float | None:
    return None if end is None else max(0.0, end - time.monotonic())


def _check_weights(weights: Any, spec: WeightsSpec | None) -> None:
    """Refuses ``weights`` that do not fit ``spec`` (the policy's ``weights_spec()``)."""
    if spec is None:
        return
    fix = "build them with numpy_weights(module) from the module that policy_fn's policy runs"
    if not isinstance(weights, Mapping):
        raise WeightsError(name="weights", expected=f"a mapping of {len(spec)} arrays by name",
                           got=type(weights).__name__, fix=fix)
    missing, unknown = sorted(set(spec) - set(weights)), sorted(set(weights) - set(spec))
    if missing or unknown:
        names = ", ".join(f"{what} {found}" for what, found in
                          (("missing", missing), ("unknown", unknown)) if found)
        raise WeightsError(f"weights must have the policy's names {sorted(spec)}, got {names}; "
                           f"{fix}.")
    for name, (shape, dtype) in spec.items():
        value = weights[name]
        got = (tuple(np.shape(value)), str(getattr(value, "dtype", "")).removeprefix("torch."))
        if got != (shape, dtype):
            raise WeightsError(f"weights[{name!r}] must have shape {shape} dtype {dtype}, got "
                               f"shape {got[0]} dtype {got[1] or type(value).__name__}; {fix}.")


def _num_actors(num_actors: int | None) -> int:
    """Default: one actor per alive node of the cluster (``num_actors`` is checked already)."""
    if num_actors is None:
        nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
        return max(1, len([node for node in nodes if node.get("Alive")]))
    return num_actors


def _check_split(num_envs: int, workers: int, uneven_split: bool) -> None:
    """``workers_per_actor`` against an actor's envs, as its VecSampler will check it, but
    before Ray starts: each actor asks Ray for that many CPUs, so a split that cannot work
    would wait out ``actor_deadline`` for them first and then blame the CPUs."""
    if workers > num_envs:
        raise errors.ConfigError(name="workers_per_actor",
                                 expected=f"at most the envs of an actor ({num_envs})",
                                 got=workers, fix="an env process needs at least one env")
    if num_envs % workers and not uneven_split:
        divisors = [d for d in range(1, num_envs + 1) if num_envs % d == 0]
        raise errors.ConfigError(
            f"the {num_envs} envs of an actor are not divisible by workers_per_actor={workers}; "
            f"choose workers_per_actor from {divisors}, or pass uneven_split=True.")


def _actor_seeds(seed: int | None, count: int) -> list[int | None]:
    """Actor i gets child i of ``SeedSequence(seed)``; its sampler spawns per-env seeds from it."""
    if seed is None:
        return [None] * count
    return list(child_seeds(seed, count, dtype=np.uint32))
