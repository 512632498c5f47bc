"""``BlockRunner``: one slot's block of envs and what runs it, wherever it runs.

A worker process runs one (two with ``pipeline``) inside its handshake and pipe
(``main.py``); the trainer's own process runs one with neither, through the door
``vecsample/inprocess.py`` (``Options.env_placement``). Both get the same block
(``step_loop.StepLoop``: its own envs, ``env_block.py``, or one hosted vector env,
``hosted_block.py``), the same command table, the same timers and the same error report, so
that a block's rows, infos, autoresets and errors are one code path whoever steps it.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from vecsample._wire.infos import InfoRecord, InfoWriter
from vecsample._wire.protocol import Command, ErrorReport
from vecsample._wire.shm import Views
from vecsample._wire.spec import WorkerSpec
from vecsample._worker.env_block import EnvBlock
from vecsample._worker.hosted_block import HostedBlock
from vecsample._worker.step_loop import Cursor, StepLoop
from vecsample.errors import FactoryImportError


class BlockRunner:
    """One slot's block (``spec``'s envs, or its hosted vector env), its rows and its timers.

    ``build`` builds it, ``step`` steps it with the actions in its rows of shared memory,
    ``run`` runs a command (RESET, RESET_TASK, CALL, GET_ATTR, SET_ATTR) on it; each raises
    what the env raised, with ``cursor.env`` naming the env, and ``report`` turns the exception
    being handled into the ``ErrorReport`` that names it (``WorkerError`` in the parent)."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.count = spec.count
        lo = spec.env_offset
        self.views: Views = spec.buffers.views(lo, lo + self.count)
        self.stats = spec.buffers.stats()[spec.index]
        self.cursor = Cursor()  # the env that is running, named by an error
        #: The slot's info columns in shared memory: a worker process writes the infos that
        #: fit them there; a hosted batch env puts its columns straight in (one copy per key).
        self.infos = InfoWriter(spec.buffers.infos, lo, lo + self.count)
        # What the slot steps, chosen once: a hosted vector env or its own envs.
        self.block: StepLoop = (EnvBlock(spec, self.views, self.cursor) if spec.hosted is None
                                else HostedBlock(spec, spec.hosted, self.views, self.infos))
        block = self.block
        self.handlers: dict[Command, Callable[[Any], Any]] = {
            Command.RESET: block.reset, Command.RESET_TASK: block.reset_task,
            Command.CALL: block.call, Command.GET_ATTR: block.get_attr,
            Command.SET_ATTR: block.set_attr}

    def build(self) -> None:
        """Registers the parent's env ids the process lacks (spawn, forkserver), then builds
        the block; what was built before an error is closed by ``close``."""
        carried = self.spec.registrations
        if carried is not None:  # before the factories need them
            register_missing(carried.load(), carried.context)
        self.block.build()

    def step(self) -> list[InfoRecord] | None:
        """Steps the block (its actions are in its rows) and counts its time; the infos, as
        ``(env, info, reset_info)`` records, where there are any and ``spec.infos`` wants them."""
        records: list[InfoRecord] = []
        start = time.perf_counter()
        self.block.step(records)
        self.stats[0] += time.perf_counter() - start
        self.stats[1] += self.count
        return records if (records and self.spec.infos) else None

    def run(self, command: Command, payload: Any) -> Any:
        """Runs ``command`` on the block; its result (None: nothing to send back)."""
        return self.handlers[command](payload)

    def report(self, command: str) -> ErrorReport:
        """The exception being handled as the report that names its env (global index)."""
        exc_type, exc, _ = sys.exc_info()
        j = self.cursor.env
        self.cursor.env = None
        return ErrorReport(
            env=None if j is None else self.spec.env_offset + j, command=command,
            exc_type=getattr(exc_type, "__name__", "Exception"), message=str(exc),
            traceback=traceback.format_exc(),
        )

    def close(self) -> None:
        """Closes the block's envs; what they raise is dropped (the block is going away, and
        the env block already closes each env on its own)."""
        with contextlib.suppress(Exception):  # nothing to report to: the block is going
            self.block.close()


def register_missing(specs: Sequence[EnvSpec], context: str) -> None:
    """Registers the parent's registrations (``specs``) of the env ids this process lacks:
    those made under the main script's guard, which a spawn or forkserver worker does not run.
    The modules of string entry points are imported first, as ``gymnasium.make`` would: one may
    register the id itself, which is then left as it is (no registration is overridden)."""
    for spec in specs:
        for point in (spec.entry_point, spec.vector_entry_point):
            if spec.id in gym.registry or not (isinstance(point, str) and ":" in point):
                continue
            module = point.split(":")[0]
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise FactoryImportError(module=exc.name or module, context=context,
                                         error=f"{type(exc).__name__}: {exc}",
                                         what=f"the registration of {spec.id!r}") from exc
        if spec.id not in gym.registry:
            gym.registry[spec.id] = spec


__all__ = ["BlockRunner", "register_missing"]
