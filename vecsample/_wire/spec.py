"""``WorkerSpec``: everything a worker process is given when it starts, pickled once by the
parent (``_parent/pool.py``) and read by the worker (``_worker/main.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from vecsample._wire.shm import SharedBuffers
from vecsample.types import AutoresetMode, EnvFn


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
