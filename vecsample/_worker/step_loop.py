"""What a worker is given (``WorkerSpec``) and what it steps: a ``StepLoop``, chosen once when
the worker is built.

Two blocks stand behind it: the env block (``env_block.py``: the worker's gymnasium envs,
stepped one after another by one inlined loop per autoreset mode) and the hosted block
(``hosted_block.py``: one batch-native ``VectorEnv`` for all the worker's rows, stepped once).
The worker (``main.py``) owns the process, the handshake and the pipe; the block owns the envs
and writes its rows of shared memory. The worker's command table is the block's methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Protocol

import numpy as np

from vecsample._wire.protocol import AutoresetMode, EnvFn, InfoRecord, ResetReply
from vecsample._wire.shm import SharedBuffers


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


@dataclass
class Cursor:
    """The env (a row of the worker's block) that is running: an error names it. Set before an
    env is called where it can raise, and back to None when the call is over."""

    env: int | None = None


class StepLoop(Protocol):
    """A worker's block of envs: built once, stepped on each posted step, and the target of the
    per-env commands (each gets one value per row of the block, and returns one per row)."""

    #: Rows that ended at their last step: NEXT_STEP resets them at the next; under DISABLED
    #: the env block freezes them (``local_step`` resets them). The hosted block marks them
    #: under NEXT_STEP only (its parent refuses to step a DISABLED block with an ended row).
    ended: np.ndarray

    def build(self) -> None:
        """Builds the envs; what was built before an error is closed by ``close()``."""

    def step(self, records: list[InfoRecord]) -> None:
        """Steps the block with the actions in shared memory, writes its rows, and appends an
        ``(env, info, reset_info)`` record for each env that has infos."""

    def reset(self, payload: tuple[list[Any], Any, Any]) -> ResetReply:
        """RESET: ``(seeds, options, mask)``."""

    def reset_task(self, tasks: Sequence[Any]) -> list[None]:
        """RESET_TASK: one task per row."""

    def call(self, payload: tuple[str, tuple[Any, ...], dict[str, Any]]) -> list[Any]:
        """CALL: ``(name, args, kwargs)``."""

    def get_attr(self, name: str) -> list[Any]:
        """GET_ATTR."""

    def set_attr(self, payload: tuple[str, Sequence[Any]]) -> list[None]:
        """SET_ATTR: ``(name, values)``, one value per row."""

    def close(self) -> None:
        """Closes what was built (the worker ignores what it raises: it is going away)."""
