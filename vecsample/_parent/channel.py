"""``Channel``: what the step API drives, each slot's life between its steps, over a transport.

A slot of the step API is posted a step (``send``, ``send_many``, ``send_all``), its step is
run somewhere and read back (``collect``, or ``collect_batch`` for a whole batch at a fixed
cost), and its result is handed over (``deliver``), the caller's last act before returning it.
Between two steps the channel holds, for each slot, one ``Slot`` record (a result read but not
handed over, a restart standing in for a lost step) and goes through one call, ``respawned``,
when the process or block behind a slot is replaced.

How a posted step runs and how its end is read is the transport's, and a subclass's:
``StepChannel`` (``stepping.py``) drives worker processes through the step handshake in
shared memory, ``SharingChannel`` also steps the blocks this process serves itself between the
post and the wait, and ``LocalChannel`` (``local.py``) steps every block here, with no process
and no handshake. Chosen once by the sampler (``Options.env_placement``).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from vecsample import errors
from vecsample._parent import signals
from vecsample._parent.stats import Meter
from vecsample._wire.infos import Schema
from vecsample._wire.protocol import WorkerState
from vecsample._wire.spaces import concat_trees, copy_tree, index_tree
from vecsample.results import StepResult

if TYPE_CHECKING:  # names in annotations; the sampler builds the parts and hands them in
    from vecsample._parent.deadline import Deadline
    from vecsample._parent.layout import Layout
    from vecsample._parent.pool import WorkerPool
    from vecsample._wire.handshake import HandshakeState
    from vecsample._wire.shm import SharedBuffers, Views


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


class Channel:
    """Posts the steps of a pool's slots, collects them and hands them over (the module
    docstring); the transport's part is a subclass's: ``_start`` and ``_start_all`` (run or
    post a step), ``ring`` (wake who must run it), ``collect`` and ``collect_batch`` (run or
    wait for the steps and read them), ``_finished`` (a step done and not yet read),
    ``_forget`` (a slot's transport made blank before its respawn) and ``snapshot``."""

    def __init__(self, layout: Layout, buffers: SharedBuffers, pool: WorkerPool,
                 meter: Meter | None = None) -> None:
        self._layout = layout
        #: The sampler's timers: ``return_s`` counts the time spent reading finished steps.
        self._timers = (meter or Meter()).timers
        self._pool = pool
        self._states = pool.states
        self._buffers = buffers
        #: The info columns given out so far (vecsample/_wire/infos.py).
        self._schema = Schema(buffers.infos)
        #: Views of every env's rows, and of each slot's block.
        self.all_views: Views = buffers.views()
        self.views = [buffers.views(*layout.bounds(w)) for w in range(layout.num_slots)]
        #: Each slot's env ids, computed once (the hot path reads them every step).
        self.blocks = [range(*layout.bounds(w)) for w in range(layout.num_slots)]
        self._sizes = np.array([len(b) for b in self.blocks])
        #: Every block's size where they are all equal (``rows_of``'s arithmetic), else 0.
        self._block_size = len(self.blocks[0]) if len(set(self._sizes.tolist())) == 1 else 0
        self._offsets = np.arange(self._block_size)
        #: One record per slot of the step API (``Slot``).
        self.slots = [Slot() for _ in range(layout.num_slots)]
        #: The slots whose record is not blank: what the hot path checks, at no cost per slot.
        self._marked: set[int] = set()

    # --- the transport's part ------------------------------------------------------------------

    def _start(self, w: int) -> None:
        """Posts (or runs) slot ``w``'s step."""
        raise NotImplementedError

    def _start_all(self) -> None:
        """Posts (or runs) every slot's step."""
        raise NotImplementedError

    def _start_many(self, workers: Sequence[int]) -> None:
        """Posts (or runs) the steps of ``workers``."""
        for w in workers:
            self._start(w)

    def ring(self, workers: Sequence[int]) -> None:
        """After ``_start``: wakes those of ``workers`` that must be woken to run their step."""
        raise NotImplementedError

    def collect(self, pending: list[int], timeout: float | None, deadline: Deadline,
                copy: bool) -> Collected:
        """The steps of ``pending`` slots, full batch or partial (``timeout``), with what
        died, failed or hung on the way, as a value: nothing here raises for a slot."""
        raise NotImplementedError

    def collect_batch(self, deadline: Deadline, copy: bool) -> StepResult | None:
        """Every slot's step of the last ``send_all`` as one StepResult, in a fixed number of
        calls; None where this path cannot take it (``collect`` then does)."""
        raise NotImplementedError

    def collect_window(self, window: float, deadline: Deadline) -> StepResult | None:
        """A partial batch as one StepResult (``gather``): every slot in flight that is done
        within ``window`` of the first arrival, in a fixed number of calls; None where this
        path cannot take it (``collect`` then does, and ``join`` makes its results one)."""
        return None

    def _finished(self, w: int, copy: bool) -> StepResult | errors.WorkerError | None:
        """Slot ``w``'s step, done and not yet read, read now (stashed in its record); None:
        not done."""
        raise NotImplementedError

    def _forget(self, slots: range) -> None:
        """Before the process or block of ``slots`` is replaced: nothing of theirs in flight."""
        raise NotImplementedError

    def snapshot(self) -> HandshakeState:
        raise NotImplementedError

    # --- sending ---------------------------------------------------------------------------------

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
            self.ring(self._post_many(workers))
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
        """Posts slot ``w``'s step and marks it STEPPING; whether it was posted (``ring`` must
        follow) or a restart of it stands in for the step instead."""
        posted = True
        if w in self._marked:
            slot = self.slots[w]
            if slot.restart is not None:  # respawned since its last step: its restart
                slot.unread, slot.restart = slot.restart, None
                if slot.restart_rows is not None:  # kept its last result's rows until now
                    self.views[w].write_rows(slot.restart_rows)
                    slot.restart_rows, slot.clear_flags = None, True
                posted = False
            elif slot.clear_flags:  # a restart's flags last until the slot's next step
                self.views[w].restarted[:] = False
                slot.clear_flags = False
            self._tidy(w)
        if posted:
            self._start(w)
        self._states.transition(w, WorkerState.STEPPING)
        return posted

    def _post_all(self) -> Sequence[int]:
        """Posts every slot's step (at once, unless a slot's record says otherwise); the slots
        posted to."""
        if self._marked:
            return [w for w in range(self._layout.num_slots) if self._post(w)]
        self._start_all()
        self._states.transition_all(WorkerState.STEPPING)
        return range(self._layout.num_slots)

    def _post_many(self, workers: Sequence[int]) -> Sequence[int]:
        """``_post`` for each of ``workers`` (all idle, each once): at once, with no Python per
        worker, unless one's record says otherwise; the slots posted to."""
        if self._marked and not self._marked.isdisjoint(workers):
            return [w for w in workers if self._post(w)]
        self._start_many(workers)
        self._states.set_many(workers, WorkerState.IDLE, WorkerState.STEPPING)
        return workers

    def _tidy(self, w: int) -> None:
        """Keeps ``_marked`` equal to the slots whose record is not blank."""
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

    # --- receiving -------------------------------------------------------------------------------

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

    def stash(self, w: int, result: StepResult) -> None:
        """Slot ``w``'s step, read and not yet handed over: the next collect returns it first
        if this one is cut short (its slot stays STEPPING until ``deliver``)."""
        self.slots[w].unread = result
        self._marked.add(w)

    def _take_carried(self, results: list[StepResult], waiting: set[int]) -> bool:
        """Results read by a call that an interrupt cut short, or restarts that stand in for
        steps lost with their process: returned first."""
        carried = [w for w in waiting if self.slots[w].unread is not None]
        for w in carried:
            waiting.discard(w)
            results.append(self.slots[w].unread)  # type: ignore[arg-type]
        return bool(carried)

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

    def rows_of(self, workers: np.ndarray) -> np.ndarray:
        """The env ids of ``workers``' blocks, one block after another."""
        if self._block_size:
            return (workers[:, None] * self._block_size + self._offsets).ravel()
        return np.concatenate([np.arange(b.start, b.stop) for b in map(self.blocks.__getitem__,
                                                                       workers.tolist())])

    def gather(self, workers: np.ndarray) -> StepResult:
        """The rows of ``workers``' blocks, as they stand in shared memory, gathered into one
        StepResult (copies: a view cannot hold rows that are not contiguous)."""
        rows = self.rows_of(workers)
        v = self.all_views
        return StepResult(None, rows, index_tree(v.obs, rows), v.rewards[rows],
                          v.terminated[rows], v.truncated[rows], index_tree(v.final_obs, rows),
                          v.has_final_obs[rows], v.restarted[rows], workers=workers)

    def join(self, results: Sequence[StepResult]) -> StepResult:
        """Several workers' results as one, in their order (copies), their infos merged: a
        partial batch read worker by worker (``collect``'s, with its restarts)."""
        workers = np.array([r.worker for r in results], dtype=np.int64)

        def cat(name: str) -> np.ndarray:
            return np.concatenate([getattr(r, name) for r in results])

        joined = StepResult(
            None, self.rows_of(workers), concat_trees([r.obs for r in results]), cat("rewards"),
            cat("terminated"), cat("truncated"), concat_trees([r.final_obs for r in results]),
            cat("has_final_obs"), cat("restarted"), workers=workers)
        for r in results:
            joined.infos.absorb(r.infos)
            joined.reset_infos.absorb(r.reset_infos)
        return joined

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
        self._forget(slots)  # after the old process is gone: nothing can write behind us
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
        if self._states[w] is WorkerState.STEPPING:
            return isinstance(self._finished(w, copy), StepResult)  # else: lost, marked so
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


__all__ = ["Channel", "Collected", "Reinit", "Slot"]
