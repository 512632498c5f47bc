"""The worker process: build the envs, then serve commands until CLOSE or the parent is gone.

A worker steps its block (``runner.BlockRunner``: its own envs or one hosted vector env),
chosen once. Each command is a method of the block. STEP reads actions from shared memory,
steps the block, which writes its rows of shared memory, and publishes the end of the step on
the handshake (with the infos that do not fit in their columns on its pipe). An exception in an
env is answered with the env index and the traceback text; the worker itself keeps serving.

This module is the worker *process*: its settings, its handshake and its pipe. The trainer's
own process runs the same ``BlockRunner`` for the blocks it steps itself, with none of these,
through ``vecsample/inprocess.py``.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing.forkserver
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from vecsample._wire import handshake
from vecsample._wire.handshake import DOORBELL, REPLY_MESSAGE, REPLY_PLAIN, WorkerSide
from vecsample._wire.infos import InfoRecord, Signature
from vecsample._wire.protocol import OK_MESSAGE, Command, ErrorReport, Reply
from vecsample._wire.shm import Lane
from vecsample._wire.spec import WorkerSpec
from vecsample._worker import rows
from vecsample._worker.runner import BlockRunner

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
            worker.close_envs()


def serve(workers: Sequence[_Worker]) -> None:
    """Runs the posted steps and the commands of ``workers`` (one process's slots) until each
    got CLOSE or the parent is gone."""
    sides = [worker.side for worker in workers]  # slot i of the waiter is workers[i]
    # The parent's choice of transport, made once, applies to both ends.
    waiter = handshake.waiter(workers[0].spec.transport, sides)
    while waiter.live:
        try:
            slot, message = waiter.next()
        except (EOFError, OSError):
            break  # the parent is gone: exit quietly
        worker = workers[slot]
        if message is None:
            worker.step_posted()
        elif not worker.handle(message):  # CLOSE
            waiter.close(slot)
    for worker in workers:
        worker.close_envs()


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
    """One slot of a worker process: its block (``BlockRunner``), its handshake side and its
    pipe."""

    def __init__(self, spec: WorkerSpec, conn: Connection) -> None:
        self.spec = spec
        self.conn = conn
        self.runner = BlockRunner(spec)
        self.count = spec.count
        self.side = self._side()
        #: The block's info columns (the runner's: a hosted batch env puts its columns there).
        self.infos = self.runner.infos
        buffers = spec.buffers  # pickled leaves travel on the pipe (shm.SharedBuffers.lane)
        self.obs_lane = any(not leaf.shared for leaf in buffers.obs_leaves)
        self.action_lane = any(not leaf.shared for leaf in buffers.action_leaves)

    def _side(self) -> WorkerSide:
        assert self.spec.ring_writer is not None, "a worker process has the parent's doorbell"
        ring_fd = self.spec.ring_writer.fileno()
        # A full doorbell pipe already wakes the parent: a ring must never block a worker.
        os.set_blocking(ring_fd, False)
        control = self.spec.buffers.control()
        return WorkerSide(control, self.spec.index, self.conn, ring_fd, self.spec.spin_s,
                          self.spec.transport)

    def build(self) -> bool:
        try:
            self.runner.build()
        except BaseException:  # reported to the parent, which raises it
            self._send_error("BUILD")
            return False
        self.conn.send_bytes(pickle.dumps((Reply.READY, None)))
        return True

    def step_posted(self) -> None:
        """A step posted through shared memory: step, publish, then send what did not fit in
        shared memory (infos of other types, pickled leaves, new info keys), if anything."""
        bits, picked_up = (0, 0), time.perf_counter()
        try:
            if self.action_lane:
                _receive_actions(self.conn, self.spec)
            self.infos.sync(self.side.published())
            records = self.runner.step()
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
        stats = self.runner.stats
        stats[2], stats[3] = picked_up, time.perf_counter()  # before it is published
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
            self.runner.cursor.env, error = found
            raise error from None

    def handle(self, message: bytes) -> bool:
        """Runs the command that ``message`` carries and sends its reply; False for CLOSE,
        which it leaves to the caller (the process closes the slot)."""
        command, payload = pickle.loads(message)
        if command is Command.CLOSE:
            return False
        try:
            result = self.runner.run(command, payload)
        except Exception:
            self._send_error(command.name)
            return True
        if result is None:
            self.conn.send_bytes(OK_MESSAGE)
            return True
        try:
            reply = pickle.dumps((Reply.OK, result), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # the reply, not the env, is at fault: the worker goes on
            reply = pickle.dumps((Reply.ERROR, _reply_error(command, payload, exc)))
        self.conn.send_bytes(reply)
        return True

    def _send_error(self, command: str) -> None:
        report = self.runner.report(command)
        with contextlib.suppress(OSError, ValueError):  # the parent is gone: nothing to tell
            self.conn.send_bytes(pickle.dumps((Reply.ERROR, report)))

    def close_envs(self) -> None:
        self.runner.close()


# --- helpers -------------------------------------------------------------------------------------


def _dumps_step(records: list[InfoRecord] | None, lane: Lane | None,
                candidates: dict[str, Signature]) -> bytes:
    try:
        return pickle.dumps((Reply.OK, (records, lane, candidates)), pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        what = "infos" if lane is None else "infos or observations"
        raise TypeError(f"the step's {what} cannot be pickled to the parent: {exc}") from exc


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
