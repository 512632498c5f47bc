"""The worker process: build the envs, then serve commands until CLOSE or the parent is gone.

A worker steps its block (``step_loop.StepLoop``), chosen once: its own envs (``env_block.py``)
or one hosted vector env (``hosted_block.py``). Each command is a method of the block. STEP
reads actions from shared memory, steps the block, which writes its rows of shared memory, and
answers with one byte (or the infos, when there are any). An exception in an env is answered
with the env index and the traceback text; the worker itself keeps serving.

The same worker runs in the trainer's own process for the blocks it steps itself
(``Options.env_placement``): ``ServedInParent`` takes what the parent sends on the worker's
pipe and runs a posted step when the parent's wait begins, with no process around it.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import multiprocessing.forkserver
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from vecsample._wire.handshake import (
    DOORBELL,
    REPLY_MESSAGE,
    REPLY_PLAIN,
    NativeWaiter,
    Waiter,
    WorkerSide,
)
from vecsample._wire.infos import InfoRecord, InfoWriter, Signature
from vecsample._wire.protocol import OK_MESSAGE, Command, ErrorReport, Reply
from vecsample._wire.shm import Lane, Views
from vecsample._wire.spec import WorkerSpec
from vecsample._worker import rows
from vecsample._worker.env_block import EnvBlock
from vecsample._worker.hosted_block import HostedBlock
from vecsample._worker.step_loop import Cursor, StepLoop
from vecsample.errors import EnvFactoryError, FactoryImportError
from vecsample.types import AutoresetMode

#: How often the watchdog thread checks that the parent is still alive (seconds).
WATCHDOG_PERIOD = 0.2
_PR_SET_PDEATHSIG = 1


def worker_main(specs: Sequence[WorkerSpec], conns: Sequence[Connection]) -> None:
    """Entry point of a worker process: it serves one worker of the step API, or two (the
    halves of its block) with ``pipeline=True``."""
    _prepare_process(specs[0])
    for inherited in specs[0].inherited_conns:
        inherited.close()
    workers = [_Worker(spec, conn) for spec, conn in zip(specs, conns, strict=True)]
    if all([worker.build() for worker in workers]):  # each reports its own build
        serve(workers)
    else:
        for worker in workers:
            worker._close_envs()


def serve(workers: Sequence[_Worker]) -> None:
    """Runs the posted steps and the commands of ``workers`` (one process's slots) until each
    got CLOSE or the parent is gone."""
    sides: list[WorkerSide] = []
    for worker in workers:  # slot i of the Waiter is workers[i]
        assert worker.side is not None  # only local_step builds one without a pipe; it never serves
        sides.append(worker.side)
    # The C waiter where the parent chose the native path (the same protocol: the parent's
    # choice, made once, applies to both ends).
    waiter = NativeWaiter(sides) if workers[0].spec.native else Waiter(sides)
    while waiter.live:
        try:
            slot, message = waiter.next()
        except (EOFError, OSError):
            break  # the parent is gone: exit quietly
        worker = workers[slot]
        if message is None:
            worker._step_posted()
        elif not worker.handle(message):  # CLOSE
            waiter.close(slot)
    for worker in workers:
        worker._close_envs()


class _NoParent:
    """The pipe of a worker run in the parent's own process: keeps the last message."""

    last: bytes = b""

    def send_bytes(self, message: bytes) -> None:
        self.last = message


def local_step(spec: WorkerSpec, seeds: Sequence[int | None],
               ) -> tuple[Callable[[], object], Callable[[], None]]:
    """Builds and resets (with ``seeds``) ``spec``'s envs in this process and returns the
    worker's step: the same loop, with no process, pipe or handshake around it (``vecsample
    bench`` times it against a bare loop), and what closes the envs. The actions are read from
    ``spec.buffers``."""
    pipe = _NoParent()
    worker = _Worker(spec, pipe)  # type: ignore[arg-type]  # only send_bytes is used
    if not worker.build():
        worker._close_envs()
        report: ErrorReport = pickle.loads(pipe.last)[1]
        raise EnvFactoryError(f"env {report.env} could not be built in this process: "
                              f"{report.exc_type}: {report.message}; check its factory.")
    block = worker.block
    block.reset((list(seeds), None, None))
    if spec.autoreset_mode is not AutoresetMode.DISABLED:
        return worker._step, worker._close_envs

    def step_and_reset() -> None:  # DISABLED freezes ended envs: reset them, as its users do
        worker._step()
        if block.ended.any():
            block.reset(([None] * worker.count, None, block.ended.copy()))

    return step_and_reset, worker._close_envs


class _InParentPipe:
    """The worker's end of its pipe when the trainer's process serves it (``ServedInParent``):
    its replies go straight to the parent's end; a step's pickled actions wait here."""

    def __init__(self, reply: Callable[[bytes], None]) -> None:
        self.send_bytes = reply
        self.actions: deque[bytes] = deque()

    def recv_bytes(self) -> bytes:
        return self.actions.popleft()


class ServedInParent:
    """A worker of the step API that the trainer's own process serves (``Options.env_placement``,
    an ``InParent`` of ``_wire/spec.py``): the worker's code (its block, its side of the
    handshake, its replies and errors) with no process around it, so that results, infos,
    modes, seeds and restarts stay one code path. What the parent sends on the worker's pipe
    comes to ``deliver``: a command runs at once, a step's pickled actions wait for its step;
    ``step`` runs a posted step (the parent's wait for steps begins with it); the replies go to
    ``reply``, the parent's end of the pipe (``_parent/inparent.py``)."""

    def __init__(self, spec: WorkerSpec, reply: Callable[[bytes], None]) -> None:
        self._pipe = _InParentPipe(reply)
        self._worker = _Worker(spec, self._pipe)  # type: ignore[arg-type]  # its two methods
        # Envs are not thread-safe: a close() from another thread waits for the step or command
        # under way. Reentrant: the SIGTERM handler (signals.py) closes the samplers from
        # whatever this thread was doing, and the process then dies of the signal.
        self._lock = threading.RLock()
        self.closed = False

    def build(self) -> None:
        """Builds the block and replies READY, or its error (its envs then closed)."""
        with self._lock:
            if not self._worker.build():
                self._close()

    def deliver(self, message: bytes) -> None:
        """A message the parent sent on the worker's pipe. OSError: the worker is closed, as a
        dead process's pipe is."""
        with self._lock:
            if self.closed:
                raise BrokenPipeError("this worker, served in the parent's process, is closed")
            if message == DOORBELL:
                return
            side = self._worker.side
            assert side is not None
            if self._worker.action_lane and side.waiting():  # the posted step's pickled
                self._pipe.actions.append(message)  # actions (``StepChannel.ring``)
            elif not self._worker.handle(message):  # CLOSE
                self._close()

    def step(self) -> None:
        """Runs the step posted to this worker, if one is posted and not yet run."""
        with self._lock:
            side = self._worker.side
            if not self.closed and side is not None and side.posted():
                self._worker._step_posted()

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if not self.closed:
            self.closed = True
            self._worker._close_envs()


# --- process settings ---------------------------------------------------------------------------


def _prepare_process(spec: WorkerSpec) -> None:
    # SIGINT goes to the whole foreground process group on Ctrl-C; the parent owns shutdown, so
    # workers ignore it instead of dying mid-step with a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Under fork a worker inherits the parent's SIGTERM handler, which closes the parent's
    # samplers; a worker must instead just die when terminated (close() relies on that).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _release_forkserver()
    _exit_with_parent(spec.parent_pid, spec.pdeathsig)
    if spec.threads is not None:
        _limit_threads(spec.threads)
    if spec.cpu_affinity is not None and hasattr(os, "sched_setaffinity"):
        # Pinning keeps a worker's env state in one core's cache; opt-in, since it fights other
        # pinning on a shared machine.
        os.sched_setaffinity(0, spec.cpu_affinity)


def _release_forkserver() -> None:
    # A child of the forkserver holds a copy of the fd that keeps the forkserver alive; a worker
    # that is stopped or stuck in C would then keep it alive after the main process died, and
    # PR_SET_PDEATHSIG (whose parent is the forkserver) would never fire. Workers start no
    # processes of their own, so they drop that fd (multiprocessing keeps it in a private slot).
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(fd, int):
        with contextlib.suppress(OSError):
            os.close(fd)
        server._forkserver_alive_fd = None  # type: ignore[union-attr]


def _exit_with_parent(parent_pid: int, pdeathsig: bool) -> None:
    # daemon=True does not cover a SIGKILLed parent. PR_SET_PDEATHSIG kills us when our direct
    # parent dies (the forkserver, which exits when the main process does); the watchdog thread
    # covers the cases PDEATHSIG misses (a parent thread that exits, non-Linux platforms).
    if pdeathsig and sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    watchdog = threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True)
    watchdog.start()


def _watch_parent(main_pid: int) -> None:
    # Our direct parent is the main process (fork, spawn) or the forkserver. Either dying
    # re-parents us, which changes getppid(); the main process dying is also seen directly.
    direct_parent = os.getppid()
    while True:
        if os.getppid() != direct_parent or not _exists(main_pid):
            os._exit(0)
        time.sleep(WATCHDOG_PERIOD)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _limit_threads(n: int) -> None:
    # N workers each running a BLAS/torch thread pool the size of the machine oversubscribe the
    # cores; one thread per worker is the right default for env stepping.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                "NUMEXPR_NUM_THREADS"):
        os.environ[var] = str(n)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)


# --- the command loop ---------------------------------------------------------------------------


class _Worker:
    """One slot of a worker process: its handshake side, its pipe and its block of envs."""

    def __init__(self, spec: WorkerSpec, conn: Connection) -> None:
        self.spec = spec
        self.conn = conn
        lo = spec.env_offset
        self.count = spec.count
        self.views: Views = spec.buffers.views(lo, lo + self.count)
        self.stats = spec.buffers.stats()[spec.index]
        self.cursor = Cursor()  # the env that is running, named by an error
        # What the worker steps, chosen once: a hosted vector env or its own envs. The commands
        # other than STEP and CLOSE go to the block's methods.
        self.infos = InfoWriter(spec.buffers.infos, lo, lo + self.count)
        self.block: StepLoop = (EnvBlock(spec, self.views, self.cursor) if spec.hosted is None
                                else HostedBlock(spec, spec.hosted, self.views, self.infos))
        block = self.block
        self.handlers: dict[Command, Callable[[Any], Any]] = {
            Command.RESET: block.reset, Command.RESET_TASK: block.reset_task,
            Command.CALL: block.call, Command.GET_ATTR: block.get_attr,
            Command.SET_ATTR: block.set_attr}
        self.side = self._side()
        buffers = spec.buffers  # pickled leaves travel on the pipe (shm.SharedBuffers.lane)
        self.obs_lane = any(not leaf.shared for leaf in buffers.obs_leaves)
        self.action_lane = any(not leaf.shared for leaf in buffers.action_leaves)

    def _side(self) -> WorkerSide | None:
        if self.spec.ring_writer is None:
            return None
        ring_fd = self.spec.ring_writer.fileno()
        # A full doorbell pipe already wakes the parent: a ring must never block a worker.
        os.set_blocking(ring_fd, False)
        control = self.spec.buffers.control()
        return WorkerSide(control, self.spec.index, self.conn, ring_fd, self.spec.spin_s,
                          self.spec.ordered)

    def build(self) -> bool:
        try:
            carried = self.spec.registrations
            if carried is not None:  # spawn, forkserver: before the factories need them
                _register_missing(carried.load(), carried.context)
            self.block.build()
        except KeyboardInterrupt:
            raise  # the user's: only a worker served in the trainer's process gets one
        except BaseException:
            self._send_error("BUILD")
            return False
        self.conn.send_bytes(pickle.dumps((Reply.READY, None)))
        return True

    def _step_posted(self) -> None:
        """A step posted through shared memory: step, publish, then send what did not fit in
        shared memory (infos of other types, pickled leaves, new info keys), if anything."""
        assert self.side is not None
        bits, picked_up = (0, 0), time.perf_counter()
        try:
            if self.action_lane:
                _receive_actions(self.conn, self.spec)
            self.infos.sync(self.side.published())
            records = self._step()
            candidates: dict[str, Signature] = {}
            if records or any(self.infos.put_bits):  # put_bits: a batch env's columns, put
                records, candidates, *written = self._write_infos(records or [])
                bits = (written[0], written[1])
            lane = (rows.lane(self.spec.buffers, self.spec.env_offset, self.count)
                    if self.obs_lane else None)
            message = (None if not records and not candidates and lane is None
                       else _dumps_step(records or None, lane, candidates))
        except Exception:
            self.side.info_bits(0, 0)
            self.side.finish(REPLY_MESSAGE)
            self._send_error("STEP")
            return
        self.side.info_bits(*bits)
        self.stats[2], self.stats[3] = picked_up, time.perf_counter()  # before it is published
        self.side.finish(REPLY_PLAIN if message is None else REPLY_MESSAGE)
        if message is not None:
            # Sent after the step is published: a large pickle may need the parent reading.
            self.conn.send_bytes(message)

    def _write_infos(self, records: list[InfoRecord],
                     ) -> tuple[list[InfoRecord], dict[str, Signature], int, int]:
        """``InfoWriter.write``; an env whose info is not a dict (a list, say) is named with an
        EnvOutputError, as any other output that does not fit (checked only on failure)."""
        try:
            return self.infos.write(records)
        except (AttributeError, TypeError):
            found = rows.first_bad_info(records)
            if found is None:
                raise
            self.cursor.env, error = found
            raise error from None

    def handle(self, message: bytes) -> bool:
        """Runs the command that ``message`` carries and sends its reply; False for CLOSE,
        which it leaves to the caller (the process closes the slot, the parent's stand-in its
        envs)."""
        command, payload = pickle.loads(message)
        if command is Command.CLOSE:
            return False
        self._run(command, self.handlers[command], payload)
        return True

    def _run(self, command: Command, handler: Callable[[Any], Any], payload: Any) -> None:
        try:
            result = handler(payload)
        except Exception:
            self._send_error(command.name)
            return
        if result is None:
            self.conn.send_bytes(OK_MESSAGE)
            return
        try:
            message = pickle.dumps((Reply.OK, result), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # the reply, not the env, is at fault: the worker goes on
            message = pickle.dumps((Reply.ERROR, _reply_error(command, payload, exc)))
        self.conn.send_bytes(message)

    def _send_error(self, command: str) -> None:
        exc_type, exc, _ = sys.exc_info()
        j = self.cursor.env
        env = None if j is None else self.spec.env_offset + j
        report = ErrorReport(
            env=env,
            command=command,
            exc_type=getattr(exc_type, "__name__", "Exception"),
            message=str(exc),
            traceback=traceback.format_exc(),
        )
        self.cursor.env = None
        with contextlib.suppress(OSError, ValueError):  # the parent is gone: nothing to tell
            self.conn.send_bytes(pickle.dumps((Reply.ERROR, report)))

    def _close_envs(self) -> None:
        with contextlib.suppress(Exception):  # the env block closes each env on its own
            self.block.close()

    # --- step ------------------------------------------------------------------------------------

    def _step(self) -> list[InfoRecord] | None:
        start = time.perf_counter()
        records: list[InfoRecord] = []
        self.block.step(records)
        self.stats[0] += time.perf_counter() - start
        self.stats[1] += self.count
        return records if (records and self.spec.infos) else None


# --- helpers -------------------------------------------------------------------------------------


def _dumps_step(records: list[InfoRecord] | None, lane: Lane | None,
                candidates: dict[str, Signature]) -> bytes:
    try:
        return pickle.dumps((Reply.OK, (records, lane, candidates)), pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        what = "infos" if lane is None else "infos or observations"
        raise TypeError(f"the step's {what} cannot be pickled to the parent: {exc}") from exc


def _register_missing(specs: Sequence[EnvSpec], context: str) -> None:
    """Registers the parent's registrations (``specs``) of the env ids this process lacks:
    those made under the main script's guard, which a spawn or forkserver worker does not run.
    The modules of string entry points are imported first, as ``gymnasium.make`` would: one may
    register the id itself, which is then left as it is (no registration is overridden)."""
    for spec in specs:
        for point in (spec.entry_point, spec.vector_entry_point):
            if spec.id in gym.registry or not (isinstance(point, str) and ":" in point):
                continue
            module = point.split(":")[0]
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise FactoryImportError(module=exc.name or module, context=context,
                                         error=f"{type(exc).__name__}: {exc}",
                                         what=f"the registration of {spec.id!r}") from exc
        if spec.id not in gym.registry:
            gym.registry[spec.id] = spec


def _receive_actions(conn: Connection, spec: WorkerSpec) -> None:
    """The pickled action leaves, sent by the parent right after it posted the step."""
    message = conn.recv_bytes()
    while message == DOORBELL:  # a ring that raced with our own look at the counter
        message = conn.recv_bytes()
    spec.buffers.apply_lane(spec.env_offset, pickle.loads(message))


def _reply_error(command: Command, payload: Any, exc: Exception) -> ErrorReport:
    what = f"{command.name.lower()}({payload!r})" if command is Command.GET_ATTR else (
        command.name.lower())
    return ErrorReport(
        env=None, command=command.name, exc_type="ReplyPicklingError",
        message=f"the reply to {what} cannot be pickled to the parent: "
        f"{type(exc).__name__}: {exc}. Return plain data (numbers, arrays, dicts).",
        traceback=traceback.format_exc(),
    )
