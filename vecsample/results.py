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
    """One worker's step (or, from ``step()``, every env's). Arrays alias shared memory."""

    worker: int | None
    env_ids: range
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
