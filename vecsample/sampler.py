"""``VecSampler``: the core front end over N worker processes and shared memory.

``step_send(worker, actions)`` starts one worker; ``step_recv(timeout)`` returns the workers that
are done: every running worker when ``timeout`` is None (a full batch), or the first one plus
whichever others finish within ``timeout`` seconds of it (a partial batch). A worker that finishes
after a recv returned stays pending and is returned by the next recv, so nothing is lost or
returned twice. Results are zero-copy views into shared memory, valid until that worker is sent
again (``copy=True`` returns copies). See docs/semantics.md.

The jobs are split by module: ``options.py`` checks the options, ``factories.py`` makes the
envs the user gave into factories (or a hosted vector env), ``_parent/layout.py`` derives the
layout from both, ``pool.py`` owns the processes and the command RPC, ``stepping.py`` the step
handshake and each worker's life between steps, ``protocol.py`` the worker state machine,
``restart.py`` the failure policy; this class is the API on top, the synchronous commands to
every env (reset, reset_task, call, get_attr, set_attr) included.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, NoReturn, ParamSpec, TypeVar

import numpy as np

from vecsample import errors, hosted
from vecsample._parent import autoplace, signals
from vecsample._parent.deadline import Deadline
from vecsample._parent.guard import CallGuard
from vecsample._parent.layout import Layout
from vecsample._parent.pool import WorkerPool
from vecsample._parent.replay import NO_LOG, CallLog, open_log
from vecsample._parent.restart import FailurePolicy, RaiseFailures, Restarts
from vecsample._parent.stats import Meter, PhaseSource
from vecsample._parent.stepping import SharingChannel, StepChannel
from vecsample._wire import handshake
from vecsample._wire.handshake import HandshakeState
from vecsample._wire.protocol import Command, WorkerState
from vecsample._wire.shm import STAT_FIELDS, WORKER_FIELDS, SharedBuffers
from vecsample._wire.spaces import Actions, ActionWriter, leaves
from vecsample.factories import Envs
from vecsample.hosted import HostedProbe, HostedVector
from vecsample.options import Options, check_options, check_seconds
from vecsample.results import Infos, StepResult
from vecsample.seeding import EnvSeeds, SeedArg
from vecsample.types import AutoresetMode, EnvFn, Space

__all__ = ["VecSampler"]

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")


def _guarded(method: Callable[Concatenate[VecSampler, P], R],
             ) -> Callable[Concatenate[VecSampler, P], R]:
    """A command (reset, call, ...): claimed for this thread and process (``CallGuard``) for
    its whole run; one that another thread's ``close()`` cut short raises ClosedError. The
    calls of the step API claim inline, without this wrapper's cost."""
    call = method.__name__

    def guarded(self: VecSampler, /, *args: P.args, **kwargs: P.kwargs) -> R:
        guard = self._guard
        restore = guard.claim(call)
        was_open = not self._closed
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            if was_open and self._closed and not isinstance(exc, errors.ClosedError):
                raise _closed_during(call) from exc
            raise
        finally:
            guard.idle = restore

    functools.update_wrapper(guarded, method)  # its name, docstring and signature
    return guarded


def _closed_during(call: str) -> errors.ClosedError:
    """What a call raises when another thread's ``close()`` cut it short (the error it met on
    the way is the cause)."""
    return errors.ClosedError(f"this VecSampler was closed (by another thread's close()) "
                              f"during {call}(); create a new one.")


class VecSampler:
    """N worker processes, each stepping a contiguous block of ``num_envs // num_workers`` envs.

    Args:
        env_fns: one factory per env (each called in a worker), a registered env id (then
            ``num_envs`` is required), or a ``HostedVector``: one batch-native vector env per
            worker for its whole block (``num_envs`` here or in it; docs/semantics.md).
        num_envs: with an env id, how many envs; with factories, optional, must match.
        env_kwargs: keyword arguments for ``gym.make`` with an env id.
        observation_space: skip building an env in the parent to read the space.
        action_space: likewise for the action space.
        options: the sampler's ``Options`` (vecsample/options.py: every option, its default and
            its meaning); None: the defaults.
        **overrides: any ``Options`` field by name (``num_workers=4, seed=0``), applied on top
            of ``options``; an unknown name is a ConfigError naming the closest field.

    Raises:
        ConfigError: an option that cannot work (the message says which and how to fix it).
        UnsupportedSpaceError: a space that cannot live in shared memory.
        EnvFactoryError: a factory that cannot be pickled, or raised while building.

    Threads and processes: a sampler serves one thread at a time. A call from another thread
    while one is inside a call, or has steps pending, raises ``ConcurrentUseError`` naming it
    (a full batch would otherwise return that thread's steps); once that thread has received
    its steps and returned, any thread may go on. ``close()`` works from any thread at any
    time, and the call it cuts short raises ``ClosedError``. A child forked from the process
    that made the sampler gets ``ForkedSamplerError``; a sampler cannot be pickled (pass its
    env factories and ``options`` instead). docs/semantics.md, "Threads and processes".

    Example:
        >>> import numpy as np
        >>> from vecsample import VecSampler
        >>> with VecSampler("CartPole-v1", num_envs=4, num_workers=2, seed=0) as sampler:
        ...     obs, infos = sampler.reset()
        ...     result = sampler.step(np.zeros(4, dtype=np.int64))
        ...     print(obs.shape, result.rewards.tolist())
        (4, 4) [1.0, 1.0, 1.0, 1.0]
    """

    _log: CallLog = NO_LOG  # recording or replaying (replay.py); set up by _start

    def __init__(
        self,
        env_fns: Sequence[EnvFn] | str | HostedVector,
        *,
        num_envs: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        observation_space: Space | None = None,
        action_space: Space | None = None,
        options: Options | None = None,
        **overrides: Any,
    ) -> None:
        self._closed = True  # until the workers are up; close() is then a no-op
        chosen = check_options(options).replace(**overrides)
        layout = Layout.build(Envs.of(env_fns, num_envs, env_kwargs), chosen)
        obs, act, probe = _probe_spaces(layout, observation_space, action_space)
        if probe is not None:
            layout = dataclasses.replace(layout, probe=probe)
        if layout.env_placement == "auto":  # times a block here, once the spaces are known
            layout = autoplace.resolve(layout, (obs, act))
        #: What this sampler runs: its envs, options and what derives from both (read-only).
        self.layout = layout
        self._start(obs, act)

    @property
    def options(self) -> Options:
        """Every option this sampler was built with (``print`` shows them all)."""
        return self.layout.options

    @property
    def num_envs(self) -> int:
        return self.layout.num_envs

    @property
    def num_workers(self) -> int:
        """Worker processes: ``options.num_workers``, with ``pipeline`` too."""
        return self.layout.options.num_workers

    @property
    def num_slots(self) -> int:
        """The workers of the step API, what ``step_send(w)`` indexes and ``StepResult.worker``
        names: ``2 * num_workers`` with ``pipeline`` (a process serves two halves), else
        ``num_workers``."""
        return self.layout.num_slots

    @property
    def envs_per_worker(self) -> int:
        """Envs per worker process (the largest block, with ``uneven_split``)."""
        return -(-self.num_envs // self.num_workers)

    @property
    def envs_per_slot(self) -> int:
        """The rows of one ``step_send``: ``envs_per_worker``, halved with ``pipeline`` (the
        largest block, with ``uneven_split``)."""
        return self.layout.envs_per_slot

    @property
    def autoreset_mode(self) -> AutoresetMode:
        return self.layout.options.autoreset_mode

    @property
    def context(self) -> str:
        """The start method in use: ``options.context``, with "auto" resolved."""
        return self.layout.context

    def _start(self, obs_space: Space, act_space: Space) -> None:
        self.single_observation_space, self.single_action_space = obs_space, act_space
        o = self.layout.options
        self._wait = Deadline(o.deadline)  # one wait of step()/step_recv(), every call
        self._actions = ActionWriter(act_space, o.check_actions)
        self._everyone = list(range(self.num_slots))
        self._buffers = SharedBuffers(obs_space, act_space, self.num_envs, self.num_slots)
        self._meter = Meter()  # stats(): our timers and the phases of code built on us
        ordered = handshake.ORDERED  # read once: tests force the unordered protocol through it
        self._pool = WorkerPool(self.layout, self._buffers, ordered)
        self._states = self._pool.states
        #: Who may call now: this process, one thread at a time (guard.py, docs/semantics.md).
        self._guard = CallGuard("VecSampler", self._states.stepping)
        # Chosen once: a channel that steps the blocks this process serves itself only where
        # there are such blocks (Options.env_placement).
        channel = SharingChannel if self.layout.parent_slots else StepChannel
        self._channel = channel(self.layout, self._buffers, self._pool, ordered, self._meter)
        #: Whether send_all gives the core up once it has posted: where the sampler spins, and
        #: no block waits for this process to step it.
        self._hand_over = self.layout.spin_s > 0 and not self.layout.parent_slots
        self._seeds = EnvSeeds(o.seed, self.num_envs)
        #: What a worker that died, raised or hung becomes, chosen here once: nothing below
        #: asks ``restart`` again (restart.py).
        self._failures: FailurePolicy = (
            Restarts(self.layout, self._pool, self._channel, self._seeds) if o.restart
            else RaiseFailures())
        #: Every restart so far, oldest first: (worker, reason). See docs/reliability.md.
        self.restart_log = self._failures.log
        #: DISABLED with a hosted env that cannot freeze rows: an ended env is reset first.
        self._no_frozen = hosted.refuses_frozen(self.layout.probe, self.autoreset_mode)
        self._closed = False
        try:
            restarts = self._failures if isinstance(self._failures, Restarts) else None
            self._log = open_log(o.record, o.replay, self.layout, self._failures.log, restarts)
            self._pool.start()
        except BaseException:
            self.close(timeout=1.0)  # a worker that failed to build will not exit politely
            raise
        signals.register(self)

    def worker_env_ids(self, worker: int) -> range:
        """The global env ids stepped by ``worker`` (a contiguous block)."""
        return range(*self.layout.bounds(self._states.index(worker, self._closed)))

    def handshake_state(self) -> HandshakeState:
        """A copy of the step handshake's counters per worker, and whether stores are ordered."""
        return self._channel.snapshot()

    def worker_pids(self) -> list[int]:
        """The workers' process ids, in worker order; a restarted worker has a new one. A
        worker that this process serves itself (``env_placement``) has this process's."""
        self._check_open()
        return self._pool.pids()

    # --- the hot path ----------------------------------------------------------------------------

    def step_send(self, worker: int, actions: Actions) -> None:
        """Writes ``worker``'s actions (``envs_per_slot`` rows) to shared memory and starts it;
        ``worker`` is a worker of the step API, below ``num_slots``.

        A KeyboardInterrupt out of this call means the step was not posted: the worker is still
        idle and no step_recv returns a result for it. A SIGINT that comes once the step is
        posted is held: this call returns, and the next vecsample call raises it before it does
        anything (docs/semantics.md, "Interrupts").
        """
        guard = self._guard
        restore = guard.claim("step_send")  # this thread's and process's (guard.py)
        try:
            signals.raise_held()  # one held by the last send: raised before anything is done
            start = time.perf_counter()
            w = self._states.index(worker, self._closed)
            self._log.send(w)  # a replay checks the call before it does anything
            self._expect_idle(w, "step_send")
            if self._no_frozen:
                hosted.check_not_ended(self._channel.views[w], self.layout.bounds(w)[0])
            self._actions.write(actions, self._channel.views[w].action_leaves,
                                len(self._channel.blocks[w]))
            self._channel.send(w, start)  # posts and returns: a SIGINT now is the next call's
        finally:
            guard.idle = restore  # a store, no call: nothing runs between the post and return

    def step_send_many(self, workers: Sequence[int], actions: Sequence[Actions]) -> None:
        """``step_send`` for several workers in one call: ``actions[i]`` is ``workers[i]``'s
        block (``envs_per_slot`` rows). Every worker is checked and every block written before
        anything is posted; then all are posted and the sleeping ones woken together (one
        futex wake on the native path, where ``step_send`` wakes one worker per call). So a
        partial-batch loop sends back what ``step_recv`` returned in one call, whatever their
        number.

        Same results as ``step_send`` for each worker in order. An error or a KeyboardInterrupt
        out of it means that nothing was posted: every worker listed is still idle.
        """
        guard = self._guard
        restore = guard.claim("step_send_many")  # this thread's and process's (guard.py)
        try:
            signals.raise_held()  # one held by the last send: raised before anything is done
            start = time.perf_counter()
            ws = self._idle_workers(workers, actions)
            for w in ws:
                self._log.send(w)  # a replay checks each send before anything is written
            for w, block in zip(ws, actions, strict=True):
                self._actions.write(block, self._channel.views[w].action_leaves,
                                    len(self._channel.blocks[w]))
            self._channel.send_many(ws, start)  # posts all, one wake: a SIGINT now is held
        finally:
            guard.idle = restore

    def _idle_workers(self, workers: Sequence[int], actions: Sequence[Actions]) -> list[int]:
        """``workers`` as indices, each idle and listed once, with one block of ``actions``
        each; else the error ``step_send`` would raise, or a ConfigError, before any write."""
        ws = [self._states.index(w, self._closed) for w in workers]
        if len(set(ws)) != len(ws) or len(actions) != len(ws):
            raise errors.ConfigError(
                name="step_send_many(workers, actions)",
                expected="distinct workers and one block of actions per worker",
                got=f"workers {list(workers)} with {len(actions)} blocks",
                fix="list each worker once, and pass actions[i] for workers[i]")
        for w in ws:
            self._expect_idle(w, "step_send_many")
            if self._no_frozen:
                hosted.check_not_ended(self._channel.views[w], self.layout.bounds(w)[0])
        return ws

    def step_recv(
        self, timeout: float | None = None, *, deadline: float | None = None, copy: bool = False
    ) -> list[StepResult]:
        """The workers that are done: all running ones (a full batch) or a partial batch.

        Args:
            timeout: the partial batch's window. None: wait for every worker with a step in
                flight. A number of seconds: wait for the first worker to finish (however long
                that takes, up to ``deadline``), then return it with every other that finishes
                within ``timeout`` seconds after it; 0 returns the first arrival and those
                already done. It is not a bound on the call: ``deadline`` is.
            deadline: the most seconds this call may wait (default: the sampler's
                ``deadline``). Past it, DeadlineExceededError names the hung workers and
                carries the results received so far; the hung workers stay pending. With
                ``restart`` a hung or dead worker is respawned after the wait, within
                ``startup_deadline`` and the sampler's deadline, not this one.
            copy: return copies instead of views of shared memory (a view is valid until its
                worker is sent again).

        A worker that finishes after the call returned stays pending and is returned by the
        next one: nothing is lost or returned twice. What every ``timeout`` and ``deadline``
        of every class bounds: the table in docs/semantics.md.
        """
        guard = self._guard
        restore = guard.claim("step_recv")  # this thread's and process's (guard.py)
        try:
            self._check_open()
            pending = self._states.stepping()
            if not pending:
                raise errors.NoPendingError()
            if timeout is not None:
                timeout = check_seconds(timeout, "timeout")
            bound = (self._wait if deadline is None
                     else Deadline(check_seconds(deadline, "deadline")))
            return self._recv(pending, timeout, bound, copy)
        finally:
            guard.idle = restore

    def _recv(self, pending: list[int], timeout: float | None, deadline: Deadline,
              copy: bool) -> list[StepResult]:
        """step_recv once its arguments are checked (step() knows them already): one wait, then
        the failure policy turns what it found into results or one exception."""
        start = time.perf_counter()
        try:
            workers, timeout, made = self._log.schedule(pending, timeout, copy)
            got = self._channel.collect(workers, timeout, deadline, copy)
            results = self._log.arrange(made + self._failures.settle(got, pending, copy))
        except BaseException as exc:
            if self._closed and isinstance(exc, Exception):  # another thread's close() ended
                if isinstance(exc, errors.ClosedError):  # the wait: nothing to hand over
                    raise
                raise _closed_during("step_recv") from exc
            self._channel.deliver(getattr(exc, "results", []))  # what it carries is handed over
            self._log.failed(exc)
            raise
        self._meter.timers["wait_s"] += time.perf_counter() - start
        # Last, and counted there: an interrupt before it loses nothing.
        return self._log.delivered(self._channel.deliver(results, self._meter.timers))

    def send_all(self, actions: Actions) -> None:
        """Writes ``actions`` (num_envs rows) to shared memory and starts every worker; on a
        SIGINT it behaves as ``step_send`` does: raised, nothing was posted.

        Where the sampler spins (every worker has a core, so this process shares one with a
        worker) it then gives its core up once (``sched_yield``), so that the worker sharing it
        starts its envs now, not after the caller's bookkeeping; that yield counts as waiting
        in ``stats()``."""
        guard = self._guard
        restore = guard.claim("send_all")  # this thread's and process's (guard.py)
        try:
            self._send_all(actions)
        finally:
            guard.idle = restore

    def _send_all(self, actions: Actions) -> None:
        start = time.perf_counter()
        self._expect_all_idle("send_all")
        self._log.send_all()
        if self._no_frozen:
            hosted.check_not_ended(self._channel.all_views, 0)
        self._actions.write(actions, self._channel.all_views.action_leaves, self.num_envs)
        # Posts, hands the core over where the sampler spins, and returns: a SIGINT from the
        # post on is the next call's (the yield is inside the channel's section, before it ends).
        self._channel.send_all(start, hand_over=self._hand_over)

    def step(self, actions: Actions, *, copy: bool = False) -> StepResult:
        """Sends every worker its rows of ``actions`` and waits for the full batch."""
        guard = self._guard
        restore = guard.claim("step")  # this thread's and process's (guard.py)
        try:
            self._send_all(actions)
            signals.raise_held()  # raised before the wait; the workers' steps stay pending
            return self._recv_batch(None, copy)
        finally:
            guard.idle = restore

    def recv_batch(self, *, deadline: float | None = None, copy: bool = False) -> StepResult:
        """``batch(step_recv(None, deadline=deadline))`` in one call: every env's data as one
        StepResult once every pending worker's step is in, with their infos merged.

        Where every worker is stepping (after ``send_all``) and nothing is recorded or
        replayed, it costs a fixed number of calls whatever the number of workers: one wait
        for all of them and one read of all the rows (docs/architecture.md, "The full
        batch"); a worker lost, a deadline or an infos message takes ``step_recv``'s path,
        with its errors and its restarts."""
        guard = self._guard
        restore = guard.claim("recv_batch")  # this thread's and process's (guard.py)
        try:
            return self._recv_batch(deadline, copy)
        finally:
            guard.idle = restore

    def _recv_batch(self, deadline: float | None, copy: bool) -> StepResult:
        self._check_open()
        bound = self._wait if deadline is None else Deadline(check_seconds(deadline, "deadline"))
        if self._log is NO_LOG and self._states.all_stepping():
            result = self._channel.collect_batch(bound, copy)
            if result is not None:
                return result  # no call after the hand-over: a SIGINT is the next call's
        pending = self._states.stepping()
        if not pending:
            raise errors.NoPendingError()
        return self.batch(self._recv(pending, None, bound, False), copy=copy)

    def batch(self, results: Sequence[StepResult] = (), *, copy: bool = False) -> StepResult:
        """Every env's current data as one StepResult, with the infos of ``results`` merged."""
        merged = self._channel.result_of(None, copy)
        for r in results:
            merged.infos.absorb(r.infos)
            merged.reset_infos.absorb(r.reset_infos)
        return merged

    # --- synchronous commands --------------------------------------------------------------------

    @_guarded
    def reset(
        self, seed: SeedArg = None, options: dict[str, Any] | None = None, *,
        mask: np.ndarray | None = None, deadline: float | None = None,
    ) -> tuple[Any, Infos]:
        """Resets the envs (those in ``mask``, if given) and returns (obs views, infos).

        ``seed``: an int seeds env j with child j of ``SeedSequence(seed)``; a list gives each
        env its own seed; None uses the constructor's seed on the first reset, then no reseed.
        ``deadline``: seconds the whole call may take, restarts included (None: the sampler's
        ``deadline`` bounds each wait, ``startup_deadline`` a restarted worker's build).
        """
        bound = Deadline.of_call(deadline, self.layout.options.deadline)
        self._expect_commandable("reset", bound)
        flags = _check_mask(mask, self.num_envs)
        self._log.reset(seed, options, flags)
        seeds = self._seeds.for_reset(seed)
        payload = self._pool.reset_payload(seeds, options, flags)
        infos = self._pool.reset_infos(
            self._command(Command.RESET, self._pool.reset_targets(flags), payload, bound))
        self._channel.drop_held()  # respawned workers were reset too: no restart to report
        return self._channel.all_views.obs, infos

    @_guarded
    def reset_task(self, tasks: Sequence[object], *, deadline: float | None = None) -> None:
        """Gives env j the task ``tasks[j]`` through ``env.unwrapped.reset_task``.

        ``deadline`` (here and in the other commands): seconds the whole call may take,
        restarts included (None: the sampler's ``deadline`` bounds each wait, and
        ``startup_deadline`` a restarted worker's build)."""
        tasks = _per_env(tasks, self.num_envs, "tasks")
        self._each(Command.RESET_TASK, lambda lo, hi: tasks[lo:hi], deadline)
        self._failures.remember(Command.RESET_TASK, "", tasks)  # a respawned env gets it again

    @_guarded
    def call(self, name: str, /, *args: Any, deadline: float | None = None,
             **kwargs: Any) -> list[Any]:
        """Calls ``name`` on every env (or reads it, if not callable); one result per env.
        ``call_with`` passes the env's method a keyword that is itself named ``deadline``."""
        return self._call(name, args, kwargs, deadline)

    @_guarded
    def call_with(self, name: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None,
                  *, deadline: float | None = None) -> list[Any]:
        """``call(name, *args, **kwargs)``, the method's arguments given as they are."""
        return self._call(name, args, kwargs, deadline)

    def _call(self, name: str, args: Sequence[Any], kwargs: dict[str, Any] | None,
              deadline: float | None) -> list[Any]:
        name, args, kwargs = _check_name(name), tuple(args), dict(kwargs or {})
        return self._each(Command.CALL, lambda lo, hi: (name, args, kwargs), deadline)

    @_guarded
    def get_attr(self, name: str, *, deadline: float | None = None) -> list[Any]:
        """The attribute ``name`` of every env, through its wrappers; one value per env."""
        name = _check_name(name)
        return self._each(Command.GET_ATTR, lambda lo, hi: name, deadline)

    @_guarded
    def set_attr(self, name: str, values: object, *, deadline: float | None = None) -> None:
        """Sets ``name`` on every env: a list gives one value per env, anything else is shared."""
        name = _check_name(name)
        if isinstance(values, (list, tuple)):
            values = _per_env(values, self.num_envs, "values")
        else:
            values = [values] * self.num_envs
        self._each(Command.SET_ATTR, lambda lo, hi: (name, values[lo:hi]), deadline)
        self._failures.remember(Command.SET_ATTR, name, values)  # a respawned env gets it again

    def _each(self, command: Command, payload: Callable[[int, int], object],
              deadline: float | None) -> list[Any]:
        """``command`` to every env, each worker getting ``payload(lo, hi)`` of its block."""
        bound = Deadline.of_call(deadline, self.layout.options.deadline)  # checked first
        self._expect_commandable(command.name.lower(), bound)
        self._log.command(command, payload(0, self.num_envs))  # a replay checks it first
        hosted.check_command(self.layout.probe, command)
        workers = range(self.num_slots)
        replies = self._command(command, workers,
                                lambda w: payload(*self.layout.bounds(w)), bound)
        return [x for w in workers for x in replies[w]]

    def _command(self, command: Command, workers: Sequence[int],
                 payload: Callable[[int], object], deadline: Deadline) -> dict[int, Any]:
        """``command`` to ``workers`` through the pool's RPC; the failure policy deals with the
        workers it lost (raises, or respawns them and asks them again)."""
        return self._failures.on_lost_in_command(
            self._pool.request(command, workers, payload, deadline),
            lambda lost: self._pool.request(command, lost, payload, deadline), deadline)

    def _expect_commandable(self, call: str, deadline: Deadline | None = None) -> None:
        """Reads an interrupted command's replies; finds workers that died since their last call
        (and, with restart, respawns them), within ``deadline`` (default: the sampler's)."""
        self._check_open()
        deadline = deadline or self._wait
        self._failures.found_dead(self._pool.reconcile(deadline))
        self._expect_all_idle(call, deadline)

    def _check_open(self) -> None:
        """Every call starts here: a SIGINT held by the last send is raised, before anything."""
        signals.raise_held()
        if self._closed:
            raise errors.ClosedError(what="VecSampler")

    def _expect_idle(self, w: int, call: str) -> None:
        if self._states.current[w] is not WorkerState.IDLE:
            self._failures.heal([w])
            self._states.expect_idle(w, call)

    def _expect_all_idle(self, call: str, deadline: Deadline | None = None) -> None:
        self._check_open()
        if not self._states.all_idle():  # the hot path (every step() call): one C-level count
            self._failures.heal(self._states.lost(), deadline)
            self._states.expect_all_idle(call)

    def add_phases(self, source: PhaseSource) -> None:
        """Adds ``source``'s phases (a ``PhaseTimer``, say) to the wall-time split of stats()."""
        self._meter.add_phases(source)

    def stats(self) -> dict[str, float]:
        """Totals since construction: env stepping (workers), send and wait (parent), plus
        ``wall_s``, ``<phase>_s`` / ``<phase>_pct`` of the wall time for every parent phase
        (send, wait, and those of every source given to ``add_phases``), ``other`` and
        ``steps_per_s``."""
        counters = self._buffers.stats().sum(axis=0)
        return self._meter.report({name: float(counters[i]) for i, name in enumerate(STAT_FIELDS)})

    def worker_stats(self) -> dict[str, np.ndarray]:
        """Each worker's own figures, one entry per worker of the step API (copies): its
        ``env_step_s`` and ``env_steps`` (their sums are ``stats()``'s), and when it picked up
        and published its last step (``step_picked_up``, ``step_published``, on
        ``time.perf_counter``'s clock, which every process shares on Linux): read them after a
        step_recv to lay that batch out on one clock (experiments/step_timeline.py)."""
        rows = self._buffers.stats().copy()
        return {name: rows[:, i] for i, name in enumerate(WORKER_FIELDS)}

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float | None = 5.0) -> None:
        """Stops every worker: ``timeout`` seconds to exit when asked (None: as long as they
        take), then SIGTERM and, 0.5 s later, SIGKILL for all left at once. Idempotent."""
        limit = check_seconds(timeout, "timeout")  # checked before anything is torn down
        if self._closed:
            return
        with signals.critical:  # a Ctrl-C waits for the (bounded) close to finish
            self._closed = True
            signals.unregister(self)
            self._log.close()
            self._pool.close(float("inf") if limit is None else limit)

    def __enter__(self) -> VecSampler:
        return self

    def __exit__(self, *exc: object) -> None:  # a with block closes, pass or fail
        self.close()

    def __reduce__(self) -> NoReturn:
        raise errors.SamplerPicklingError(
            what="VecSampler", fix="Pass what builds one instead, its env factories and its "
            "options (sampler.options), and build it where it runs: VecSampler(env_fns, "
            "options=options)")

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        halves = f" in {self.num_slots} halves" if self.num_slots != self.num_workers else ""
        here = self.layout.env_placement
        placed = "" if here == "workers" else f", env_placement={here!r}"
        return (f"VecSampler({self.num_workers} workers x {self.envs_per_worker} envs{halves}, "
                f"{self.autoreset_mode.value}, {self.context}{placed}, {state})")


# --- helpers -------------------------------------------------------------------------------------


def _probe_spaces(layout: Layout, obs: Space | None,
                  act: Space | None) -> tuple[Space, Space, HostedProbe | None]:
    """The spaces (those given, else env 0's) and, for a hosted env, what it can do."""
    if layout.hosted is not None:  # a hosted block: checked here, at construction
        return hosted.probe_spaces(layout.hosted, layout.options.autoreset_mode, obs, act)
    if obs is None or act is None:
        try:
            env = layout.env_fns[0]()
        except Exception as exc:
            raise errors.EnvFactoryError(
                f"env_fns[0]() raised {type(exc).__name__}: {exc}; fix the factory (it is "
                f"called once in the parent to read the spaces)."
            ) from exc
        try:
            obs = env.observation_space if obs is None else obs
            act = env.action_space if act is None else act
        finally:
            env.close()
    leaves(obs)  # raises UnsupportedSpaceError naming the space
    return obs, act, None


def _check_mask(mask: object, num_envs: int) -> np.ndarray | None:
    if mask is None:
        return None
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (num_envs,):
        got = f"{type(mask).__name__} {getattr(mask, 'dtype', '')} {getattr(mask, 'shape', '')}"
        raise errors.ConfigError(name="mask", expected=f"a numpy bool array of shape "
                                 f"({num_envs},)", got=got.strip())
    if not mask.any():
        raise errors.ConfigError("mask selects no env; set at least one entry to True.")
    return mask


def _per_env(values: Sequence[T], num_envs: int, name: str) -> list[T]:
    items = list(values)
    if len(items) != num_envs:
        raise errors.ConfigError(
            f"{name} needs one entry per env: expected {num_envs}, got {len(items)}; pass a "
            f"list of {num_envs}."
        )
    return items


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise errors.ConfigError(name="attribute name", expected="a non-empty str", got=name)
    return name
