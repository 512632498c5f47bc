"""The step handshake: sequence counters in shared memory, pipes only as doorbells.

A step never needs a system call while both sides are awake. The parent writes the actions,
then bumps the worker's ``SEQ`` word; the worker, polling that word, steps its envs, writes the
results, then sets ``DONE`` to the same number. A side that found nothing for ``spin_s`` goes to
sleep on a pipe and says so in its ``SLEEPING`` word; the other side then rings it with one
write. Commands other than STEP (reset, call, close, ...) still travel on the worker's pipe;
the parent counts each in the worker's ``COMMANDS`` word, which a spinning worker reads between
bursts of polls, so a command never waits for a spin to end.

Lost wake-ups: the sleeper writes ``SLEEPING`` and then reads the counter; the poster writes the
counter and then reads ``SLEEPING``. Each side puts a full memory fence between its write and its
read, so at least one of them sees the other's write (Dekker's argument). Sleeps are still
bounded by ``MAX_SLEEP`` as a second line of defence, so a missed ring costs at most that long.

Memory order: on x86 (TSO) stores become visible in program order and loads are not reordered
with other loads, so a reader that sees the new counter also sees the data written before it.
Elsewhere (``Transport.ordered`` false) nothing is read from the counters before a ring arrived:
every post and every reply rings, and readiness comes from the rings, whose kernel round trip
orders the memory. See docs/architecture.md.

Which of these runs is one record, ``Transport``, decided once per sampler (``Layout``) and
read by the two factories at the end of this module, ``parent_side`` and ``waiter``: each side
owns its own ``ring``, so nothing outside this module and ``_native.c`` branches on it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import math
import os
import platform
import select
import sys
import threading
import time
import types
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Protocol

import numpy as np


class Ringable(Protocol):
    """A worker's pipe as the parent's side rings it: one byte (``DOORBELL``)."""

    def send_bytes(self, buf: bytes) -> None: ...


#: Words per control row (int64). The parent writes words 0..7 and the worker 8..15, so with a
#: 64-byte aligned base the two sides never write the same cache line.
CONTROL_WORDS = 16
SEQ = 0  # parent -> worker: number of the last step posted
COMMANDS = 1  # parent -> worker: commands sent on its pipe so far (a spinning worker looks)
DONE = 8  # worker -> parent: number of the last step finished
REPLY = 9  # worker -> parent: REPLY_PLAIN, or REPLY_MESSAGE when a pickle follows on the pipe
SLEEPING = 10  # worker -> parent: 1 while the worker blocks on its pipe
INFO_STEP = 11  # worker -> parent: bitmask of the step-info columns this step wrote (infos.py)
INFO_RESET = 12  # worker -> parent: the same for the infos of resets done by autoreset
PARENT_SLEEPING = 0  # in the extra last row: 1 while the parent blocks on the doorbell pipe
CLOSING = 2  # in the extra last row: set by a close() (any thread): every wait returns at once
SCHEMA = 8  # in the extra last row, its own cache line: info columns published (infos.py)
BELL = 12  # in the extra last row: the futex word that sleeping workers wait on (Bell)

REPLY_PLAIN = 0
REPLY_MESSAGE = 1

#: The parent's one-byte ring on a worker's pipe. Pickles start with 0x80, so it never collides.
DOORBELL = b"\x01"
#: Counter reads between two yields of a spinning worker. Each read is ~0.1 µs; each yield is
#: a system call, and on this VM system calls leave the interpreter's caches and branch
#: predictors cold: 20 reads per yield took CartPole 2x64 from 0.78 to 0.80 of two bare loops.
SPIN_BURST = 20
#: Longest single sleep (seconds) before the sleeper re-reads the counters anyway.
MAX_SLEEP = 0.05

#: True where stores are seen in program order (x86 TSO); see the module docstring.
_ORDERED = platform.machine().lower() in {"x86_64", "amd64", "i386", "i686", "x86"}

#: The C hot path of the handshake (vecsample/_wire/_native.c), where it was built at install;
#: None: the pure-Python path below (NATIVE_MISSING says why not).
_native: types.ModuleType | None
try:
    from vecsample._wire import _native
except ImportError:  # no C compiler at install, or not Linux on x86-64: pure Python
    _native = None


def source_digest(source: Path) -> str | None:
    """The digest of ``source`` that setup.py stamps into the build (``SOURCE_DIGEST``), or
    None where the source is not there to read (an install that ships the build alone)."""
    try:
        return hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    except OSError:
        return None


def is_stale(native: types.ModuleType, source: Path) -> bool:
    """True where ``native`` was built from another ``source`` than the one beside it: a
    checkout updated after ``pip install -e .`` keeps the old build, whose functions may not
    match this module's (it is declined, and NATIVE_MISSING says how to rebuild)."""
    digest = source_digest(source)
    return digest is not None and getattr(native, "SOURCE_DIGEST", None) != digest


_STALE = _native is not None and is_stale(_native, Path(__file__).with_name("_native.c"))
if _STALE:
    _native = None

#: Linux's futex system call number on x86-64 (the futex is used where stores are ordered).
_SYS_FUTEX = {"x86_64": 202, "amd64": 202}.get(platform.machine().lower())
# Shared (not private) operations, the word being in shared memory; the bitset variants let one
# wake reach just the workers it names (each waits with the bit of its index modulo 32).
_FUTEX_WAIT_BITSET, _FUTEX_WAKE_BITSET = 9, 10
_BELL_MASK = 0x7FFFFFFF  # the futex compares 32 bits: the counter stays below 2**31


@dataclass(frozen=True)
class Transport:
    """How one sampler's step handshake runs, decided once (``Layout.transport``) and read by
    both ends through ``parent_side`` and ``waiter``: nothing else branches on it.

    ``native``: the C hot path (``_native.c``) at both ends, else the Python one here.
    ``ordered``: stores are seen in program order (x86), so readiness is read off the counters
    alone; else every post and every reply rings a pipe and readiness comes from the rings.
    ``futex``: a sleeping worker waits on the futex word (``Bell``), and one system call wakes
    every sleeper named; else each sleeps on its pipe and is rung with one byte.
    """

    native: bool
    ordered: bool
    futex: bool

    def __post_init__(self) -> None:
        if (self.native and not (self.ordered and self.futex)) or (self.futex and not
                                                                     self.ordered):
            raise ValueError(f"{self}: the C path needs ordered stores and the futex, and the "
                             f"futex needs ordered stores")


#: The Python path, ordered stores, pipes: what a record made without asking the machine
#: holds (a worker spec built for the in-process loop, unit tests).
PLAIN = Transport(native=False, ordered=True, futex=False)

#: What this machine can run: the C path where it was built (x86-64 Linux), ordered stores on
#: x86, the futex on Linux with ordered stores. ``Layout``'s ``decide_transport`` is its one
#: reader (tests/test_structure.py checks it); tests choose another through their fixtures.
MACHINE = Transport(
    native=_native is not None and _ORDERED and _SYS_FUTEX is not None
    and sys.platform.startswith("linux"),
    ordered=_ORDERED,
    futex=_ORDERED and sys.platform.startswith("linux") and _SYS_FUTEX is not None,
)
#: Why the C path cannot run here, in one line (None when it can).
NATIVE_MISSING = None if MACHINE.native else (
    "vecsample's native handshake was built from an older _native.c than the one beside it "
    "(the checkout changed after `pip install -e .`): the pure-Python handshake runs instead; "
    "rebuild it with `pip install -e .` (or `python setup.py build_ext --inplace`)"
    if _STALE else
    "vecsample's native handshake is not built (no C compiler when vecsample was installed): "
    "the pure-Python handshake runs instead, with more parent CPU per batch; install a C "
    "compiler (gcc) and reinstall vecsample to build it"
    if _native is None and MACHINE.futex else
    f"vecsample's native handshake runs on x86-64 Linux only (this is {sys.platform} on "
    f"{platform.machine()}): the pure-Python handshake runs instead")

_fence_lock = threading.Lock()


def fence() -> None:
    """A full memory fence: an uncontended lock's atomic read-modify-write (``lock cmpxchg`` on
    x86) drains the store buffer, which is what Dekker's argument needs. About 0.1 µs."""
    _fence_lock.acquire()
    _fence_lock.release()


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class Bell:
    """One futex word in the control array, for every worker: a worker with nothing to do
    waits on it with its own bit, and one ``ring(workers)`` system call wakes exactly the named
    workers (and those sharing their bit: worker w has bit w % 32), however many they are."""

    def __init__(self, control: np.ndarray) -> None:
        self.words = control.reshape(-1).data
        self.index = (control.shape[0] - 1) * CONTROL_WORDS + BELL
        # The low half of the int64 word (little-endian): the 32 bits the futex compares.
        self.address = ctypes.c_void_p(control.ctypes.data + self.index * 8)
        self._syscall = ctypes.CDLL(None, use_errno=True).syscall

    def value(self) -> int:
        """The ring count; read it before checking for work, then ``wait(value, ...)``."""
        count: int = self.words[self.index]
        return count

    def wait(self, seen: int, bits: int, timeout: float) -> None:
        """Sleeps until a ring for a worker of ``bits`` (bit ``w % 32`` for worker w) after
        ``seen`` (at once if any ring came since) or ``timeout`` seconds."""
        end = time.monotonic() + timeout  # FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC
        spec = _Timespec(int(end), int((end % 1.0) * 1e9))
        done = self._syscall(_SYS_FUTEX, self.address, _FUTEX_WAIT_BITSET, ctypes.c_int(seen),
                             ctypes.byref(spec), None, ctypes.c_uint32(bits))
        if done == -1 and ctypes.get_errno() in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
            time.sleep(0.001)  # no futex here (a sandbox): poll every millisecond instead

    def ring(self, workers: Iterable[int]) -> None:
        """Wakes those of ``workers`` that wait: one system call, whatever their number."""
        bits = 0
        for w in workers:
            bits |= 1 << (w % 32)
        self.words[self.index] = (self.words[self.index] + 1) & _BELL_MASK
        self._syscall(_SYS_FUTEX, self.address, _FUTEX_WAKE_BITSET, ctypes.c_int(_BELL_MASK),
                      None, None, ctypes.c_uint32(bits))


def control_rows(num_workers: int) -> int:
    """Rows of the control array: one per worker and one for the parent."""
    return num_workers + 1


class WorkerSide:
    """A worker's end (one slot of a worker process): sees a posted step or a command, and
    publishes the end of a step. ``Waiter`` does the waiting, over all the process's slots."""

    def __init__(self, control: np.ndarray, index: int, conn: Connection, ring_fd: int,
                 spin_s: float, transport: Transport) -> None:
        # memoryview items read as Python ints at a third of a numpy scalar's cost.
        self.words = control.reshape(-1).data
        self.index = index
        self.base = index * CONTROL_WORDS
        self.parent_sleeping = (control.shape[0] - 1) * CONTROL_WORDS + PARENT_SLEEPING
        self.conn = conn
        self.ring_fd = ring_fd
        self.ring = int(index).to_bytes(4, "little")
        self.spin_s = spin_s if transport.ordered else 0.0
        self.ordered = transport.ordered
        self.seen = self.words[self.base + SEQ]  # a restarted worker starts where it finds SEQ
        #: Commands read off the pipe, counted from what COMMANDS said when this process
        #: started (those sent to a process before it are gone with its pipe).
        self.commands_read = self.words[self.base + COMMANDS]
        self.schema = (control.shape[0] - 1) * CONTROL_WORDS + SCHEMA
        self.bell = Bell(control) if transport.futex else None
        self.bits = (0, 0)  # the info columns of the step under way (info_bits)
        #: Set by NativeWaiter: the C side's reply for this slot (reply, step bits, reset bits).
        self.native_finish: Callable[[int, int, int], None] | None = None

    def published(self) -> int:
        """How many info columns the parent has published (read before each step)."""
        count: int = self.words[self.schema]
        return count

    def info_bits(self, step: int, reset: int) -> None:
        """Which info columns this step wrote; ``finish`` publishes them with the step."""
        self.bits = (step, reset)

    def commanded(self) -> bool:
        """Whether the parent has sent a command not read yet (COMMANDS counts those sent):
        the spin's way out, so that a command on the pipe never waits for the spin to end."""
        return bool(self.words[self.base + COMMANDS] != self.commands_read)

    def posted(self) -> bool:
        """Whether a new step was posted (and, if so, takes it as seen)."""
        seq: int = self.words[self.base + SEQ]
        if seq == self.seen:
            return False
        self.seen = seq
        return True

    def waiting(self) -> bool:
        """Whether a step is posted and not yet taken (``posted`` takes it)."""
        return bool(self.words[self.base + SEQ] != self.seen)

    def look(self) -> tuple[bool, bytes | None]:
        """Once, on the futex path: (True, None) for a posted step, (True, message) for a
        command, (False, None) for nothing (a stray doorbell is read and dropped)."""
        if self.posted():
            return True, None
        if self.conn.poll(0):
            if self.posted():  # posted since the look above: the pipe holds this step's
                return True, None  # pickled actions (a command never meets a step)
            message = self.conn.recv_bytes()
            if message != DOORBELL:
                self.commands_read += 1
                return True, message
        return False, None

    def finish(self, reply: int) -> None:
        """Publishes the end of step ``seen``; the results must already be in shared memory."""
        if self.native_finish is not None:  # the C waiter took the step: it knows its number
            self.native_finish(reply, *self.bits)
            return
        words, base = self.words, self.base
        words[base + INFO_STEP], words[base + INFO_RESET] = self.bits
        words[base + REPLY] = reply
        words[base + DONE] = self.seen
        fence()
        if not self.ordered or words[self.parent_sleeping]:
            # A full pipe already wakes the parent; a broken one has no parent left to wake.
            with contextlib.suppress(BlockingIOError, BrokenPipeError):
                os.write(self.ring_fd, self.ring)


class Waiter:
    """A worker process's wait for its next job, over the workers (slots) it serves: one, or
    two with ``pipeline=True``. ``next()`` spins on their SEQ words for ``spin_s``, then sleeps
    (on the futex with all their bits, or on their pipes) with each slot's SLEEPING word set."""

    def __init__(self, sides: Sequence[WorkerSide]) -> None:
        self.sides = list(sides)
        self.live = list(range(len(sides)))  # slots not closed yet
        first = sides[0]
        self.spin_s, self.ordered, self.bell = first.spin_s, first.ordered, first.bell
        self.bits = 0
        for side in sides:
            self.bits |= 1 << (side.index % 32)

    def close(self, slot: int) -> None:
        """Slot ``slot`` got CLOSE: it is no longer waited on."""
        self.live.remove(slot)

    def next(self) -> tuple[int, bytes | None]:
        """(slot, None) when a step was posted to ``slot``, else (slot, its next command
        message). EOFError or OSError: the parent is gone."""
        if self.spin_s > 0:
            slot = self._spin()
            if slot is not None:
                return slot, None
        if self.bell is not None:
            return self._sleep_on_bell(self.bell)
        return self._sleep_on_pipes()

    def _spin(self) -> int | None:
        """The slot posted to within ``spin_s``, or None: the spin is over, or a command came
        (its ``COMMANDS`` word, read once per burst, moved: the sleep's look reads the pipe).
        Only shared memory is polled, so the loop makes one system call per turn, the yield
        that hands this core to the parent when both share it."""
        if len(self.live) > 1:
            return self._spin_all()
        side = self.sides[self.live[0]]  # one worker per process (the default): no inner loop
        slot, is_posted, commanded = self.live[0], side.posted, side.commanded
        end = time.perf_counter() + self.spin_s
        while True:
            for _ in range(SPIN_BURST):
                if is_posted():
                    return slot
            if commanded() or time.perf_counter() >= end:
                return None
            os.sched_yield()

    def _spin_all(self) -> int | None:
        """``_spin`` over several slots (pipeline=True): the first one found posted."""
        posted = [(slot, self.sides[slot].posted) for slot in self.live]
        commanded = [self.sides[slot].commanded for slot in self.live]
        end = time.perf_counter() + self.spin_s
        while True:
            for _ in range(SPIN_BURST):
                for slot, is_posted in posted:
                    if is_posted():
                        return slot
            if any(c() for c in commanded) or time.perf_counter() >= end:
                return None
            os.sched_yield()

    def _mark_sleeping(self, value: int) -> None:
        for slot in self.live:
            side = self.sides[slot]
            side.words[side.base + SLEEPING] = value

    def _sleep_on_bell(self, bell: Bell) -> tuple[int, bytes | None]:
        """Waits on the futex until a step is posted or a command came (the parent rings after
        either): the ring count is read before looking, so a ring in between is not missed."""
        self._mark_sleeping(1)
        try:
            while True:
                seen = bell.value()
                fence()
                for slot in self.live:
                    found, message = self.sides[slot].look()
                    if found:
                        return slot, message
                bell.wait(seen, self.bits, MAX_SLEEP)
        finally:
            self._mark_sleeping(0)

    def _sleep_on_pipes(self) -> tuple[int, bytes | None]:
        self._mark_sleeping(1)
        fence()
        try:
            while True:
                if self.ordered:
                    for slot in self.live:
                        if self.sides[slot].posted():
                            return slot, None
                for slot in self._readable(MAX_SLEEP):
                    side = self.sides[slot]
                    message = side.conn.recv_bytes()
                    if message != DOORBELL:
                        side.commands_read += 1
                        return slot, message
                    if not self.ordered and side.posted():  # the ring's read ordered memory
                        return slot, None
        finally:
            self._mark_sleeping(0)

    def _readable(self, timeout: float) -> list[int]:
        """The live slots whose pipe has something to read within ``timeout``."""
        if len(self.live) == 1:  # Connection.poll: a fifth of wait()'s cost (no selector)
            slot = self.live[0]
            return [slot] if self.sides[slot].conn.poll(timeout) else []
        by_conn = {self.sides[slot].conn: slot for slot in self.live}
        return [by_conn[c] for c in wait(list(by_conn), timeout)]  # type: ignore[index]


@dataclass(frozen=True)
class HandshakeState:
    """A copy of the step handshake's state (``VecSampler.handshake_state()``)."""

    #: True where stores are ordered (x86): readiness is read from the counters alone; False
    #: elsewhere: every post and reply also rings a pipe, and readiness comes from the rings.
    ordered: bool
    #: Per worker, the number of the last step posted to it (SEQ).
    posted: np.ndarray
    #: Per worker, the number of the last step it finished (DONE); equal to posted: idle.
    finished: np.ndarray


class ParentSide:
    """The parent's end: posts steps, rings sleeping workers, waits for finished steps."""

    def __init__(self, control: np.ndarray, num_workers: int, ring_reader: Connection,
                 spin_s: float, transport: Transport, pipes: Mapping[int, Ringable]) -> None:
        self.words = control.reshape(-1).data
        self.sleeping = control[:num_workers, SLEEPING]  # a view: every worker's SLEEPING word
        self.seq_words = control[:num_workers, SEQ]  # a view: every worker's SEQ word
        self.done_words = control[:num_workers, DONE]  # a view: every worker's DONE word
        #: The SEQ words as the last post_all left them, while that batch is all in flight
        #: (None once a worker was posted, read or reset on its own): what all_done compares.
        self._batch: np.ndarray | None = None
        self.parent_sleeping = num_workers * CONTROL_WORDS + PARENT_SLEEPING
        self.ring_fd = ring_reader.fileno()
        os.set_blocking(self.ring_fd, False)
        self.spin_s = spin_s if transport.ordered else 0.0
        self.ordered = transport.ordered
        #: Each worker process's pipe by slot, where a worker asleep on it is rung (the pool's
        #: dict, which a respawn updates in place).
        self._pipes = pipes
        #: The futex that sleeping workers wait on (None: each sleeps on its pipe).
        self._bell = Bell(control) if transport.futex else None
        #: Each worker's COMMANDS word: the commands sent on its pipe so far (``commanded``).
        self._commands = control[:num_workers, COMMANDS]
        #: The step number each worker is expected to finish; -1 when none is in flight.
        self.expect = [-1] * num_workers
        self.seq: list[int] = [self.words[w * CONTROL_WORDS + SEQ] for w in range(num_workers)]
        self.rung: set[int] = set()  # unordered platforms: workers whose ring was read

    def snapshot(self) -> HandshakeState:
        """The counters as they stand, for diagnostics and tests."""
        rows = np.asarray(self.words, dtype=np.int64)[: len(self.seq) * CONTROL_WORDS]
        rows = rows.reshape(len(self.seq), CONTROL_WORDS)
        return HandshakeState(self.ordered, rows[:, SEQ].copy(), rows[:, DONE].copy())

    def post(self, w: int) -> None:
        """Starts step number seq+1 on worker ``w`` (its actions are already written)."""
        self._batch = None
        seq = self.seq[w] + 1
        self.seq[w] = seq
        self.expect[w] = seq
        self.words[w * CONTROL_WORDS + SEQ] = seq

    def ring(self, workers: Sequence[int]) -> None:
        """After posting to ``workers``: wakes those that sleep, with one futex ring for all,
        or a byte on each sleeper's pipe (every one's, where stores are not ordered)."""
        fence()
        if self._bell is not None:
            if workers and self._any_sleeping(workers):
                self._bell.ring(workers)
            return
        for w in workers:
            if not self.ordered or self.words[w * CONTROL_WORDS + SLEEPING]:
                # A dead worker cannot be rung; its death fd reports it in the next wait.
                with contextlib.suppress(OSError):
                    self._pipes[w].send_bytes(DOORBELL)

    def closing(self, ring_writer: Connection) -> None:
        """Another thread's ``close()`` has begun: every wait of this side returns at once
        (the C wait reads the CLOSING word; a sleeping one is woken on the doorbell), so that
        the call it serves ends with ClosedError now, not when the workers are gone."""
        self.words[self.parent_sleeping - PARENT_SLEEPING + CLOSING] = 1
        with contextlib.suppress(OSError):  # a full pipe already wakes it; a closed one: gone
            os.write(ring_writer.fileno(), b"\xff\xff\xff\xff")  # no worker's index

    def commanded(self, workers: Sequence[int]) -> None:
        """After a command was sent on the pipe of each of ``workers``: a worker spinning for
        its next step sees its COMMANDS word move and reads its pipe; one asleep on the futex
        is rung (one asleep on its pipe wakes by itself)."""
        for w in workers:
            self._commands[w] += 1
        if self._bell is not None:
            self._bell.ring(workers)

    def _any_sleeping(self, workers: Sequence[int]) -> bool:
        """After ``fence()``: whether any of ``workers`` sleeps (one numpy read for many)."""
        if len(workers) == 1:
            return bool(self.words[workers[0] * CONTROL_WORDS + SLEEPING])
        return bool(self.sleeping[list(workers) if not isinstance(workers, range) else
                                  slice(workers.start, workers.stop)].any())

    def post_many(self, workers: Iterable[int]) -> None:
        """``post`` for each of ``workers`` (in C, one call)."""
        for w in workers:
            self.post(w)

    def post_all(self) -> None:
        """Starts the next step on every worker: one vectorised write of the SEQ words."""
        self.seq_words += 1
        self.seq = self.seq_words.tolist()
        self.expect = list(self.seq)
        self._batch = self.seq_words.copy()

    def counters_tell(self) -> bool:
        """Whether the counters alone tell which steps are done (stores ordered): what a
        partial batch read at a fixed cost needs (elsewhere only the rings tell)."""
        return self.ordered

    def batch_posted(self) -> bool:
        """Whether the steps in flight were posted together by ``post_all`` (and none was
        posted, read or reset on its own since): ``all_done`` can then tell when they end,
        where stores are ordered (elsewhere only the rings tell)."""
        return self.ordered and self._batch is not None

    def all_done(self) -> bool:
        """Whether every worker finished the step the last ``post_all`` posted: one
        vectorised compare."""
        return self._batch is not None and bool((self.done_words == self._batch).all())

    def received_all(self) -> None:
        """Marks the step of every worker read (after ``all_done``)."""
        self.expect = [-1] * len(self.expect)
        self._batch = None
        self.rung.clear()

    def ready(self, workers: Iterable[int] | None) -> list[int]:
        """Those of ``workers`` (None: every worker with a step in flight) whose expected step
        is finished (without waiting)."""
        words, expect = self.words, self.expect
        if workers is None:
            workers = [w for w, e in enumerate(expect) if e >= 0]
        if self.ordered:
            return [w for w in workers if words[w * CONTROL_WORDS + DONE] == expect[w]]
        return [w for w in workers
                if w in self.rung and words[w * CONTROL_WORDS + DONE] == expect[w]]

    def info_bits(self, w: int) -> tuple[int, int]:
        """The info columns worker ``w``'s finished step wrote: (step, reset) bitmasks."""
        base = w * CONTROL_WORDS
        return self.words[base + INFO_STEP], self.words[base + INFO_RESET]

    def publish(self, columns: int) -> None:
        """Tells every worker that ``columns`` info columns exist (before the next post)."""
        self.words[len(self.seq) * CONTROL_WORDS + SCHEMA] = columns

    def received(self, w: int) -> int:
        """Marks worker ``w``'s step as read; returns its reply kind."""
        self._batch = None
        self.expect[w] = -1
        self.rung.discard(w)
        reply: int = self.words[w * CONTROL_WORDS + REPLY]
        return reply

    def finish_here(self, w: int, reply: int, step_bits: int, reset_bits: int) -> None:
        """The end of slot ``w``'s step, for a slot this process stepped itself
        (``SharingChannel``): its control row as a worker's ``finish`` leaves it (with the
        info columns it wrote), so that the waits and the full batch treat it as any slot's.
        The same thread reads it next: no fence."""
        base = w * CONTROL_WORDS
        words = self.words
        words[base + INFO_STEP], words[base + INFO_RESET] = step_bits, reset_bits
        words[base + REPLY] = reply
        words[base + DONE] = words[base + SEQ]

    def received_many(self, workers: Iterable[int]) -> None:
        """``received`` for each of ``workers``, their reply kinds not read (in C, one call)."""
        for w in workers:
            self.received(w)

    def reset_worker(self, w: int) -> None:
        """Before a restart: nothing in flight, counters equal, so the new worker starts clean."""
        self._batch = None
        self.words[w * CONTROL_WORDS + DONE] = self.seq[w]
        self.words[w * CONTROL_WORDS + SLEEPING] = 0
        self.expect[w] = -1
        self.rung.discard(w)

    def wait(self, workers: Collection[int], timeout: float | None,
             deaths: dict[int, list[int]]) -> list[int]:
        """Returns when a step of ``workers`` finished, a worker died or ``timeout`` passed;
        the dead workers (by ``deaths``: a process's death fd, which polls readable once it
        has exited, -> the workers it serves) are returned, their steps unchecked.
        The caller has just found none of ``workers`` ready (``_spin`` yields before it
        looks, ``_sleep`` looks again after announcing itself)."""
        return self._wait(lambda: bool(self.ready(workers)), timeout, deaths)

    def wait_all(self, timeout: float | None, deaths: dict[int, list[int]]) -> list[int]:
        """``wait`` for every worker's step of the last ``post_all``: returns when all are
        done, a worker died or ``timeout`` passed; the dead workers."""
        return self._wait(self.all_done, timeout, deaths)

    def wait_window(self, window: float, timeout: float | None,
                    deaths: dict[int, list[int]]) -> list[int]:
        """A partial batch's wait, over every worker with a step in flight: returns once one
        finished and then every one did or ``window`` seconds passed since; or a worker died
        or ``timeout`` passed first. The dead workers."""
        flying = [w for w, e in enumerate(self.expect) if e >= 0]
        end = None if timeout is None else time.monotonic() + timeout
        dead = self._wait(lambda: bool(self.ready(flying)), timeout, deaths)
        if dead or not self.ready(flying):
            return dead
        until = time.monotonic() + window
        if end is not None:
            until = min(until, end)
        while len(self.ready(flying)) < len(flying) and not dead:
            left = until - time.monotonic()
            if left <= 0:
                break
            dead = self._wait(lambda: len(self.ready(flying)) == len(flying), left, deaths)
        return dead

    def _wait(self, finished: Callable[[], bool], timeout: float | None,
              deaths: dict[int, list[int]]) -> list[int]:
        if self.spin_s > 0 and timeout != 0 and self._spin(finished, timeout):
            return []
        return self._sleep(finished, timeout, deaths)

    def _spin(self, finished: Callable[[], bool], timeout: float | None) -> bool:
        end = time.perf_counter() + (self.spin_s if timeout is None
                                     else min(self.spin_s, timeout))
        while time.perf_counter() < end:
            # Yields first: the worker we wait for may be runnable on this very core.
            os.sched_yield()
            if finished():
                return True
        return False

    def _sleep(self, finished: Callable[[], bool], timeout: float | None,
               deaths: dict[int, list[int]]) -> list[int]:
        poller = select.poll()
        poller.register(self.ring_fd, select.POLLIN)
        for fd in deaths:  # plain fds (pidfds where the kernel has them): poll() watches them
            poller.register(fd, select.POLLIN)
        self.words[self.parent_sleeping] = 1
        fence()
        try:
            if finished():
                return []
            limit = MAX_SLEEP if timeout is None else min(max(timeout, 0.0), MAX_SLEEP)
            events = poller.poll(math.ceil(limit * 1e3))
        finally:
            self.words[self.parent_sleeping] = 0
        self._drain()
        return [w for fd, _ in events if fd in deaths for w in deaths[fd]]

    def _drain(self) -> None:
        try:
            data = os.read(self.ring_fd, 65536)
        except BlockingIOError:
            return
        if not self.ordered:
            self.rung.update(int.from_bytes(data[i:i + 4], "little")
                             for i in range(0, len(data) - 3, 4))


# --- the native path ----------------------------------------------------------------------------

class NativeParentSide(ParentSide):
    """``ParentSide`` with its hot path in C (``_native.Parent``): post, wake, ready, the
    waits (the GIL released) and the reads run there, one call each whatever the number of
    workers. The Python attributes it inherits (``words``, ``snapshot``, ``info_bits``,
    ``publish``) read the same control words."""

    def __init__(self, control: np.ndarray, num_workers: int, ring_reader: Connection,
                 spin_s: float, transport: Transport, pipes: Mapping[int, Ringable]) -> None:
        super().__init__(control, num_workers, ring_reader, spin_s, transport, pipes)
        assert _native is not None and transport.native, "the C path is not built"
        self._c = _native.Parent(control, num_workers, self.ring_fd, self.spin_s)
        self.post = self._c.post  # type: ignore[method-assign]
        self.post_all = self._c.post_all  # type: ignore[method-assign]
        self.received = self._c.received  # type: ignore[method-assign]
        self.received_all = self._c.received_all  # type: ignore[method-assign]
        self.reset_worker = self._c.reset_worker  # type: ignore[method-assign]
        self.post_many = self._c.post_many  # type: ignore[method-assign]
        self.received_many = self._c.received_many  # type: ignore[method-assign]
        self._n = num_workers

    def ring(self, workers: Sequence[int]) -> None:
        """Wakes those of ``workers`` that sleep: a fence, a look at their SLEEPING words and
        one futex wake for all, in one C call."""
        self._c.wake(workers)

    def commanded(self, workers: Sequence[int]) -> None:
        for w in workers:
            self._commands[w] += 1
        self._c.wake(workers)  # fences first: a worker asleep on the futex reads its pipe

    def ready(self, workers: Iterable[int] | None) -> list[int]:
        ready: list[int] = self._c.ready(workers)
        return ready

    def batch_posted(self) -> bool:
        return True  # the C side checks each worker's own expected step

    def all_done(self) -> bool:
        return len(self._c.ready(None)) == self._n

    def wait(self, workers: Collection[int], timeout: float | None,
             deaths: dict[int, list[int]]) -> list[int]:
        return self._native_wait(workers, 1, timeout, deaths)

    def wait_all(self, timeout: float | None, deaths: dict[int, list[int]]) -> list[int]:
        return self._native_wait(None, self._n, timeout, deaths)

    def wait_window(self, window: float, timeout: float | None,
                    deaths: dict[int, list[int]]) -> list[int]:
        end = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        fired: list[int] = self._c.wait(None, 1, end, list(deaths), window)
        return [w for fd in fired for w in deaths[fd]]

    def _native_wait(self, workers: Collection[int] | None, need: int, timeout: float | None,
                     deaths: dict[int, list[int]]) -> list[int]:
        """The C wait: the death fds (pidfds where the kernel has them) polled with the
        doorbell, as the Python path polls them."""
        end = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        fired: list[int] = self._c.wait(workers, need, end, list(deaths))
        return [w for fd in fired for w in deaths[fd]]


class NativeWaiter:
    """``Waiter`` with its hot path in C (``_native.Worker``): the spin on the SEQ words, the
    sleep on the futex and the reply run there, the GIL released while it waits. The commands
    are read here, off the slot's pipe, as ``Waiter`` reads them."""

    def __init__(self, sides: Sequence[WorkerSide]) -> None:
        assert _native is not None
        first = sides[0]
        control = np.frombuffer(first.words, dtype=np.int64).reshape(-1, CONTROL_WORDS)
        self.sides = list(sides)
        self.live = list(range(len(sides)))
        self._c = _native.Worker(control, control.shape[0] - 1, [s.index for s in sides],
                                 [s.conn.fileno() for s in sides], first.ring_fd, first.spin_s)
        for i, side in enumerate(sides):
            side.native_finish = functools.partial(self._c.finish, i)

    def close(self, slot: int) -> None:
        self.live.remove(slot)
        self._c.close_slot(slot)

    def next(self) -> tuple[int, bytes | None]:
        """(slot, None) when a step was posted to ``slot``, else (slot, its next command
        message). EOFError or OSError: the parent is gone."""
        while True:
            slot, posted = self._c.next()
            if posted:
                return slot, None
            message = self.sides[slot].conn.recv_bytes()
            if message != DOORBELL:
                return slot, message


# --- the two ends, built from the transport ------------------------------------------------------


def parent_side(transport: Transport, control: np.ndarray, num_workers: int,
                ring_reader: Connection, spin_s: float,
                pipes: Mapping[int, Ringable]) -> ParentSide:
    """The parent's end of the handshake that ``transport`` says (the C one, or Python's).
    ``pipes``: each worker's pipe, for the rings of workers asleep on theirs."""
    side = NativeParentSide if transport.native else ParentSide
    return side(control, num_workers, ring_reader, spin_s, transport, pipes)


def waiter(transport: Transport, sides: Sequence[WorkerSide]) -> Waiter | NativeWaiter:
    """A worker process's wait for its next job, over its slots' ``sides``, as ``transport``
    says: the same choice the parent made (both ends read the one record)."""
    return NativeWaiter(sides) if transport.native else Waiter(sides)
