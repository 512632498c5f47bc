"""Shared-memory buffers: one RawArray per leaf and field, each worker owning a row slice.

Why RawArray and not ``multiprocessing.shared_memory.SharedMemory``: a RawArray lives in an
anonymous arena whose /dev/shm file is unlinked the moment it is created, so nothing is left
behind when a process is SIGKILLed. A named SharedMemory block leaks until someone unlinks it.
Why no lock: each worker writes only its own rows, and the parent reads them only after the
worker published the end of its step (vecsample/_wire/handshake.py), which orders the accesses.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import RawArray
from typing import Any

import numpy as np
from gymnasium import spaces

from vecsample._wire.handshake import CONTROL_WORDS, control_rows
from vecsample._wire.infos import InfoTables
from vecsample._wire.spaces import Leaf, leaves, unflatten

#: The values of pickled leaves for a block of rows, by buffer name ("obs0", "act1", ...).
Lane = dict[str, list[Any]]

#: Per-worker profile counters kept in shared memory (seconds stepping envs, env steps done).
STAT_FIELDS = ("env_step_s", "env_steps")


def _raw(nbytes: int) -> Any:
    return RawArray(ctypes.c_byte, max(int(nbytes), 1))


def _view(raw: Any, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)


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
    """All per-step arrays of a sampler. Pickled once per worker at start (RawArrays travel)."""

    observation_space: spaces.Space[Any]
    action_space: spaces.Space[Any]
    num_envs: int
    num_slots: int  # the step API's workers: one control row and stats row each
    obs_leaves: list[Leaf] = field(init=False)
    action_leaves: list[Leaf] = field(init=False)
    raws: dict[str, Any] = field(init=False)
    #: Pickled leaves (not shared): one object array per leaf and field, each process its own
    #: copy; the pipe carries their values (see ``lane`` and docs/semantics.md).
    local: dict[str, np.ndarray] = field(init=False)
    #: The infos' shared-memory columns and their schema log (vecsample/_wire/infos.py).
    infos: InfoTables = field(init=False)

    def __post_init__(self) -> None:
        self.obs_leaves = leaves(self.observation_space)
        self.action_leaves = leaves(self.action_space)
        n = self.num_envs
        raws: dict[str, Any] = {}
        self.local = {}
        for prefixes, leaf_list in ((("obs", "final_obs"), self.obs_leaves),
                                    (("act",), self.action_leaves)):
            for i, leaf in enumerate(leaf_list):
                for prefix in prefixes:
                    if leaf.shared:
                        nbytes = n * leaf.dtype.itemsize * int(np.prod(leaf.shape, dtype=np.int64))
                        raws[f"{prefix}{i}"] = _raw(nbytes)
                    else:
                        self.local[f"{prefix}{i}"] = np.empty(n, dtype=object)
        raws["rewards"] = _raw(n * 8)
        for name in ("terminated", "truncated", "has_final_obs", "restarted"):
            raws[name] = _raw(n)
        raws["stats"] = _raw(self.num_slots * len(STAT_FIELDS) * 8)
        # int64 elements, so the words the step handshake polls are 8-byte aligned (atomic).
        raws["control"] = RawArray(ctypes.c_int64, control_rows(self.num_slots) * CONTROL_WORDS)
        self.raws = raws
        self.infos = InfoTables(n)

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
            rewards=_view(self.raws["rewards"], np.dtype(np.float64), (n,))[lo:hi],
            terminated=_view(self.raws["terminated"], flag, (n,))[lo:hi],
            truncated=_view(self.raws["truncated"], flag, (n,))[lo:hi],
            has_final_obs=_view(self.raws["has_final_obs"], flag, (n,))[lo:hi],
            restarted=_view(self.raws["restarted"], flag, (n,))[lo:hi],
        )

    def _leaf(self, name: str, leaf: Leaf) -> np.ndarray:
        if not leaf.shared:
            return self.local[name]
        return _view(self.raws[name], leaf.dtype, (self.num_envs, *leaf.shape))

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
        return _view(self.raws["control"], np.dtype(np.int64), shape)

    def stats(self) -> np.ndarray:
        """The (num_slots, len(STAT_FIELDS)) float64 counters, written by the workers."""
        shape = (self.num_slots, len(STAT_FIELDS))
        return _view(self.raws["stats"], np.dtype(np.float64), shape)
