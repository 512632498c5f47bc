"""What a step returns: ``StepResult``, one worker's block of envs (or all of them, from step()).

Its arrays alias shared memory and stay valid until that worker is sent again (see
docs/semantics.md); ``copy=True`` on the receiving call returns copies instead. And how
``stats()`` reports time: ``wall_split``, shared by the sampler and ``vecsample.train``'s
profiler.
"""

from __future__ import annotations

from collections.abc import Mapping
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


def wall_split(totals: Mapping[str, float], wall: float, steps: float) -> dict[str, float]:
    """``<phase>_s`` and ``<phase>_pct`` of ``wall`` per phase, the rest as ``other``, steps/s."""
    out: dict[str, float] = {"wall_s": wall}
    for name, seconds in totals.items():
        out[f"{name}_s"] = seconds
        out[f"{name}_pct"] = _pct(seconds, wall)
    other = wall - sum(totals.values())
    out["other_s"], out["other_pct"] = other, _pct(other, wall)
    out["steps_per_s"] = steps / wall if wall > 0 else 0.0
    return out


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0
