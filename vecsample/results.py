"""What a step returns: ``StepResult``, one worker's block of envs (or all of them, from step()).

Its arrays alias shared memory and stay valid until that worker is sent again (see
docs/semantics.md); ``copy=True`` on the receiving call returns copies instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vecsample._wire.infos import InfoMap

#: One info dict per env, as gymnasium's single envs return them.
Infos = list[dict[str, Any]]


@dataclass
class StepResult:
    """One worker's step (or, from ``step()``, every env's; from ``recv_batch(timeout)``, the
    workers done within the window, together). Arrays alias shared memory, except a partial
    batch's, whose rows are gathered into copies."""

    #: The worker of the step API whose step this is; None for a batch of several.
    worker: int | None
    #: The global env ids of the rows, in order: a range for one worker's block or every env,
    #: an int array for a partial batch (``recv_batch(timeout)``).
    env_ids: range | np.ndarray
    obs: Any
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: Any
    has_final_obs: np.ndarray
    #: Workers restarted since their last step flag their envs here (see docs/reliability.md).
    restarted: np.ndarray
    #: Non-empty step infos by global env id (a dict-like ``InfoMap``: numeric values come
    #: from shared-memory columns, and the per-env dicts are built when first read).
    infos: InfoMap = field(default_factory=InfoMap)
    #: Non-empty infos of the resets done by autoreset during this step, by global env id.
    reset_infos: InfoMap = field(default_factory=InfoMap)
    #: The workers of the step API whose steps these rows are, in row order: set by
    #: ``recv_batch(timeout)`` (those done within the window), which
    #: ``step_send_many(result.workers, actions)`` sends again; None for one worker's result
    #: (``worker``) and for a full batch (``step()``, ``recv_batch(None)``: every worker).
    workers: np.ndarray | None = None

    @property
    def block(self) -> range:
        """The env ids of one worker's result, or of ``step()``'s, as a range (a partial
        batch's are not contiguous: read ``env_ids``)."""
        if not isinstance(self.env_ids, range):
            raise TypeError("this result holds several workers' blocks (recv_batch(timeout)): "
                            "its env ids are env_ids, an array, not one range")
        return self.env_ids

