"""``VecSampler``: the core front end over N worker processes and shared memory.

``step_send(worker, actions)`` starts one worker; ``step_recv(timeout)`` returns the workers that
are done: every running worker when ``timeout`` is None (a full batch), or the first one plus
whichever others finish within ``timeout`` seconds of it (a partial batch). A worker that finishes
after a recv returned stays in its pipe and is returned by the next recv, so nothing is lost or
returned twice. Results are zero-copy views into shared memory, valid until that worker is sent
again (``copy=True`` returns copies). See docs/semantics.md.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import multiprocessing as mp
import numbers
import os
import pickle
import select
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

import gymnasium as gym
import numpy as np

from vecsample import errors, handshake, signals
from vecsample.handshake import DOORBELL, REPLY_MESSAGE, ParentSide
from vecsample.protocol import (
    OK_MESSAGE,
    AutoresetMode,
    Command,
    EnvFn,
    ErrorReport,
    Reply,
    WorkerState,
)
from vecsample.results import StepResult
from vecsample.seeding import SeedArg, check_seed, env_seeds, resolve_seeds, restart_seed
from vecsample.shm import STAT_FIELDS, SharedBuffers, Views
from vecsample.spaces import bounds_checker, check_action_leaf, copy_tree, flatten, leaves
from vecsample.stats import PhaseSource, merged_totals, wall_split
from vecsample.worker import WorkerSpec, worker_main

#: Default whole-call deadline (seconds): no call blocks longer, even if a worker hangs.
DEFAULT_DEADLINE = 300.0
#: How long the parent and the workers poll the step handshake's counters before sleeping on a
#: pipe, when every worker can have a core of its own (µs). It skips scheduler wake-ups (an IPI
#: on a VM, docs/benchmarks.md); with more workers than cores, spinning would steal their CPU.
AUTO_SPIN_US = 200.0
#: Building envs (imports, MuJoCo model compiles) may take longer than one call's deadline.
STARTUP_DEADLINE = 120.0
#: forkserver: safe with threads in the parent (torch, CUDA), starts workers from a small clean
#: process instead of copying the trainer's memory, and gives the same picklability rules on
#: every platform as spawn, while starting faster than spawn once the server is up.
DEFAULT_CONTEXT = "forkserver"


@dataclass(frozen=True)
class EnvMaker:
    """A picklable factory for ``gym.make(env_id, **kwargs)``."""

    env_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> gym.Env[Any, Any]:
        if self.env_id not in gym.registry and importlib.util.find_spec("vecsample.envs"):
            importlib.import_module("vecsample.envs")  # registers the meta-RL task envs
        return gym.make(self.env_id, **self.kwargs)


class VecSampler:
    """N worker processes, each stepping ``num_envs // num_workers`` envs serially."""

    def __init__(
        self,
        env_fns: Sequence[EnvFn] | str,
        *,
        num_envs: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        num_workers: int = 1,
        seed: int | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
        infos: bool = True,
        context: str = DEFAULT_CONTEXT,
        deadline: float | None = DEFAULT_DEADLINE,
        threads_per_worker: int | None = 1,
        cpu_affinity: Sequence[Sequence[int]] | bool | None = None,
        check_actions: bool = True,
        observation_space: gym.Space[Any] | None = None,
        action_space: gym.Space[Any] | None = None,
        restart: bool = False,
        max_restarts: int = 3,
        spin_us: float | None = None,
    ) -> None:
        self._closed = True  # until the workers are up; close() is then a no-op
        fns = _env_fns(env_fns, num_envs, env_kwargs)
        self.num_envs = len(fns)
        self.num_workers = _check_workers(num_workers, self.num_envs)
        self.envs_per_worker = self.num_envs // self.num_workers
        self.autoreset_mode = _check_mode(autoreset_mode)
        self.deadline = _check_deadline(deadline, "deadline")
        self.check_actions = bool(check_actions)
        self.spin_s = _spin_seconds(spin_us, self.num_workers)
        self._seeds = env_seeds(None if seed is None else check_seed(seed), self.num_envs)
        self.restart = bool(restart)
        self.max_restarts = _check_max_restarts(max_restarts)
        #: Every restart so far, oldest first: (worker, reason). See docs/reliability.md.
        self.restart_log: list[tuple[int, str]] = []
        self._streams = list(self._seeds)  # each env's own seed stream, for re-seeding restarts
        self._flagged = [False] * self.num_workers  # restarted flags to clear on the next send
        self._ctx = _context(context)
        self.context = context
        obs_space, act_space = _probe_spaces(fns[0], observation_space, action_space)
        self.single_observation_space = obs_space
        self.single_action_space = act_space
        self._action_leaves = leaves(act_space)
        self._action_bounds = [bounds_checker(leaf) if self.check_actions else None
                               for leaf in self._action_leaves]
        self._bare_action = len(self._action_leaves) == 1 and not self._action_leaves[0].path
        self._everyone = list(range(self.num_workers))
        self._buffers = SharedBuffers(obs_space, act_space, self.num_envs, self.num_workers)
        self._all: Views = self._buffers.views()
        self._views = [self._buffers.views(*self._bounds(w)) for w in range(self.num_workers)]
        self._states = [WorkerState.IDLE] * self.num_workers
        self._timers = {"send_s": 0.0, "wait_s": 0.0, "recvs": 0.0, "workers_received": 0.0}
        self._born = time.perf_counter()
        self._phase_sources: list[PhaseSource] = []  # add_phases(): timers of code built on us
        self._fns, self._infos, self._threads = fns, infos, threads_per_worker
        self._affinity = _affinity(cpu_affinity, self.num_workers)
        self._ordered = handshake.ORDERED
        # The workers' shared doorbell to a sleeping parent (handshake.py): (reader, writer).
        self._ring_reader, self._ring_writer = self._ctx.Pipe(duplex=False)
        self._hs = ParentSide(self._buffers.control(), self.num_workers, self._ring_reader,
                              self.spin_s, self._ordered)
        self._procs, self._conns = self._start()
        # The finalizer holds these lists themselves: a restart replaces entries in place.
        self._finalizer = weakref.finalize(self, _shutdown, self._procs, self._conns, 1.0,
                                           [self._ring_reader, self._ring_writer])
        self._closed = False
        self._await_ready()
        signals.register(self)

    # --- construction --------------------------------------------------------------------------

    def _bounds(self, worker: int) -> tuple[int, int]:
        lo = worker * self.envs_per_worker
        return lo, lo + self.envs_per_worker

    def worker_env_ids(self, worker: int) -> range:
        """The global env ids stepped by ``worker`` (a contiguous block)."""
        return range(*self._bounds(self._check_index(worker)))

    def worker_pids(self) -> list[int]:
        """The workers' process ids, in worker order; a restarted worker has a new one."""
        self._check_open()
        return [int(proc.pid) for proc in self._procs]

    def _start(self) -> tuple[list[Any], list[Connection]]:
        procs: list[Any] = []
        conns: list[Connection] = []
        for w in range(self.num_workers):
            try:
                proc, conn = self._spawn(w, conns)
            except errors.EnvFactoryError:
                _shutdown(procs, conns, 1.0, [self._ring_reader, self._ring_writer])
                raise
            procs.append(proc)
            conns.append(conn)
        return procs, conns

    def _spawn(self, w: int, others: list[Connection]) -> tuple[Any, Connection]:
        """Starts worker ``w`` (at construction or as a restart); returns (process, pipe end)."""
        lo, hi = self._bounds(w)
        parent_end, child_end = self._ctx.Pipe(duplex=True)
        spec = WorkerSpec(
            index=w,
            env_fns=self._fns[lo:hi],
            env_offset=lo,
            buffers=self._buffers,
            autoreset_mode=self.autoreset_mode,
            infos=self._infos,
            threads=self._threads,
            cpu_affinity=self._affinity[w],
            parent_pid=os.getpid(),
            spin_s=self.spin_s,
            ring_writer=self._ring_writer,
            ordered=self._ordered,
            inherited_conns=(
                [*others, parent_end, self._ring_reader] if self.context == "fork" else []
            ),
        )
        # daemon=True: if the parent exits normally without close(), multiprocessing
        # terminates the workers instead of waiting on them forever at interpreter exit.
        proc = self._ctx.Process(
            target=worker_main, args=(spec, child_end), daemon=True,
            name=f"vecsample-worker-{w}",
        )
        try:
            proc.start()
        except Exception as exc:
            parent_end.close()
            raise _pickle_error(exc, self.context) from exc
        finally:
            child_end.close()  # only the worker holds it now, so its death reads as EOF here
        return proc, parent_end

    def _await_ready(self) -> None:
        try:
            for w in range(self.num_workers):
                self._states[w] = WorkerState.BUSY
            limit = None if self.deadline is None else max(self.deadline, STARTUP_DEADLINE)
            replies = self._gather(range(self.num_workers), "BUILD", limit)
        except errors.WorkerError as exc:
            self.close()
            raise errors.EnvFactoryError(
                f"worker {exc.worker} could not build its envs (env {exc.env}): {exc}"
            ) from exc
        except BaseException:
            self.close()
            raise
        assert all(tag is Reply.READY for tag, _ in replies.values())

    # --- the hot path ----------------------------------------------------------------------------

    def step_send(self, worker: int, actions: Any) -> None:
        """Writes ``worker``'s actions (envs_per_worker rows) to shared memory and starts it."""
        start = time.perf_counter()
        w = self._check_index(worker)
        self._expect_idle(w, "step_send")
        parts = self._check_actions(actions, self.envs_per_worker)
        for view, part in zip(self._views[w].action_leaves, parts, strict=True):
            np.copyto(view, part, casting="same_kind")
        self._send_step(w)
        self._ring((w,))
        self._timers["send_s"] += time.perf_counter() - start

    def _send_step(self, w: int) -> None:
        """Posts worker ``w``'s step; ``_ring`` must follow (one fence covers many posts)."""
        if self._flagged[w]:  # a restart's flags last until the worker's next step
            self._clear_restart_flags(w)
        self._hs.post(w)
        self._states[w] = WorkerState.STEPPING

    def _ring(self, workers: Sequence[int]) -> None:
        """Wakes those of ``workers`` that sleep on their pipe (handshake.py)."""
        handshake.fence()
        for w in workers:
            if not self._hs.wants_ring(w):
                continue
            try:
                self._conns[w].send_bytes(DOORBELL)
            except OSError as exc:
                self._states[w] = WorkerState.DEAD
                raise self._died(w, "STEP", []) from exc

    def step_recv(
        self, timeout: float | None = None, *, deadline: float | None = None, copy: bool = False
    ) -> list[StepResult]:
        """The workers that are done: all running ones (timeout None) or a partial batch.

        With a float ``timeout`` this waits for the first worker, then returns whichever others
        finish within ``timeout`` seconds of it. No call lasts longer than ``deadline`` (default:
        the sampler's): past it, DeadlineExceededError names the hung workers and carries the
        results received so far; the hung workers stay pending.
        """
        self._check_open()
        pending = [w for w, s in enumerate(self._states) if s is WorkerState.STEPPING]
        if not pending:
            raise errors.NoPendingError()
        window = _check_deadline(timeout, "timeout")
        limit = self.deadline if deadline is None else _check_deadline(deadline, "deadline")
        return self._recv(pending, window, limit, copy)

    def _recv(self, pending: list[int], window: float | None, limit: float | None,
              copy: bool) -> list[StepResult]:
        """step_recv once its arguments are checked (step() knows them already)."""
        start = time.perf_counter()
        results = self._collect_or_restart(pending, window, limit, copy)
        self._timers["wait_s"] += time.perf_counter() - start
        self._timers["recvs"] += 1
        self._timers["workers_received"] += len(results)
        return results

    def send_all(self, actions: Any) -> None:
        """Writes ``actions`` (num_envs rows) to shared memory and starts every worker."""
        start = time.perf_counter()
        self._expect_all_idle("send_all")
        parts = self._check_actions(actions, self.num_envs)
        for view, part in zip(self._all.action_leaves, parts, strict=True):
            np.copyto(view, part, casting="same_kind")
        for w in range(self.num_workers):
            self._send_step(w)
        self._ring(range(self.num_workers))
        self._timers["send_s"] += time.perf_counter() - start

    def step(self, actions: Any, *, copy: bool = False) -> StepResult:
        """Sends every worker its rows of ``actions`` and waits for the full batch."""
        self.send_all(actions)
        if self.spin_s > 0:
            # The parent only waits now: handing its core over at once lets the worker that
            # shares it start its envs without waiting for step_recv's bookkeeping.
            os.sched_yield()
        return self.batch(self._recv(self._everyone, None, self.deadline, False), copy=copy)

    def batch(self, results: Sequence[StepResult] = (), *, copy: bool = False) -> StepResult:
        """Every env's current data as one StepResult, with the infos of ``results`` merged."""
        merged = self._result(None, self._all, range(self.num_envs), copy)
        for r in results:
            merged.infos.update(r.infos)
            merged.reset_infos.update(r.reset_infos)
        return merged

    def _collect(
        self, pending: list[int], window: float | None, limit: float | None, copy: bool
    ) -> list[StepResult]:
        results: list[StepResult] = []
        waiting = set(pending)
        deadline_at = None if limit is None else time.monotonic() + limit
        window_end: float | None = None
        while waiting:
            ready = self._hs.ready(waiting)
            if ready:
                for w in sorted(ready):
                    waiting.discard(w)
                    results.append(self._read_step(w, copy, results))
                if window is not None and window_end is None:
                    window_end = time.monotonic() + window
                continue
            now = time.monotonic()
            if window_end is not None and now >= window_end:
                break
            if deadline_at is not None and now >= deadline_at:
                raise errors.DeadlineExceededError(hung_workers=sorted(waiting), deadline=limit,
                                                   results=results)
            until = _earliest(deadline_at, window_end)
            sentinels = {self._procs[w].sentinel: w for w in waiting}
            dead = self._hs.wait(waiting, None if until is None else until - now, sentinels)
            self._check_dead(dead, results)
        return results

    def _check_dead(self, dead: list[int], results: list[StepResult]) -> None:
        # Data before death: a worker that finished its step and then died still delivers it.
        finished = self._hs.ready(dead)
        for w in dead:
            if w not in finished:
                self._states[w] = WorkerState.DEAD
                raise self._died(w, "STEP", results)

    def _wait_any(self, waiting: dict[Connection, int], timeout: float | None) -> list[Any]:
        """The pipes and sentinels of ``waiting`` workers that are ready within ``timeout``."""
        handles = [*waiting, *(self._procs[w].sentinel for w in waiting.values())]
        return _wait(handles, None if timeout is None else max(0.0, timeout))

    def _dead_in(self, ready: list[Any]) -> set[int]:
        sentinels = {p.sentinel: w for w, p in enumerate(self._procs)}
        return {sentinels[r] for r in ready if isinstance(r, int) and r in sentinels}

    def _read_step(self, w: int, copy: bool, results: list[StepResult]) -> StepResult:
        records = None
        if self._hs.received(w) == REPLY_MESSAGE:
            try:
                message = self._conns[w].recv_bytes()
            except (EOFError, OSError) as exc:
                self._states[w] = WorkerState.DEAD
                raise self._died(w, "STEP", results) from exc
            tag, payload = pickle.loads(message)
            if tag is Reply.ERROR:
                self._states[w] = WorkerState.FAILED
                raise _worker_error(w, payload, results)
            records = payload
        self._states[w] = WorkerState.IDLE
        result = self._result(w, self._views[w], range(*self._bounds(w)), copy)
        self._add_infos(result, records)
        return result

    def _result(self, w: int | None, v: Views, env_ids: range, copy: bool) -> StepResult:
        if copy:
            return StepResult(
                w, env_ids, copy_tree(v.obs), v.rewards.copy(), v.terminated.copy(),
                v.truncated.copy(), copy_tree(v.final_obs), v.has_final_obs.copy(),
                v.restarted.copy(),
            )
        return StepResult(
            w, env_ids, v.obs, v.rewards, v.terminated, v.truncated, v.final_obs,
            v.has_final_obs, v.restarted,
        )

    @staticmethod
    def _add_infos(result: StepResult, records: Any) -> None:
        if not records:
            return
        offset = result.env_ids.start
        for j, info, reset_info in records:
            if info:
                result.infos[offset + j] = info
            if reset_info is not None:
                result.reset_infos[offset + j] = reset_info

    # --- restart (docs/reliability.md) -----------------------------------------------------------

    def _collect_or_restart(
        self, pending: list[int], window: float | None, limit: float | None, copy: bool
    ) -> list[StepResult]:
        """``_collect``, but with ``restart`` on a worker that died, raised or hung is respawned
        and returned as a result whose envs are flagged restarted and truncated."""
        if not self.restart:
            return self._collect(pending, window, limit, copy)
        results: list[StepResult] = []
        deadline_at = None if limit is None else time.monotonic() + limit
        while pending:
            remaining = None if deadline_at is None else max(0.0, deadline_at - time.monotonic())
            try:
                return results + self._collect(pending, window, remaining, copy)
            except errors.DeadlineExceededError as exc:
                results += exc.results
                for w in exc.hung_workers:
                    results.append(self._restart(w, "hung past the deadline", exc, results, copy))
                return results
            except errors.WorkerError as exc:
                results += exc.results
                results.append(self._restart(exc.worker, exc.reason, exc, results, copy))
            if window is not None:  # a partial batch: the restarted worker is enough
                return results
            pending = [w for w in pending if self._states[w] is WorkerState.STEPPING]
        return results

    def _restart(
        self, w: int, reason: str, cause: BaseException, results: list[Any], copy: bool
    ) -> StepResult:
        """Respawns worker ``w`` in place and returns its flagged result; the others' rows are
        never touched. Raises RestartLimitError past ``max_restarts``."""
        if len(self.restart_log) >= self.max_restarts:
            self._states[w] = WorkerState.FAILED
            raise errors.RestartLimitError(
                worker=w, reason=reason, history=self.restart_log,
                max_restarts=self.max_restarts, env=getattr(cause, "env", None),
                remote_traceback=getattr(cause, "remote_traceback", ""), results=results,
            ) from cause
        self.restart_log.append((w, reason))
        reset_infos = self._respawn(w)
        result = self._result(w, self._views[w], self.worker_env_ids(w), copy)
        lo = self._bounds(w)[0]
        for j, info in reset_infos:
            result.reset_infos[lo + j] = info
            result.infos[lo + j] = {"restart_reason": reason}
        return result

    def _respawn(self, w: int) -> list[tuple[int, dict[str, Any]]]:
        """Kills what is left of worker ``w``, starts a fresh one on a fresh pipe (so no stale
        reply can ever be read), re-seeds its envs and flags their rows."""
        _shutdown([self._procs[w]], [self._conns[w]], 0.0)
        self._hs.reset_worker(w)
        others = [c for i, c in enumerate(self._conns) if i != w]
        self._procs[w], self._conns[w] = self._spawn(w, others)
        self._states[w] = WorkerState.BUSY
        limit = None if self.deadline is None else max(self.deadline, STARTUP_DEADLINE)
        self._gather([w], "BUILD", limit)
        lo, hi = self._bounds(w)
        restarts = sum(1 for worker, _ in self.restart_log if worker == w)
        seeds = [restart_seed(stream, restarts) for stream in self._streams[lo:hi]]
        self._conns[w].send_bytes(_dumps(Command.RESET, (seeds, None, None)))
        self._states[w] = WorkerState.BUSY
        _, reply = self._gather([w], "RESET", self.deadline)[w]
        v = self._views[w]
        v.rewards[:] = 0.0
        v.terminated[:] = False
        v.has_final_obs[:] = False
        v.truncated[:] = True
        v.restarted[:] = True
        self._flagged[w] = True
        return list(reply)

    def _clear_restart_flags(self, w: int) -> None:
        self._views[w].restarted[:] = False
        self._flagged[w] = False

    def _heal(self, w: int) -> None:
        """With ``restart`` on, a worker left failed or dead by a synchronous call is respawned
        before its next use (its envs flagged like any restart)."""
        cause = errors.WorkerLostError(call="heal", worker=w, state=self._states[w].value)
        self._restart(w, f"was {self._states[w].value} after a synchronous call", cause, [], False)
        self._states[w] = WorkerState.IDLE

    # --- synchronous commands --------------------------------------------------------------------

    def reset(
        self,
        seed: SeedArg = None,
        options: dict[str, Any] | None = None,
        *,
        mask: np.ndarray | None = None,
    ) -> tuple[Any, list[dict[str, Any]]]:
        """Resets the envs (those in ``mask``, if given) and returns (obs views, infos).

        ``seed``: an int seeds env j with child j of ``SeedSequence(seed)``; a list gives each
        env its own seed; None uses the constructor's seed on the first reset, then no reseed.
        """
        self._expect_all_idle("reset")
        flags = _check_mask(mask, self.num_envs)
        seeds = self._reset_seeds(seed)
        workers = [w for w in range(self.num_workers)
                   if flags is None or flags[slice(*self._bounds(w))].any()]

        def payload(w: int) -> Any:
            lo, hi = self._bounds(w)
            return seeds[lo:hi], options, None if flags is None else flags[lo:hi]

        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for w, reply in self._request(Command.RESET, workers, payload).items():
            for j, info in reply:
                infos[self._bounds(w)[0] + j] = info
        return self._all.obs, infos

    def _reset_seeds(self, seed: SeedArg) -> list[int | None]:
        if seed is None:
            seeds, self._seeds = self._seeds, [None] * self.num_envs
            return seeds
        seeds = resolve_seeds(seed, self.num_envs)
        self._seeds = [None] * self.num_envs
        self._streams = list(seeds)
        return seeds

    def reset_task(self, tasks: Sequence[Any]) -> None:
        """Gives env j the task ``tasks[j]`` through ``env.unwrapped.reset_task``."""
        tasks = _per_env(tasks, self.num_envs, "tasks")
        self._request(Command.RESET_TASK, range(self.num_workers),
                      lambda w: tasks[slice(*self._bounds(w))])

    def call(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Calls ``name`` on every env (or reads it, if not callable); one result per env."""
        name = _check_name(name)
        replies = self._request(Command.CALL, range(self.num_workers),
                                lambda w: (name, args, kwargs))
        return [x for w in range(self.num_workers) for x in replies[w]]

    def get_attr(self, name: str) -> list[Any]:
        """The attribute ``name`` of every env, through its wrappers; one value per env."""
        name = _check_name(name)
        replies = self._request(Command.GET_ATTR, range(self.num_workers), lambda w: name)
        return [x for w in range(self.num_workers) for x in replies[w]]

    def set_attr(self, name: str, values: Any) -> None:
        """Sets ``name`` on every env: a list gives one value per env, anything else is shared."""
        name = _check_name(name)
        if isinstance(values, (list, tuple)):
            per_env = _per_env(values, self.num_envs, "values")
        else:
            per_env = [values] * self.num_envs
        self._request(Command.SET_ATTR, range(self.num_workers),
                      lambda w: (name, per_env[slice(*self._bounds(w))]))

    def _request(
        self, command: Command, workers: Sequence[int], payload: Callable[[int], Any]
    ) -> dict[int, Any]:
        self._expect_all_idle(command.name.lower())
        # Build every message before sending any: a payload that fails to pickle must not leave
        # some workers busy with a command whose replies nobody reads.
        messages = {w: _dumps(command, payload(w)) for w in workers}
        for w, message in messages.items():
            try:
                self._conns[w].send_bytes(message)
            except OSError as exc:
                self._states[w] = WorkerState.DEAD
                raise self._died(w, command.name, []) from exc
            self._states[w] = WorkerState.BUSY
        replies = self._gather(workers, command.name, self.deadline)
        return {w: payload_ for w, (_, payload_) in replies.items()}

    def _gather(
        self, workers: Sequence[int], command: str, limit: float | None
    ) -> dict[int, tuple[Reply, Any]]:
        replies: dict[int, tuple[Reply, Any]] = {}
        failures: list[errors.WorkerError] = []
        waiting = {self._conns[w]: w for w in workers}
        deadline_at = None if limit is None else time.monotonic() + limit
        while waiting:
            remaining = None if deadline_at is None else deadline_at - time.monotonic()
            ready = self._wait_any(waiting, remaining)
            if not ready:
                # A late reply must never be read as the answer to a later call: the silent
                # workers are marked failed (restart respawns them on a fresh pipe).
                for w in waiting.values():
                    self._states[w] = WorkerState.FAILED
                raise errors.DeadlineExceededError(
                    hung_workers=sorted(waiting.values()), deadline=limit,
                    fix="they are marked failed and must be restarted; raise `deadline` if the "
                    "envs are just slow",
                )
            for w in sorted({waiting[c] for c in ready if c in waiting} | self._dead_in(ready)):
                if w in waiting.values():
                    del waiting[self._conns[w]]
                    try:
                        replies[w] = self._read_reply(w, command)
                    except errors.WorkerError as exc:
                        failures.append(exc)  # read the others' replies first: none goes stale
        if failures:
            raise failures[0]
        return replies

    def _read_reply(self, w: int, command: str) -> tuple[Reply, Any]:
        conn = self._conns[w]
        try:
            if not conn.poll():
                raise EOFError
            message = conn.recv_bytes()
        except (EOFError, OSError) as exc:
            self._states[w] = WorkerState.DEAD
            raise self._died(w, command, []) from exc
        tag, payload = (Reply.OK, None) if message == OK_MESSAGE else pickle.loads(message)
        assert isinstance(tag, Reply)
        if tag is Reply.ERROR:
            self._states[w] = WorkerState.FAILED
            raise _worker_error(w, payload, [])
        self._states[w] = WorkerState.IDLE
        return tag, payload

    # --- state checks ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise errors.ClosedError(what="VecSampler")

    def _check_index(self, worker: Any) -> int:
        self._check_open()
        if (isinstance(worker, bool) or not isinstance(worker, numbers.Integral)
                or not 0 <= int(worker) < self.num_workers):
            raise errors.WorkerIndexError(worker=worker, num_workers=self.num_workers)
        return int(worker)

    def _expect_idle(self, w: int, call: str) -> None:
        state = self._states[w]
        if state is WorkerState.IDLE:
            return
        if self.restart and state in (WorkerState.FAILED, WorkerState.DEAD):
            self._heal(w)
            return
        if state is WorkerState.STEPPING:
            raise errors.WorkerBusyError(call=call, workers=[w], to_one=True)
        raise errors.WorkerLostError(call=call, worker=w, state=state.value)

    def _expect_all_idle(self, call: str) -> None:
        self._check_open()
        if self._states.count(WorkerState.IDLE) == self.num_workers:
            return  # the hot path (every step() call): one C-level count
        stepping = [w for w, s in enumerate(self._states) if s is WorkerState.STEPPING]
        if stepping:
            raise errors.WorkerBusyError(call=call, workers=stepping)
        for w in range(self.num_workers):
            self._expect_idle(w, call)

    def _check_actions(self, actions: Any, batch: int) -> list[np.ndarray]:
        if self._bare_action:  # the common case: one leaf, no Dict/Tuple to take apart
            return [check_action_leaf(self._action_leaves[0], actions, batch,
                                      self._action_bounds[0])]
        parts = flatten(self.single_action_space, actions)
        return [check_action_leaf(leaf, part, batch, bounds)
                for leaf, part, bounds in zip(self._action_leaves, parts, self._action_bounds,
                                              strict=True)]

    def _died(self, w: int, command: str, results: list[StepResult]) -> errors.WorkerDiedError:
        proc = self._procs[w]
        proc.join(0.1)
        return errors.WorkerDiedError(
            worker=w, pid=proc.pid, exitcode=proc.exitcode, command=command,
            env_ids=self.worker_env_ids(w), results=results,
        )

    # --- stats and lifetime ----------------------------------------------------------------------

    def add_phases(self, source: PhaseSource) -> None:
        """Adds ``source``'s phases (a ``PhaseTimer``, say) to the wall-time split of stats()."""
        self._phase_sources.append(source)

    def stats(self) -> dict[str, float]:
        """Totals since construction: env stepping (workers), send and wait (parent), plus
        ``wall_s``, ``<phase>_s`` / ``<phase>_pct`` of the wall time for every parent phase
        (send, wait, and those of every source given to ``add_phases``), ``other`` and
        ``steps_per_s``."""
        counters = self._buffers.stats().sum(axis=0)
        out = {name: float(counters[i]) for i, name in enumerate(STAT_FIELDS)}
        out.update(self._timers)
        # Totals and % of the wall time, with the phases that add_phases() registered.
        own = {"send": out["send_s"], "wait": out["wait_s"]}
        wall = time.perf_counter() - self._born
        out.update(wall_split(merged_totals(self._phase_sources, own), wall, out["env_steps"]))
        return out

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float = 5.0) -> None:
        """Stops every worker, terminating those not gone within ``timeout``. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._states = [WorkerState.CLOSED] * self.num_workers
        self._finalizer.detach()
        signals.unregister(self)
        _shutdown(self._procs, self._conns, timeout, [self._ring_reader, self._ring_writer])

    def __enter__(self) -> VecSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (f"VecSampler({self.num_workers} workers x {self.envs_per_worker} envs, "
                f"{self.autoreset_mode.value}, {self.context}, {state})")


# --- helpers -------------------------------------------------------------------------------------


def _shutdown(
    procs: list[Any], conns: list[Connection], timeout: float, more: Sequence[Connection] = ()
) -> None:
    """Asks every worker to exit, then terminates and kills what is left, then closes the
    pipes (``more``: the doorbell pipe's ends). Always returns."""
    close_message = pickle.dumps((Command.CLOSE, None))
    for conn in conns:
        with contextlib.suppress(OSError, ValueError):  # already dead or closed: nothing to ask
            conn.send_bytes(close_message)
    started = [p for p in procs if p.pid is not None]
    end = time.monotonic() + max(0.0, timeout)
    for proc in started:
        proc.join(max(0.0, end - time.monotonic()))
    for proc in started:
        _stop(proc)
    for conn in [*conns, *more]:
        conn.close()
    for proc in started:
        proc.close()


def _stop(proc: Any) -> None:
    """SIGTERM, then SIGKILL, a worker that did not exit when asked."""
    if proc.is_alive():
        proc.terminate()
        proc.join(1.0)
    if proc.is_alive():
        proc.kill()
        proc.join()


def _env_fns(
    env_fns: Sequence[EnvFn] | str, num_envs: int | None, env_kwargs: dict[str, Any] | None
) -> list[EnvFn]:
    if isinstance(env_fns, str):
        if num_envs is None or isinstance(num_envs, bool) or not isinstance(num_envs, int):
            raise errors.ConfigError(
                f"with an env id ({env_fns!r}) pass num_envs=<int>, got {num_envs!r}."
            )
        if num_envs < 1:
            raise errors.ConfigError(f"num_envs must be >= 1, got {num_envs}.")
        return [EnvMaker(env_fns, dict(env_kwargs or {}))] * num_envs
    if env_kwargs:
        raise errors.ConfigError("env_kwargs is only used with an env id; bind kwargs in env_fns.")
    fns = list(env_fns)
    if not fns:
        raise errors.ConfigError("env_fns is empty; pass at least one env factory.")
    bad = [i for i, fn in enumerate(fns) if not callable(fn)]
    if bad:
        raise errors.ConfigError(
            f"env_fns[{bad[0]}] is {fns[bad[0]]!r}, not callable; pass factories such as "
            f"functools.partial(gym.make, 'CartPole-v1'), not env instances."
        )
    if num_envs is not None and num_envs != len(fns):
        raise errors.ConfigError(f"num_envs={num_envs} but {len(fns)} env_fns were given.")
    return fns


def _check_max_restarts(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 0:
        raise errors.ConfigError(
            f"max_restarts must be an int >= 0 (restarts allowed over the sampler's life), "
            f"got {value!r}."
        )
    return int(value)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _check_workers(num_workers: Any, num_envs: int) -> int:
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise errors.ConfigError(f"num_workers must be an int >= 1, got {num_workers!r}.")
    if num_envs % num_workers:
        raise errors.ConfigError(
            f"num_envs={num_envs} is not divisible by num_workers={num_workers}; choose "
            f"num_workers from {_divisors(num_envs)}."
        )
    return num_workers


def _check_mode(mode: AutoresetMode | str) -> AutoresetMode:
    if isinstance(mode, AutoresetMode):
        return mode
    value = getattr(mode, "value", mode)  # accepts gymnasium's own AutoresetMode enum too
    try:
        return AutoresetMode(value)
    except ValueError:
        choices = [m.value for m in AutoresetMode]
        raise errors.ConfigError(
            f"autoreset_mode must be one of {choices}, got {mode!r}."
        ) from None


def _check_deadline(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value) >= 0:
        raise errors.ConfigError(
            f"{name} must be None or a number of seconds >= 0, got {value!r}."
        )
    return float(value)


def _context(name: str) -> Any:
    methods = mp.get_all_start_methods()
    if name not in methods:
        raise errors.ConfigError(f"context must be one of {methods}, got {name!r}.")
    if name == "fork" and threading.active_count() > 1:
        # Forking a multi-threaded parent can deadlock the child on a lock held by another
        # thread; allowed because it is fast and often fine, but the user should know.
        import warnings

        warnings.warn("context='fork' with threads running in the parent can deadlock workers; "
                      "prefer 'forkserver'.", RuntimeWarning, stacklevel=3)
    return mp.get_context(name)


def _affinity(value: Sequence[Sequence[int]] | bool | None, workers: int) -> list[list[int] | None]:
    if value is None or value is False:
        return [None] * workers
    if value is True:
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if not cores:
            raise errors.ConfigError("cpu_affinity=True needs os.sched_getaffinity (Linux).")
        return [[cores[w % len(cores)]] for w in range(workers)]
    sets = [list(s) for s in value]
    if len(sets) != workers:
        raise errors.ConfigError(
            f"cpu_affinity needs one core list per worker: expected {workers}, got {len(sets)}."
        )
    return [s for s in sets]


def _probe_spaces(
    env_fn: EnvFn, obs: gym.Space[Any] | None, act: gym.Space[Any] | None
) -> tuple[gym.Space[Any], gym.Space[Any]]:
    if obs is None or act is None:
        try:
            env = env_fn()
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
    leaves(act)
    return obs, act


def _pickle_error(exc: Exception, context: str) -> errors.EnvFactoryError:
    return errors.EnvFactoryError(
        f"could not start a worker with context={context!r}: {type(exc).__name__}: {exc}. "
        f"Under spawn/forkserver every env factory must be picklable: define it at module top "
        f"level or use functools.partial, not a lambda or local function (or use context='fork')."
    )


def _worker_error(w: int, report: object, results: list[StepResult]) -> errors.WorkerError:
    assert isinstance(report, ErrorReport), report
    return errors.WorkerError(
        worker=w, env=report.env, command=report.command, exc_type=report.exc_type,
        message=report.message, remote_traceback=report.traceback, results=results,
    )


def _dumps(command: Command, payload: Any) -> bytes:
    try:
        return pickle.dumps((command, payload), pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise errors.ConfigError(
            f"the arguments of {command.name.lower()}() cannot be pickled to the workers: "
            f"{type(exc).__name__}: {exc}. Pass plain data (numbers, arrays, dicts)."
        ) from exc


def _wait(objects: list[Any], timeout: float | None) -> list[Any]:
    """``multiprocessing.connection.wait`` for pipes and sentinels, at a quarter of the cost.

    ``wait`` builds a ``selectors`` object and registers every handle through it on each call:
    ~12 µs for two workers (two pipes, two sentinels). A bare ``select.poll`` does the same in
    ~3 µs (timeit, docs/benchmarks.md), with the same millisecond rounding of the timeout and
    the same rule that any event (data, hang-up, error) makes a handle ready.
    """
    if not hasattr(select, "poll"):  # Windows
        return wait(objects, timeout)
    poller = select.poll()
    by_fd: dict[int, Any] = {}
    for obj in objects:
        fd = obj if isinstance(obj, int) else obj.fileno()
        by_fd[fd] = obj
        poller.register(fd, select.POLLIN)
    events = poller.poll(None if timeout is None else math.ceil(timeout * 1e3))
    return [by_fd[fd] for fd, _ in events]


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask; all of them off Linux)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _spin_seconds(spin_us: float | None, num_workers: int) -> float:
    if spin_us is None:
        # Without an affinity mask (off Linux) the cores we get are unknown: spin for a
        # single worker only, rather than steal CPU from workers that may share a core.
        cores = usable_cores() if hasattr(os, "sched_getaffinity") else 1
        return AUTO_SPIN_US * 1e-6 if num_workers <= cores else 0.0
    value = _check_deadline(spin_us, "spin_us")
    return 0.0 if value is None else value * 1e-6


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def _check_mask(mask: Any, num_envs: int) -> np.ndarray | None:
    if mask is None:
        return None
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (num_envs,):
        got = f"{type(mask).__name__} {getattr(mask, 'dtype', '')} {getattr(mask, 'shape', '')}"
        raise errors.ConfigError(
            f"mask must be a numpy bool array of shape ({num_envs},), got {got.strip()}."
        )
    if not mask.any():
        raise errors.ConfigError("mask selects no env; set at least one entry to True.")
    return mask


def _per_env(values: Sequence[Any], num_envs: int, name: str) -> list[Any]:
    items = list(values)
    if len(items) != num_envs:
        raise errors.ConfigError(
            f"{name} needs one entry per env: expected {num_envs}, got {len(items)}."
        )
    return items


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise errors.ConfigError(f"attribute name must be a non-empty str, got {name!r}.")
    return name
