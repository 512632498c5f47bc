"""What a failed worker becomes, decided once at construction: an exception (``RaiseFailures``,
``restart=False``) or a respawn (``Restarts``, ``restart=True``).

A step's wait (``Channel.collect``) returns what it read together with what died, failed or
hung; the sampler's policy turns that into the call's results or one exception, raised at the API
boundary (``settle``). A command's RPC returns its replies with the workers lost on the way
(``pool.Replies``); the policy raises the first loss or respawns the lost workers and asks them
again (``on_lost_in_command``). ``found_dead`` is told of the workers that died between two
calls, and ``heal`` respawns workers found lost before a call.

With ``Restarts``, a worker that died, raised or hung is respawned in place: the channel stops
its process, starts a fresh one on a fresh pipe (no stale reply can be read) and flags its rows
``restarted`` and truncated (``Channel.respawned``); this policy gives the new envs again the
tasks and attributes that ``reset_task``/``set_attr`` gave them and resets them with seeds drawn
from each env's own stream (``seeding.EnvSeeds``). The respawned worker comes back as a result of
the call that saw it fail, so the caller's loop goes on. Past ``max_restarts`` the failure is
raised as RestartLimitError. See docs/reliability.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from vecsample import errors
from vecsample._parent import commands
from vecsample._parent.deadline import Deadline
from vecsample._parent.layout import Layout
from vecsample._wire.protocol import Command, WorkerState
from vecsample.results import StepResult
from vecsample.seeding import EnvSeeds

if TYPE_CHECKING:  # passed in by the sampler, which builds them: no import at run time
    from vecsample._parent.channel import Channel, Collected
    from vecsample._parent.pool import Replies, WorkerPool

#: Asks the workers given again for the command that lost them: their ``Replies``.
Retry = Callable[[list[int]], "Replies"]


class FailurePolicy(Protocol):
    """What the sampler does with a worker that died, raised or hung."""

    #: Every restart so far, oldest first: (worker, reason); empty without restarts.
    log: list[tuple[int, str]]

    def settle(self, got: Collected, pending: Sequence[int], copy: bool) -> list[StepResult]:
        """A step's results, from what its wait found; or one exception carrying them."""

    def on_lost_in_command(self, replies: Replies, retry: Retry,
                           deadline: Deadline) -> dict[int, Any]:
        """A command's replies by worker, once the workers it lost are dealt with: its first
        loss raised, or the lost workers respawned and asked again (``retry``)."""

    def found_dead(self, dead: list[errors.WorkerDiedError]) -> None:
        """Before a command: ``dead`` workers died since their last call."""

    def heal(self, workers: list[int], deadline: Deadline | None = None) -> None:
        """Before a call: what it does with ``workers`` that an earlier call left lost."""

    def remember(self, command: Command, name: str, values: list[Any]) -> None:
        """A ``reset_task`` (name ``""``) or ``set_attr(name)`` that every env took."""


class RaiseFailures:
    """``restart=False``: the first loss of a wait is raised, carrying the results read with it;
    past the deadline, DeadlineExceededError names the hung workers, which stay pending."""

    log: list[tuple[int, str]]

    def __init__(self) -> None:
        self.log = []

    def settle(self, got: Collected, pending: Sequence[int], copy: bool) -> list[StepResult]:
        if got.hung:
            raise errors.DeadlineExceededError(hung_workers=got.hung, deadline=got.bound,
                                               results=got.results)
        if got.lost:
            raise got.lost[0].carrying(results=list(got.results), others=got.lost[1:])
        return got.results

    def on_lost_in_command(self, replies: Replies, retry: Retry,
                           deadline: Deadline) -> dict[int, Any]:
        return replies.or_raise()

    def found_dead(self, dead: list[errors.WorkerDiedError]) -> None:
        """The first death is news to the caller; later calls get WorkerLostError."""
        if dead:
            raise dead[0]

    def heal(self, workers: list[int], deadline: Deadline | None = None) -> None:
        """Nothing: the call that needs them raises WorkerLostError."""

    def remember(self, command: Command, name: str, values: list[Any]) -> None:
        """Nothing: without restarts no env is ever re-made."""


class Restarts:
    """``restart=True``: a worker that died, raised or hung is respawned and returned flagged."""

    def __init__(self, layout: Layout, pool: WorkerPool, channel: Channel,
                 seeds: EnvSeeds) -> None:
        self._layout = layout
        self._pool = pool
        self._channel = channel
        self._seeds = seeds
        #: Every restart so far, oldest first: (worker, reason).
        self.log: list[tuple[int, str]] = []
        #: What the sampler's commands set on the envs: reset_task's tasks and set_attr's values
        #: (one per env), by (command, attribute), the latest call last. A respawned worker's
        #: envs get them again before their reset, as the old envs had them.
        self.settings: dict[tuple[Command, str], list[Any]] = {}

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
            delivered = {r.worker for r in results}
            if w not in delivered:
                owed = {s for s in pending if s not in delivered}
                results += self._restart(w, reason, cause, results, copy, owed=owed)
        return results

    def on_lost_in_command(self, replies: Replies, retry: Retry,
                           deadline: Deadline) -> dict[int, Any]:
        """Workers that died during the command are respawned and asked again, the others'
        replies kept, all within ``deadline``; an env that raised is the caller's to see."""
        answered = dict(replies.ok)
        while replies.lost:
            if not isinstance(replies.lost[0], errors.WorkerDiedError):
                raise replies.first_lost(answered)
            lost = [e.worker for e in replies.lost]
            self.heal(lost, deadline)  # RestartLimitError past max_restarts
            replies = retry(lost)
            answered.update(replies.ok)
        return answered

    def found_dead(self, dead: list[errors.WorkerDiedError]) -> None:
        """Nothing yet: the call heals them before it uses them."""

    def heal(self, workers: list[int], deadline: Deadline | None = None) -> None:
        """Workers left failed or dead by a synchronous call are respawned
        before their next use (their envs flagged like any restart), within the ``deadline`` of
        the call that needs them (default: the sampler's deadline and startup_deadline)."""
        for w in workers:
            state = self._pool.states[w]  # an other half restarted with an earlier one: idle
            if state in (WorkerState.FAILED, WorkerState.DEAD):
                cause = errors.WorkerLostError(call="heal", worker=w, state=state.value)
                self._restart(w, f"was {state.value} when it was next used", cause, [], True,
                              deadline, hold=True)  # its next step returns this restart

    def force(self, w: int, reason: str, copy: bool) -> list[StepResult]:
        """Replay (replay.py): restarts worker ``w``, pending in a step, as the recorded run did,
        whatever it does now; the same seeds and flags, since the restart log is the same."""
        cause = errors.WorkerLostError(call="replay", worker=w, state="restarted in the record")
        return self._restart(w, reason, cause, [], copy)

    def _restart(self, w: int, reason: str, cause: BaseException, results: list[StepResult],
                 copy: bool, deadline: Deadline | None = None, owed: frozenset[int] | set[int]
                 = frozenset(), hold: bool = False) -> list[StepResult]:
        """Respawns the process serving worker ``w`` in place (one restart, whatever it serves):
        its flagged result, then those of its other half (``pipeline``) if the death lost its
        step (``Channel.respawned``). Raises RestartLimitError past ``max_restarts``; a
        rebuild that fails too raises, carrying ``results``."""
        self._check_limit(w, reason, cause, results)
        self.log.append((w, reason))
        bound = deadline or Deadline(self._layout.options.deadline)
        try:
            return self._channel.respawned(
                w, reason, copy, owed=owed, hold=hold,
                startup=bound.per(self._layout.options.startup_deadline),
                reinit=functools.partial(self._reinit, bound))
        except errors.WorkerError as exc:  # the rebuild failed too: keep what others returned
            raise exc.carrying(results=[*results, *exc.results]).with_traceback(
                exc.__traceback__) from exc.__cause__

    def _check_limit(self, w: int, reason: str, cause: BaseException,
                     results: list[StepResult]) -> None:
        if len(self.log) >= self._layout.options.max_restarts:
            self._pool.states.transition(w, WorkerState.FAILED)
            raise errors.RestartLimitError(
                worker=w, reason=reason, history=self.log,
                max_restarts=self._layout.options.max_restarts, env=getattr(cause, "env", None),
                remote_traceback=getattr(cause, "remote_traceback", ""), results=results,
            ) from cause

    def _reinit(self, deadline: Deadline, slots: range) -> list[dict[str, Any]]:
        """The envs of a respawned process (``slots``): given the tasks and attributes their
        old envs had, then reset with seeds from their own streams; every env's reset info."""
        for (command, name), values in self.settings.items():
            setting = functools.partial(self._setting, command, name, values)
            self._pool.request(command, slots, setting, deadline).or_raise()
        lo, hi = self._layout.bounds(slots[0])[0], self._layout.bounds(slots[-1])[1]
        restarts = sum(1 for worker, _ in self.log if worker in slots)  # of this process
        seeds = self._seeds.for_restart(lo, hi, restarts)
        payload = commands.reset_payload(self._layout, seeds, None, None)
        return commands.reset_infos(self._layout, self._pool.buffers, self._pool.request(
            Command.RESET, slots, payload, deadline).or_raise())

    def _setting(self, command: Command, name: str, values: list[Any], slot: int) -> Any:
        """The payload of a remembered command for ``slot``: its envs' rows of ``values``."""
        block = values[slice(*self._layout.bounds(slot))]
        return block if command is Command.RESET_TASK else (name, block)
