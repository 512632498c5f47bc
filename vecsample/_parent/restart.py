"""What a failed worker becomes, decided once at construction: an exception (``RaiseFailures``,
``restart=False``) or a respawn (``Restarts``, ``restart=True``).

A step's wait (``StepChannel.collect``) returns what it read together with what died, failed or
hung; the sampler's policy turns that into the call's results or one exception, raised at the API
boundary (``settle``). Commands go through the pool's RPC, where the policy's ``heal_hook``
(None: raise) respawns what died during them; ``heal`` respawns workers found lost before a call.

With ``Restarts``, a worker that died, raised or hung is respawned in place: a fresh process on a
fresh pipe (no stale reply can be read), its envs rebuilt and given again the tasks and
attributes that ``reset_task``/``set_attr`` gave them, reset with seeds drawn from each env's own
stream (``seeding.EnvSeeds``), and their rows flagged ``restarted`` and truncated. The respawned
worker comes back as a result of the call that saw it fail, so the caller's loop goes on. Past
``max_restarts`` the failure is raised as RestartLimitError. See docs/reliability.md.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from vecsample import errors
from vecsample._wire.protocol import Command, WorkerState
from vecsample.config import Deadline, SamplerConfig
from vecsample.results import StepResult
from vecsample.seeding import EnvSeeds

if TYPE_CHECKING:  # passed in by the sampler, which builds them: no import at run time
    from vecsample._parent.pool import Heal, WorkerPool
    from vecsample._parent.stepping import Collected, StepChannel


class FailurePolicy(Protocol):
    """What the sampler does with a worker that died, raised or hung."""

    #: Every restart so far, oldest first: (worker, reason); empty without restarts.
    log: list[tuple[int, str]]
    #: Given to the pool's command RPC: respawns workers lost during a command (None: raise).
    heal_hook: Heal | None

    def settle(self, got: Collected, pending: Sequence[int], copy: bool) -> list[StepResult]:
        """A step's results, from what its wait found; or one exception carrying them."""

    def heal(self, workers: list[int], deadline: Deadline | None = None) -> None:
        """Before a call: what it does with ``workers`` that an earlier call left lost."""

    def remember(self, command: Command, name: str, values: list[Any]) -> None:
        """A ``reset_task`` (name ``""``) or ``set_attr(name)`` that every env took."""

    def force(self, w: int, reason: str, copy: bool) -> list[StepResult]:
        """Replay: restarts worker ``w`` as the recorded run did, whatever it does now."""


class RaiseFailures:
    """``restart=False``: the first loss of a wait is raised, carrying the results read with it;
    past the deadline, DeadlineExceededError names the hung workers, which stay pending."""

    log: list[tuple[int, str]]
    heal_hook: Heal | None = None

    def __init__(self) -> None:
        self.log = []

    def settle(self, got: Collected, pending: Sequence[int], copy: bool) -> list[StepResult]:
        if got.hung:
            raise errors.DeadlineExceededError(hung_workers=got.hung, deadline=got.bound,
                                               results=got.results)
        if got.lost:
            first = got.lost[0]
            first.results, first.others = list(got.results), got.lost[1:]
            raise first
        return got.results

    def heal(self, workers: list[int], deadline: Deadline | None = None) -> None:
        """Nothing: the call that needs them raises WorkerLostError."""

    def remember(self, command: Command, name: str, values: list[Any]) -> None:
        """Nothing: without restarts no env is ever re-made."""

    def force(self, w: int, reason: str, copy: bool) -> list[StepResult]:
        raise AssertionError("a replay's header check makes a run without restarts replay "
                             "a log without restarts")


class Restarts:
    """``restart=True``: a worker that died, raised or hung is respawned and returned flagged."""

    def __init__(self, config: SamplerConfig, pool: WorkerPool, channel: StepChannel,
                 seeds: EnvSeeds) -> None:
        self._config = config
        self._pool = pool
        self._channel = channel
        self._seeds = seeds
        #: Every restart so far, oldest first: (worker, reason).
        self.log: list[tuple[int, str]] = []
        #: What the sampler's commands set on the envs: reset_task's tasks and set_attr's values
        #: (one per env), by (command, attribute), the latest call last. A respawned worker's
        #: envs get them again before their reset, as the old envs had them.
        self.settings: dict[tuple[Command, str], list[Any]] = {}
        self.heal_hook: Heal | None = self.heal

    def remember(self, command: Command, name: str, values: list[Any]) -> None:
        self.settings.pop((command, name), None)  # re-inserted: the latest call goes last
        self.settings[(command, name)] = values

    def settle(self, got: Collected, pending: Sequence[int], copy: bool) -> list[StepResult]:
        """``got``'s results, plus a flagged result for each worker lost or hung in the wait,
        respawned (once per process: an other half restarted with an earlier one is done)."""
        results = list(got.results)
        causes: list[tuple[int, str, errors.VecSampleError]] = [
            (e.worker, e.reason, e) for e in got.lost]
        hung = errors.DeadlineExceededError(hung_workers=got.hung, deadline=got.bound)
        causes += [(w, "hung past the deadline", hung) for w in got.hung]
        for w, reason, cause in causes:
            if all(r.worker != w for r in results):
                results += self._restart(w, reason, cause, results, copy, pending=pending)
        return results

    def heal(self, workers: list[int], deadline: Deadline | None = None) -> None:
        """Workers left failed or dead by a synchronous call are respawned
        before their next use (their envs flagged like any restart), within the ``deadline`` of
        the call that needs them (default: the sampler's deadline and startup_deadline)."""
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
        seeds = self._seeds.for_restart(lo, hi, restarts)
        infos = self._pool.reset(seeds, None, None, deadline, workers=list(slots))
        for s in slots:
            self._channel.flag_restarted(s)
        return infos
