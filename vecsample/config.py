"""A sampler's layout, derived from its envs and its ``Options``, and the checks that need the
envs.

``SamplerConfig.build(env_fns, options)`` makes the env factories, checks what only the envs can
tell (``num_workers`` divides them, ``pipeline`` halves them), resolves what "auto" means here
(the start method, the spin, the cores) and returns a frozen record; nothing after it
re-validates. Each option's own check lives with its field in options.py; the names imported
from there (``check_int``, ``check_seconds``, ``check_mode``, the defaults) stay importable
from here, and ``env_factories`` is public, so that the Ray backend, the meta-RL sampler and
the tools reject bad input with the same words.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from vecsample._parent.startup import resolve_context
from vecsample.errors import ConfigError
from vecsample.hosted import HostedVector
from vecsample.options import (
    DEFAULT_CONTEXT,
    DEFAULT_DEADLINE,
    STARTUP_DEADLINE,
    Options,
    check_int,
    check_mode,
    check_seconds,
)
from vecsample.types import AutoresetMode, EnvFn

__all__ = ["AUTO_SPIN_US", "DEFAULT_CONTEXT", "DEFAULT_DEADLINE", "STARTUP_DEADLINE", "Deadline",
           "EnvMaker", "SamplerConfig", "check_int", "check_mode", "check_seconds",
           "env_factories", "usable_cores"]

#: How long the parent and the workers poll the step handshake's counters before sleeping on a
#: pipe, when every worker can have a core of its own (µs). It skips scheduler wake-ups (an IPI
#: on a VM, docs/benchmarks.md); with more workers than cores, spinning would steal their CPU.
AUTO_SPIN_US = 200.0


@dataclass(frozen=True)
class EnvMaker:
    """A picklable factory for ``gym.make(env_id, **kwargs)``."""

    env_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> gym.Env[Any, Any]:
        if self.env_id not in gym.registry and importlib.util.find_spec("vecsample.envs"):
            importlib.import_module("vecsample.envs")  # registers the meta-RL task envs
        return gym.make(self.env_id, **self.kwargs)


@dataclass(frozen=True)
class Deadline:
    """The bounds of one synchronous call (reset, call, ...): each wait inside it lasts at most
    ``per_wait`` seconds (the sampler's ``deadline``), and none goes past ``end`` (a time on the
    monotonic clock, set by the call's own ``timeout``), restarts and their rebuilds included."""

    per_wait: float | None
    end: float | None = None
    #: The call's own bound in seconds, named by the error once ``end`` has passed.
    timeout: float | None = None

    @classmethod
    def within(cls, seconds: float | None) -> Deadline:
        """A call that must be over ``seconds`` from now (None: never)."""
        end = None if seconds is None else time.monotonic() + seconds
        return cls(seconds, end, seconds)

    @classmethod
    def of_call(cls, seconds: float | None, per_wait: float | None) -> Deadline:
        """A synchronous call's bounds: its own ``deadline=`` (``seconds``, checked) bounds the
        whole call, restarts included; None leaves each wait bounded by ``per_wait`` (the
        sampler's ``deadline``) and a restart's rebuild by ``startup_deadline``."""
        if seconds is None:
            return cls(per_wait)
        return cls.within(check_seconds(seconds, "deadline"))

    def per(self, seconds: float | None) -> Deadline:
        """The same call's end, with waits of ``seconds`` (a rebuild's startup_deadline)."""
        return Deadline(seconds, self.end, self.timeout)

    def wait_end(self) -> float | None:
        """When a wait that starts now must end: after ``per_wait``, or at ``end`` if sooner."""
        now_plus = None if self.per_wait is None else time.monotonic() + self.per_wait
        ends = [t for t in (now_plus, self.end) if t is not None]
        return min(ends) if ends else None

    def exceeded(self) -> float | None:
        """The bound a wait that ran out hit: the call's ``timeout`` once ``end`` has passed,
        ``per_wait`` before."""
        if self.end is not None and time.monotonic() >= self.end:
            return self.timeout
        return self.per_wait


@dataclass(frozen=True)
class SamplerConfig:
    """What a ``VecSampler`` runs: its envs, its ``Options`` and the layout derived from both
    (how many slots, which envs each steps, the start method and spin "auto" chose)."""

    env_fns: tuple[EnvFn, ...]
    options: Options
    #: The start method ``options.context`` resolved to ("auto" becomes fork or forkserver).
    context: str
    #: The spin before sleeping, in seconds (``options.spin_us``, or the automatic choice).
    spin_s: float
    #: Each slot's cores (None: the OS chooses); a process's slots share its cores.
    cpu_affinity: tuple[tuple[int, ...] | None, ...]
    #: Slots (handshake slots, env blocks: the step API's workers) served by one process: 2
    #: with ``pipeline=True``, so the process steps one half of its envs while the parent
    #: computes the other's actions.
    slots_per_process: int = 1

    @property
    def num_envs(self) -> int:
        return len(self.env_fns)

    # No ``num_workers`` here: it counted slots before issue 23, and code that still reads it
    # should fail, not get the processes. ``options.num_workers`` counts the processes.

    @property
    def num_slots(self) -> int:
        """The step API's workers: ``num_workers * slots_per_process``."""
        return self.options.num_workers * self.slots_per_process

    def slots(self, process: int) -> range:
        """The slots that process ``process`` serves."""
        k = self.slots_per_process
        return range(process * k, (process + 1) * k)

    def process_slots(self, w: int) -> range:
        """The slots served by the process that serves slot ``w`` (``w`` and, pipelined, its
        other half)."""
        return self.slots(w // self.slots_per_process)

    @property
    def envs_per_slot(self) -> int:
        """The block size (the largest block, with an uneven split)."""
        return -(-self.num_envs // self.num_slots)

    def bounds(self, slot: int) -> tuple[int, int]:
        """The global env ids ``[lo, hi)`` that ``slot`` steps (a contiguous block); with an
        uneven split the first ``num_envs % num_slots`` blocks hold one env more."""
        base, extra = divmod(self.num_envs, self.num_slots)
        lo = slot * base + min(slot, extra)
        return lo, lo + base + (1 if slot < extra else 0)

    @classmethod
    def build(
        cls, env_fns: Sequence[EnvFn] | str | HostedVector, options: Options, *,
        num_envs: int | None = None, env_kwargs: dict[str, Any] | None = None,
    ) -> SamplerConfig:
        """The envs' factories and the layout, after the checks that need the envs."""
        o = options
        fns = env_factories(env_fns, num_envs, env_kwargs, o.autoreset_mode)
        check_workers(o.num_workers, len(fns), o.uneven_split)
        k = check_pipeline(o.pipeline, o.num_workers, len(fns), o.uneven_split)
        return cls(
            env_fns=tuple(fns), options=o, context=resolve_context(o.context),
            spin_s=spin_seconds(o.spin_us, o.num_workers),
            cpu_affinity=per_slot(check_affinity(o.cpu_affinity, o.num_workers), k),
            slots_per_process=k,
        )


# --- checks shared by every constructor ---------------------------------------------------------


def env_factories(
    env_fns: Sequence[EnvFn] | str | HostedVector, num_envs: int | None,
    env_kwargs: dict[str, Any] | None, mode: AutoresetMode = AutoresetMode.SAME_STEP,
) -> list[EnvFn]:
    """One factory per env: ``env_fns`` as given, ``num_envs`` makers of an env id, or the
    ``num_envs`` rows of a hosted vector env autoresetting in ``mode``."""
    if isinstance(env_fns, HostedVector):
        if None not in (num_envs, env_fns.num_envs) and num_envs != env_fns.num_envs:
            raise ConfigError(f"num_envs={num_envs} but HostedVector(num_envs="
                              f"{env_fns.num_envs}); give it once.")
        count = check_int(env_fns.num_envs if num_envs is None else num_envs, "num_envs",
                          fix="with a HostedVector pass num_envs=<int>")
        if env_kwargs:
            raise ConfigError("env_kwargs is only used with an env id; pass a HostedVector's "
                              "keyword arguments as HostedVector(..., env_kwargs={...}).")
        return list(env_fns.slots(count, mode))
    if isinstance(env_fns, str):
        count = check_int(num_envs, "num_envs", fix=f"with an env id ({env_fns!r}) pass "
                          "num_envs=<int>")
        return [EnvMaker(env_fns, dict(env_kwargs or {}))] * count
    if env_kwargs:
        raise ConfigError("env_kwargs is only used with an env id; bind kwargs in env_fns.")
    fns = list(env_fns)
    if not fns:
        raise ConfigError("env_fns is empty; pass at least one env factory.")
    bad = [i for i, fn in enumerate(fns) if not callable(fn)]
    if bad:
        raise ConfigError(
            name=f"env_fns[{bad[0]}]", expected="a callable that returns an env", got=fns[bad[0]],
            fix="pass factories such as functools.partial(gym.make, 'CartPole-v1'), not env "
            "instances",
        )
    if num_envs is not None and num_envs != len(fns):
        raise ConfigError(f"num_envs={num_envs} but {len(fns)} env_fns were given.")
    return fns


def check_workers(num_workers: Any, num_envs: int, uneven_split: bool = False) -> int:
    """``num_workers`` if it is an int >= 1 that divides ``num_envs`` (or, with
    ``uneven_split``, is at most ``num_envs``)."""
    workers = check_int(num_workers, "num_workers")
    if workers > num_envs:
        raise ConfigError(name="num_workers", expected=f"at most num_envs={num_envs}",
                          got=workers, fix="a worker needs at least one env")
    if num_envs % workers and not uneven_split:
        divisors = [d for d in range(1, num_envs + 1) if num_envs % d == 0]
        raise ConfigError(
            f"num_envs={num_envs} is not divisible by num_workers={workers}; choose "
            f"num_workers from {divisors}, or pass uneven_split=True."
        )
    return workers


def check_pipeline(pipeline: bool, processes: int, num_envs: int, uneven_split: bool) -> int:
    """Slots per process: 2 with ``pipeline`` (each process's block splits in two halves)."""
    if not pipeline:
        return 1
    if uneven_split or num_envs % (2 * processes):
        raise ConfigError(
            f"pipeline=True splits each worker's block of envs in two halves, so num_envs="
            f"{num_envs} must be divisible by 2 * num_workers = {2 * processes} (and "
            f"uneven_split={uneven_split} must be False); choose num_workers from "
            f"{[d for d in range(1, num_envs // 2 + 1) if num_envs % (2 * d) == 0]}."
        )
    return 2


def per_slot(per_process: tuple[tuple[int, ...] | None, ...],
             k: int) -> tuple[tuple[int, ...] | None, ...]:
    """A per-process setting repeated for each of the ``k`` slots a process serves."""
    return tuple(value for value in per_process for _ in range(k))


def check_affinity(
    value: Sequence[Sequence[int]] | bool | None, workers: int
) -> tuple[tuple[int, ...] | None, ...]:
    """One core list (or None) per worker process: True pins worker w to the w-th usable core
    (a machine's fact, so it is resolved here, not in Options)."""
    if value is None or value is False:
        return (None,) * workers
    if value is True:
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if not cores:
            raise ConfigError("cpu_affinity=True needs os.sched_getaffinity (Linux); pass one "
                              "core list per worker or leave it None.")
        return tuple((cores[w % len(cores)],) for w in range(workers))
    sets = tuple(tuple(s) for s in value)
    if len(sets) != workers:
        raise ConfigError(name="cpu_affinity", expected=f"one core list per worker ({workers})",
                          got=f"{len(sets)} lists")
    return sets


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask; all of them off Linux)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def spin_seconds(spin_us: float | None, num_workers: int) -> float:
    """The spin before sleeping, in seconds: ``spin_us`` (checked by Options), or AUTO_SPIN_US
    while every worker process can have a core of its own."""
    if spin_us is None:
        # Without an affinity mask (off Linux) the cores we get are unknown: spin for a
        # single worker only, rather than steal CPU from workers that may share a core.
        cores = usable_cores() if hasattr(os, "sched_getaffinity") else 1
        return AUTO_SPIN_US * 1e-6 if num_workers <= cores else 0.0
    return spin_us * 1e-6
