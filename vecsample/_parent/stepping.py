"""``StepChannel``: the parent's side of the step handshake, the hot path of every step.

It posts a worker's step and wakes it if it sleeps (``post``, ``ring``), waits for finished
steps, full or partial batch, within a deadline (``collect``), and turns a worker's rows of
shared memory into a ``StepResult`` (``result_of``). The handshake itself, counters and
doorbells, is in ``handshake.py``; the worker processes and their pipes are the pool's.
"""

from __future__ import annotations

import contextlib
import pickle
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from vecsample import errors
from vecsample._parent import signals
from vecsample._parent.signals import Section
from vecsample._parent.stats import Meter
from vecsample._wire import handshake
from vecsample._wire.handshake import DOORBELL, REPLY_MESSAGE, HandshakeState, ParentSide
from vecsample._wire.infos import RESET, STEP, Schema, read_block
from vecsample._wire.protocol import InfoRecord, Reply, WorkerState
from vecsample._wire.shm import SharedBuffers, Views
from vecsample._wire.spaces import copy_tree
from vecsample.config import Deadline, SamplerConfig
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


class StepChannel:
    """Posts, wakes and collects the steps of a pool's workers through shared memory."""

    def __init__(self, config: SamplerConfig, buffers: SharedBuffers, pool: WorkerPool,
                 ordered: bool, meter: Meter | None = None) -> None:
        self._config = config
        #: The sampler's timers: ``return_s`` counts the time spent reading finished steps.
        self._timers = (meter or Meter()).timers
        self._pool = pool
        self._states = pool.states
        self._buffers = buffers
        self._action_lane = any(not leaf.shared for leaf in buffers.action_leaves)
        self._hs = ParentSide(buffers.control(), config.num_slots, pool.ring_reader,
                              config.spin_s, ordered)
        #: The info columns given out so far (vecsample/_wire/infos.py).
        self._schema = Schema(buffers.infos)
        #: Views of every env's rows, and of each worker's block.
        self.all_views: Views = buffers.views()
        self.views = [buffers.views(*config.bounds(w)) for w in range(config.num_slots)]
        #: Each worker's env ids, computed once (the hot path reads them every step).
        self.blocks = [range(*config.bounds(w)) for w in range(config.num_slots)]
        self._flagged = [False] * config.num_slots  # restarted flags to clear on next send
        #: Results read but not yet returned (a KeyboardInterrupt came between): the next
        #: collect returns them first; their workers stay STEPPING until then.
        self._stash: dict[int, StepResult] = {}
        #: A worker respawned before its next step: that step is not run, its result is the
        #: flagged restart (held here until the step is posted), with the rows to write back
        #: then (None: its rows already hold the restart).
        self._held: dict[int, tuple[StepResult, list[np.ndarray] | None]] = {}

    def send(self, w: int, started: float) -> None:
        """Posts worker ``w``'s step, wakes it and counts ``send_s`` since ``started``: the end
        of step_send. A SIGINT from the post on is held for the next call (``signals.commit``),
        so a KeyboardInterrupt out of step_send means that nothing was posted."""
        signals.enter()
        try:
            self._post(w)
            self.ring((w,))
            self._timers["send_s"] += time.perf_counter() - started
        finally:
            signals.commit()  # the last call: no KeyboardInterrupt between the post and return

    def send_all(self, started: float) -> None:
        """``send`` for every worker (all idle): the end of send_all."""
        signals.enter()
        try:
            self._post_all()
            self.ring(range(self._config.num_slots))
            self._timers["send_s"] += time.perf_counter() - started
        finally:
            signals.commit()  # the last call: no KeyboardInterrupt between the post and return

    def _post(self, w: int) -> None:
        """Posts worker ``w``'s step and marks it STEPPING; ``ring`` must follow."""
        held = self._held.pop(w, None) if self._held else None
        if held is not None:  # respawned since its last step: its restart is the result
            self._stash[w], rows = held
            if rows is not None:  # kept its last result's rows until now (``keep``)
                self.views[w].write_rows(rows)
                self._flagged[w] = True
        else:
            if self._flagged[w]:  # a restart's flags last until the worker's next step
                self.views[w].restarted[:] = False
                self._flagged[w] = False
            self._hs.post(w)
        self._states.transition(w, WorkerState.STEPPING)

    def _post_all(self) -> None:
        """Posts every worker's step: one vectorised write, unless a worker has a held restart
        result or restart flags to clear."""
        if self._held or any(self._flagged):
            for w in range(self._config.num_slots):
                self._post(w)
            return
        self._hs.post_all()
        self._states.transition_all(WorkerState.STEPPING)

    def hold(self, w: int, result: StepResult, rows: list[np.ndarray] | None = None) -> None:
        """Worker ``w`` was respawned while idle: its next step returns ``result`` instead (and
        writes ``rows``, its restart's, back to its rows first)."""
        self._held[w] = (result, rows)

    def keep(self, w: int, restart: StepResult, saved: list[np.ndarray]) -> None:
        """``w``'s process was respawned with ``w``'s last result standing: its rows go back to
        ``saved`` (its views stay valid) and its next step returns ``restart`` (a copy)."""
        self.hold(w, restart, self.views[w].copy_rows())
        self.views[w].write_rows(saved)
        if w in self._stash:  # to be delivered by this recv (or the next): still stepping
            self._states.transition(w, WorkerState.STEPPING)

    def carry(self, w: int, restart: StepResult) -> None:
        """``w``'s step was lost with its process: ``restart`` is its result, to deliver."""
        self._states.transition(w, WorkerState.STEPPING)
        self._stash[w] = restart

    def settled(self, w: int, copy: bool) -> bool:
        """Whether ``w``'s step has a result: stashed, or finished and read (stashed) now."""
        if w in self._stash:
            return True
        if self._states[w] is WorkerState.STEPPING and self._hs.ready((w,)):
            return isinstance(self._read_step(w, copy), StepResult)  # else: lost, marked so
        return False

    def drop_held(self) -> None:
        """A reset replaced every held restart result with fresh episodes."""
        self._held.clear()

    def ring(self, workers: Sequence[int]) -> None:
        """Wakes those of ``workers`` that sleep: one futex ring for all where there is one,
        else a pipe write each (handshake.py)."""
        handshake.fence()
        posted = [w for w in workers if w not in self._stash] if self._stash else workers
        if self._pool.bell is not None:
            if self._hs.any_sleeping(posted):
                self._pool.bell.ring(posted)
        else:
            for w in posted:
                if self._hs.wants_ring(w):
                    # A dead worker cannot be rung; its sentinel reports it in the next collect,
                    # where the restart policy (or the error) handles it with the others.
                    with contextlib.suppress(OSError):
                        self._pool.conns[w].send_bytes(DOORBELL)
        if self._action_lane:
            self._send_actions(posted)

    def _send_actions(self, workers: Sequence[int]) -> None:
        """The pickled action leaves of ``workers``, after their post (the worker reads them)."""
        for w in workers:
            lo, hi = self._config.bounds(w)
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
        if self._stash and self._take_carried(got.results, waiting) and timeout is not None:
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
        return got

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
        sentinels = self._pool.sentinels(waiting)
        cpu = time.thread_time()
        dead = self._hs.wait(waiting, None if until is None else until - now, sentinels)
        self._timers["wait_cpu_s"] += time.thread_time() - cpu
        if dead:
            # Data before death: a worker that finished its step and then died delivers it.
            finished = self._hs.ready(dead)
            lost = [w for w in dead if w not in finished]
            waiting.difference_update(lost)
            got.lost += [self._pool.died(w, "STEP", []) for w in lost]

    def deliver(self, results: list[StepResult], timers: dict[str, float] | None = None,
                ) -> list[StepResult]:
        """Hands ``results`` over: their workers become idle, and ``timers`` counts them
        (``workers_received``). A SIGINT before the hand-over is complete undoes it; one after
        it is raised in the caller's code, which then holds the results."""
        Section.depth += 1
        done: list[tuple[int, StepResult]] = []
        try:
            for r in results:
                assert r.worker is not None
                stashed = self._stash.pop(r.worker, None)
                if stashed is not None:
                    self._states.transition(r.worker, WorkerState.IDLE)
                    done.append((r.worker, stashed))
            count = float(len(results))
        except BaseException:
            self._undo(done)
            Section.depth -= 1
            if Section.pending and Section.depth == 0:  # noted during the undo: raise it
                Section.pending = False
                signal.default_int_handler(signal.SIGINT, None)
            raise
        if Section.pending:  # a SIGINT came before the hand-over was complete: undo, raise
            self._undo(done)
            Section.depth -= 1
            Section.pending = False
            signal.default_int_handler(signal.SIGINT, None)
        if timers is not None:  # no call from here to the return: no SIGINT can land here
            timers["recvs"] += 1.0
            timers["workers_received"] += count
        Section.depth -= 1
        return results

    def _undo(self, done: list[tuple[int, StepResult]]) -> None:
        for w, stashed in done:
            self._states.transition(w, WorkerState.STEPPING)
            self._stash[w] = stashed

    def _take_carried(self, results: list[StepResult], waiting: set[int]) -> bool:
        """Results read by a call that an interrupt cut short: returned first."""
        carried = [w for w in waiting if w in self._stash]
        for w in carried:
            waiting.discard(w)
            results.append(self._stash[w])
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
                    return self._pool.died(w, "STEP", [])
                tag, payload = pickle.loads(message)
                if tag is Reply.ERROR:
                    return self._pool.failed(w, payload, [])
                records, lane, candidates = payload
                if lane:
                    self._buffers.apply_lane(self._config.bounds(w)[0], lane)
                if candidates and self._schema.propose(candidates):
                    self._hs.publish(len(self._schema.columns))
            result = self.result_of(w, copy)
            _add_infos(self._schema, result, records, bits)
            self._stash[w] = result
        finally:
            signals.leave()
        return result

    def result_of(self, w: int | None, copy: bool) -> StepResult:
        """Worker ``w``'s rows (every env's for None) as a StepResult, views or copies."""
        v = self.all_views if w is None else self.views[w]
        env_ids = range(self._config.num_envs) if w is None else self.blocks[w]
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

    def forget(self, w: int) -> None:
        """Before a restart: nothing in flight, so the new worker starts clean."""
        self._hs.reset_worker(w)

    def flag_restarted(self, w: int) -> None:
        """Worker ``w``'s rows after a restart: truncated, restarted, no reward, until it steps.
        Its final observations are zeroed: the dead worker may have half written them, and a
        replayed run must find the same bytes there (tests/test_replay.py)."""
        v = self.views[w]
        for leaf in v.final_obs_leaves:
            leaf[:] = None if leaf.dtype == object else 0
        v.rewards[:] = 0.0
        v.terminated[:] = False
        v.has_final_obs[:] = False
        v.truncated[:] = True
        v.restarted[:] = True
        self._flagged[w] = True


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


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


__all__ = ["Collected", "StepChannel"]
