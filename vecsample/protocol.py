"""The parent–worker contract on one page: commands, replies, worker states, autoreset modes.

Steps go through shared memory (``vecsample.handshake``): sequence counters, with pipes only as
doorbells for a sleeping side, and a pickled ``(Reply.OK, infos)`` or ``(Reply.ERROR, report)``
on the pipe after a step that has infos or failed. Every other command travels on one duplex
``multiprocessing.Pipe`` per worker (see docs/architecture.md):

* parent → worker: a pickled ``(Command, payload)`` tuple (or ``handshake.DOORBELL``, a ring).
* worker → parent: ``OK_MESSAGE`` (one byte) when a command returned nothing; otherwise a pickled
  ``(Reply, payload)`` tuple. A pickle always starts with ``0x80``, so it never collides with the
  one-byte messages.

Bulk data (actions, observations, rewards, flags, final observations) never travels on the
pipe: it lives in shared memory (``vecsample.shm``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Any

import gymnasium as gym

#: What builds one env in a worker: called there, once per env (and again on a restart).
EnvFn = Callable[[], gym.Env[Any, Any]]


class Command(IntEnum):
    """What the parent asks a worker to do."""

    STEP = 1
    RESET = 2
    RESET_TASK = 3
    CALL = 4
    GET_ATTR = 5
    SET_ATTR = 6
    CLOSE = 7


class Reply(IntEnum):
    """What a worker answers."""

    OK = 1  # payload: command-specific result (infos, call results, ...)
    ERROR = 2  # payload: ErrorReport fields as a tuple
    READY = 3  # payload: None; sent once after the envs are built


class WorkerState(Enum):
    """The parent's view of one worker; the state machine behind every PendingCallError."""

    IDLE = "idle"
    STEPPING = "stepping"
    BUSY = "busy"  # a synchronous command (reset, call, ...) is in flight
    FAILED = "failed"  # its env raised; it must be restarted or the sampler closed
    DEAD = "dead"  # the process is gone
    CLOSED = "closed"


class AutoresetMode(str, Enum):
    """How an env that ended is reset; the values match gymnasium's ``AutoresetMode``."""

    NEXT_STEP = "NextStep"  # the step after the end resets instead of stepping (gymnasium default)
    SAME_STEP = "SameStep"  # reset inside the ending step; final obs kept in shared memory
    DISABLED = "Disabled"  # never reset; an ended env is frozen until reset() names it


OK_MESSAGE = b"\x00"

#: Infos of one step, sparse: (local env index, step info, reset info or None).
#: The reset info is set when the env was auto-reset during this step.
InfoRecord = tuple[int, dict[str, object], "dict[str, object] | None"]


@dataclass
class ErrorReport:
    """What a worker sends (with ``Reply.ERROR``) when a handler raised."""

    env: int | None
    command: str
    exc_type: str
    message: str
    traceback: str
