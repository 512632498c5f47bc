"""``WorkerPool``: the worker processes and their pipes, and the command RPC over those pipes.

The pool starts every worker and waits for its envs to be built, respawns one in place (a fresh
process on a fresh pipe, so no stale reply is ever read), shuts them all down, and runs the
synchronous commands (reset, call, ...): send one pickled ``(Command, payload)`` per worker,
then read one reply per worker. What a command got comes back as a value, ``Replies``: the
replies by worker and the workers lost on the way; the sampler's failure policy decides what
to do with the lost ones (``restart.py``). Steps do not go through here: they travel through
shared memory (``handshake.py``), driven by ``VecSampler``. A worker that this process serves
itself (``Options.env_placement``) has a stand-in process and pipe (``inparent.py``), made in
``_serve_here``: the rest of the pool treats it as any worker.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import pickle
import select
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

import numpy as np

from vecsample import errors
from vecsample._parent.deadline import Deadline
from vecsample._parent.inparent import WorkerProcess, serve_here
from vecsample._parent.layout import Layout
from vecsample._parent.signals import critical
from vecsample._parent.startup import check_main_guard
from vecsample._wire.handshake import COMMANDS, FUTEX, Bell
from vecsample._wire.protocol import (
    OK_MESSAGE,
    Command,
    ErrorReport,
    Reply,
    WorkerState,
    WorkerStates,
)
from vecsample._wire.shm import SharedBuffers
from vecsample._wire.spec import (
    IN_PARENT,
    WORKER_MAIN,
    Pickled,
    PickledFactory,
    PipeEnd,
    WorkerSpec,
)
from vecsample.factories import env_registrations

if TYPE_CHECKING:
    from vecsample._wire.spec import InParent

#: The longest single wait handed to poll(): longer ones are cut (poll takes int milliseconds).
MAX_POLL_MS = 2**31 - 1
#: How long close() waits, at most, for workers that got CLOSE (a larger timeout is capped).
MAX_WAIT = 86_400.0
#: After SIGTERM, how long workers get to exit before SIGKILL (all of them together).
TERMINATE_GRACE = 0.5
#: What a command can lose a worker to: its process died, its env raised, or only its reply
#: could not be pickled (the worker is fine).
Lost = errors.WorkerError | errors.ReplyPicklingError


@dataclass
class Replies:
    """What one command got: the replies of the workers that answered (by worker), and the
    workers lost on the way, each as the error that names it (the first one first)."""

    ok: dict[int, Any] = field(default_factory=dict)
    lost: list[Lost] = field(default_factory=list)

    def first_lost(self, answered: dict[int, Any] | None = None) -> Lost:
        """The error to raise for this command: its first loss, carrying the replies of the
        workers that did answer (``answered``, default: this command's)."""
        error = self.lost[0]
        error.replies = dict(self.ok if answered is None else answered)
        return error

    def or_raise(self) -> dict[int, Any]:
        """The replies, or the first loss raised (a command with no way to recover)."""
        if self.lost:
            raise self.first_lost()
        return self.ok


def _disown_in_forked_child() -> None:
    """In a child forked from a process with samplers (a DataLoader worker, a forking server):
    multiprocessing's exit hook there would terminate and join every daemonic child it still
    lists, that is our workers, which belong to the parent. So the child forgets them."""
    registry = getattr(mp.process, "_children", None)  # multiprocessing's own list of children
    for pool in list(_POOLS):
        for proc in pool.procs:
            if registry is not None:
                registry.discard(proc)


_POOLS: weakref.WeakSet[WorkerPool] = weakref.WeakSet()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disown_in_forked_child)


class WorkerPool:
    """The workers of one sampler: their processes, pipes and states."""

    def __init__(self, layout: Layout, buffers: SharedBuffers, ordered: bool) -> None:
        self.layout = layout
        self.states = WorkerStates(layout.num_slots)
        self._buffers = buffers
        self._ordered = ordered
        self._ctx: Any = mp.get_context(layout.context)  # typeshed: BaseContext lacks Process
        # The workers' shared doorbell to a sleeping parent (handshake.py): (reader, writer).
        self.ring_reader, self.ring_writer = self._ctx.Pipe(duplex=False)
        #: Per worker, the process that serves it (a ``ParentProcess`` stand-in for a worker
        #: this process serves itself, ``env_placement``) and the parent's end of its pipe.
        self.procs: list[WorkerProcess] = []
        self.conns: list[PipeEnd] = []
        #: The workers this process serves itself, by slot (``layout.parent_slots``): what the
        #: step channel runs when its wait begins (``SharingChannel``).
        self.served: dict[int, InParent] = {}
        #: Per worker, the fd that polls readable once its process has exited (``death_fd``):
        #: what every wait for a worker watches, set once per process (spawn, respawn).
        self.deaths: list[int] = []
        #: The pidfds this pool opened, by process: closed when the process is reaped.
        self._pidfds: dict[WorkerProcess, int] = {}
        self._owner = os.getpid()
        self._all_deaths: dict[int, list[int]] | None = None  # all of them, until a respawn
        #: The futex that sleeping workers wait on (None: each sleeps on its pipe); rung after
        #: every command and step post (handshake.Bell).
        self.bell = Bell(buffers.control()) if FUTEX and ordered else None
        #: Each worker's COMMANDS word: counts the commands sent on its pipe, so that a
        #: worker spinning for its next step stops to read them (handshake.Waiter._spin).
        self._commands = buffers.control()[:layout.num_slots, COMMANDS]
        #: What a spawn or forkserver worker registers before it builds (factories.py).
        self.registrations = (None if layout.context == "fork" else Pickled(
            env_registrations(layout.env_fns, layout.hosted), layout.context,
            "an env registration"))
        _POOLS.add(self)
        # The finalizer holds these lists themselves: a respawn replaces entries in place. It
        # runs in this process only: a child forked from it (a DataLoader worker) that exits
        # must not close our workers (its copies of the pipes just close with it).
        self._finalizer = weakref.finalize(self, _shutdown_in, os.getpid(), self.procs,
                                           self.conns, [self.ring_reader, self.ring_writer],
                                           self._pidfds)

    # --- lifetime --------------------------------------------------------------------------------

    def start(self) -> None:
        """Starts every worker and waits until all have built their envs."""
        if len(self.layout.parent_slots) < self.layout.num_slots:  # a process to start
            check_main_guard(self.layout.context)
        for p in range(self.layout.options.num_workers):
            proc, conns, death = self._spawn(self.layout.slots(p))  # EnvFactoryError: caller
            self.procs += [proc] * len(conns)  # per worker: a process serves its slots  (closes)
            self.conns += conns
            self.deaths += [death] * len(conns)
        try:
            self._await_built(range(self.layout.num_slots),
                              Deadline(self.layout.options.startup_deadline))
        except errors.WorkerError as exc:
            # A build error the worker typed (a module it cannot import, an env id it lacks)
            # is raised as that class again; any other as EnvFactoryError.
            kind = errors.BUILD_ERRORS.get(exc.exc_type, errors.EnvFactoryError)
            raise kind(f"worker {exc.worker} could not build its envs (env {exc.env}): {exc}"
                       ) from exc

    def _await_built(self, workers: Sequence[int], deadline: Deadline) -> None:
        for w in workers:
            self.states.transition(w, WorkerState.BUSY)
        try:
            self.gather(workers, "BUILD", deadline).or_raise()  # READY from each
        except errors.DeadlineExceededError as exc:
            raise errors.DeadlineExceededError(
                hung_workers=exc.hung_workers, deadline=exc.deadline, who="workers building envs",
                fix="their env factories did not return in time; raise startup_deadline (or "
                "the call's timeout) if building is just slow, or find what blocks it",
            ) from exc

    def stop(self, w: int) -> None:
        """Kills what is left of worker ``w``'s process (before ``respawn``), closes its pipes."""
        shutdown([self.procs[w]], [self.conns[s] for s in self.layout.process_slots(w)], 0.0,
                 pidfds=self._pidfds)

    def respawn(self, w: int, deadline: Deadline) -> None:
        """After ``stop(w)``: a new process for ``w`` (and its other half), built in time."""
        slots = self.layout.process_slots(w)
        proc, conns, death = self._spawn(slots)
        for s, conn in zip(slots, conns, strict=True):
            self.procs[s], self.conns[s], self.deaths[s] = proc, conn, death
        self._await_built(list(slots), deadline)

    def _spawn(self, slots: range) -> tuple[WorkerProcess, list[PipeEnd], int]:
        """Starts the process serving workers ``slots``; its pipes, one per worker, and the fd
        that tells its death (``death_fd``). Slots that this process serves itself
        (``layout.parent_slots``) are built here, now (``inparent.serve_here``)."""
        self._all_deaths = None  # a new process: a new death fd
        if slots.start in self.layout.parent_slots:
            return self._serve_here(slots)
        pipes = [self._ctx.Pipe(duplex=True) for _ in slots]
        others = [c for i, c in enumerate(self.conns) if i not in slots]
        inherited = [*others, *(parent for parent, _ in pipes), self.ring_reader]
        specs = [_worker_spec(self, w, inherited) for w in slots]
        # daemon=True: if the parent exits normally without close(), multiprocessing
        # terminates the workers instead of waiting on them forever at interpreter exit.
        proc = self._ctx.Process(target=WORKER_MAIN, daemon=True,
                                 args=(specs, [child for _, child in pipes]),
                                 name=f"vecsample-worker-{slots.start // len(slots)}")
        try:
            proc.start()
        except Exception as exc:
            for parent, _ in pipes:
                parent.close()
            raise _pickle_error(exc, self.layout.context) from exc
        finally:
            for _, child in pipes:  # only the worker holds them now: its death reads as EOF
                child.close()
        death, owned = death_fd(proc)
        if owned:
            self._pidfds[proc] = death
        return proc, [parent for parent, _ in pipes], death

    def _serve_here(self, slots: range) -> tuple[WorkerProcess, list[PipeEnd], int]:
        """Workers ``slots``, served by this process: their blocks built here (the worker's
        own code, through ``IN_PARENT``), their stand-in process and pipes."""
        proc, pipes, served = serve_here(IN_PARENT, [_worker_spec(self, w, []) for w in slots])
        self.served.update(zip(slots, served, strict=True))
        return proc, list(pipes), proc.death_fd

    def pids(self) -> list[int]:
        return [int(proc.pid or 0) for proc in self.procs]

    def all_death_fds(self) -> dict[int, list[int]]:
        """``death_fds`` of every worker, made once and again after each respawn: what a full
        batch's wait watches, at no cost per worker."""
        if self._all_deaths is None:
            self._all_deaths = self.death_fds(range(self.layout.num_slots))
        return self._all_deaths

    def death_fds(self, workers: Iterable[int]) -> dict[int, list[int]]:
        """Each process's death fd (``death_fd``) -> those of ``workers`` it serves (two if
        pipelined)."""
        deaths = self.deaths
        if self.layout.slots_per_process == 1:  # on every wait of a step: the short way
            return {deaths[w]: [w] for w in workers}
        found: dict[int, list[int]] = {}
        for w in workers:
            found.setdefault(deaths[w], []).append(w)
        return found

    def close(self, timeout: float) -> None:
        """Stops every worker, terminating those not gone within ``timeout``. Idempotent."""
        if self._finalizer.detach() is None:
            return
        try:
            if os.getpid() != self._owner:  # a forked copy of the sampler: leave the workers be
                _close_copies(self.conns, [self.ring_reader, self.ring_writer], self._pidfds)
                return
            self.states.close_all()
            shutdown(self.procs, self.conns, timeout, [self.ring_reader, self.ring_writer],
                     self.announce, self._pidfds)
        finally:
            # The shared memory's fd, here and now (shm.Region): its mapping stays for the
            # views still held (the user's results), and goes with the last of them.
            self._buffers.release()

    # --- errors ----------------------------------------------------------------------------------

    def died(self, w: int, command: str) -> errors.WorkerDiedError:
        """Marks worker ``w`` dead; the error to raise, naming its pid, exit code and envs."""
        self.states.transition(w, WorkerState.DEAD)
        proc = self.procs[w]
        if proc.exitcode is None and _exited(self.deaths[w], 0.1):  # pipe EOF: exiting now
            proc.join()  # it has exited: the reap returns at once (not by its sentinel, which
            # a child it forked may hold open)
        return errors.WorkerDiedError(
            worker=w, pid=proc.pid, exitcode=proc.exitcode, command=command,
            env_ids=range(*self.layout.bounds(w)),
        )

    def failed(self, w: int, report: object) -> errors.WorkerError:
        """Marks worker ``w`` failed; the error to raise, with the remote traceback."""
        assert isinstance(report, ErrorReport), report
        self.states.transition(w, WorkerState.FAILED)
        return errors.WorkerError(
            worker=w, env=report.env, command=report.command, exc_type=report.exc_type,
            message=report.message, remote_traceback=report.traceback,
        )

    # --- the command RPC -------------------------------------------------------------------------

    def request(
        self, command: Command, workers: Sequence[int], payload: Callable[[int], Any],
        deadline: Deadline,
    ) -> Replies:
        """Sends ``command`` with ``payload(w)`` to each of ``workers``; their replies, and the
        workers lost on the way (past ``deadline``: DeadlineExceededError, the silent ones
        marked failed)."""
        # Build every message before sending any: a payload that fails to pickle must not leave
        # some workers busy with a command whose replies nobody reads.
        messages = {w: _dumps(command, payload(w)) for w in workers}
        sent: list[int] = []
        unsent: list[Lost] = []
        for w, message in messages.items():
            with critical:  # sent and marked busy together, or neither
                try:
                    self.conns[w].send_bytes(message)
                except OSError:
                    unsent.append(self.died(w, command.name))
                    continue
                self.states.transition(w, WorkerState.BUSY)
            sent.append(w)
        self.announce(sent)
        replies = self.gather(sent, command.name, deadline)  # every sent command is answered
        replies.lost += unsent
        return replies

    def announce(self, workers: Sequence[int]) -> None:
        """After a command was sent to each of ``workers``: a worker spinning for its next step
        sees its COMMANDS word move and reads its pipe; one asleep on the futex is rung (one
        asleep on its pipe wakes by itself)."""
        for w in workers:
            self._commands[w] += 1
        if self.bell is not None:
            self.bell.ring(workers)

    def reconcile(self, deadline: Deadline) -> list[errors.WorkerDiedError]:
        """Before a command: an interrupted command's replies are read, and the workers that
        died since their last call are marked dead; returned, for the failure policy."""
        self.drain(deadline)
        return self.find_dead()

    def find_dead(self) -> list[errors.WorkerDiedError]:
        """Marks idle workers whose process is gone as dead (a death between calls)."""
        dead = [w for w, proc in enumerate(self.procs)
                if self.states.current[w] is WorkerState.IDLE and not proc.is_alive()]
        return [self.died(w, "the time between two calls") for w in dead]

    def drain(self, deadline: Deadline) -> None:
        """Reads the replies of a command that a KeyboardInterrupt cut short, so that no stale
        reply is ever taken for a later call's (a silent worker is marked failed; a lost one's
        own state says what happened)."""
        busy = [w for w, s in enumerate(self.states.current) if s is WorkerState.BUSY]
        if busy:
            self.gather(busy, "DRAIN", deadline)

    def reset_targets(self, mask: np.ndarray | None) -> list[int]:
        """The workers a reset of the envs in ``mask`` (None: all) goes to."""
        return [w for w in range(self.layout.num_slots)
                if mask is None or mask[slice(*self.layout.bounds(w))].any()]

    def reset_payload(self, seeds: Sequence[int | None], options: dict[str, Any] | None,
                      mask: np.ndarray | None) -> Callable[[int], object]:
        """Each worker's part of a reset: its envs' seeds, the options, its rows of ``mask``."""

        def payload(w: int) -> object:
            lo, hi = self.layout.bounds(w)
            return seeds[lo:hi], options, None if mask is None else mask[lo:hi]

        return payload

    def reset_infos(self, replies: dict[int, Any]) -> list[dict[str, Any]]:
        """Every env's reset info from a reset's replies (empty for envs not reset); the
        pickled leaves the replies carry are written to their rows."""
        infos: list[dict[str, Any]] = [{} for _ in range(self.layout.num_envs)]
        for w, (reply, lane) in replies.items():
            lo = self.layout.bounds(w)[0]
            for j, info in reply:
                infos[lo + j] = info
            if lane:
                self._buffers.apply_lane(lo, lane)
        return infos

    def gather(self, workers: Sequence[int], command: str, deadline: Deadline) -> Replies:
        """One reply from each of ``workers``: every one is read, failures included, so that
        none goes stale. Past ``deadline``: DeadlineExceededError (the silent ones failed)."""
        replies = Replies()
        waiting = {self.conns[w]: w for w in workers}
        deadline_at = deadline.wait_end()
        while waiting:
            remaining = None if deadline_at is None else deadline_at - time.monotonic()
            ready = self._wait_any(waiting, remaining)
            if self.states.closed:  # by another thread's close(): the workers are going
                raise errors.ClosedError(f"this VecSampler was closed (by another thread's "
                                         f"close()) while {command.lower()}() waited; create a "
                                         f"new one.")
            if not ready:
                if deadline_at is not None and time.monotonic() >= deadline_at:
                    raise self._silent(sorted(waiting.values()), deadline.exceeded())
                continue  # a long wait is cut into pieces (wait_handles): not the deadline
            for w in sorted({waiting[c] for c in ready if c in waiting} | self._dead_in(ready)):
                if w in waiting.values():
                    del waiting[self.conns[w]]
                    payload, lost = self._read_reply(w, command)
                    if lost is None:
                        replies.ok[w] = payload
                    else:
                        replies.lost.append(lost)
        return replies

    def _silent(self, workers: list[int], limit: float | None) -> errors.DeadlineExceededError:
        # A late reply must never be read as the answer to a later call: the silent workers
        # are marked failed (a restart respawns them on a fresh pipe).
        for w in workers:
            self.states.transition(w, WorkerState.FAILED)
        return errors.DeadlineExceededError(
            hung_workers=workers, deadline=limit,
            fix="they are marked failed and must be restarted; raise `deadline` if the envs "
            "are just slow",
        )

    def _wait_any(self, waiting: dict[PipeEnd, int], timeout: float | None) -> list[Any]:
        """The pipes and death fds of ``waiting`` workers that are ready within ``timeout``."""
        handles = [*waiting, *{self.deaths[w] for w in waiting.values()}]
        return wait_handles(handles, None if timeout is None else max(0.0, timeout))

    def _dead_in(self, ready: list[Any]) -> set[int]:
        """The workers whose process's death fd is in ``ready`` (all of a process's slots)."""
        fired = {r for r in ready if isinstance(r, int)}
        return {w for w, fd in enumerate(self.deaths) if fd in fired}

    def _read_reply(self, w: int, command: str) -> tuple[Any, Lost | None]:
        """Worker ``w``'s reply to ``command``: (its payload, None), or (None, the error that
        names what was lost); the worker's state moved accordingly."""
        conn = self.conns[w]
        with critical:  # read and recorded together: a pipe is never left half read
            try:
                if not conn.poll():
                    raise EOFError
                message = conn.recv_bytes()
            except (EOFError, OSError):
                return None, self.died(w, command)
            tag, payload = (Reply.OK, None) if message == OK_MESSAGE else pickle.loads(message)
            assert isinstance(tag, Reply)
            if isinstance(payload, ErrorReport) and payload.exc_type == "ReplyPicklingError":
                self.states.transition(w, WorkerState.IDLE)  # only the reply was at fault
                return None, errors.ReplyPicklingError(worker=w, command=command,
                                                       message=payload.message)
            if tag is Reply.ERROR:
                return None, self.failed(w, payload)
            self.states.transition(w, WorkerState.IDLE)
        return payload, None


# --- helpers -------------------------------------------------------------------------------------

def _worker_spec(pool: WorkerPool, w: int, inherited: list[PipeEnd]) -> WorkerSpec:
    """What the process serving worker ``w`` needs for it (``inherited``: pipe ends to close
    under fork)."""
    lo, hi = pool.layout.bounds(w)
    fns = pool.layout.env_fns[lo:hi]  # empty with a hosted env, which pickles itself
    if pool.layout.context != "fork":
        fns = tuple(PickledFactory(fn, pool.layout.context) for fn in fns)
    affinity = pool.layout.cpu_affinity[w]
    return WorkerSpec(
        index=w, env_fns=fns, env_offset=lo, count=hi - lo, hosted=pool.layout.hosted,
        buffers=pool._buffers,
        autoreset_mode=pool.layout.options.autoreset_mode, infos=pool.layout.options.infos,
        threads=pool.layout.options.threads_per_worker,
        cpu_affinity=None if affinity is None else list(affinity), parent_pid=os.getpid(),
        # PR_SET_PDEATHSIG fires when the creating *thread* exits: from another thread,
        # the worker relies on its watchdog (the parent's death is seen within 0.2 s).
        pdeathsig=threading.current_thread() is threading.main_thread(),
        spin_s=pool.layout.spin_s, ring_writer=pool.ring_writer, ordered=pool._ordered,
        native=pool.layout.native,
        inherited_conns=inherited if pool.layout.context == "fork" else [],
        registrations=pool.registrations,
    )


def shutdown(
    procs: Sequence[WorkerProcess], conns: Sequence[PipeEnd], timeout: float,
    more: Sequence[PipeEnd] = (), announce: Callable[[Sequence[int]], None] | None = None,
    pidfds: dict[WorkerProcess, int] | None = None,
) -> None:
    """Asks every worker to exit (``announce``: ``WorkerPool.announce``, for all of them),
    then terminates and kills what is left, then closes the pipes (``more``: the doorbell
    pipe's ends) and the pidfds of ``procs`` (in ``pidfds``). Always returns."""
    pidfds = {} if pidfds is None else pidfds
    close_message = pickle.dumps((Command.CLOSE, None))
    for conn in conns:
        with contextlib.suppress(OSError, ValueError):  # already dead or closed: nothing to ask
            conn.send_bytes(close_message)
    if announce is not None:
        announce(range(len(conns)))
    started = [p for p in dict.fromkeys(procs) if p.pid is not None]  # once per process
    end = time.monotonic() + min(max(0.0, timeout), MAX_WAIT)
    _join_all(started, end, pidfds)
    for proc in started:  # all at once: the call is bounded, not each worker in turn
        if proc.is_alive():
            proc.terminate()
    _join_all(started, time.monotonic() + TERMINATE_GRACE, pidfds)
    for proc in started:
        if proc.is_alive():
            proc.kill()  # cannot be ignored: the join below returns at once
    _join_all(started, None, pidfds)
    for conn in [*conns, *more]:
        conn.close()
    for proc in started:
        proc.close()
        fd = pidfds.pop(proc, None)
        if fd is not None:
            os.close(fd)


def _join_all(procs: Sequence[WorkerProcess], end: float | None,
              pidfds: dict[WorkerProcess, int]) -> None:
    """Reaps those of ``procs`` that exit before ``end`` (None: waits for all)."""
    for proc in procs:
        fd = pidfds.get(proc)
        remaining = None if end is None else max(0.0, end - time.monotonic())
        if fd is None:  # no pidfd: the sentinel, as multiprocessing waits
            proc.join(remaining)
        elif _exited(fd, remaining):
            proc.join()  # it has exited: returns at once, whoever holds its sentinel


def death_fd(proc: BaseProcess) -> tuple[int, bool]:
    """An fd that polls readable (POLLIN) once ``proc`` has exited, and whether it is ours to
    close: every wait for a worker (the step handshake's, the command RPC's, close's) watches it.

    Its pidfd (Linux >= 5.3) where the kernel has one: a handle on the process itself, which no
    other process holds. The process sentinel is not enough: it is a pipe whose write end the
    worker holds, and a child the worker forks (an env that starts a simulator or an emulator)
    inherits it, so under fork or spawn a worker's death would be seen only when that child
    exits, or at the deadline. Where there is no pidfd (an older kernel, another platform, a
    sandbox that forbids the call) the sentinel it is, with that limit (docs/reliability.md).
    A plain fd per process, which any ``poll()`` can watch: a native wait for the handshake
    watches the same fds.
    """
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None and proc.pid is not None:
        # The process is ours (fork, spawn) or the forkserver's, started just now: its pid
        # cannot have been reused yet.
        with contextlib.suppress(OSError):  # ENOSYS, EPERM: the sentinel below
            return pidfd_open(proc.pid), True
    return proc.sentinel, False


def _exited(fd: int, timeout: float | None) -> bool:
    """Whether death fd ``fd`` reads ready within ``timeout`` seconds (None: waits)."""
    return bool(wait_handles([fd], timeout))


def _close_copies(conns: Sequence[PipeEnd], more: Sequence[PipeEnd],
                  pidfds: dict[WorkerProcess, int]) -> None:
    """In a forked copy of the pool: closes its copies of the pipes and pidfds, and nothing
    else (the workers are the parent's)."""
    for conn in [*conns, *more]:
        conn.close()
    for fd in pidfds.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    pidfds.clear()


def _pickle_error(exc: Exception, context: str) -> errors.EnvFactoryError:
    return errors.EnvFactoryError(
        f"could not start a worker with context={context!r}: {type(exc).__name__}: {exc}. "
        f"Under spawn/forkserver every env factory must be picklable by cloudpickle "
        f"(functions, lambdas and closures are; open files, locks and live envs are not): "
        f"build such objects inside the factory, or use context='fork'."
    )


def _dumps(command: Command, payload: Any) -> bytes:
    try:
        return pickle.dumps((command, payload), pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise errors.ConfigError(
            f"the arguments of {command.name.lower()}() cannot be pickled to the workers: "
            f"{type(exc).__name__}: {exc}. Pass plain data (numbers, arrays, dicts)."
        ) from exc


def wait_handles(objects: list[Any], timeout: float | None) -> list[Any]:
    """``multiprocessing.connection.wait`` for pipes and sentinels, at a quarter of the cost.

    ``wait`` builds a ``selectors`` object and registers every handle through it on each call:
    ~12 µs for two workers (two pipes, two sentinels). A bare ``select.poll`` does the same in
    ~3 µs (timeit, docs/lab/benchmarks.md), with the same millisecond rounding of the timeout and
    the same rule that any event (data, hang-up, error) makes a handle ready.
    """
    if not hasattr(select, "poll"):  # Windows
        return wait(objects, timeout)
    poller = select.poll()
    by_fd: dict[int, Any] = {}
    for obj in objects:
        fd = obj if isinstance(obj, int) else obj.fileno()
        by_fd[fd] = obj
        poller.register(fd, select.POLLIN)
    ms = None if timeout is None else min(math.ceil(timeout * 1e3), MAX_POLL_MS)
    events = poller.poll(ms)
    return [by_fd[fd] for fd, _ in events]


def _shutdown_in(owner: int, procs: list[WorkerProcess], conns: list[PipeEnd],
                 more: Sequence[PipeEnd], pidfds: dict[WorkerProcess, int]) -> None:
    """The finalizer: ``shutdown`` in the process that made the workers, else only close the
    pipe and pidfd copies (a forked child exiting must not close its parent's workers)."""
    if os.getpid() == owner:
        shutdown(procs, conns, 1.0, more, pidfds=pidfds)
    else:
        _close_copies(conns, more, pidfds)
