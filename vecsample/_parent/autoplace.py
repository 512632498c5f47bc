"""``env_placement="auto"``: where a sampler's blocks are stepped, chosen from a measurement.

Once the spaces are known, the sampler times one worker process's block of envs stepped here,
by the worker's own loop (``inprocess.time_block``, through the door ``vecsample/inprocess.py``),
and prices a synchronous step (post, step, wait: ``step()``, ``VectorEnv.step``) three ways, each
block costing its envs' time plus what one more block costs the process that steps it
(``BLOCK_S``: the step's bookkeeping, its rows):

* ``"parent"``: every block stepped here, one after another: ``W * block``;
* ``"workers"`` or ``"share"``: the blocks stepped at once, ``block * max(1, W / cores)``
  (more processes than cores share them), plus what waiting for a worker process adds
  (``ROUND_TRIP_S``).

A worker process pays for itself only when stepping at once saves more than that, by
``MARGIN`` (a hysteresis, as the device probe's, so that noise in the timing cannot flip a
close choice). Then ``"share"`` where the machine has no core to spare for a waiting parent
(``W >= cores``: the parent would be one more busy process), else ``"workers"``, which keep
every guarantee. Like ``vecsample.train.device``, it measures rather than guesses, and says
what it chose and why (``PlacementNotice``, once per process for each choice). It assumes the
cores are this job's: on a machine that other processes keep busy, a worker gains less.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from vecsample._parent.startup import warn_once
from vecsample.errors import PlacementNotice
from vecsample.inprocess import time_block
from vecsample.machine import usable_cores

if TYPE_CHECKING:
    from gymnasium import Space

    from vecsample._parent.layout import Layout

#: What waiting for a worker process adds to a step beyond its envs' time (the step is
#: posted, seen, published, read, and the second block's infos joined): on the 2-core AMD EPYC
#: VM at commit 80a743a, 37-100 µs (median 43) over CartPole-v1 and HalfCheetah-v5 x 4 and
#: x 16 with CleanRL's MLP between steps, read off "share" and "parent" steps of the same run
#: (``docs/lab/scripts/round_trip.py``; docs/lab/benchmarks.md, "The round trip, measured");
#: 7-21 µs on the 2-core Intel Xeon VM at 75f589e. The larger is the price: priced at 15 µs,
#: "auto" chose "share" for CartPole x 4 where "parent" measured faster on both VMs. A
#: constant, not measured at start: timing it would mean starting the worker processes that
#: the choice may do without. ``Options.placement_costs`` replaces it (and ``BLOCK_S``).
ROUND_TRIP_S = 45e-6
#: What one more block costs the process that steps it, beyond its envs' time: 13-14 µs on
#: the same VM (two blocks stepped here against one, the same envs; commit 75f589e).
BLOCK_S = 13e-6
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
    try:
        block = time_block(envs, layout.options.autoreset_mode, spaces, list(range(size)),
                           BUDGET_S)
    except Exception as exc:  # the worker processes will name it, typed, and contain it
        choice, reason = "workers", (f"a block of {size} envs could not be stepped here "
                                     f"({type(exc).__name__}: {exc}); a worker process "
                                     f"contains an env that fails")
    else:
        costs = layout.options.placement_costs or (ROUND_TRIP_S, BLOCK_S)
        choice, reason = choose(float(block), workers, usable_cores(), size, costs)
    warn_once(f"env_placement {choice} {layout.num_envs} {workers}",
              f"env_placement='auto' chose {choice!r}: {reason}", PlacementNotice)
    return dataclasses.replace(layout, placement=choice, placement_reason=reason)


def choose(block: float, workers: int, cores: int, block_envs: int,
           costs: tuple[float, float] = (ROUND_TRIP_S, BLOCK_S)) -> tuple[str, str]:
    """The placement for blocks of ``block`` seconds a step (``block_envs`` envs each), in
    ``workers`` workers on ``cores`` cores, and why, at ``costs`` = (round trip, one block
    more) seconds (the module docstring's prices)."""
    round_trip, block_cost = costs
    each = block + block_cost
    serial = workers * each
    split = each * max(1.0, workers / cores) + round_trip
    prices = (f"a block of {block_envs} envs took {block * 1e6:.0f} µs a step here, so "
              f"{workers} blocks take about {serial * 1e6:.0f} µs stepped one after another "
              f"in this process, {split * 1e6:.0f} µs stepped at once on {cores} cores (with "
              f"{block_cost * 1e6:.0f} µs a block beyond its envs, and {round_trip * 1e6:.0f} µs "
              f"for the wait for a worker process)")
    if serial <= split * (1 + MARGIN):
        return "parent", f"{prices}: worker processes would not pay for themselves."
    if cores <= workers:
        return "share", (f"{prices}; with no core to spare for a parent that waits, this "
                         f"process steps the last block itself.")
    return "workers", f"{prices}; every block in a process of its own."


__all__ = ["BLOCK_S", "BUDGET_S", "MARGIN", "ROUND_TRIP_S", "choose", "resolve"]
