"""What a worker steps: a ``StepLoop``, chosen once when the worker is built from its
``WorkerSpec`` (``_wire/spec.py``).

Two blocks stand behind it: the env block (``env_block.py``: the worker's gymnasium envs,
stepped one after another by one inlined loop per autoreset mode) and the hosted block
(``hosted_block.py``: one batch-native ``VectorEnv`` for all the worker's rows, stepped once).
The worker (``main.py``) owns the process, the handshake and the pipe; the block owns the envs
and writes its rows of shared memory. The worker's command table is the block's methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from vecsample._wire.infos import InfoRecord
from vecsample._wire.protocol import ResetReply


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
