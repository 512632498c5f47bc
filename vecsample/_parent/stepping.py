"""``StepChannel``: the step API over worker processes, through the step handshake.

A posted step is a bump of the worker's ``SEQ`` word (and a ring where it sleeps); its end is
the worker's ``DONE`` word, waited for in one call (C or Python, ``handshake.py``), with the
infos that did not fit in their columns on its pipe. ``collect`` reads a full or partial batch
with what died, failed or hung on the way; ``collect_batch`` a whole batch at a fixed cost.
What a slot holds between steps, the hand-over and the respawn are the base class's
(``channel.py``). ``SharingChannel`` (``local.py``) also steps, between the post and the wait,
the block this process serves itself (``env_placement="share"``).
"""

from __future__ import annotations

import contextlib
import pickle
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from vecsample import errors
from vecsample._parent import signals
from vecsample._parent.channel import Channel, Collected
from vecsample._parent.deadline import Deadline
from vecsample._parent.layout import Layout
from vecsample._parent.stats import Meter
from vecsample._wire.handshake import (
    INFO_RESET,
    INFO_STEP,
    REPLY,
    REPLY_MESSAGE,
    HandshakeState,
)
from vecsample._wire.infos import (
    RESET,
    STEP,
    InfoRecord,
    Schema,
    Signature,
    read_batch,
    read_block,
    read_rows,
)
from vecsample._wire.protocol import Reply, WorkerState
from vecsample._wire.shm import SharedBuffers
from vecsample.results import StepResult

if TYPE_CHECKING:  # passed in by the sampler, which builds it: no import at run time
    from vecsample._parent.pool import WorkerPool


class StepChannel(Channel):
    """Posts, wakes and collects the steps of a pool's worker processes through shared memory."""

    def __init__(self, layout: Layout, buffers: SharedBuffers, pool: WorkerPool,
                 meter: Meter | None = None) -> None:
        super().__init__(layout, buffers, pool, meter)
        self._action_lane = any(not leaf.shared for leaf in buffers.action_leaves)
        #: The parent's end of the handshake, built by the pool from ``layout.transport``.
        self._hs = pool.side
        control = buffers.control()[:layout.num_slots]
        #: Every worker's reply kind and info bitmasks: a full batch reads them at once.
        self._replies = control[:, REPLY]  # views (basic slices): they follow the words
        self._info_bits = control[:, INFO_STEP:INFO_RESET + 1]
        assert INFO_RESET == INFO_STEP + 1 and self._info_bits.base is not None

    def _start(self, w: int) -> None:
        self._hs.post(w)

    def _start_all(self) -> None:
        self._hs.post_all()

    def _start_many(self, workers: Sequence[int]) -> None:
        self._hs.post_many(workers)

    def _forget(self, slots: range) -> None:
        for s in slots:
            self._hs.reset_worker(s)

    def _finished(self, w: int, copy: bool) -> StepResult | errors.WorkerError | None:
        return self._read_step(w, copy) if self._hs.ready((w,)) else None

    def snapshot(self) -> HandshakeState:
        return self._hs.snapshot()

    def ring(self, workers: Sequence[int]) -> None:
        """Wakes those of ``workers`` that sleep (the transport's ``ring``), then sends their
        pickled action leaves, if the action space has any."""
        self._hs.ring(workers)
        if self._action_lane:
            self._send_actions(workers)

    def _send_actions(self, workers: Sequence[int]) -> None:
        """The pickled action leaves of ``workers``, after their post (the worker reads them)."""
        for w in workers:
            conn = self._pool.conns.get(w)
            if conn is None:  # a block served here reads this process's own leaves
                continue
            lo, hi = self._layout.bounds(w)
            message = pickle.dumps(self._buffers.lane(lo, hi, ("act",)), pickle.HIGHEST_PROTOCOL)
            with contextlib.suppress(OSError):  # dead: the next collect reports it (see ring)
                conn.send_bytes(message)

    def collect(self, pending: list[int], timeout: float | None, deadline: Deadline,
                copy: bool) -> Collected:
        """The steps of ``pending`` workers: all of them, or (``timeout``) a partial batch, with
        what died, failed or hung on the way, as a value: nothing here raises for a worker.

        A full batch waits for every pending worker that is alive; a partial one for the first
        arrival (or loss) and then ``timeout`` seconds more. The wait ends at ``deadline``
        (``Deadline.wait_end``); the workers still pending then are ``hung``. The results stay
        stashed (their workers STEPPING) until ``deliver``, the caller's last act before
        returning them, so a KeyboardInterrupt in between leaves them for the next collect."""
        got = Collected()
        waiting = set(pending)
        end = deadline.wait_end()
        window: float | None = None  # the end of a partial batch: ``timeout`` after the first
        if self._marked:
            self._take_carried(got.results, waiting)
        while waiting:
            if timeout is not None and window is None and (got.results or got.lost):
                window = time.monotonic() + timeout  # the first arrival, or the first loss
            if self._read_ready(got, waiting, copy):
                continue
            now = time.monotonic()
            if window is not None and now >= window:
                break
            if end is not None and now >= end:
                got.hung, got.bound = sorted(waiting), deadline.exceeded()
                break
            self._sleep(got, waiting, _earliest(end, window), now)
            if self._states.closed:  # by another thread's close(): the workers are going
                raise closed_while_waiting()
        return got

    def collect_batch(self, deadline: Deadline, copy: bool) -> StepResult | None:
        """Every worker's step of the last ``send_all``, as one StepResult over all the envs,
        in a fixed number of calls whatever the number of workers: one wait for all of them,
        one look at their replies, one read of each info column written. None where this path
        cannot take it: a worker's record is not blank, the steps were not posted together,
        a worker died or the deadline passed first, or a reply came on a pipe (infos of other
        types, pickled leaves, an env that raised); the general ``collect`` then takes over and
        finds the finished steps still unread. A SIGINT once the steps are taken is held for
        the next call (``signals.commit``): the batch is returned, nothing is lost."""
        if self._marked or not self._hs.batch_posted():
            return None
        started = time.perf_counter()
        if not self._wait_batch(deadline.wait_end()) or self._replies.any():
            return None
        read = time.perf_counter()  # from here on, the parent's own work (return_s)
        signals.enter()
        try:
            result = self.result_of(None, copy)
            bits = self._info_bits
            if bits.any():
                result.infos.add(read_batch(self._schema, STEP, bits[:, 0], self._sizes), {})
                result.reset_infos.add(
                    read_batch(self._schema, RESET, bits[:, 1], self._sizes), {})
            self._hs.received_all()
            self._states.transition_all(WorkerState.IDLE)
            self._count_recv(len(self.blocks), started, read)
        finally:
            signals.commit()  # the last call: the batch is taken, a SIGINT is the next call's
        return result

    def collect_window(self, window: float, deadline: Deadline) -> StepResult | None:
        """A partial batch at a fixed cost whatever the number of workers in it: one wait
        (every worker in flight, until one is done and then ``window`` more seconds, or all
        are), one look at their replies, one gather of their rows and one read of each info
        column written, one state change. None where this path cannot take it: a worker's
        record is not blank, stores are not ordered, a worker died, the deadline passed, or a
        reply came on a pipe; the general ``collect`` then finds the finished steps unread. A
        SIGINT once the steps are taken is held for the next call: the batch is returned."""
        if self._marked or not self._hs.counters_tell():
            return None
        started = time.perf_counter()
        end = deadline.wait_end()
        cpu = time.thread_time()
        fired = self._hs.wait_window(window, None if end is None else end - time.monotonic(),
                                     self._pool.all_death_fds())
        self._timers["wait_cpu_s"] += time.thread_time() - cpu
        if self._states.closed:  # by another thread's close(): the workers are going
            raise closed_while_waiting()
        ready = [] if fired else self._hs.ready(None)
        workers = np.array(ready, dtype=np.int64)
        if not ready or self._replies[workers].any():
            return None
        read = time.perf_counter()
        signals.enter()
        try:
            result = self._gathered(workers, ready)
            self._count_recv(len(ready), started, read)
        finally:
            signals.commit()  # the last call: the steps are taken, a SIGINT is the next call's
        return result

    def _count_recv(self, workers: int, started: float, read: float) -> None:
        """The stats of a recv of ``workers`` steps whose wait began at ``started`` and whose
        reading (the parent's own work) at ``read``."""
        timers, done = self._timers, time.perf_counter()
        timers["recvs"] += 1.0
        timers["workers_received"] += float(workers)
        timers["wait_s"] += done - started
        timers["return_s"] += done - read

    def _gathered(self, workers: np.ndarray, ready: list[int]) -> StepResult:
        """``gather`` of ``workers`` (all finished, their replies plain) with their infos; their
        steps then marked read and their workers idle."""
        result = self.gather(workers)
        bits = self._info_bits[workers]
        if bits.any():
            rows, sizes = result.env_ids, self._sizes[workers]
            assert isinstance(rows, np.ndarray)
            result.infos.add(read_rows(self._schema, STEP, bits[:, 0], rows, sizes), {})
            result.reset_infos.add(read_rows(self._schema, RESET, bits[:, 1], rows, sizes), {})
        self._hs.received_many(ready)
        self._states.set_many(ready, WorkerState.STEPPING, WorkerState.IDLE)
        return result

    def _wait_batch(self, end: float | None) -> bool:
        """Waits until every worker finished (True), or one died or ``end`` passed (False)."""
        hs, sentinels = self._hs, self._pool.all_death_fds()
        cpu = time.thread_time()
        try:
            while not hs.all_done():
                now = time.monotonic()
                if end is not None and now >= end:
                    return False
                if hs.wait_all(None if end is None else end - now, sentinels):
                    return False  # a worker died: the general collect names it
                if self._states.closed:
                    raise closed_while_waiting()
            return True
        finally:
            self._timers["wait_cpu_s"] += time.thread_time() - cpu

    def _read_ready(self, got: Collected, waiting: set[int], copy: bool) -> bool:
        """Reads every finished step among ``waiting`` into ``got``; whether there was one."""
        ready = self._hs.ready(waiting)
        if not ready:
            return False
        start = time.perf_counter()
        for w in sorted(ready):
            waiting.discard(w)
            read = self._read_step(w, copy)
            if isinstance(read, StepResult):
                got.results.append(read)
            else:
                got.lost.append(read)
        self._timers["return_s"] += time.perf_counter() - start
        return True

    def _sleep(self, got: Collected, waiting: set[int], until: float | None,
               now: float) -> None:
        """Sleeps until a worker of ``waiting`` finishes or dies, or ``until``; a worker that
        died before finishing goes to ``got.lost``, out of ``waiting``."""
        deaths = self._pool.death_fds(waiting)
        cpu = time.thread_time()
        dead = self._hs.wait(waiting, None if until is None else until - now, deaths)
        self._timers["wait_cpu_s"] += time.thread_time() - cpu
        if dead:
            # Data before death: a worker that finished its step and then died delivers it.
            finished = self._hs.ready(dead)
            lost = [w for w in dead if w not in finished]
            waiting.difference_update(lost)
            got.lost += [self._pool.died(w, "STEP") for w in lost]

    def propose(self, candidates: dict[str, Signature]) -> None:
        """Gives columns to the info keys a step proposed, and publishes them to every worker
        process (each reads them before its next step), whichever block proposed them: a
        worker process or a block stepped here."""
        if self._schema.propose(candidates):
            self._hs.publish(len(self._schema.columns))

    def _read_step(self, w: int, copy: bool) -> StepResult | errors.WorkerError:
        """Worker ``w``'s finished step, read off the handshake (and pipe) in one piece and
        stashed; or the error that names it, if it died while sending or its env raised."""
        signals.enter()
        try:
            records, bits = None, self._hs.info_bits(w)
            if self._hs.received(w) == REPLY_MESSAGE:
                try:
                    message = self._pool.conns[w].recv_bytes()
                except (EOFError, OSError):
                    return self._pool.died(w, "STEP")
                tag, payload = pickle.loads(message)
                if tag is Reply.ERROR:
                    return self._pool.failed(w, payload)
                records, lane, candidates = payload
                if lane:
                    self._buffers.apply_lane(self._layout.bounds(w)[0], lane)
                if candidates:
                    self.propose(candidates)
            result = self.result_of(w, copy)
            add_infos(self._schema, result, self.blocks[w], records, bits)
            self.stash(w, result)
        finally:
            signals.leave()
        return result


def add_infos(schema: Schema, result: StepResult, block: range,
               records: list[InfoRecord] | None, bits: tuple[int, int]) -> None:
    """The step's infos (a worker's, whose envs are ``block``): copies of the columns it
    wrote, plus the pickled rest."""
    if not records and not any(bits):
        return
    lo, hi = block.start, block.stop
    left: dict[int, dict[str, object]] = {}
    left_reset: dict[int, dict[str, object]] = {}
    for j, info, reset_info in records or ():
        if info:
            left[lo + j] = info
        if reset_info:
            left_reset[lo + j] = reset_info
    step = read_block(schema, STEP, lo, hi, bits[0]) if bits[0] else None
    reset = read_block(schema, RESET, lo, hi, bits[1]) if bits[1] else None
    result.infos.add(step, left)
    result.reset_infos.add(reset, left_reset)


def closed_while_waiting() -> errors.ClosedError:
    return errors.ClosedError("this VecSampler was closed (by another thread's close()) while "
                              "step_recv() waited; create a new one.")


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


__all__ = ["StepChannel", "add_infos", "closed_while_waiting"]
