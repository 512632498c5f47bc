"""Per-phase timings: where the time of a sampling or training loop goes.

A :class:`PhaseTimer` accumulates named phases (``wait``, ``inference``, ``copy``, ``sync``,
``train``...). Phases are *exclusive*: entering a phase inside another pauses the outer one, so
no second is counted twice and the phases plus ``other`` always add up to the wall time since
:meth:`PhaseTimer.reset`. :meth:`PhaseTimer.report` returns the totals, counts and percentages;
:func:`format_report` renders them for the CLI's ``--profile``; :class:`ProgressBar` shows a live
tqdm bar with steps/s and the biggest phase.

Time spent inside worker processes (env stepping) runs in parallel with the parent's ``wait``
phase, so it is reported next to the phases (``extra``), never added to them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any, TypedDict

Clock = Callable[[], float]


class PhaseReport(TypedDict):
    """One phase of a report: seconds, how many times it was entered, share of the wall time."""

    total_s: float
    count: int
    pct: float


class Report(TypedDict):
    """What :meth:`PhaseTimer.report` returns (and what ``stats()`` builds on)."""

    wall_s: float
    steps: int
    steps_per_s: float
    phases: dict[str, PhaseReport]
    other_s: float
    other_pct: float
    extra: dict[str, float]


@dataclass
class _Phase:
    total_s: float = 0.0
    count: int = 0


class PhaseTimer:
    """Accumulates exclusive time per named phase against an injectable clock.

    >>> timer = PhaseTimer()
    >>> with timer.phase("inference"):
    ...     pass
    >>> timer.report()["phases"]["inference"]["count"]
    1
    """

    def __init__(self, clock: Clock = time.perf_counter) -> None:
        self._clock = clock
        self._phases: dict[str, _Phase] = {}
        self._stack: list[tuple[str, float]] = []
        self._steps = 0
        self._start = clock()

    def reset(self) -> None:
        """Forget every phase and step and restart the wall clock (open phases restart too)."""
        now = self._clock()
        self._phases.clear()
        self._stack = [(name, now) for name, _ in self._stack]
        self._steps = 0
        self._start = now

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the ``with`` block as ``name``; an enclosing phase is paused meanwhile."""
        now = self._clock()
        if self._stack:
            outer, since = self._stack[-1]
            self._charge(outer, now - since, count=0)
        self._stack.append((name, now))
        try:
            yield
        finally:
            end = self._clock()
            _, since = self._stack.pop()
            self._charge(name, end - since, count=1)
            if self._stack:
                outer, _ = self._stack[-1]
                self._stack[-1] = (outer, end)

    def add(self, name: str, seconds: float, count: int = 1) -> None:
        """Charge time measured elsewhere (e.g. a CUDA-synchronised copy) to ``name``."""
        self._charge(name, seconds, count=count)

    def add_steps(self, n: int) -> None:
        """Count ``n`` env steps (for steps/s)."""
        self._steps += n

    @property
    def steps(self) -> int:
        return self._steps

    @property
    def wall_s(self) -> float:
        return self._clock() - self._start

    def totals(self) -> dict[str, float]:
        """Seconds per phase so far (closed parts of open phases included)."""
        return {name: p.total_s for name, p in self._phases.items()}

    def biggest(self) -> tuple[str, float] | None:
        """The phase with the most time and its share of the wall time, or None if none ran."""
        if not self._phases:
            return None
        name, p = max(self._phases.items(), key=lambda item: item[1].total_s)
        wall = self.wall_s
        return name, (p.total_s / wall if wall > 0 else 0.0)

    def report(self, extra: Mapping[str, float] | None = None) -> Report:
        """Totals, counts and percentages of the wall time; ``other`` is what no phase claimed."""
        wall = self.wall_s
        phases: dict[str, PhaseReport] = {
            name: {"total_s": p.total_s, "count": p.count, "pct": _pct(p.total_s, wall)}
            for name, p in self._phases.items()
        }
        other = wall - sum(p.total_s for p in self._phases.values())
        return {
            "wall_s": wall,
            "steps": self._steps,
            "steps_per_s": self._steps / wall if wall > 0 else 0.0,
            "phases": phases,
            "other_s": other,
            "other_pct": _pct(other, wall),
            "extra": dict(extra or {}),
        }

    def _charge(self, name: str, seconds: float, *, count: int) -> None:
        phase = self._phases.setdefault(name, _Phase())
        phase.total_s += seconds
        phase.count += count


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def format_report(report: Report, title: str = "profile") -> str:
    """A fixed-width table of a report, biggest phase first, for ``--profile`` output."""
    lines = [
        f"{title}: wall {report['wall_s']:.3f} s, {report['steps']} steps, "
        f"{report['steps_per_s']:.1f} steps/s",
        f"  {'phase':<14}{'seconds':>10}{'% wall':>9}{'count':>9}{'ms/call':>10}",
    ]
    ordered = sorted(report["phases"].items(), key=lambda item: -item[1]["total_s"])
    for name, p in ordered:
        per_call = 1e3 * p["total_s"] / p["count"] if p["count"] else 0.0
        lines.append(
            f"  {name:<14}{p['total_s']:>10.3f}{p['pct']:>8.1f}%{p['count']:>9}{per_call:>10.3f}"
        )
    lines.append(f"  {'other':<14}{report['other_s']:>10.3f}{report['other_pct']:>8.1f}%")
    for name, value in report["extra"].items():
        lines.append(f"  {name:<14}{value:>10.3f}  (parallel, not part of the wall split)")
    return "\n".join(lines)


def phase_totals(stats: Mapping[str, float]) -> dict[str, float]:
    """The phases of a flat ``stats()`` dict (every ``<name>_s`` with a ``<name>_pct``)."""
    return {
        key[:-4]: stats[key[:-4] + "_s"]
        for key in stats
        if key.endswith("_pct") and key != "other_pct" and key[:-4] + "_s" in stats
    }


def stats_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """The flat stats of the interval between two ``stats()`` calls, percentages recomputed.

    Use it to profile a loop without the start-up before it (worker start, first reset).
    """
    out = {k: after[k] - before.get(k, 0.0) for k in after if not k.endswith("_pct")}
    wall = out.get("wall_s", 0.0)
    for key in after:
        if key.endswith("_pct") and key[:-4] + "_s" in out:
            out[key] = _pct(out[key[:-4] + "_s"], wall)
    steps = out.get("env_steps")
    if steps is not None:
        out["steps_per_s"] = steps / wall if wall > 0 else 0.0
    return out


def format_stats(stats: Mapping[str, float], title: str = "profile", workers: int = 1) -> str:
    """A fixed-width table of a flat ``stats()`` dict (``VecSampler.stats``), biggest first.

    Worker time (``env_step_s``) is summed over workers and runs in parallel with the parent's
    phases, so it is shown apart, with the share of the workers' wall time it took.
    """
    wall = stats.get("wall_s", 0.0)
    lines = [
        f"{title}: wall {wall:.3f} s, {stats.get('steps_per_s', 0.0):.1f} env steps/s",
        f"  {'phase':<14}{'seconds':>10}{'% wall':>9}",
    ]
    for name, seconds in sorted(phase_totals(stats).items(), key=lambda item: -item[1]):
        lines.append(f"  {name:<14}{seconds:>10.3f}{stats[name + '_pct']:>8.1f}%")
    lines.append(
        f"  {'other':<14}{stats.get('other_s', 0.0):>10.3f}{stats.get('other_pct', 0):>8.1f}%"
    )
    if "env_step_s" in stats:
        busy = _pct(stats["env_step_s"], wall * workers)
        lines.append(
            f"  {'env_step':<14}{stats['env_step_s']:>10.3f}  (in the workers, in parallel: "
            f"{busy:.1f}% of {workers} worker(s)' wall time)"
        )
    return "\n".join(lines)


class ProgressBar:
    """A tqdm bar for long runs: steps/s and the biggest phase in its postfix.

    ``totals`` supplies the phase seconds when some are timed outside ``timer`` (for a sampler:
    ``lambda: phase_totals(sampler.stats())``); by default the timer's own phases are used.

    ``disable=None`` lets tqdm hide the bar when stderr is not a terminal (CI logs stay clean).
    """

    def __init__(
        self,
        timer: PhaseTimer,
        total: int | None = None,
        *,
        desc: str = "steps",
        disable: bool | None = None,
        extra: Callable[[], Mapping[str, Any]] | None = None,
        file: IO[str] | None = None,
        totals: Callable[[], Mapping[str, float]] | None = None,
    ) -> None:
        from tqdm import tqdm  # imported here: only long runs pay for it

        self._timer = timer
        self._extra = extra
        self._totals = totals
        self._bar = tqdm(
            total=total, desc=desc, unit="step", disable=disable, dynamic_ncols=True, file=file
        )

    def update(self, steps: int) -> None:
        """Advance by ``steps`` and refresh the postfix (tqdm rate-limits the redraw)."""
        self._bar.update(steps)
        postfix: dict[str, Any] = {
            "sps": f"{self._timer.steps / max(self._timer.wall_s, 1e-9):.0f}"
        }
        top = self._biggest()
        if top is not None:
            postfix["top"] = f"{top[0]} {100 * top[1]:.0f}%"
        if self._extra is not None:
            postfix.update(self._extra())
        self._bar.set_postfix(postfix, refresh=False)

    def _biggest(self) -> tuple[str, float] | None:
        if self._totals is None:
            return self._timer.biggest()
        totals = self._totals()
        if not totals:
            return None
        name = max(totals, key=lambda k: totals[k])
        return name, totals[name] / max(self._timer.wall_s, 1e-9)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
