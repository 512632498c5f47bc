"""The blocks this process steps itself (``Options.env_placement``), and ``LocalChannel``.

A block served here is the worker's own code (``inprocess.LocalBlock``, through the door
``vecsample/inprocess.py``), called directly: no process, pipe or handshake. ``LocalSteps``
runs the posted steps of such blocks and keeps each one's outcome (its info records, or the
report of the exception it raised) until it is read, as a worker's ``DONE`` word and pipe keep
it; ``read`` turns an outcome into the slot's ``StepResult`` or its error. ``LocalChannel`` is
the channel of a sampler whose every block is served here (``env_placement="parent"``), the
backend that ``SyncVectorEnv`` is to gymnasium: a step is a loop over the blocks, in this
process, with the same rows, infos, autoresets, errors, replay and restarts as with worker
processes. ``SharingChannel`` is ``StepChannel`` (``stepping.py``) with ``LocalSteps`` for
the one block it serves beside its worker processes (``"share"``).

What a block served here cannot promise (docs/reliability.md): an env that hangs cannot be
cut short or killed (``deadline`` does not bound it), and one that crashes the process takes
the trainer with it. Interrupts: a step runs in an interrupt-safe section, so vecsample's
SIGINT handler holds a Ctrl-C until the block's step is done (the step is then finished and
returned, the interrupt raised by the next call); a KeyboardInterrupt that escapes the step
anyway (an env's own, or a SIGINT handler other than vecsample's) ends it as failed at the env
it interrupted, is raised at once, and the next call reports the failure (or, with
``restart``, rebuilds the block at once).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

import numpy as np

from vecsample import errors
from vecsample._parent import signals
from vecsample._parent.channel import Channel, Collected
from vecsample._parent.deadline import Deadline
from vecsample._parent.layout import Layout
from vecsample._parent.stats import Meter
from vecsample._parent.stepping import StepChannel, add_infos, closed_while_waiting
from vecsample._wire.handshake import REPLY_MESSAGE, REPLY_PLAIN, HandshakeState
from vecsample._wire.infos import Schema, Signature
from vecsample._wire.protocol import ErrorReport, WorkerState
from vecsample._wire.shm import SharedBuffers
from vecsample.inprocess import Stepped
from vecsample.results import StepResult

if TYPE_CHECKING:  # passed in by the sampler, which builds it: no import at run time
    from vecsample._parent.pool import WorkerPool

#: What a block's step left to read: its infos (``inprocess.Stepped``: the records left over,
#: the keys proposed for columns, the columns written), or the report of the exception it
#: raised.
Outcome = Stepped | ErrorReport


class LocalSteps:
    """Runs the posted steps of the blocks served here (``pool.local``) and keeps their
    outcomes until read."""

    def __init__(self, pool: WorkerPool, slots: Sequence[int], schema: Schema,
                 timers: dict[str, float],
                 ended: Callable[[int, Outcome], None] | None = None,
                 propose: Callable[[dict[str, Signature]], object] | None = None) -> None:
        self._pool = pool
        #: The sampler's info columns (the channel's): a block stepped here writes its infos
        #: there, and proposes the keys that have none yet.
        self._schema = schema
        #: How a proposal is taken: the channel's own where worker processes must learn of
        #: the new columns too (``StepChannel.propose``, which publishes them), else the
        #: schema's.
        self._propose = propose or schema.propose
        self._timers = timers
        #: Called as each step ends, however it ends (``SharingChannel`` completes the slot's
        #: control row there, before an interrupt out of the step can leave it incomplete).
        self._ended = ended
        self.slots = frozenset(slots)
        self._order = tuple(sorted(slots))
        #: Slots whose step is posted and not run yet; slots whose step ran, with its outcome.
        self.posted: set[int] = set()
        self.finished: dict[int, Outcome] = {}
        #: Whether a step run since ``finished`` was last emptied raised.
        self.failed = False
        #: Steps posted and finished per slot, for ``snapshot`` (the batches posted together
        #: counted once, in ``batches``).
        self._posted = dict.fromkeys(self._order, 0)
        self._finished = dict.fromkeys(self._order, 0)
        self._batches = 0

    def post(self, w: int) -> None:
        self.posted.add(w)
        self._posted[w] += 1

    def post_all(self) -> None:
        self.posted.update(self._order)
        self._batches += 1

    def post_many(self, workers: Sequence[int]) -> None:
        for w in workers:
            if w in self.slots:
                self.post(w)

    def forget(self, w: int) -> None:
        """Before ``w``'s block is rebuilt: nothing of its in flight."""
        self.posted.discard(w)
        self.finished.pop(w, None)

    def run(self, pending: Collection[int] | None) -> list[int]:
        """Runs the posted steps of the slots in ``pending`` (None: all), in slot order, in one
        interrupt-safe section (a SIGINT that comes during them is raised once they are done,
        their outcomes kept in ``finished``); the slots run."""
        started = time.perf_counter()
        ran: list[int] = []
        signals.enter()
        try:
            for w in self._order:
                if w in self.posted and (pending is None or w in pending):
                    self._run_one(w)
                    ran.append(w)
        finally:
            self._timers["share_s"] += time.perf_counter() - started
            signals.leave()  # a SIGINT that came during the steps is raised now
        return ran

    def _run_one(self, w: int) -> None:
        block = self._pool.local[w]
        try:
            self.posted.discard(w)
            self.finished[w] = block.step(len(self._schema.columns))
        except Exception:
            self.finished[w] = block.report("STEP")
            self.failed = True
        except BaseException:  # KeyboardInterrupt out of an env: the step ended half taken
            self.finished[w] = block.report("STEP")
            self.failed = True
            raise
        finally:
            self._finished[w] += 1
            if self._ended is not None:
                self._ended(w, self.finished.get(w, _INTERRUPTED))

    def read(self, channel: Channel, w: int, copy: bool) -> StepResult | errors.WorkerError:
        """Slot ``w``'s outcome, taken: its result, stashed in its record as a read step is
        (``Channel``), or the error that names its env (the slot marked failed). A slot that
        was posted and neither ran nor finished (an interrupt between) failed with it."""
        outcome = self.finished.pop(w, _INTERRUPTED)
        if not self.finished:
            self.failed = False
        if isinstance(outcome, ErrorReport):
            return self._pool.failed(w, outcome)
        result = channel.result_of(w, copy)
        self.add_infos(result, channel.blocks[w], outcome)
        channel.stash(w, result)
        return result

    def add_infos(self, result: StepResult, block: range, stepped: Stepped) -> None:
        """A block's step's infos into ``result`` (whose rows ``block`` are the block's): the
        columns it wrote and its records left over; the keys it proposed get columns for its
        next steps."""
        left, candidates, step_bits, reset_bits = stepped
        if candidates:
            self._propose(candidates)
        if left or step_bits or reset_bits:
            add_infos(self._schema, result, block, left, (step_bits, reset_bits))

    def snapshot(self) -> HandshakeState:
        """Steps posted and finished by slot (the slots served here; zeros for the others)."""
        n = max(self._order, default=-1) + 1
        posted, done = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        for w in self._order:
            posted[w] = self._posted[w] + self._batches
            done[w] = self._finished[w]
        return HandshakeState(True, posted, done)


#: The outcome of a step that an interrupt cut off before it was run or kept.
_INTERRUPTED = ErrorReport(env=None, command="STEP", exc_type="KeyboardInterrupt",
                           message="the step of this block, stepped in the trainer's "
                           "process, was interrupted before it ended", traceback="")


class LocalChannel(Channel):
    """The channel of a sampler that steps every block in its own process
    (``env_placement="parent"``): a post marks a slot's step, and the wait runs it; a whole
    batch is one loop over the blocks and one result."""

    def __init__(self, layout: Layout, buffers: SharedBuffers, pool: WorkerPool,
                 meter: Meter | None = None) -> None:
        super().__init__(layout, buffers, pool, meter)
        self._here = LocalSteps(pool, range(layout.num_slots), self._schema, self._timers)
        self._all = range(layout.num_slots)

    def _start(self, w: int) -> None:
        self._here.post(w)

    def _start_all(self) -> None:
        self._here.post_all()

    def _start_many(self, workers: Sequence[int]) -> None:
        self._here.post_many(workers)

    def ring(self, workers: Sequence[int]) -> None:
        """Nothing to wake: the wait runs the steps."""

    def _forget(self, slots: range) -> None:
        for s in slots:
            self._here.forget(s)

    def _finished(self, w: int, copy: bool) -> StepResult | errors.WorkerError | None:
        return self._here.read(self, w, copy) if w in self._here.finished else None

    def snapshot(self) -> HandshakeState:
        return self._here.snapshot()

    def collect(self, pending: list[int], timeout: float | None, deadline: Deadline,
                copy: bool) -> Collected:
        """Every pending slot's step, run now: a partial batch is a full one here (nothing
        is slower to arrive than the loop that runs it); the deadline cannot cut an env
        short."""
        got = Collected()
        waiting = set(pending)
        if self._marked:
            self._take_carried(got.results, waiting)
        self._here.run(waiting)
        start = time.perf_counter()
        for w in sorted(waiting):
            read = self._here.read(self, w, copy)
            if isinstance(read, StepResult):
                got.results.append(read)
            else:
                got.lost.append(read)
        self._timers["return_s"] += time.perf_counter() - start
        if self._states.closed:  # by another thread's close(), which waited for the steps
            raise closed_while_waiting()
        return got

    def collect_batch(self, deadline: Deadline, copy: bool) -> StepResult | None:
        """Every block's step, run now, as one result over all the envs; None where a slot's
        record is not blank or a block raised (``collect`` then reads the outcomes). A SIGINT
        once the steps are taken is held for the next call: the batch is returned."""
        if self._marked:
            return None
        started = time.perf_counter()
        here = self._here
        here.run(None)
        if here.failed:
            return None
        signals.enter()
        try:
            result = self.result_of(None, copy)
            for w, stepped in here.finished.items():
                here.add_infos(result, self.blocks[w], stepped)  # type: ignore[arg-type]
            here.finished.clear()
            self._states.transition_all(WorkerState.IDLE)
            timers = self._timers
            timers["recvs"] += 1.0
            timers["workers_received"] += float(len(self.blocks))
            timers["wait_s"] += time.perf_counter() - started
        finally:
            signals.commit()  # the last call: the batch is taken, a SIGINT is the next call's
        return result


class SharingChannel(StepChannel):
    """The step channel of a sampler whose process serves some slots itself
    (``env_placement="share"``, ``layout.parent_slots``): a wait for steps begins by running
    those of them that are pending, here (``LocalSteps``), while the worker processes step
    theirs. A block served here keeps a control row, which is completed as its step ends (as
    a worker's would be), so the waits and the full batch treat it as any slot; its outcome
    (the info columns it wrote and the values no column takes, or its error) is read from
    here, not from a pipe. Chosen
    once by the sampler: a sampler without such slots pays nothing for them."""

    def __init__(self, layout: Layout, buffers: SharedBuffers, pool: WorkerPool,
                 meter: Meter | None = None) -> None:
        super().__init__(layout, buffers, pool, meter)
        self._here = LocalSteps(pool, layout.parent_slots, self._schema, self._timers,
                                self._complete, self.propose)

    def _start(self, w: int) -> None:
        super()._start(w)
        if w in self._here.slots:
            self._here.post(w)

    def _start_all(self) -> None:
        super()._start_all()
        self._here.post_all()

    def _start_many(self, workers: Sequence[int]) -> None:
        super()._start_many(workers)
        self._here.post_many(workers)

    def _forget(self, slots: range) -> None:
        super()._forget(slots)
        for s in slots:
            self._here.forget(s)

    def collect(self, pending: list[int], timeout: float | None, deadline: Deadline,
                copy: bool) -> Collected:
        self._step_here(pending)
        return super().collect(pending, timeout, deadline, copy)

    def _wait_batch(self, end: float | None) -> bool:
        self._step_here(None)  # a batch posted together: every slot is pending
        return super()._wait_batch(end)

    def _step_here(self, pending: Collection[int] | None) -> None:
        """Runs the posted steps of the slots served here that are in ``pending`` (None:
        all); each completes its control row as it ends (``_complete``)."""
        self._here.run(pending)
        if self._states.closed:  # by another thread's close(), which waited for the steps
            raise closed_while_waiting()

    def _complete(self, w: int, outcome: Outcome) -> None:
        """Slot ``w``'s step here ended: its control row as a worker's reply leaves it, a plain
        one (with the info columns it wrote) where it left no records and did not raise, so
        that a full batch reads it with the others (anything else is read from here by
        ``_read_step``)."""
        if isinstance(outcome, ErrorReport):
            self._hs.finish_here(w, REPLY_MESSAGE, 0, 0)
            return
        left, candidates, step_bits, reset_bits = outcome
        plain = not left and not candidates
        self._hs.finish_here(w, REPLY_PLAIN if plain else REPLY_MESSAGE, step_bits, reset_bits)

    def _read_step(self, w: int, copy: bool) -> StepResult | errors.WorkerError:
        if w not in self._here.slots:
            return super()._read_step(w, copy)
        self._hs.received(w)
        return self._here.read(self, w, copy)


__all__ = ["LocalChannel", "LocalSteps", "Outcome", "SharingChannel"]
