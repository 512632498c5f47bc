"""``WorkerPool``: the worker processes and their pipes, and the command RPC over those pipes.

The pool starts every worker and waits for its envs to be built, respawns one in place (a fresh
process on a fresh pipe, so no stale reply is ever read), shuts them all down, and runs the
synchronous commands (reset, call, ...): send one pickled ``(Command, payload)`` per worker,
then read one reply per worker. What a command got comes back as a value, ``Replies``: the
replies by worker and the workers lost on the way; the sampler's failure policy decides what
to do with the lost ones (``restart.py``). Steps do not go through here: they travel through
shared memory (``handshake.py``), driven by ``VecSampler``.

Two kinds of slot, told apart by one dict (``local``): a slot served by a worker process (in
``procs``, ``conns`` and ``deaths``: it can die, hang and be killed; its commands travel
pickled on its pipe) and a slot this process serves itself (``Options.env_placement``: a
``LocalBlock``, reached through the door ``vecsample/inprocess.py``; its commands are direct
calls, it cannot die on its own, and an env that hangs there cannot be killed). Each method
says what it does for each kind; docs/reliability.md lists the guarantees of each.
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
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from vecsample import errors
from vecsample._parent.deadline import Deadline
from vecsample._parent.layout import Layout
from vecsample._parent.signals import critical
from vecsample._parent.startup import check_main_guard
from vecsample._wire.handshake import parent_side
from vecsample._wire.protocol import (
    OK_MESSAGE,
    Command,
    ErrorReport,
    Reply,
    WorkerState,
    WorkerStates,
)
from vecsample._wire.shm import SharedBuffers
from vecsample._wire.spec import WORKER_MAIN, Pickled, PickledFactory, WorkerSpec
from vecsample.factories import env_registrations
from vecsample.inprocess import LocalBlock

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
        return self.lost[0].carrying(replies=dict(self.ok if answered is None else answered))

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
        for proc in pool.procs.values():
            if registry is not None:
                registry.discard(proc)


_POOLS: weakref.WeakSet[WorkerPool] = weakref.WeakSet()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disown_in_forked_child)


class WorkerPool:
    """The slots of one sampler: the processes, pipes and blocks that serve them, and their
    states (the module docstring: the two kinds of slot)."""

    def __init__(self, layout: Layout, buffers: SharedBuffers) -> None:
        self.layout = layout
        self.states = WorkerStates(layout.num_slots)
        self._buffers = buffers
        self._ctx: Any = mp.get_context(layout.context)  # typeshed: BaseContext lacks Process
        # The workers' shared doorbell to a sleeping parent (handshake.py): (reader, writer).
        self.ring_reader, self.ring_writer = self._ctx.Pipe(duplex=False)
        #: The slots this process serves itself (``layout.parent_slots``), by slot: their
        #: blocks, which the step channel runs (``_parent/local.py``).
        self.local: dict[int, LocalBlock] = {}
        #: The slots served by worker processes: by slot, the process that serves it and the
        #: parent's end of its pipe.
        self.procs: dict[int, BaseProcess] = {}
        self.conns: dict[int, Connection] = {}
        #: By process slot, the fd that polls readable once its process has exited
        #: (``death_fd``): what every wait for a worker watches, set once per process.
        self.deaths: dict[int, int] = {}
        #: The pidfds this pool opened, by process: closed when the process is reaped.
        self._pidfds: dict[BaseProcess, int] = {}
        self._owner = os.getpid()
        self._all_deaths: dict[int, list[int]] | None = None  # all of them, until a respawn
        #: The parent's end of the step handshake, as ``layout.transport`` says (the step
        #: channel drives it; the pool tells it of every command sent, ``announce``). A block
        #: served here has a control row too, which its channel completes itself.
        self.side = parent_side(layout.transport, buffers.control(), layout.num_slots,
                                self.ring_reader, layout.parent_spin_s, self.conns)
        #: What a spawn or forkserver worker registers before it builds (factories.py).
        self.registrations = (None if layout.context == "fork" else Pickled(
            env_registrations(layout.env_fns, layout.hosted), layout.context,
            "an env registration"))
        _POOLS.add(self)
        # The finalizer holds these dicts themselves: a respawn replaces entries in place. It
        # runs in this process only: a child forked from it (a DataLoader worker) that exits
        # must not close our workers (its copies of the pipes just close with it).
        self._finalizer = weakref.finalize(self, _shutdown_in, os.getpid(), self.procs,
                                           self.conns, [self.ring_reader, self.ring_writer],
                                           self._pidfds, self.local)

    # --- lifetime --------------------------------------------------------------------------------

    def start(self) -> None:
        """Starts every worker process and builds every block served here; returns once all
        have built their envs."""
        here = self.layout.parent_slots
        if len(here) < self.layout.num_slots:  # a process to start
            check_main_guard(self.layout.context)
        for p in range(self.layout.options.num_workers):
            slots = self.layout.slots(p)
            if slots.start in here:
                self._build_here(slots)  # a typed build error raised at once
                continue
            proc, conns, death = self._spawn(slots)  # EnvFactoryError: caller closes
            for s, conn in zip(slots, conns, strict=True):
                self.procs[s], self.conns[s], self.deaths[s] = proc, conn, death
        try:
            self._await_built(sorted(self.procs), Deadline(self.layout.options.startup_deadline))
        except errors.WorkerError as exc:
            raise _build_error(exc) from exc

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

    def _build_here(self, slots: range) -> None:
        """Builds the blocks of ``slots`` in this process, now (``inprocess.LocalBlock``). An
        env that raises is the build error a worker process would report; a KeyboardInterrupt
        closes what was built, then is raised."""
        built: list[LocalBlock] = []
        try:
            for w in slots:
                block = LocalBlock(_worker_spec(self, w, None))
                self.local[w] = block
                built.append(block)
                self.states.transition(w, WorkerState.BUSY)
                try:
                    block.build()
                except Exception as exc:
                    raise _build_error(self.failed(w, block.report("BUILD"))) from exc
                self.states.transition(w, WorkerState.IDLE)
        except BaseException:
            for block in built:
                block.close()
            raise

    def stop(self, w: int) -> None:
        """Stops what serves slot ``w`` (before ``respawn``): kills what is left of its process
        and closes its pipes, or closes the envs of a block served here."""
        slots = self.layout.process_slots(w)
        if w in self.local:
            for s in slots:
                self.local[s].close()
            return
        shutdown([self.procs[w]], [self.conns[s] for s in slots], 0.0, pidfds=self._pidfds)

    def respawn(self, w: int, deadline: Deadline) -> None:
        """After ``stop(w)``: a new process for ``w`` (and its other half), built in time, or
        its blocks built here again."""
        slots = self.layout.process_slots(w)
        if w in self.local:
            self._build_here(slots)
            return
        proc, conns, death = self._spawn(slots)
        for s, conn in zip(slots, conns, strict=True):
            self.procs[s], self.conns[s], self.deaths[s] = proc, conn, death
        self._await_built(list(slots), deadline)

    def _spawn(self, slots: range) -> tuple[BaseProcess, list[Connection], int]:
        """Starts the process serving workers ``slots``; its pipes, one per worker, and the fd
        that tells its death (``death_fd``)."""
        self._all_deaths = None  # a new process: a new death fd
        pipes = [self._ctx.Pipe(duplex=True) for _ in slots]
        others = [c for i, c in self.conns.items() if i not in slots]
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

    @property
    def buffers(self) -> SharedBuffers:
        """The shared memory the workers write their rows to (a reset's pickled leaves go
        there too: ``commands.reset_infos``)."""
        return self._buffers

    def pids(self) -> list[int]:
        """Each slot's process id: this process's for a block served here."""
        return [os.getpid() if w in self.local else int(self.procs[w].pid or 0)
                for w in range(self.layout.num_slots)]

    def all_death_fds(self) -> dict[int, list[int]]:
        """``death_fds`` of every process slot, made once and again after each respawn: what
        a full batch's wait watches, at no cost per worker."""
        if self._all_deaths is None:
            self._all_deaths = self.death_fds(self.deaths)
        return self._all_deaths

    def death_fds(self, workers: Iterable[int]) -> dict[int, list[int]]:
        """Each process's death fd (``death_fd``) -> those of ``workers`` it serves (two if
        pipelined); a block served here has none (it cannot die apart from this process)."""
        deaths = self.deaths
        if self.layout.slots_per_process == 1 and not self.local:  # every wait: the short way
            return {deaths[w]: [w] for w in workers}
        found: dict[int, list[int]] = {}
        for w in workers:
            if w in deaths:
                found.setdefault(deaths[w], []).append(w)
        return found

    def close(self, timeout: float) -> None:
        """Stops every worker, terminating those not gone within ``timeout``, and closes the
        blocks served here. Idempotent."""
        if self._finalizer.detach() is None:
            return
        try:
            if os.getpid() != self._owner:  # a forked copy of the sampler: leave the workers be
                _close_copies(self.conns, [self.ring_reader, self.ring_writer], self._pidfds)
                return
            self.states.close_all()
            self.side.closing(self.ring_writer)  # a wait in another thread ends now
            _close_local(self.local)
            shutdown(list(self.procs.values()), list(self.conns.values()), timeout,
                     [self.ring_reader, self.ring_writer], self.announce, self._pidfds)
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
        marked failed). The worker processes get theirs first, then the blocks served here
        run theirs, while the processes work, then the processes' replies are read."""
        # Build every message before sending any: a payload that fails to pickle must not leave
        # some workers busy with a command whose replies nobody reads.
        messages = {w: _dumps(command, payload(w)) for w in workers if w not in self.local}
        sent: list[int] = []
        replies = Replies()
        for w, message in messages.items():
            with critical:  # sent and marked busy together, or neither
                try:
                    self.conns[w].send_bytes(message)
                except OSError:
                    replies.lost.append(self.died(w, command.name))
                    continue
                self.states.transition(w, WorkerState.BUSY)
            sent.append(w)
        self.announce(sent)
        for w in workers:
            if w in self.local:
                self._run_here(w, command, payload(w), replies)
        got = self.gather(sent, command.name, deadline)  # every sent command is answered
        got.ok.update(replies.ok)
        got.lost += replies.lost
        return got

    def _run_here(self, w: int, command: Command, payload: Any, replies: Replies) -> None:
        """``command`` on the block served here as slot ``w``, a direct call: its result, or
        the error that names its env, into ``replies``. A KeyboardInterrupt out of it (an env's,
        or a SIGINT handler other than vecsample's) leaves the block half commanded: it is
        marked failed (a restart rebuilds it), then the interrupt is raised."""
        block = self.local[w]
        self.states.transition(w, WorkerState.BUSY)
        try:
            result = block.run(command, payload)
        except Exception:
            replies.lost.append(self.failed(w, block.report(command.name)))
            return
        except BaseException:
            self.failed(w, block.report(command.name))
            raise
        self.states.transition(w, WorkerState.IDLE)
        replies.ok[w] = result

    def announce(self, workers: Sequence[int]) -> None:
        """After a command was sent to each of ``workers``: the handshake's side makes sure
        each reads it now, spinning or asleep (``ParentSide.commanded``)."""
        if workers:
            self.side.commanded(workers)

    def reconcile(self, deadline: Deadline) -> list[errors.WorkerDiedError]:
        """Before a command: an interrupted command's replies are read, and the workers that
        died since their last call are marked dead; returned, for the failure policy."""
        self.drain(deadline)
        return self.find_dead()

    def find_dead(self) -> list[errors.WorkerDiedError]:
        """Marks idle workers whose process is gone as dead (a death between calls)."""
        dead = [w for w, proc in self.procs.items()
                if self.states.current[w] is WorkerState.IDLE and not proc.is_alive()]
        return [self.died(w, "the time between two calls") for w in dead]

    def drain(self, deadline: Deadline) -> None:
        """Reads the replies of a command that a KeyboardInterrupt cut short, so that no stale
        reply is ever taken for a later call's (a silent worker is marked failed; a lost one's
        own state says what happened). A block served here is never left busy."""
        busy = [w for w in self.procs if self.states.current[w] is WorkerState.BUSY]
        if busy:
            self.gather(busy, "DRAIN", deadline)

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

    def _wait_any(self, waiting: dict[Connection, int], timeout: float | None) -> list[Any]:
        """The pipes and death fds of ``waiting`` workers that are ready within ``timeout``."""
        handles = [*waiting, *{self.deaths[w] for w in waiting.values()}]
        return wait_handles(handles, None if timeout is None else max(0.0, timeout))

    def _dead_in(self, ready: list[Any]) -> set[int]:
        """The workers whose process's death fd is in ``ready`` (all of a process's slots)."""
        fired = {r for r in ready if isinstance(r, int)}
        return {w for w, fd in self.deaths.items() if fd in fired}

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

def _worker_spec(pool: WorkerPool, w: int, inherited: list[Connection] | None) -> WorkerSpec:
    """What the process serving worker ``w`` needs for it (``inherited``: pipe ends to close
    under fork); None: ``w`` is served here, its factories called as they are."""
    lo, hi = pool.layout.bounds(w)
    fns = pool.layout.env_fns[lo:hi]  # empty with a hosted env, which pickles itself
    here = inherited is None
    if pool.layout.context != "fork" and not here:
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
        spin_s=pool.layout.spin_s, ring_writer=None if here else pool.ring_writer,
        transport=pool.layout.transport,
        inherited_conns=inherited if inherited and pool.layout.context == "fork" else [],
        registrations=None if here else pool.registrations,
    )


def shutdown(
    procs: Sequence[BaseProcess], conns: Sequence[Connection], timeout: float,
    more: Sequence[Connection] = (), announce: Callable[[Sequence[int]], None] | None = None,
    pidfds: dict[BaseProcess, int] | None = None,
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


def _join_all(procs: Sequence[BaseProcess], end: float | None,
              pidfds: dict[BaseProcess, int]) -> None:
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


def _close_copies(conns: dict[int, Connection], more: Sequence[Connection],
                  pidfds: dict[BaseProcess, int]) -> None:
    """In a forked copy of the pool: closes its copies of the pipes and pidfds, and nothing
    else (the workers and the blocks served here are the parent's)."""
    for conn in [*conns.values(), *more]:
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


def _shutdown_in(owner: int, procs: dict[int, BaseProcess], conns: dict[int, Connection],
                 more: Sequence[Connection], pidfds: dict[BaseProcess, int],
                 local: dict[int, LocalBlock]) -> None:
    """The finalizer: ``shutdown`` in the process that made the workers (and the blocks served
    here closed), else only close the pipe and pidfd copies (a forked child exiting must not
    close its parent's workers)."""
    if os.getpid() == owner:
        _close_local(local)
        shutdown(list(procs.values()), list(conns.values()), 1.0, more, pidfds=pidfds)
    else:
        _close_copies(conns, more, pidfds)


def _close_local(local: dict[int, LocalBlock]) -> None:
    """Closes the envs of every block served here (each waits for a step or command under
    way in another thread)."""
    for block in local.values():
        block.close()


def _build_error(exc: errors.WorkerError) -> errors.EnvFactoryError:
    """A worker's (or a block's) build error as the parent raises it: a build error the
    worker typed (a module it cannot import, an env id it lacks) as that class again, any
    other as EnvFactoryError."""
    kind = errors.BUILD_ERRORS.get(exc.exc_type, errors.EnvFactoryError)
    return kind(f"worker {exc.worker} could not build its envs (env {exc.env}): {exc}")
