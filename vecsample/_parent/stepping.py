"""``StepChannel``: the parent's side of the step handshake, the hot path of every step.

It posts a worker's step and wakes it if it sleeps (``send``, ``ring``), waits for finished
steps, full or partial batch, within a deadline (``collect``), hands them over (``deliver``), and
turns a worker's rows of shared memory into a ``StepResult`` (``result_of``). It owns each
worker's life between steps: what it holds for a worker besides the handshake counters is one
``Slot`` record, and a respawn of a worker's process goes through one call, ``respawned``. The
handshake itself, counters and doorbells, is in ``handshake.py``; the worker processes and
their pipes are the pool's.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from vecsample import errors
from vecsample._parent import signals
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
from vecsample._wire.infos import RESET, STEP, InfoRecord, Schema, read_batch, read_block
from vecsample._wire.protocol import Reply, WorkerState
from vecsample._wire.shm import SharedBuffers, Views
from vecsample._wire.spaces import copy_tree
from vecsample.results import StepResult

if TYPE_CHECKING:  # passed in by the sampler, which builds it: no import at run time
    from vecsample._parent.pool import WorkerPool


@dataclass
class Collected:
    """What one wait for steps found: the results read, in arrival order; the workers lost on
    the way (died, or their env raised), each as the error that names it; and the workers still
    pending when the wait's deadline passed (``hung``; ``bound``: the seconds that ran out).
    A failure policy (restart.py) turns it into the call's results or one exception."""

    results: list[StepResult] = field(default_factory=list)
    lost: list[errors.WorkerError] = field(default_factory=list)
    hung: list[int] = field(default_factory=list)
    bound: float | None = None


@dataclass
class Slot:
    """What the channel holds for one worker of the step API besides its handshake counters;
    a blank record (every field at its default) is the usual case between steps."""

    #: A step read but not yet handed over (an interrupt came between, or a restart stands in
    #: for a step lost with its process): the next collect returns it first. Its worker stays
    #: STEPPING until it is handed over.
    unread: StepResult | None = None
    #: A restart that stands in for the worker's next step (its process was respawned between
    #: two of its steps): returned when that step is posted, instead of running it.
    restart: StepResult | None = None
    #: The rows to write back when ``restart`` is returned (its rows still held the worker's
    #: last result, which the caller may hold as views); None: they hold the restart already.
    restart_rows: list[np.ndarray] | None = None
    #: The worker's rows carry a restart's flags (``restarted``), cleared when it next steps.
    clear_flags: bool = False

    def blank(self) -> bool:
        return self.unread is None and self.restart is None and not self.clear_flags


@dataclass
class _HandOver:
    """What one ``deliver`` has done so far, for its undo: the workers it made idle (with the
    results they held) and what it counted."""

    idle: list[tuple[int, StepResult]] = field(default_factory=list)
    counted: dict[str, float] = field(default_factory=dict)


#: A respawned process's envs made ready again (``Restarts``): given ``slots``, every env's
#: reset info.
Reinit = Callable[[range], list[dict[str, Any]]]


class StepChannel:
    """Posts, wakes and collects the steps of a pool's workers through shared memory."""

    def __init__(self, layout: Layout, buffers: SharedBuffers, pool: WorkerPool,
                 meter: Meter | None = None) -> None:
        self._layout = layout
        #: The sampler's timers: ``return_s`` counts the time spent reading finished steps.
        self._timers = (meter or Meter()).timers
        self._pool = pool
        self._states = pool.states
        self._buffers = buffers
        self._action_lane = any(not leaf.shared for leaf in buffers.action_leaves)
        #: The parent's end of the handshake, built by the pool from ``layout.transport``.
        self._hs = pool.side
        control = buffers.control()[:layout.num_slots]
        #: Every worker's reply kind and info bitmasks: a full batch reads them at once.
        self._replies = control[:, REPLY]  # views (basic slices): they follow the words
        self._info_bits = control[:, INFO_STEP:INFO_RESET + 1]
        assert INFO_RESET == INFO_STEP + 1 and self._info_bits.base is not None
        #: The info columns given out so far (vecsample/_wire/infos.py).
        self._schema = Schema(buffers.infos)
        #: Views of every env's rows, and of each worker's block.
        self.all_views: Views = buffers.views()
        self.views = [buffers.views(*layout.bounds(w)) for w in range(layout.num_slots)]
        #: Each worker's env ids, computed once (the hot path reads them every step).
        self.blocks = [range(*layout.bounds(w)) for w in range(layout.num_slots)]
        self._sizes = np.array([len(b) for b in self.blocks])
        #: One record per worker of the step API (``Slot``).
        self.slots = [Slot() for _ in range(layout.num_slots)]
        #: The workers whose record is not blank: what the hot path checks, at no cost per worker.
        self._marked: set[int] = set()

    def send(self, w: int, started: float) -> None:
        """Posts worker ``w``'s step, wakes it and counts ``send_s`` since ``started``: the end
        of step_send. A SIGINT from the post on is held for the next call (``signals.commit``),
        so a KeyboardInterrupt out of step_send means that nothing was posted."""
        signals.enter()
        try:
            if self._post(w):
                self.ring((w,))
            self._timers["send_s"] += time.perf_counter() - started
        finally:
            signals.commit()  # the last call: no KeyboardInterrupt between the post and return

    def send_many(self, workers: Sequence[int], started: float) -> None:
        """``send`` for each of ``workers`` (all idle, each once), with one ring for all: the
        end of step_send_many. A SIGINT from the first post on is held for the next call."""
        signals.enter()
        try:
            self.ring([w for w in workers if self._post(w)])
            self._timers["send_s"] += time.perf_counter() - started
        finally:
            signals.commit()  # the last call: no KeyboardInterrupt between the posts and return

    def send_all(self, started: float, hand_over: bool = False) -> None:
        """``send`` for every worker (all idle): the end of send_all. With ``hand_over`` it
        then yields this process's core once (``sched_yield``), so that the worker sharing it
        starts now; the yield counts as waiting (``wait_s``)."""
        signals.enter()
        try:
            self.ring(self._post_all())
            posted = time.perf_counter()
            self._timers["send_s"] += posted - started
            if hand_over:
                os.sched_yield()
                self._timers["wait_s"] += time.perf_counter() - posted
        finally:
            signals.commit()  # the last call: no KeyboardInterrupt between the post and return

    def _post(self, w: int) -> bool:
        """Posts worker ``w``'s step and marks it STEPPING; whether it was posted to the
        worker (``ring`` must follow) or a restart of it stands in for the step instead."""
        posted = True
        if w in self._marked:
            slot = self.slots[w]
            if slot.restart is not None:  # respawned since its last step: its restart
                slot.unread, slot.restart = slot.restart, None
                if slot.restart_rows is not None:  # kept its last result's rows until now
                    self.views[w].write_rows(slot.restart_rows)
                    slot.restart_rows, slot.clear_flags = None, True
                posted = False
            elif slot.clear_flags:  # a restart's flags last until the worker's next step
                self.views[w].restarted[:] = False
                slot.clear_flags = False
            self._tidy(w)
        if posted:
            self._hs.post(w)
        self._states.transition(w, WorkerState.STEPPING)
        return posted

    def _post_all(self) -> Sequence[int]:
        """Posts every worker's step (one vectorised write, unless a worker's record says
        otherwise); the workers posted to."""
        if self._marked:
            return [w for w in range(self._layout.num_slots) if self._post(w)]
        self._hs.post_all()
        self._states.transition_all(WorkerState.STEPPING)
        return range(self._layout.num_slots)

    def _tidy(self, w: int) -> None:
        """Keeps ``_marked`` equal to the workers whose record is not blank."""
        if self.slots[w].blank():
            self._marked.discard(w)
        else:
            self._marked.add(w)

    def drop_held(self) -> None:
        """A reset replaced every restart held for a next step with fresh episodes."""
        for w in list(self._marked):
            slot = self.slots[w]
            slot.restart = slot.restart_rows = None
            self._tidy(w)

    def ring(self, workers: Sequence[int]) -> None:
        """Wakes those of ``workers`` that sleep (the transport's ``ring``), then sends their
        pickled action leaves, if the action space has any."""
        self._hs.ring(workers)
        if self._action_lane:
            self._send_actions(workers)

    def _send_actions(self, workers: Sequence[int]) -> None:
        """The pickled action leaves of ``workers``, after their post (the worker reads them)."""
        for w in workers:
            lo, hi = self._layout.bounds(w)
            message = pickle.dumps(self._buffers.lane(lo, hi, ("act",)), pickle.HIGHEST_PROTOCOL)
            with contextlib.suppress(OSError):  # dead: the next collect reports it (see ring)
                self._pool.conns[w].send_bytes(message)

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
        if self._marked and self._take_carried(got.results, waiting) and timeout is not None:
            window = time.monotonic() + timeout
        while waiting:
            if self._read_ready(got, waiting, copy):
                if timeout is not None and window is None:
                    window = time.monotonic() + timeout  # a loss ends a partial batch too
                continue
            now = time.monotonic()
            if window is not None and now >= window:
                break
            if end is not None and now >= end:
                got.hung, got.bound = sorted(waiting), deadline.exceeded()
                break
            self._sleep(got, waiting, _earliest(end, window), now)
            if self._states.closed:  # by another thread's close(): the workers are going
                raise _closed_while_waiting()
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
            timers = self._timers
            timers["recvs"] += 1.0
            timers["workers_received"] += float(len(self.blocks))
            done = time.perf_counter()
            timers["wait_s"] += done - started
            timers["return_s"] += done - read
        finally:
            signals.commit()  # the last call: the batch is taken, a SIGINT is the next call's
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
                    raise _closed_while_waiting()
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

    def deliver(self, results: list[StepResult], timers: dict[str, float] | None = None,
                ) -> list[StepResult]:
        """Hands ``results`` over: their workers become idle, and ``timers`` counts them
        (``recvs``, ``workers_received``). A SIGINT before the hand-over is complete undoes
        it, count included; one after it is raised in the caller's code, with the hand-over
        and its count both done (CPython may run a handler as soon as the section's end
        returns, so nothing is left to do after it)."""
        did = _HandOver()
        with signals.undoable(functools.partial(self._undo, did, timers)):
            for r in results:
                assert r.worker is not None
                slot = self.slots[r.worker]
                if slot.unread is not None:
                    self._states.transition(r.worker, WorkerState.IDLE)
                    did.idle.append((r.worker, slot.unread))
                    slot.unread = None
                    self._tidy(r.worker)
            if timers is not None:
                did.counted = {"recvs": 1.0, "workers_received": float(len(results))}
                for name, value in did.counted.items():
                    timers[name] += value
        return results

    def _undo(self, did: _HandOver, timers: dict[str, float] | None) -> None:
        for name, value in did.counted.items():
            timers[name] -= value  # type: ignore[index]  # counted only with timers
        for w, unread in did.idle:
            self._states.transition(w, WorkerState.STEPPING)
            self.slots[w].unread = unread
            self._marked.add(w)

    def _take_carried(self, results: list[StepResult], waiting: set[int]) -> bool:
        """Results read by a call that an interrupt cut short, or restarts that stand in for
        steps lost with their process: returned first."""
        carried = [w for w in waiting if self.slots[w].unread is not None]
        for w in carried:
            waiting.discard(w)
            results.append(self.slots[w].unread)  # type: ignore[arg-type]
        return bool(carried)

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
                if candidates and self._schema.propose(candidates):
                    self._hs.publish(len(self._schema.columns))
            result = self.result_of(w, copy)
            _add_infos(self._schema, result, records, bits)
            self.slots[w].unread = result
            self._marked.add(w)
        finally:
            signals.leave()
        return result

    def result_of(self, w: int | None, copy: bool) -> StepResult:
        """Worker ``w``'s rows (every env's for None) as a StepResult, views or copies."""
        v = self.all_views if w is None else self.views[w]
        env_ids = range(self._layout.num_envs) if w is None else self.blocks[w]
        if copy:
            return StepResult(
                w, env_ids, copy_tree(v.obs), v.rewards.copy(), v.terminated.copy(),
                v.truncated.copy(), copy_tree(v.final_obs), v.has_final_obs.copy(),
                v.restarted.copy(),
            )
        return StepResult(w, env_ids, v.obs, v.rewards, v.terminated, v.truncated, v.final_obs,
                          v.has_final_obs, v.restarted)

    def snapshot(self) -> HandshakeState:
        return self._hs.snapshot()

    # --- a respawn ------------------------------------------------------------------------------

    def respawned(self, w: int, reason: str, copy: bool, *, owed: Collection[int], hold: bool,
                  startup: Deadline, reinit: Reinit) -> list[StepResult]:
        """Replaces the process serving worker ``w`` (its envs made ready by ``reinit``, within
        ``startup`` for the build) and returns ``w``'s flagged restart, then those of its other
        half (``pipeline``) whose step was lost with the process: stepping, or ``owed`` (pending
        in this recv and not received), and not finished before the death. An other half whose
        result stands keeps it: its rows are written back after the respawn and its restart is
        returned by its next step. With ``hold``, ``w``'s restart is returned by its next step
        too (it was respawned between two steps). Other processes' rows are never touched."""
        slots = self._layout.process_slots(w)
        others = [s for s in slots if s != w]
        lost = [s for s in others if (self._states[s] is WorkerState.STEPPING or s in owed)
                and not self._has_result(s, copy)]
        saved = {s: self.views[s].copy_rows() for s in others if s not in lost}
        self._pool.stop(w)
        for s in slots:  # after the old process is gone: nothing can write behind us
            self._hs.reset_worker(s)
        self._pool.respawn(w, startup)
        reset_infos = reinit(slots)
        made = {s: self._restarted(s, reset_infos, reason if s == w else f"{reason} (worker "
                                   f"{w}, the other half of its process)", copy or s in saved)
                for s in slots}
        for s, rows in saved.items():  # the standing result's rows, back; the restart waits
            self._stand_in(s, made[s], self.views[s].copy_rows())
            self.views[s].write_rows(rows)
        for s in lost:  # its step was lost with the process: the restart is its result
            self._states.transition(s, WorkerState.STEPPING)
            self.slots[s].unread = made[s]
            self._tidy(s)
        if hold:
            self._stand_in(w, made[w], None)
        return [made[w], *(made[s] for s in lost)]

    def _has_result(self, w: int, copy: bool) -> bool:
        """Whether ``w``'s step has a result: read already, or finished (read now)."""
        if self.slots[w].unread is not None:
            return True
        if self._states[w] is WorkerState.STEPPING and self._hs.ready((w,)):
            return isinstance(self._read_step(w, copy), StepResult)  # else: lost, marked so
        return False

    def _stand_in(self, w: int, restart: StepResult, rows: list[np.ndarray] | None) -> None:
        """``w``'s next step returns ``restart`` (writing ``rows`` back first, if given)."""
        slot = self.slots[w]
        slot.restart, slot.restart_rows = restart, rows
        if slot.unread is not None:  # to be delivered by this recv (or the next): stepping
            self._states.transition(w, WorkerState.STEPPING)
        self._tidy(w)

    def _restarted(self, w: int, reset_infos: list[dict[str, Any]], reason: str,
                   copy: bool) -> StepResult:
        """Worker ``w``'s rows after a respawn: truncated, restarted, no reward, until it steps,
        with its envs' reset infos and ``reason``. Its final observations are zeroed: the dead
        worker may have half written them, and a replayed run must find the same bytes there
        (tests/test_replay.py)."""
        v = self.views[w]
        for leaf in v.final_obs_leaves:
            leaf[:] = None if leaf.dtype == object else 0
        v.rewards[:] = 0.0
        v.terminated[:] = False
        v.has_final_obs[:] = False
        v.truncated[:] = True
        v.restarted[:] = True
        self.slots[w].clear_flags = True
        self._tidy(w)
        result = self.result_of(w, copy)  # added as leftovers: the map stays columnar
        result.reset_infos.add(None, {env: reset_infos[env] for env in result.env_ids})
        result.infos.add(None, {env: {"restart_reason": reason} for env in result.env_ids})
        return result


class SharingChannel(StepChannel):
    """The step channel of a sampler whose process serves some workers itself
    (``Options.env_placement``, ``layout.parent_slots``): a wait for steps begins by running
    those of them that are pending, here, while the worker processes step theirs; their
    results are then read as any worker's. Those steps run in one interrupt-safe section: a
    SIGINT that comes during them is raised once they are done, so a step is never half taken
    (it is then finished and pending, and the next ``step_recv`` returns it). Chosen once by
    the sampler: a sampler without such workers pays nothing for them."""

    def __init__(self, layout: Layout, buffers: SharedBuffers, pool: WorkerPool,
                 meter: Meter | None = None) -> None:
        super().__init__(layout, buffers, pool, meter)
        self._here = tuple(layout.parent_slots)
        #: Every worker is served here ("parent"): a batch is done once this process stepped it.
        self._all_here = len(self._here) == layout.num_slots

    def collect(self, pending: list[int], timeout: float | None, deadline: Deadline,
                copy: bool) -> Collected:
        self._step_here(pending)
        return super().collect(pending, timeout, deadline, copy)

    def _wait_batch(self, end: float | None) -> bool:
        self._step_here(None)  # a batch posted together: every worker is pending
        if self._all_here:  # nothing left to wait for
            return self._hs.all_done()
        return super()._wait_batch(end)

    def _step_here(self, pending: Collection[int] | None) -> None:
        """Runs the posted steps of the workers served here that are in ``pending`` (None:
        all); ``share_s`` counts the time, a part of ``wait_s``."""
        served = self._pool.served
        started = time.perf_counter()
        signals.enter()
        try:
            for w in self._here:
                if pending is None or w in pending:
                    served[w].step()
        finally:
            self._timers["share_s"] += time.perf_counter() - started
            signals.leave()  # a SIGINT that came during the steps is raised now
        if self._states.closed:  # by another thread's close(), which waited for the steps
            raise _closed_while_waiting()


def _add_infos(schema: Schema, result: StepResult, records: list[InfoRecord] | None,
               bits: tuple[int, int]) -> None:
    """The step's infos: copies of the columns it wrote, plus the pickled rest."""
    if not records and not any(bits):
        return
    lo, hi = result.env_ids.start, result.env_ids.stop
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


def _closed_while_waiting() -> errors.ClosedError:
    return errors.ClosedError("this VecSampler was closed (by another thread's close()) while "
                              "step_recv() waited; create a new one.")


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


__all__ = ["Collected", "SharingChannel", "StepChannel"]
