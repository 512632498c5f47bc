"""The parent–worker contract on one page: commands, replies, worker states (the autoreset
modes, which users name too, are in ``vecsample/types.py``).

Steps go through shared memory (``vecsample._wire.handshake``): sequence counters, with pipes
only as doorbells for a sleeping side, and a pickled ``(Reply.OK, StepReply)`` or
``(Reply.ERROR, report)`` on the pipe after a step that has infos, pickled leaves or failed.
Every other command travels on one duplex ``multiprocessing.Pipe`` per worker
(see docs/architecture.md):

* parent → worker: a pickled ``(Command, payload)`` tuple (or ``handshake.DOORBELL``, a ring).
* worker → parent: ``OK_MESSAGE`` (one byte) when a command returned nothing; otherwise a pickled
  ``(Reply, payload)`` tuple. A pickle always starts with ``0x80``, so it never collides with the
  one-byte messages.

Bulk data (actions, observations, rewards, flags, final observations) never travels on the
pipe: it lives in shared memory (``vecsample._wire.shm``). The exception is a *pickled leaf*, a
space with no fixed shape (Text, Graph, Sequence, OneOf, custom): its values ride in the step's
reply, and its actions in one pickled message the parent sends right after posting the step.
"""

from __future__ import annotations

import numbers
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum, IntEnum
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from vecsample import errors

if TYPE_CHECKING:  # in the aliases' quoted annotations only
    from vecsample._wire.infos import InfoRecord


class Command(IntEnum):
    """What the parent asks a worker to do on its pipe (a step is posted through shared memory,
    handshake.py, and never travels as a command)."""

    RESET = 2
    RESET_TASK = 3
    CALL = 4
    GET_ATTR = 5
    SET_ATTR = 6
    CLOSE = 7


class Reply(IntEnum):
    """What a worker answers."""

    OK = 1  # payload: command-specific result (infos, call results, ...)
    ERROR = 2  # payload: ErrorReport fields as a tuple
    READY = 3  # payload: None; sent once after the envs are built


class WorkerState(Enum):
    """The parent's view of one worker; the state machine behind every out-of-order error."""

    IDLE = "idle"
    STEPPING = "stepping"
    BUSY = "busy"  # a synchronous command (reset, call, ...) is in flight
    FAILED = "failed"  # its env raised or it hung; it must be restarted or the sampler closed
    DEAD = "dead"  # the process is gone
    CLOSED = "closed"

    # Hashed by identity, in C: Enum's own __hash__ is a Python call, and every transition
    # hashes two states (the table's lookup and membership), twice a step. Members are
    # singletons, so identity is equality.
    __hash__ = object.__hash__


_S = WorkerState
#: Every move a worker's state may make; anything else is a bug in vecsample (ProtocolError).
#: A restart moves a failed, dead or hung (still STEPPING) worker to BUSY while it is rebuilt.
TRANSITIONS: dict[WorkerState, frozenset[WorkerState]] = {
    _S.IDLE: frozenset({_S.STEPPING, _S.BUSY, _S.DEAD, _S.CLOSED}),  # DEAD: a send failed
    _S.STEPPING: frozenset({_S.IDLE, _S.FAILED, _S.DEAD, _S.BUSY, _S.CLOSED}),
    _S.BUSY: frozenset({_S.IDLE, _S.FAILED, _S.DEAD, _S.CLOSED}),
    _S.FAILED: frozenset({_S.BUSY, _S.FAILED, _S.CLOSED}),
    _S.DEAD: frozenset({_S.BUSY, _S.FAILED, _S.CLOSED}),
    _S.CLOSED: frozenset(),
}


class WorkerStates:
    """One ``WorkerState`` per worker, changed only through :meth:`transition`.

    The out-of-order checks (``expect_idle``, ``expect_all_idle``, ``stepping``) raise the
    errors a caller can act on, in gymnasium's style: which call, which workers, what to call
    first.
    """

    def __init__(self, num_workers: int) -> None:
        #: The states by worker, for reads on the hot path; change them only by ``transition``.
        self.current = [WorkerState.IDLE] * num_workers
        #: Set by ``close_all``: a wait in another thread sees it and ends (ClosedError).
        self.closed = False

    def __getitem__(self, w: int) -> WorkerState:
        return self.current[w]

    def index(self, worker: object, closed: bool) -> int:
        """``worker`` as a valid index, or ClosedError / WorkerIndexError saying why not."""
        if closed:
            raise errors.ClosedError(what="VecSampler")
        n = len(self.current)
        if (isinstance(worker, bool) or not isinstance(worker, numbers.Integral)
                or not 0 <= int(worker) < n):
            raise errors.WorkerIndexError(worker=worker, num_workers=n)
        return int(worker)

    def transition(self, w: int, to: WorkerState) -> None:
        """Moves worker ``w`` to ``to``; a move not in TRANSITIONS raises ProtocolError."""
        now = self.current[w]
        if to not in TRANSITIONS[now]:
            raise errors.ProtocolError(worker=w, current=now.value, requested=to.value)
        self.current[w] = to

    def transition_all(self, to: WorkerState) -> None:
        """Moves every worker to ``to``, checking each distinct state once: when all are in one
        state (every step), one C-level count and one check, nothing per worker (an enum
        member's hash is a Python call, so no set of them here)."""
        current, first = self.current, self.current[0]
        states = [first] if current.count(first) == len(current) else list(WorkerState)
        for now in states:
            if to not in TRANSITIONS[now] and now in current:
                raise errors.ProtocolError(worker=current.index(now), current=now.value,
                                           requested=to.value)
        current[:] = [to] * len(current)

    def set_many(self, workers: Sequence[int], frm: WorkerState, to: WorkerState) -> None:
        """Moves each of ``workers`` from ``frm`` to ``to``: one check of the move, one C-level
        look at their states, and the writes in C (nothing per worker in Python), for a batch
        of them. A worker not in ``frm`` raises ProtocolError before anything moves."""
        current = self.current
        if not workers:
            return
        got = (current[workers[0]],) if len(workers) == 1 else itemgetter(*workers)(current)
        if to not in TRANSITIONS[frm] or got.count(frm) != len(workers):
            w = next((w for w in workers if current[w] is not frm), workers[0])
            raise errors.ProtocolError(worker=w, current=current[w].value, requested=to.value)
        deque(map(current.__setitem__, workers, repeat(to, len(workers))), maxlen=0)

    def close_all(self) -> None:
        self.closed = True
        for w in range(len(self.current)):
            self.transition(w, WorkerState.CLOSED)

    def stepping(self) -> list[int]:
        """The workers with a step in flight, in index order."""
        return [w for w, s in enumerate(self.current) if s is WorkerState.STEPPING]

    def all_idle(self) -> bool:
        return self.current.count(WorkerState.IDLE) == len(self.current)  # one C-level count

    def all_stepping(self) -> bool:
        return self.current.count(WorkerState.STEPPING) == len(self.current)

    def any_stepping(self) -> bool:
        return WorkerState.STEPPING in self.current  # one C-level scan

    def expect_idle(self, w: int, call: str) -> None:
        """Raises unless worker ``w`` can take ``call`` now (restart heals lost ones first)."""
        state = self.current[w]
        if state is WorkerState.STEPPING:
            raise errors.WorkerBusyError(call=call, workers=[w], to_one=True)
        if state is not WorkerState.IDLE:
            raise errors.WorkerLostError(call=call, worker=w, state=state.value)

    def expect_all_idle(self, call: str) -> None:
        """Raises unless every worker can take ``call`` now (a command to all of them)."""
        if self.all_idle():
            return
        stepping = self.stepping()
        if stepping:
            raise errors.WorkerBusyError(call=call, workers=stepping)
        for w in range(len(self.current)):
            self.expect_idle(w, call)

    def lost(self) -> list[int]:
        """The workers left failed or dead by an earlier call."""
        return [w for w, s in enumerate(self.current)
                if s in (WorkerState.FAILED, WorkerState.DEAD)]


OK_MESSAGE = b"\x00"

#: A step's message payload: the infos that did not fit in shared-memory columns (None: none),
#: the pickled leaves' values, and info keys proposed for new columns (vecsample/_wire/infos.py).
StepReply = tuple["list[InfoRecord] | None", "dict[str, list[Any]] | None",
                  "dict[str, tuple[type, str, tuple[int, ...]]]"]
#: A reset's reply: (local env index, reset info) per env reset, and the pickled leaves' values.
ResetReply = tuple[list[tuple[int, dict[str, Any]]], "dict[str, list[Any]] | None"]


@dataclass
class ErrorReport:
    """What a worker sends (with ``Reply.ERROR``) when a handler raised."""

    env: int | None
    command: str
    exc_type: str
    message: str
    traceback: str
