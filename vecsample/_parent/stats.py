"""How ``stats()`` splits a sampler's wall time: its own phases plus those timed by its users.

The core times two parent phases itself (``send``, ``wait``). Code built on it (the rollout in
``vecsample.train``) times more (``inference``, ``copy``, ``sync``) and registers its timer with
``VecSampler.add_phases``, so one ``stats()`` call splits the wall time among all of them
without the core importing that code.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Protocol


class PhaseSource(Protocol):
    """Anything that reports seconds per named phase (``vecsample.train.profile.PhaseTimer``)."""

    def totals(self) -> dict[str, float]: ...


class Meter:
    """A sampler's own timers (send, wait, recv counts), its age, and the phases of its users."""

    def __init__(self) -> None:
        #: Added to on the hot path, so a plain dict: ``send_s``, ``wait_s`` (all of step_recv,
        #: and the time step() gives its core away once it has posted),
        #: ``return_s`` (the part of ``wait_s`` spent reading finished steps: the parent's own
        #: work, not waiting), ``share_s`` (the part of ``wait_s`` spent stepping the blocks
        #: this process serves itself, ``Options.env_placement``), ``wait_cpu_s`` (CPU time
        #: spent waiting: spinning, polling), ``recvs``, ``workers_received``.
        self.timers = {"send_s": 0.0, "wait_s": 0.0, "return_s": 0.0, "share_s": 0.0,
                       "wait_cpu_s": 0.0, "recvs": 0.0, "workers_received": 0.0}
        self._born = time.perf_counter()
        self._sources: list[PhaseSource] = []

    def add_phases(self, source: PhaseSource) -> None:
        self._sources.append(source)

    def report(self, counters: Mapping[str, float]) -> dict[str, float]:
        """``counters`` (the workers'), the timers, and the wall-time split of every phase."""
        out = {**counters, **self.timers}
        own = {"send": out["send_s"], "wait": out["wait_s"]}
        wall = time.perf_counter() - self._born
        out.update(wall_split(merged_totals(self._sources, own), wall, out["env_steps"]))
        return out


def merged_totals(sources: list[PhaseSource], own: Mapping[str, float]) -> dict[str, float]:
    """``own`` phases plus every source's, summed by name."""
    totals = dict(own)
    for source in sources:
        for name, seconds in source.totals().items():
            totals[name] = totals.get(name, 0.0) + seconds
    return totals


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
