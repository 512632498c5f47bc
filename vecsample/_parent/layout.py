"""``Layout``: what a ``VecSampler`` runs, derived once from its envs and its ``Options``.

``Layout.build(envs, options)`` checks what only the envs can tell (``num_workers`` divides them,
``pipeline`` halves them), resolves what "auto" means on this machine (the start method, the
spin, the cores) and returns a frozen record: which envs each worker of the step API steps,
which process serves which workers, and, for a hosted vector env, the env and what the parent's
probe found it can do (``hosted.HostedProbe``). Nothing after it re-validates. Each option's own
check lives with its field in options.py.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vecsample._parent.startup import resolve_context, warn_once
from vecsample._wire import handshake
from vecsample._wire.handshake import PLAIN, Transport
from vecsample.errors import ConfigError
from vecsample.machine import ensure_fds, usable_cores
from vecsample.options import AUTO_SPIN_US, Options

if TYPE_CHECKING:  # names in annotations: the records are the sampler's to import
    from vecsample.factories import Envs
    from vecsample.hosted import HostedProbe, HostedVector
    from vecsample.types import EnvFn


@dataclass(frozen=True)
class Layout:
    """What a ``VecSampler`` runs: its envs, its ``Options`` and what derives from both (how
    many slots, which envs each steps, the start method and spin "auto" chose)."""

    #: One factory per env (each built in its worker); empty with a hosted vector env.
    env_fns: tuple[EnvFn, ...]
    options: Options
    num_envs: int
    #: The start method ``options.context`` resolved to ("auto" becomes fork or forkserver).
    context: str
    #: The workers' spin before sleeping, in seconds (``options.spin_us``, or the automatic
    #: choice: while every worker process can have a core of its own).
    spin_s: float
    #: Each slot's cores (None: the OS chooses); a process's slots share its cores.
    cpu_affinity: tuple[tuple[int, ...] | None, ...]
    #: Slots (handshake slots, env blocks: the step API's workers) served by one process: 2
    #: with ``pipeline=True``, so the process steps one half of its envs while the parent
    #: computes the other's actions.
    slots_per_process: int = 1
    #: One batch-native vector env per worker for its whole block, in place of ``env_fns``.
    hosted: HostedVector | None = None
    #: What the parent's probe of ``hosted`` found it can do (set once the spaces are read).
    probe: HostedProbe | None = None
    #: How the step handshake runs (``options.handshake`` and the machine, decided once by
    #: ``decide_transport``): the parent's side and every worker's waiter are built from it.
    transport: Transport = PLAIN
    #: Where the blocks are stepped: ``options.env_placement``, "auto" resolved (the sampler
    #: resolves it once the spaces are known): "workers", "share" or "parent" (``parent_slots``).
    placement: str = "workers"
    #: Why "auto" chose ``placement`` (what it measured); empty when it was given.
    placement_reason: str = ""

    # No ``num_workers`` here: ``options.num_workers`` counts the processes, ``num_slots`` the
    # step API's workers.

    @property
    def native(self) -> bool:
        """Whether the step handshake runs its C hot path (``transport.native``)."""
        return self.transport.native

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
    def parent_spin_s(self) -> float:
        """The parent's spin before it sleeps in a wait for steps, in seconds: ``spin_s`` where
        ``options.spin_us`` sets it; automatically, only where the worker processes and this
        one each have a core (with "share" this process steps a block, so one worker process
        fewer), so that a waiting parent never takes a worker's core."""
        processes = self.options.num_workers + (0 if self.placement == "share" else 1)
        return spin_seconds(self.options.spin_us, processes)

    @property
    def parent_slots(self) -> range:
        """The slots that the trainer's own process serves (``env_placement``): the last
        process's with "share", every slot with "parent", none with "workers"."""
        if self.placement == "share":
            return self.slots(self.options.num_workers - 1)
        return range(self.num_slots) if self.placement == "parent" else range(0)

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
    def build(cls, envs: Envs, options: Options) -> Layout:
        """The layout of ``envs`` under ``options``, after the checks that need the envs."""
        o = options
        check_workers(o.num_workers, envs.count, o.uneven_split)
        k = check_pipeline(o.pipeline, o.num_workers, envs.count, o.uneven_split)
        ensure_fds(o.num_workers * k)  # the workers' pipes and handles, before any starts
        return cls(
            env_fns=envs.fns, options=o, num_envs=envs.count,
            context=resolve_context(o.context), spin_s=spin_seconds(o.spin_us, o.num_workers),
            cpu_affinity=per_slot(check_affinity(o.cpu_affinity, o.num_workers), k),
            slots_per_process=k, hosted=envs.hosted, transport=decide_transport(o.handshake),
            placement=o.env_placement,
        )


# --- the checks that need the envs or the machine ------------------------------------------------


def check_workers(workers: int, num_envs: int, uneven_split: bool = False) -> int:
    """``workers`` (an int >= 1, checked by Options) if it divides ``num_envs`` (or, with
    ``uneven_split``, is at most ``num_envs``)."""
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
    """One core list (or None) per worker process: True pins worker w to the w-th usable core.
    Which cores exist is a machine's fact, so it is checked here, not in Options: a core this
    process may not run on would kill the worker in ``sched_setaffinity``."""
    if value is None or value is False:
        return (None,) * workers
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if not cores:
        raise ConfigError(name="cpu_affinity", expected="None on a platform without "
                          "os.sched_getaffinity (Linux has it)", got=value,
                          fix="leave cpu_affinity None: the OS places the workers")
    if value is True:
        return tuple((cores[w % len(cores)],) for w in range(workers))
    sets = tuple(tuple(s) for s in value)  # one list per worker: Options checked it
    unusable = sorted({c for s in sets for c in s} - set(cores))
    if unusable:
        raise ConfigError(name="cpu_affinity", expected=f"cores this process may run on, "
                          f"{cores}", got=f"{[list(s) for s in sets]} (cores {unusable} are not "
                          f"usable here)", fix=f"pick each worker's cores from {cores}, or pass "
                          f"True (one usable core per worker)")
    return sets


def decide_transport(requested: str) -> Transport:
    """How the step handshake runs, from ``options.handshake`` and what this machine can run
    (``handshake.MACHINE``; this is its one reader): "native" insists on the C path (a
    ConfigError where it cannot run), "python" declines it, "auto" takes it where it can and
    says once why not. The futex and the memory order are the machine's."""
    machine = handshake.MACHINE
    if machine.native and requested != "python":
        return machine
    reason = handshake.NATIVE_MISSING or ""
    if requested == "native":
        raise ConfigError(name="handshake", expected="'auto' or 'python' here",
                          got="'native'", fix=reason)
    if requested == "auto" and machine.ordered:  # x86 without the build: say how to get it
        warn_once("native", f"{reason}.")
    return dataclasses.replace(machine, native=False)


def spin_seconds(spin_us: float | None, processes: int) -> float:
    """The spin before sleeping, in seconds: ``spin_us`` (checked by Options), or AUTO_SPIN_US
    while each of ``processes`` busy processes can have a core of its own (the workers, for a
    worker's spin; the workers and the parent, for the parent's)."""
    if spin_us is None:
        # Without an affinity mask (off Linux) the cores we get are unknown: spin for a
        # single worker only, rather than steal CPU from workers that may share a core.
        cores = usable_cores() if hasattr(os, "sched_getaffinity") else 1
        return AUTO_SPIN_US * 1e-6 if processes <= cores else 0.0
    return spin_us * 1e-6


__all__ = ["Layout", "check_pipeline", "check_workers", "spin_seconds"]
