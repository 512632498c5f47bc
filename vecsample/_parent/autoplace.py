"""``env_placement="auto"``: where a sampler's blocks are stepped, chosen from a measurement.

Once the spaces are known, the sampler times one worker process's block of envs stepped here,
by the worker's own loop (``inprocess.time_block``, through ``_wire/spec.py: TIME_BLOCK``), and
prices a synchronous step (post, step, wait: ``step()``, ``VectorEnv.step``) three ways:

* ``"parent"``: every block stepped here, one after another: ``W * block``;
* ``"workers"`` or ``"share"``: the blocks stepped at once, ``block * max(1, W / cores)``
  (more processes than cores share them), plus what a round trip to a worker process costs
  (``ROUND_TRIP_S``).

A worker process pays for itself only when stepping at once saves more than the round trip,
by ``MARGIN`` (a hysteresis, as the device probe's, so that noise in the timing cannot flip a
close choice). Then ``"share"`` where the machine has no core to spare for a waiting parent
(``W >= cores``: the parent would be one more busy process), else ``"workers"``, which keep
every guarantee. Like ``vecsample.train.device``, it measures rather than guesses, and says
what it chose and why (``PlacementNotice``, once per process for each choice).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from vecsample._parent.startup import warn_once
from vecsample._wire.spec import TIME_BLOCK
from vecsample.errors import PlacementNotice
from vecsample.options import usable_cores

if TYPE_CHECKING:
    from gymnasium import Space

    from vecsample._parent.layout import Layout

#: What a step's round trip to the worker processes costs beyond the envs' own time (post,
#: wake-up, wait, read), parent and worker together: about 60 µs on the 2-core development VM
#: (docs/benchmarks.md, "The targets for hosted envs"), where one worker's round trip with one
#: env was 26 µs (P5). A constant, not measured at start: timing it would mean starting the
#: worker processes that the choice may do without.
ROUND_TRIP_S = 60e-6
#: How much cheaper stepping the blocks at once must come out to leave the parent alone: the
#: device probe's hysteresis (vecsample.train.device, ``margin``).
MARGIN = 0.1
#: The most seconds the timing takes (after its warm-up steps).
BUDGET_S = 0.25


def resolve(layout: Layout, spaces: tuple[Space[Any], Space[Any]]) -> Layout:
    """``layout`` with "auto" resolved, and the reason (``placement_reason``); said once."""
    workers = layout.options.num_workers
    size = layout.bounds(layout.slots(0)[-1])[1]  # the first process's block: the largest
    envs = layout.hosted if layout.hosted is not None else layout.env_fns[:size]
    block = TIME_BLOCK(envs, layout.options.autoreset_mode, spaces, list(range(size)), BUDGET_S)
    choice, reason = choose(float(block), workers, usable_cores(), size)
    warn_once(f"env_placement {choice} {layout.num_envs} {workers}",
              f"env_placement='auto' chose {choice!r}: {reason}", PlacementNotice)
    return dataclasses.replace(layout, env_placement=choice, placement_reason=reason)


def choose(block: float, workers: int, cores: int, block_envs: int) -> tuple[str, str]:
    """The placement for blocks of ``block`` seconds a step (``block_envs`` envs each), in
    ``workers`` workers on ``cores`` cores, and why (the module docstring's prices)."""
    serial = workers * block
    split = block * max(1.0, workers / cores) + ROUND_TRIP_S
    prices = (f"a block of {block_envs} envs took {block * 1e6:.0f} µs a step here, so "
              f"{workers} blocks take {serial * 1e6:.0f} µs stepped one after another in this "
              f"process, about {split * 1e6:.0f} µs stepped at once on {cores} cores (a round "
              f"trip to the workers costs about {ROUND_TRIP_S * 1e6:.0f} µs)")
    if serial <= split * (1 + MARGIN):
        return "parent", f"{prices}: the workers would not pay for their round trip."
    if cores <= workers:
        return "share", (f"{prices}; with no core to spare for a parent that waits, this "
                         f"process steps the last block itself.")
    return "workers", f"{prices}; every block in a process of its own."


__all__ = ["BUDGET_S", "MARGIN", "ROUND_TRIP_S", "choose", "resolve"]
