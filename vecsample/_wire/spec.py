"""What a worker process is started with: the function it runs (``WORKER_MAIN``), and a
``WorkerSpec`` per worker it serves, pickled once by the parent (``_parent/pool.py``) and read by
the worker (``_worker/main.py``)."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import cloudpickle
from gymnasium import error as gym_error

from vecsample._wire.handshake import PLAIN, Transport
from vecsample._wire.shm import SharedBuffers
from vecsample.errors import EnvNotRegisteredError, FactoryImportError
from vecsample.types import AutoresetMode, EnvFn

if TYPE_CHECKING:  # what the parent puts here; the worker's hosted block builds it
    from gymnasium.envs.registration import EnvSpec

    from vecsample.hosted import HostedVector

T = TypeVar("T")


@dataclass(frozen=True)
class EntryPoint:
    """A function named by its module and its name, imported where it is called. The parent
    starts its worker processes with one, so that its code names the worker process's main
    without importing it: a child process imports its own side by that name. (The trainer's
    process runs the worker's code for the blocks it steps itself through one plain import,
    the door ``vecsample/inprocess.py``.)"""

    module: str
    function: str

    def __call__(self, *args: object) -> Any:
        return getattr(importlib.import_module(self.module), self.function)(*args)


#: What every worker process runs: ``worker_main(specs, conns)``.
WORKER_MAIN = EntryPoint("vecsample._worker.main", "worker_main")


class Pickled(Generic[T]):
    """A value for a spawn or forkserver worker (``context``), pickled by cloudpickle, so that
    lambdas, closures and the main script's classes travel too, and unpickled by ``load()``,
    inside the worker's build: a module the worker cannot import is then a FactoryImportError
    naming it, which the worker reports like any build error, instead of an exception in
    multiprocessing's start-up that kills the process with no word to the parent."""

    def __init__(self, value: T, context: str, what: str = "an env factory") -> None:
        self._value, self._loaded, self._pickled = value, True, b""
        self.context, self.what = context, what

    def __getstate__(self) -> tuple[bytes, str, str]:
        return cloudpickle.dumps(self._value), self.context, self.what

    def __setstate__(self, state: tuple[bytes, str, str]) -> None:
        self._pickled, self.context, self.what = state
        self._loaded = False

    def load(self) -> T:
        """The value, unpickled on first use."""
        if not self._loaded:
            try:
                self._value = cloudpickle.loads(self._pickled)
            except ImportError as exc:
                raise FactoryImportError(module=exc.name, context=self.context,
                                         error=f"{type(exc).__name__}: {exc}",
                                         what=self.what) from exc
            self._loaded = True
        return self._value


class PickledFactory(Pickled[EnvFn]):
    """An env factory for a spawn or forkserver worker (``Pickled``). An env id it asks
    gymnasium for and the worker lacks (registered under the parent's main guard, inside a
    closure vecsample cannot see into) is an EnvNotRegisteredError saying why and what to do."""

    def __call__(self) -> Any:
        fn = self.load()
        try:
            return fn()
        except gym_error.UnregisteredEnv as exc:
            raise EnvNotRegisteredError(context=self.context,
                                        error=f"{type(exc).__name__}: {exc}") from exc


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
    inherited_conns: Sequence[Connection] = field(default_factory=list)
    #: Seconds to poll for the next step or command before sleeping (handshake.WorkerSide).
    spin_s: float = 0.0
    #: The write end of the parent's doorbell pipe (handshake.py); None for a block that the
    #: trainer's process steps itself (no handshake), and in unit tests.
    ring_writer: Connection | None = None
    #: How the handshake runs, as the parent decided it (``Layout.transport``): the worker
    #: builds its waiter and its sides from it (``handshake.waiter``).
    transport: Transport = PLAIN
    #: The block's batch-native vector env, built once for all its rows (None: ``env_fns``).
    hosted: HostedVector | None = None
    #: Spawn and forkserver: the parent's gymnasium registrations of the env ids the factories
    #: name, for those the worker does not have (registered under the main script's guard).
    registrations: Pickled[tuple[EnvSpec, ...]] | None = None
