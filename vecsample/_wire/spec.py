"""What a worker process is started with: the function it runs (``WORKER_MAIN``), and a
``WorkerSpec`` per worker it serves, pickled once by the parent (``_parent/pool.py``) and read by
the worker (``_worker/main.py``)."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from vecsample._wire.shm import SharedBuffers
from vecsample.types import AutoresetMode, EnvFn

if TYPE_CHECKING:  # what the parent puts here; the worker's hosted block builds it
    from vecsample.hosted import HostedVector


@dataclass(frozen=True)
class EntryPoint:
    """A function named by its module and its name, imported where it is called. The parent
    starts its worker processes with one, so that its code names the worker's entry point
    without importing the worker's code: each process imports only its own side."""

    module: str
    function: str

    def __call__(self, *args: object) -> None:
        getattr(importlib.import_module(self.module), self.function)(*args)


#: What every worker process runs: ``worker_main(specs, conns)``.
WORKER_MAIN = EntryPoint("vecsample._worker.main", "worker_main")


@dataclass
class WorkerSpec:
    """Everything a worker needs, pickled once when the process starts."""

    index: int
    #: One factory per env of its block; empty with a hosted vector env (``hosted``).
    env_fns: Sequence[EnvFn]
    env_offset: int
    #: The envs of its block (rows ``env_offset`` to ``env_offset + count``).
    count: int
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
    #: The block's batch-native vector env, built once for all its rows (None: ``env_fns``).
    hosted: HostedVector | None = None
    #: Whether the worker waits and replies through the handshake's C path (Layout.native).
    native: bool = False
