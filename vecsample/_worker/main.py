"""The worker process: build the envs, then serve commands until CLOSE or the parent is gone.

Each command is a small handler. STEP reads actions from shared memory, steps every env of the
worker one after another, autoresets as the mode says, writes results back to shared memory and
answers with one byte (or the infos, when there are any). An exception in an env is answered
with the env index and the traceback text; the worker itself keeps serving.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import multiprocessing.forkserver
import os
import pickle
import reprlib
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np

from vecsample import hosted
from vecsample._wire.handshake import DOORBELL, REPLY_MESSAGE, REPLY_PLAIN, Waiter, WorkerSide
from vecsample._wire.infos import InfoWriter, Signature
from vecsample._wire.protocol import (
    OK_MESSAGE,
    AutoresetMode,
    Command,
    EnvFn,
    ErrorReport,
    InfoRecord,
    Reply,
    ResetReply,
)
from vecsample._wire.shm import Lane, SharedBuffers, Views
from vecsample._wire.spaces import Leaf, flatten, unflatten
from vecsample.errors import EnvFactoryError, EnvOutputError

#: How often the watchdog thread checks that the parent is still alive (seconds).
WATCHDOG_PERIOD = 0.2
_PR_SET_PDEATHSIG = 1
#: numpy dtype kinds a batch of observations may stack to and be copied in one slice: bool,
#: ints, floats, complex (not strings, bytes or objects).
_NUMERIC_KINDS = "biufc"


@dataclass
class WorkerSpec:
    """Everything a worker needs, pickled once when the process starts."""

    index: int
    env_fns: Sequence[EnvFn]
    env_offset: int
    buffers: SharedBuffers
    autoreset_mode: AutoresetMode
    infos: bool
    threads: int | None
    cpu_affinity: list[int] | None
    parent_pid: int
    #: Whether to ask the kernel for SIGKILL when the creating thread exits (see pool.py).
    pdeathsig: bool = True
    # Under fork the child inherits the parent's ends of the other workers' pipes; it closes
    # them so a worker sees EOF as soon as the parent is gone.
    inherited_conns: list[Connection] = field(default_factory=list)
    #: Seconds to poll for the next step or command before sleeping (handshake.WorkerSide).
    spin_s: float = 0.0
    #: The write end of the parent's doorbell pipe (handshake.py); None only in unit tests.
    ring_writer: Connection | None = None
    #: handshake.ORDERED as the parent saw it (tests force the unordered protocol through it).
    ordered: bool = True


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
    waiter = Waiter(sides)
    while waiter.live:
        try:
            slot, message = waiter.next()
        except (EOFError, OSError):
            break  # the parent is gone: exit quietly
        worker = workers[slot]
        if message is None:
            worker._step_posted()
            continue
        command, payload = pickle.loads(message)
        if command is Command.CLOSE:
            waiter.close(slot)
            continue
        worker._run(command, worker.handlers[command], payload)
    for worker in workers:
        worker._close_envs()


class _NoParent:
    """The pipe of a worker run in the parent's own process: keeps the last message."""

    last: bytes = b""

    def send_bytes(self, message: bytes) -> None:
        self.last = message


def local_step(spec: WorkerSpec, seeds: Sequence[int | None]) -> Callable[[], object]:
    """Builds and resets (with ``seeds``) ``spec``'s envs in this process and returns the
    worker's step: the same loop, with no process, pipe or handshake around it (``vecsample
    bench`` times it against a bare loop). The actions are read from ``spec.buffers``."""
    pipe = _NoParent()
    worker = _Worker(spec, pipe)  # type: ignore[arg-type]  # only send_bytes is used
    if not worker.build():
        report: ErrorReport = pickle.loads(pipe.last)[1]
        raise EnvFactoryError(f"env {report.env} could not be built in this process: "
                              f"{report.exc_type}: {report.message}; check its factory.")
    worker._reset((list(seeds), None, None))
    if spec.autoreset_mode is not AutoresetMode.DISABLED:
        return functools.partial(worker._step, None)

    def step_and_reset() -> None:  # DISABLED freezes ended envs: reset them, as its users do
        worker._step(None)
        if worker.ended.any():
            worker._reset(([None] * worker.count, None, worker.ended.copy()))

    return step_and_reset


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
    def __init__(self, spec: WorkerSpec, conn: Connection) -> None:
        self.spec = spec
        self.conn = conn
        self.envs: list[gym.Env[Any, Any]] = []
        lo = spec.env_offset
        self.count = len(spec.env_fns)
        self.views: Views = spec.buffers.views(lo, lo + self.count)
        self.stats = spec.buffers.stats()[spec.index]
        self.current_env: int | None = None
        self.ended = np.zeros(self.count, dtype=bool)  # NEXT_STEP: reset next; DISABLED: frozen
        self.handlers: dict[Command, Callable[[Any], Any]] = {
            Command.RESET: self._reset,
            Command.RESET_TASK: self._reset_task,
            Command.CALL: self._call,
            Command.GET_ATTR: self._get_attr,
            Command.SET_ATTR: self._set_attr,
        }
        # One inlined loop per mode, chosen once here, none branching on the mode per env:
        # scalars are gathered in lists and written with one slice copy per field.
        loops: dict[AutoresetMode, Callable[[Sequence[Any], list[InfoRecord]], None]] = {
                         AutoresetMode.SAME_STEP: self._step_all_same,
                         AutoresetMode.NEXT_STEP: functools.partial(_step_all_next, self),
                         AutoresetMode.DISABLED: functools.partial(_step_all_disabled, self)}
        self.step_all = loops[spec.autoreset_mode]
        self.host: hosted.Host | None = None  # a hosted vector env (hosted.py), set by build()
        self.side = self._side()
        self.write_obs = _obs_writer(spec.buffers, self.views.obs_leaves)
        # The loops hand each observation to put_obs(j, obs); _flush_rows calls flush_obs at the
        # end: one slice copy for a bare array space, a row write per env otherwise.
        self.put_obs, self.flush_obs = _obs_batcher(self)
        self.infos = InfoWriter(spec.buffers.infos, lo, lo + self.count)
        self.write_final = _obs_writer(spec.buffers, self.views.final_obs_leaves)
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
            self.host = hosted.attach(self)  # one vector env for the block, or None
            for j, env_fn in enumerate(() if self.host else self.spec.env_fns):
                self.current_env = j
                self.envs.append(env_fn())
            _check_spaces(self.envs, self.spec.buffers, self)
        except BaseException:
            self._send_error("BUILD")
            return False
        self.current_env = None
        self.conn.send_bytes(pickle.dumps((Reply.READY, None)))
        return True

    def _step_posted(self) -> None:
        """A step posted through shared memory: step, publish, then send what did not fit in
        shared memory (infos of other types, pickled leaves, new info keys), if anything."""
        assert self.side is not None
        bits = (0, 0)
        try:
            if self.action_lane:
                _receive_actions(self.conn, self.spec)
            self.infos.sync(self.side.published())
            records = self._step(None)
            candidates: dict[str, Signature] = {}
            if records:
                records, candidates, *written = self.infos.write(records)
                bits = (written[0], written[1])
            lane = _lane(self.spec, self.count) if self.obs_lane else None
            message = (None if not records and not candidates and lane is None
                       else _dumps_step(records or None, lane, candidates))
        except Exception:
            self.side.info_bits(0, 0)
            self.side.finish(REPLY_MESSAGE)
            self._send_error("STEP")
            return
        self.side.info_bits(*bits)
        self.side.finish(REPLY_PLAIN if message is None else REPLY_MESSAGE)
        if message is not None:
            # Sent after the step is published: a large pickle may need the parent reading.
            self.conn.send_bytes(message)

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
        env = None if self.current_env is None else self.spec.env_offset + self.current_env
        report = ErrorReport(
            env=env,
            command=command,
            exc_type=getattr(exc_type, "__name__", "Exception"),
            message=str(exc),
            traceback=traceback.format_exc(),
        )
        self.current_env = None
        with contextlib.suppress(OSError, ValueError):  # the parent is gone: nothing to tell
            self.conn.send_bytes(pickle.dumps((Reply.ERROR, report)))

    def _close_envs(self) -> None:
        if self.host is not None:
            with contextlib.suppress(Exception):
                self.host.close()
        for env in self.envs:
            # One env failing to close must not stop the others from closing.
            with contextlib.suppress(Exception):
                env.close()

    # --- step ------------------------------------------------------------------------------------

    def _step(self, _: None) -> list[InfoRecord] | None:
        start = time.perf_counter()
        records: list[InfoRecord] = []
        self.step_all(self._actions(), records)
        self.stats[0] += time.perf_counter() - start
        self.stats[1] += self.count
        return records if (records and self.spec.infos) else None

    def _step_all_same(self, actions: Sequence[Any], records: list[InfoRecord]) -> None:
        """SAME_STEP over every env: the hot loop, inlined. Scalars are gathered in lists and
        written with one slice copy per field; observations row by row (a row may be a scalar
        that must not broadcast, see tests/test_hot_path.py)."""
        n = self.count
        rewards: list[Any] = [0.0] * n
        terminated, truncated = [False] * n, [False] * n
        has_final = [False] * n
        envs, put_obs, write_final = self.envs, self.put_obs, self.write_final
        j = 0
        try:
            for j in range(n):
                env = envs[j]
                obs, rewards[j], term, trunc, info = env.step(actions[j])
                if term or trunc:
                    write_final(j, obs)
                    has_final[j] = True
                    obs, reset_info = env.reset()
                    records.append((j, info, reset_info))
                elif info:
                    records.append((j, info, None))
                put_obs(j, obs)
                terminated[j], truncated[j] = term, trunc
            j = n
        except BaseException:
            self.current_env = j
            raise
        finally:
            # Envs before a failing one keep what they wrote.
            _flush_rows(self, rewards, terminated, truncated, j)
            self.views.has_final_obs[:j] = has_final[:j]

    def _actions(self) -> Sequence[Any]:
        views = self.views.action_leaves
        if len(views) == 1 and not self.spec.buffers.action_leaves[0].path:
            return views[0]  # type: ignore[return-value]  # rows (or scalars) straight from shm
        space = self.spec.buffers.action_space
        return [unflatten(space, (v[j] for v in views)) for j in range(self.count)]

    # --- synchronous commands --------------------------------------------------------------------

    def _reset(self, payload: tuple[list[Any], Any, Any]) -> ResetReply:
        seeds, options, mask = payload
        infos: list[tuple[int, dict[str, Any]]] = []
        done: list[int] = []  # envs reset so far: their flags are cleared, even on an error
        try:
            for j, env in enumerate(self.envs):
                if mask is not None and not mask[j]:
                    continue
                self.current_env = j
                obs, info = env.reset(seed=seeds[j], options=options)  # as gymnasium calls it
                self.write_obs(j, obs)
                done.append(j)
                infos.append((j, info))
        finally:
            v = self.views
            for flags in (v.terminated, v.truncated, v.has_final_obs, v.restarted, self.ended):
                flags[done] = False
        self.current_env = None
        return infos, (_lane(self.spec, self.count) if self.obs_lane else None)

    def _reset_task(self, tasks: Sequence[Any]) -> list[None]:
        for j, (env, task) in enumerate(zip(self.envs, tasks, strict=True)):
            self.current_env = j
            reset_task = getattr(env.unwrapped, "reset_task", None)
            if reset_task is None:
                raise AttributeError(
                    f"{type(env.unwrapped).__name__} has no reset_task(task); reset_task needs "
                    f"a meta-RL task env (see vecsample.envs)."
                )
            reset_task(task)
        self.current_env = None
        return [None] * self.count

    def _call(self, payload: tuple[str, tuple[Any, ...], dict[str, Any]]) -> list[Any]:
        name, args, kwargs = payload
        out = []
        for j, env in enumerate(self.envs):
            self.current_env = j
            attr = env.get_wrapper_attr(name)
            out.append(attr(*args, **kwargs) if callable(attr) else attr)
        self.current_env = None
        return out

    def _get_attr(self, name: str) -> list[Any]:
        out = []
        for j, env in enumerate(self.envs):
            self.current_env = j
            out.append(env.get_wrapper_attr(name))
        self.current_env = None
        return out

    def _set_attr(self, payload: tuple[str, Sequence[Any]]) -> list[None]:
        name, values = payload
        for j, (env, value) in enumerate(zip(self.envs, values, strict=True)):
            self.current_env = j
            env.set_wrapper_attr(name, value)
        self.current_env = None
        return [None] * self.count


# --- helpers -------------------------------------------------------------------------------------


def _check_spaces(envs: list[gym.Env[Any, Any]], buffers: SharedBuffers, worker: _Worker) -> None:
    for j, env in enumerate(envs):
        worker.current_env = j
        if env.observation_space != buffers.observation_space:
            raise ValueError(
                f"env built observation_space {env.observation_space}, expected "
                f"{buffers.observation_space} (the first env's); all envs must match."
            )
        if env.action_space != buffers.action_space:
            raise ValueError(
                f"env built action_space {env.action_space}, expected "
                f"{buffers.action_space} (the first env's); all envs must match."
            )


def _dumps_step(records: list[InfoRecord] | None, lane: Lane | None,
                candidates: dict[str, Signature]) -> bytes:
    try:
        return pickle.dumps((Reply.OK, (records, lane, candidates)), pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        what = "infos" if lane is None else "infos or observations"
        raise TypeError(f"the step's {what} cannot be pickled to the parent: {exc}") from exc


def _lane(spec: WorkerSpec, count: int) -> Lane:
    """This worker's pickled observation leaves, to send with a step or reset reply."""
    return spec.buffers.lane(spec.env_offset, spec.env_offset + count)


def _receive_actions(conn: Connection, spec: WorkerSpec) -> None:
    """The pickled action leaves, sent by the parent right after it posted the step."""
    message = conn.recv_bytes()
    while message == DOORBELL:  # a ring that raced with our own look at the counter
        message = conn.recv_bytes()
    spec.buffers.apply_lane(spec.env_offset, pickle.loads(message))


def _obs_writer(buffers: SharedBuffers, views: list[np.ndarray]) -> Callable[[int, Any], None]:
    """``write(j, value)``: puts env j's (possibly nested) observation into ``views``.

    A fixed-shape leaf's value must have exactly the leaf's shape: numpy would broadcast
    a (2,) observation into a (2, 2) row without a word, so that is an EnvOutputError; so is
    a value numpy cannot convert to the leaf's dtype (a string for a float Box)."""
    space, obs_leaves = buffers.observation_space, buffers.obs_leaves
    shapes = [leaf.shape if leaf.shared else None for leaf in obs_leaves]
    # The common case: one bare leaf (not a Dict/Tuple of one), one numpy row assignment.
    if len(views) == 1 and not obs_leaves[0].path:
        view, shape = views[0], shapes[0]

        def write(j: int, value: Any) -> None:
            if shape is not None and shape != (
                    value.shape if type(value) is np.ndarray else np.shape(value)):
                raise _shape_error(obs_leaves[0], value)
            try:
                view[j] = value
            except (ValueError, TypeError) as exc:
                raise _type_error(obs_leaves[0], value) from exc

        return write

    def write_nested(j: int, value: Any) -> None:
        for leaf, leaf_view, shape, part in zip(obs_leaves, views, shapes,
                                                flatten(space, value), strict=True):
            if shape is not None and np.shape(part) != shape:
                raise _shape_error(leaf, part)
            try:
                leaf_view[j] = part
            except (ValueError, TypeError) as exc:
                raise _type_error(leaf, part) from exc

    return write_nested


def _obs_batcher(worker: _Worker) -> tuple[Callable[[int, Any], None], Callable[[int], None]]:
    """``(put, flush)`` for a step loop. A bare fixed-shape space gathers the observations in a
    list and ``flush(k)`` writes the first ``k`` with one slice copy. When they do not stack to
    exactly the rows' shape (a scalar for a vector space, a wrong shape, ragged lists), each row
    is written on its own: the good ones land, and the first bad env is named. Other spaces
    write each row as it comes."""
    leaf, write = worker.spec.buffers.obs_leaves[0], worker.write_obs
    if len(worker.views.obs_leaves) != 1 or leaf.path or not leaf.shared:
        return write, lambda k: None
    rows: list[Any] = [None] * worker.count
    view = worker.views.obs_leaves[0]

    def flush(k: int) -> None:
        try:
            stacked = np.asarray(rows if k == len(rows) else rows[:k])
        except (ValueError, TypeError):  # ragged: numpy cannot stack them
            stacked = None
        # Numbers only: strings would stack too, and fail the copy with no env to name.
        if (stacked is not None and stacked.shape == view[:k].shape
                and stacked.dtype.kind in _NUMERIC_KINDS):
            view[:k] = stacked
            return
        bad: list[tuple[int, Exception]] = []
        for j in range(k):
            try:
                write(j, rows[j])
            except (EnvOutputError, ValueError, TypeError) as exc:
                bad.append((j, exc))
        if bad:
            worker.current_env = bad[0][0]
            raise bad[0][1]

    return rows.__setitem__, flush


def _shape_error(leaf: Leaf, value: Any) -> EnvOutputError:
    return EnvOutputError(
        f"observation {leaf.name!r} is a {type(value).__name__} of shape {np.shape(value)}, "
        f"expected {leaf.shape} of {leaf.dtype} for {leaf.space}; return observations of the "
        f"space's shape (nothing is broadcast)."
    )


def _type_error(leaf: Leaf, value: Any) -> EnvOutputError:
    return EnvOutputError(
        f"observation {leaf.name!r} is a {type(value).__name__} ({reprlib.repr(value)}), "
        f"expected {leaf.dtype} values of shape {leaf.shape} for {leaf.space}; return numbers "
        f"of the space's dtype (np.asarray(obs, dtype=space.dtype)) from reset() and step()."
    )


def _scalar_error(field: str, value: Any) -> EnvOutputError:
    return EnvOutputError(
        f"{field} has shape {np.shape(value)}, expected a scalar; return float(reward), "
        f"bool(terminated) and bool(truncated) from step()."
    )


def _first_non_scalar(rewards: list[Any], terminated: list[Any], truncated: list[Any],
                      count: int) -> tuple[int, EnvOutputError]:
    """The first env (and its error) whose reward or flags are not scalars."""
    for j in range(count):
        for name, values in (("reward", rewards), ("terminated", terminated),
                             ("truncated", truncated)):
            if np.ndim(values[j]) != 0:
                return j, _scalar_error(name, values[j])
    return 0, EnvOutputError("a step's reward or flags could not be stored as scalars")


def _reply_error(command: Command, payload: Any, exc: Exception) -> ErrorReport:
    what = f"{command.name.lower()}({payload!r})" if command is Command.GET_ATTR else (
        command.name.lower())
    return ErrorReport(
        env=None, command=command.name, exc_type="ReplyPicklingError",
        message=f"the reply to {what} cannot be pickled to the parent: "
        f"{type(exc).__name__}: {exc}. Return plain data (numbers, arrays, dicts).",
        traceback=traceback.format_exc(),
    )


def _step_all_next(worker: _Worker, actions: Sequence[Any], records: list[InfoRecord]) -> None:
    """NEXT_STEP over every env, inlined like SAME_STEP's loop: an env that ended at its last
    step is reset instead of stepped (reward 0, flags False, its action ignored)."""
    n, envs, ended, put_obs = worker.count, worker.envs, worker.ended, worker.put_obs
    rewards: list[Any] = [0.0] * n
    terminated, truncated = [False] * n, [False] * n
    j = 0
    try:
        for j in range(n):
            env = envs[j]
            if ended[j]:
                obs, reset_info = env.reset()
                ended[j] = False
                records.append((j, {}, reset_info))
            else:
                obs, rewards[j], term, trunc, info = env.step(actions[j])
                terminated[j], truncated[j] = term, trunc
                ended[j] = term or trunc
                if info:
                    records.append((j, info, None))
            put_obs(j, obs)
        j = n
    except BaseException:
        worker.current_env = j
        raise
    finally:
        _flush_rows(worker, rewards, terminated, truncated, j)


def _flush_rows(worker: _Worker, rewards: list[Any], terminated: list[Any],
                truncated: list[Any], count: int) -> None:
    """The end of every step loop: one slice copy per scalar field, then the gathered
    observations, for the first ``count`` envs (those before a failing one)."""
    v = worker.views
    try:
        v.rewards[:count] = rewards[:count]
        v.terminated[:count] = terminated[:count]
        v.truncated[:count] = truncated[:count]
    except (ValueError, TypeError):  # one env returned a non-scalar: name it
        worker.current_env, error = _first_non_scalar(rewards, terminated, truncated, count)
        raise error from None
    worker.flush_obs(count)


def _step_all_disabled(worker: _Worker, actions: Sequence[Any],
                       records: list[InfoRecord]) -> None:
    """DISABLED over every env, inlined like the others: an env that ended stays frozen (not
    stepped, reward 0, its flags as they were) until reset(mask=...) names it."""
    n, envs, ended, put_obs = worker.count, worker.envs, worker.ended, worker.put_obs
    rewards: list[Any] = [0.0] * n
    terminated: list[Any] = worker.views.terminated.tolist()  # frozen envs keep their flags
    truncated: list[Any] = worker.views.truncated.tolist()
    j = 0
    try:
        for j in range(n):
            if ended[j]:
                continue
            obs, rewards[j], term, trunc, info = envs[j].step(actions[j])
            terminated[j], truncated[j] = term, trunc
            ended[j] = term or trunc
            if info:
                records.append((j, info, None))
            put_obs(j, obs)
        j = n
    except BaseException:
        worker.current_env = j
        raise
    finally:
        _flush_rows(worker, rewards, terminated, truncated, j)
