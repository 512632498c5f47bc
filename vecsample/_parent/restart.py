"""``Restarts``: the restart policy (``restart=True``), on top of the step channel and the pool.

A worker that died, raised or hung is respawned in place: a fresh process on a fresh pipe (no
stale reply can be read), its envs rebuilt and reset with seeds drawn from each env's own stream
(``seeding.restart_seed``), and their rows flagged ``restarted`` and truncated. The respawned
worker comes back as a result of the call that saw it fail, so the caller's loop goes on. Past
``max_restarts`` the failure is raised as RestartLimitError. See docs/reliability.md.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Collection
from typing import Any

from vecsample import errors
from vecsample._parent.pool import WorkerPool
from vecsample._parent.stepping import StepChannel
from vecsample._wire.protocol import Command, WorkerState
from vecsample.config import Deadline, SamplerConfig
from vecsample.results import StepResult
from vecsample.seeding import SeedArg, env_seeds, resolve_seeds, restart_seed


class Restarts:
    """Collects steps, respawning failed workers when the sampler was built with restart."""

    def __init__(self, config: SamplerConfig, pool: WorkerPool, channel: StepChannel) -> None:
        self._config = config
        self._pool = pool
        self._channel = channel
        #: Each env's own seed stream, for re-seeding restarts (reset(seed=...) replaces it).
        self.streams = env_seeds(config.options.seed, config.num_envs)
        self._first_seeds: list[int | None] = list(self.streams)  # used by the first reset
        #: Every restart so far, oldest first: (worker, reason).
        self.log: list[tuple[int, str]] = []
        #: What the sampler's commands set on the envs: reset_task's tasks and set_attr's values
        #: (one per env), by (command, attribute), the latest call last. A respawned worker's
        #: envs get them again before their reset, as the old envs had them.
        self.settings: dict[tuple[Command, str], list[Any]] = {}

    def remember(self, command: Command, name: str, values: list[Any]) -> None:
        """Notes a ``reset_task`` (name ``""``) or ``set_attr(name)`` that every env took."""
        self.settings.pop((command, name), None)  # re-inserted: the latest call goes last
        self.settings[(command, name)] = values

    def collect(self, pending: list[int], timeout: float | None, deadline: float | None,
                copy: bool) -> list[StepResult]:
        """``StepChannel.collect``, but with restart on a worker that died, raised or hung is
        respawned and returned as a result whose envs are flagged restarted and truncated."""
        if not self._config.options.restart:
            return self._channel.collect(pending, timeout, deadline, copy)
        results: list[StepResult] = []
        deadline_at = None if deadline is None else time.monotonic() + deadline
        while pending:
            remaining = None if deadline_at is None else max(0.0, deadline_at - time.monotonic())
            try:
                return results + self._channel.collect(pending, timeout, remaining, copy)
            except errors.DeadlineExceededError as exc:
                results += exc.results
                for w in exc.hung_workers:
                    if w not in {r.worker for r in results}:  # not restarted with its other half
                        results += self._restart(w, "hung past the deadline", exc, results, copy,
                                                 pending=pending)
                return results
            except errors.WorkerError as exc:
                results += exc.results
                results += self._restart(exc.worker, exc.reason, exc, results, copy,
                                         pending=pending)
                for w in self._lost_too(pending, exc.worker):  # died in the same collect
                    results += self._restart(w, "died in the same step", exc, results, copy,
                                             pending=pending)
            if timeout is not None:  # a partial batch: the restarted worker is enough
                return results
            got = {r.worker for r in results}  # read but not yet delivered: still STEPPING
            pending = [w for w in pending
                       if self._pool.states[w] is WorkerState.STEPPING and w not in got]
        return results

    def _lost_too(self, pending: list[int], reported: int) -> list[int]:
        states = self._pool.states
        return [w for w in pending if w != reported and states[w] is WorkerState.DEAD]

    def seeds_for_reset(self, seed: SeedArg) -> list[int | None]:
        """The seeds of a ``reset(seed)``: None gives the constructor's seed once, then none;
        a new seed also becomes the streams that later restarts draw from."""
        if seed is None:
            seeds, self._first_seeds = self._first_seeds, [None] * self._config.num_envs
            return seeds
        seeds = resolve_seeds(seed, self._config.num_envs)
        self._first_seeds = [None] * self._config.num_envs
        self.streams = list(seeds)
        return seeds

    def heal(self, workers: list[int], deadline: Deadline | None = None) -> None:
        """With restart on, workers left failed or dead by a synchronous call are respawned
        before their next use (their envs flagged like any restart), within the ``deadline`` of
        the call that needs them (default: the sampler's deadline and startup_deadline)."""
        if not self._config.options.restart:
            return
        for w in workers:
            state = self._pool.states[w]  # an other half restarted with an earlier one: idle
            if state in (WorkerState.FAILED, WorkerState.DEAD):
                cause = errors.WorkerLostError(call="heal", worker=w, state=state.value)
                result, *_ = self._restart(w, f"was {state.value} when it was next used", cause,
                                           [], True, deadline)
                self._channel.hold(w, result)  # its next step returns this restart

    def force(self, w: int, reason: str, copy: bool) -> list[StepResult]:
        """Replay (replay.py): restarts worker ``w``, pending in a step, as the recorded run did,
        whatever it does now; the same seeds and flags, since the restart log is the same."""
        cause = errors.WorkerLostError(call="replay", worker=w, state="restarted in the record")
        return self._restart(w, reason, cause, [], copy)

    def _restart(self, w: int, reason: str, cause: BaseException, results: list[StepResult],
                 copy: bool, deadline: Deadline | None = None,
                 pending: Collection[int] = ()) -> list[StepResult]:
        """Respawns the process serving worker ``w`` in place (one restart, whatever it serves)
        and returns ``w``'s flagged result, then those of its other half (``pipeline``) if the
        death lost its step (stepping, or in ``pending``). An other half whose result stands
        (received, or finished before the death) keeps it: its rows are restored after the
        respawn and its restart is returned by its next step. Other processes' rows are never
        touched. Raises RestartLimitError past ``max_restarts``."""
        self._check_limit(w, reason, cause, results)
        self.log.append((w, reason))
        others = [s for s in self._config.process_slots(w) if s != w]
        lost = [s for s in others if self._owed(s, pending, results)
                and not self._channel.settled(s, copy)]
        saved = {s: self._channel.views[s].copy_rows() for s in others if s not in lost}
        try:
            reset_infos = self._respawn(w, deadline or Deadline(self._config.options.deadline))
        except errors.WorkerError as exc:  # the rebuild failed too: keep what others returned
            exc.results = [*results, *exc.results]
            raise
        made = {s: self._flagged(s, reset_infos, reason if s == w else
                                 f"{reason} (worker {w}, the other half of its process)",
                                 copy or s in saved) for s in (w, *others)}
        for s, rows in saved.items():
            self._channel.keep(s, made[s], rows)
        for s in lost:
            self._channel.carry(s, made[s])
        return [made[w], *(made[s] for s in lost)]

    def _owed(self, w: int, pending: Collection[int], results: list[StepResult]) -> bool:
        """Whether a step of worker ``w`` awaits its result: stepping, or pending in this recv
        (and marked dead since) and not among the ``results`` read so far."""
        if self._pool.states[w] is WorkerState.STEPPING:
            return True
        return w in pending and all(r.worker != w for r in results)

    def _check_limit(self, w: int, reason: str, cause: BaseException,
                     results: list[StepResult]) -> None:
        if len(self.log) >= self._config.options.max_restarts:
            self._pool.states.transition(w, WorkerState.FAILED)
            raise errors.RestartLimitError(
                worker=w, reason=reason, history=self.log,
                max_restarts=self._config.options.max_restarts, env=getattr(cause, "env", None),
                remote_traceback=getattr(cause, "remote_traceback", ""), results=results,
            ) from cause

    def _flagged(self, w: int, reset_infos: list[dict[str, Any]], reason: str,
                 copy: bool) -> StepResult:
        """Worker ``w``'s rows after the respawn, with its envs' reset infos and ``reason``."""
        result = self._channel.result_of(w, copy)  # added as leftovers: the map stays columnar
        result.reset_infos.add(None, {env: reset_infos[env] for env in result.env_ids})
        result.infos.add(None, {env: {"restart_reason": reason} for env in result.env_ids})
        return result

    def _set_again(self, slots: list[int], deadline: Deadline) -> None:
        """Gives the respawned ``slots``' envs the tasks and attributes their old envs had."""
        for (command, name), values in self.settings.items():
            payload = functools.partial(self._setting, command, name, values)
            self._pool.request(command, slots, payload, deadline)

    def _setting(self, command: Command, name: str, values: list[Any], slot: int) -> Any:
        """The payload of a remembered command for ``slot``: its envs' rows of ``values``."""
        block = values[slice(*self._config.bounds(slot))]
        return block if command is Command.RESET_TASK else (name, block)

    def _respawn(self, w: int, deadline: Deadline) -> list[dict[str, Any]]:
        """A fresh process for worker ``w`` (and its other half) with re-seeded envs and flagged
        rows, built and reset within ``deadline``; every env's reset info (empty: not reset)."""
        slots = self._config.process_slots(w)
        self._pool.stop(w)
        for s in slots:  # after the old process is gone: nothing can write behind us
            self._channel.forget(s)
        self._pool.respawn(w, deadline.per(self._config.options.startup_deadline))
        self._set_again(list(slots), deadline)
        lo, hi = self._config.bounds(slots[0])[0], self._config.bounds(slots[-1])[1]
        restarts = sum(1 for worker, _ in self.log if worker in slots)  # of this process
        seeds = [restart_seed(stream, restarts) for stream in self.streams[lo:hi]]
        streams = [None] * lo + seeds  # only the process's rows are read
        infos = self._pool.reset(streams, None, None, deadline, workers=list(slots))
        for s in slots:
            self._channel.flag_restarted(s)
        return infos
