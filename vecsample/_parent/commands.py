"""The reset command's format: which workers a reset goes to, what each gets, what comes back.

The pool carries commands (``WorkerPool.request``) without knowing what they hold; the sampler
(``VecSampler.reset``) and the restart policy (``Restarts._reinit``, which resets a respawned
process's envs) build a reset and read its replies with these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # names in annotations: the callers hand in their layout and buffers
    from vecsample._parent.layout import Layout
    from vecsample._wire.shm import SharedBuffers


def reset_targets(layout: Layout, mask: np.ndarray | None) -> list[int]:
    """The workers a reset of the envs in ``mask`` (None: all) goes to."""
    return [w for w in range(layout.num_slots)
            if mask is None or mask[slice(*layout.bounds(w))].any()]


def reset_payload(layout: Layout, seeds: Sequence[int | None], options: dict[str, Any] | None,
                  mask: np.ndarray | None) -> Callable[[int], object]:
    """Each worker's part of a reset: its envs' seeds, the options, its rows of ``mask``."""

    def payload(w: int) -> object:
        lo, hi = layout.bounds(w)
        return seeds[lo:hi], options, None if mask is None else mask[lo:hi]

    return payload


def reset_infos(layout: Layout, buffers: SharedBuffers,
                replies: dict[int, Any]) -> list[dict[str, Any]]:
    """Every env's reset info from a reset's replies (empty for envs not reset); the pickled
    leaves the replies carry are written to their rows."""
    infos: list[dict[str, Any]] = [{} for _ in range(layout.num_envs)]
    for w, (reply, lane) in replies.items():
        lo = layout.bounds(w)[0]
        for j, info in reply:
            infos[lo + j] = info
        if lane:
            buffers.apply_lane(lo, lane)
    return infos


__all__ = ["reset_infos", "reset_payload", "reset_targets"]
