"""Shared-memory buffers: one mapping per sampler, each leaf and field a view of it, each worker
owning a row slice of every buffer.

Why one ``Region`` per sampler and not RawArrays (issue 23): a RawArray is a block of
multiprocessing's process-wide heap, whose arenas are files held open (two fds each: the file's
and the mmap object's copy) and mapped for the life of the process; an arena under 4 MiB is kept
for reuse even once every block in it is freed. Closing a sampler could not give them back: a
fresh process kept 4 to 8 fds after ``close()``, and kept them after garbage collection too. A
Region is the sampler's own: ``close()`` closes its one fd, and the mapping goes when the last
numpy view of it does (so a view kept past ``close()`` never points into unmapped memory).
Why not ``multiprocessing.shared_memory.SharedMemory``: a named block leaks until someone unlinks
it (a SIGKILLed parent never does), and its mmap object keeps its fd as long as any view lives.
A Region's file has no name (a memfd, or a file unlinked the moment it is made), so nothing is
left behind when a process is SIGKILLed.
Why no lock: each worker writes only its own rows, and the parent reads them only after the
worker published the end of its step (vecsample/_wire/handshake.py), which orders the accesses.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import tempfile
import weakref
from dataclasses import dataclass, field
from multiprocessing import context, reduction
from typing import Any

import numpy as np
from gymnasium import spaces

from vecsample import errors
from vecsample._wire.handshake import CONTROL_WORDS, control_rows
from vecsample._wire.infos import LOG_BYTES, ROW_BYTES, InfoTables
from vecsample._wire.spaces import Leaf, leaves, unflatten

#: The values of pickled leaves for a block of rows, by buffer name ("obs0", "act1", ...).
Lane = dict[str, list[Any]]

#: Per-worker profile counters kept in shared memory (seconds stepping envs, env steps done).
STAT_FIELDS = ("env_step_s", "env_steps")
#: Each worker's timeline of its last step, after its counters in the same row: when it picked
#: the step up and when it published it, on ``time.perf_counter``'s clock (CLOCK_MONOTONIC on
#: Linux, one clock for every process), so one batch can be laid out parent and workers alike.
STAMP_FIELDS = ("step_picked_up", "step_published")
WORKER_FIELDS = STAT_FIELDS + STAMP_FIELDS
#: Every buffer starts on a cache line of its own: two buffers never share one, and the control
#: words start 64-byte aligned, as handshake.py's split of a row into two lines needs.
ALIGN = 64

# mmap and munmap themselves (not the mmap module): an mmap object keeps a copy of the file's fd
# for as long as it lives, that is as long as any view of it, and cannot unmap while views exist.
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mmap.restype = ctypes.c_void_p
_LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]
_LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


class Region:
    """One sampler's shared memory: a file with no name, mapped once; every buffer is a view.

    The parent makes it (``create``) and keeps its fd until ``release()`` (the sampler's close),
    for the workers it starts or restarts: under spawn and forkserver a worker's start pickles
    it, which hands the worker a duplicate of the fd (``reduction.DupFd``, the way RawArrays
    travel); the worker maps it and closes the fd at once. A forked worker inherits the mapping.
    The mapping outlives the fd: it is unmapped when the last view of ``array`` is gone.
    """

    def __init__(self, array: np.ndarray, fd: int) -> None:
        #: The whole mapping as uint8: every buffer is a view of it, and so holds the mapping.
        self.array = array
        self.fd = fd
        # A Region dropped without release() (a failed start, tools/efficiency.py) closes its fd
        # when collected; release() runs the same finalizer, once.
        self._fd_closer = weakref.finalize(self, os.close, fd) if fd != -1 else None

    @classmethod
    def create(cls, nbytes: int) -> Region:
        fd = _new_file(nbytes)
        try:
            return cls(_map(fd, nbytes), fd)
        except BaseException:
            os.close(fd)
            raise

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)

    def release(self) -> None:
        """Closes the fd (idempotent). Views stay valid; the memory goes with the last one."""
        if self._fd_closer is not None:
            self._fd_closer()
        self.fd = -1

    def __reduce__(self) -> tuple[Any, ...]:
        if self.fd == -1 or context.get_spawning_popen() is None:
            raise errors.SharedMemoryError(
                step="send", nbytes=self.nbytes, got="a pickle outside one" if self.fd != -1
                else "a region whose fd is closed (a closed sampler, or a worker's copy)",
                expected="a worker's start (multiprocessing pickles its arguments then)",
                fix="shared memory travels only to the workers a sampler starts")
        return _attach, (reduction.DupFd(self.fd), self.nbytes)


def _attach(dup: Any, nbytes: int) -> Region:
    """A worker's copy of a pickled Region: mapped, its fd closed (the mapping is enough)."""
    fd = dup.detach()
    try:
        return Region(_map(fd, nbytes), -1)
    finally:
        os.close(fd)


def _new_file(nbytes: int) -> int:
    """The fd of ``nbytes`` zero bytes in a file that no other process can open by name."""
    fd = -1
    with contextlib.suppress(AttributeError, OSError):  # not Linux, or a sandbox forbids it
        # MFD_CLOEXEC: a program the parent execs (a subprocess) must not hold our memory; a
        # spawn worker gets its copy from multiprocessing's pass_fds, a forkserver one by
        # SCM_RIGHTS, a forked one by fork itself, none of which exec closes.
        fd = os.memfd_create("vecsample", os.MFD_CLOEXEC)
    try:
        if fd == -1:  # as multiprocessing makes its arenas: a file unlinked as soon as made
            fd, path = tempfile.mkstemp(prefix="vecsample-", dir=_shm_dir())
            os.unlink(path)
        os.ftruncate(fd, nbytes)
        _claim(fd, nbytes)
    except OSError as exc:
        if fd != -1:
            os.close(fd)
        raise errors.SharedMemoryError(
            step="create", nbytes=nbytes, expected="a file of that size in memory",
            got=f"{type(exc).__name__}: {exc}",
            fix="free memory (or space in /dev/shm), or use fewer or smaller envs") from exc
    return fd


def _shm_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") else None  # else the temporary directory


def _claim(fd: int, nbytes: int) -> None:
    """Takes the file's pages now, where it can: memory that runs out is then an error here,
    not a SIGBUS at a worker's first write. RawArrays did the same by zeroing theirs."""
    if hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, nbytes)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENODEV):
                raise  # ENOSPC, ENOMEM: reported by the caller


def _map(fd: int, nbytes: int) -> np.ndarray:
    """``nbytes`` of ``fd`` mapped shared, as a uint8 array over a ctypes array that unmaps
    itself once no longer referenced: every numpy view holds it (as its base), so no view ever
    outlives the mapping."""
    address = _LIBC.mmap(None, nbytes, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    if address is None or address == _MAP_FAILED:
        code = ctypes.get_errno()
        raise errors.SharedMemoryError(
            step="map", nbytes=nbytes, expected="a shared mapping",
            got=f"{errno.errorcode.get(code, code)} ({os.strerror(code)})",
            fix="free memory or raise the address-space limit (ulimit -v)")
    memory = (ctypes.c_uint8 * nbytes).from_address(address)
    # Not at interpreter exit (atexit False): a view may still be read while it shuts down; the
    # process's end unmaps it anyway.
    weakref.finalize(memory, _LIBC.munmap, address, nbytes).atexit = False
    return np.ctypeslib.as_array(memory)


def _place(sizes: dict[str, int]) -> tuple[dict[str, tuple[int, int]], int]:
    """Each buffer's (offset, bytes) in one region, each ALIGN-aligned; and the region's size."""
    layout: dict[str, tuple[int, int]] = {}
    end = 0
    for name, nbytes in sizes.items():
        layout[name] = (end, nbytes)
        end += -(-max(nbytes, 1) // ALIGN) * ALIGN
    return layout, end


@dataclass
class Views:
    """numpy views of a row range [lo, hi) of every buffer; obs are nested like the space."""

    obs_leaves: list[np.ndarray]
    final_obs_leaves: list[np.ndarray]
    action_leaves: list[np.ndarray]
    obs: Any
    final_obs: Any
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    has_final_obs: np.ndarray
    restarted: np.ndarray

    def copy_rows(self) -> list[np.ndarray]:
        """Copies of every array a StepResult of these rows views (not the actions)."""
        return [a.copy() for a in self._step_arrays()]

    def write_rows(self, rows: list[np.ndarray]) -> None:
        """Writes ``rows`` (from ``copy_rows``) back into these rows."""
        for a, saved in zip(self._step_arrays(), rows, strict=True):
            a[...] = saved

    def _step_arrays(self) -> list[np.ndarray]:
        return [*self.obs_leaves, *self.final_obs_leaves, self.rewards, self.terminated,
                self.truncated, self.has_final_obs, self.restarted]


@dataclass
class SharedBuffers:
    """All per-step arrays of a sampler, views of its one ``Region``. Pickled once per worker at
    start under spawn and forkserver (the region travels as an fd, the views are rebuilt)."""

    observation_space: spaces.Space[Any]
    action_space: spaces.Space[Any]
    num_envs: int
    num_slots: int  # the step API's workers: one control row and stats row each
    obs_leaves: list[Leaf] = field(init=False)
    action_leaves: list[Leaf] = field(init=False)
    #: The sampler's shared memory; ``layout`` says where each buffer lies in it.
    region: Region = field(init=False)
    #: Each buffer's (offset, bytes) in ``region``, by name ("obs0", "rewards", "control", ...).
    layout: dict[str, tuple[int, int]] = field(init=False)
    #: Pickled leaves (not shared): one object array per leaf and field, each process its own
    #: copy; the pipe carries their values (see ``lane`` and docs/semantics.md).
    local: dict[str, np.ndarray] = field(init=False)
    #: The infos' shared-memory columns and their schema log (vecsample/_wire/infos.py).
    infos: InfoTables = field(init=False)

    def __post_init__(self) -> None:
        self.obs_leaves = leaves(self.observation_space)
        self.action_leaves = leaves(self.action_space)
        self.local = {}
        self.layout, nbytes = _place(self._sizes())
        self.region = Region.create(nbytes)
        self.infos = self._info_tables()

    def _sizes(self) -> dict[str, int]:
        """The bytes of every shared buffer, by name; makes ``local`` for the pickled leaves."""
        n = self.num_envs
        # First, at the region's (page-aligned) start: int64 words, so the words the step
        # handshake polls are 8-byte aligned (atomic).
        sizes = {"control": control_rows(self.num_slots) * CONTROL_WORDS * 8}
        for prefixes, leaf_list in ((("obs", "final_obs"), self.obs_leaves),
                                    (("act",), self.action_leaves)):
            for i, leaf in enumerate(leaf_list):
                for prefix in prefixes:
                    if leaf.shared:
                        count = int(np.prod(leaf.shape, dtype=np.int64))
                        sizes[f"{prefix}{i}"] = n * leaf.dtype.itemsize * count
                    else:
                        self.local[f"{prefix}{i}"] = np.empty(n, dtype=object)
        sizes["rewards"] = n * 8
        for name in ("terminated", "truncated", "has_final_obs", "restarted"):
            sizes[name] = n
        sizes["stats"] = self.num_slots * len(WORKER_FIELDS) * 8
        sizes["info_rows"] = 2 * n * ROW_BYTES
        sizes["info_log"] = LOG_BYTES
        return sizes

    def _info_tables(self) -> InfoTables:
        u8 = np.dtype(np.uint8)
        rows = self._view("info_rows", u8, (2, self.num_envs, ROW_BYTES))
        return InfoTables(self.num_envs, rows, self._view("info_log", u8, (LOG_BYTES,)))

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["infos"]  # views: rebuilt from the region on arrival, never copied
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.infos = self._info_tables()

    def release(self) -> None:
        """The sampler's close: closes the region's fd. Views (the user's too) stay valid; the
        memory is unmapped with the last of them. Idempotent."""
        self.region.release()

    def _view(self, name: str, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
        offset, _ = self.layout[name]
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return self.region.array[offset:offset + nbytes].view(dtype).reshape(shape)

    def views(self, lo: int = 0, hi: int | None = None) -> Views:
        """Views of rows [lo, hi); zero-copy, valid as long as this object lives."""
        hi = self.num_envs if hi is None else hi
        n = self.num_envs
        obs = [self._leaf(f"obs{i}", lf)[lo:hi] for i, lf in enumerate(self.obs_leaves)]
        fin = [self._leaf(f"final_obs{i}", lf)[lo:hi] for i, lf in enumerate(self.obs_leaves)]
        act = [self._leaf(f"act{i}", lf)[lo:hi] for i, lf in enumerate(self.action_leaves)]
        flag = np.dtype(np.bool_)
        return Views(
            obs_leaves=obs,
            final_obs_leaves=fin,
            action_leaves=act,
            obs=unflatten(self.observation_space, iter(obs)),
            final_obs=unflatten(self.observation_space, iter(fin)),
            rewards=self._view("rewards", np.dtype(np.float64), (n,))[lo:hi],
            terminated=self._view("terminated", flag, (n,))[lo:hi],
            truncated=self._view("truncated", flag, (n,))[lo:hi],
            has_final_obs=self._view("has_final_obs", flag, (n,))[lo:hi],
            restarted=self._view("restarted", flag, (n,))[lo:hi],
        )

    def _leaf(self, name: str, leaf: Leaf) -> np.ndarray:
        if not leaf.shared:
            return self.local[name]
        return self._view(name, leaf.dtype, (self.num_envs, *leaf.shape))

    @property
    def has_lane(self) -> bool:
        """Whether any leaf is pickled: steps then carry a lane message on the pipe."""
        return bool(self.local)

    def lane(self, lo: int, hi: int, fields: tuple[str, ...] = ("obs", "final_obs")) -> Lane:
        """The pickled leaves' values of rows [lo, hi), to send to the other process."""
        return {name: list(arr[lo:hi]) for name, arr in self.local.items()
                if name.rstrip("0123456789") in fields}

    def apply_lane(self, lo: int, lane: Lane) -> None:
        """Writes a lane received from the other process into this process's rows."""
        for name, values in lane.items():
            arr = self.local[name]
            for j, value in enumerate(values):
                arr[lo + j] = value

    def control(self) -> np.ndarray:
        """The step handshake's (num_slots + 1, CONTROL_WORDS) int64 words (handshake.py)."""
        shape = (control_rows(self.num_slots), CONTROL_WORDS)
        return self._view("control", np.dtype(np.int64), shape)

    def stats(self) -> np.ndarray:
        """The (num_slots, len(WORKER_FIELDS)) float64 counters and stamps, written by the
        workers."""
        shape = (self.num_slots, len(WORKER_FIELDS))
        return self._view("stats", np.dtype(np.float64), shape)
