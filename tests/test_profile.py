"""Tests for vecsample.profile: exclusive phase time, reports that add up, the live bar."""

from __future__ import annotations

import io
import time

import pytest

from vecsample.profile import PhaseTimer, ProgressBar, format_report


class ManualClock:
    """A clock the test moves by hand, so every total is known exactly."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def test_phases_accumulate_exact_totals_and_counts(clock: ManualClock) -> None:
    timer = PhaseTimer(clock)
    for _ in range(3):
        with timer.phase("wait"):
            clock.tick(2.0)
        with timer.phase("inference"):
            clock.tick(0.5)
    clock.tick(1.0)  # claimed by no phase: "other"
    report = timer.report()
    assert report["wall_s"] == pytest.approx(8.5)
    assert report["phases"]["wait"] == {
        "total_s": 6.0,
        "count": 3,
        "pct": pytest.approx(6 / 8.5 * 100),
    }
    assert report["phases"]["inference"]["total_s"] == pytest.approx(1.5)
    assert report["other_s"] == pytest.approx(1.0)
    assert sum(p["pct"] for p in report["phases"].values()) + report["other_pct"] == pytest.approx(
        100
    )


def test_nested_phase_pauses_the_outer_one(clock: ManualClock) -> None:
    timer = PhaseTimer(clock)
    with timer.phase("rollout"):
        clock.tick(1.0)
        with timer.phase("sync"):
            clock.tick(0.25)
        clock.tick(2.0)
    totals = timer.totals()
    assert totals == {"rollout": pytest.approx(3.0), "sync": pytest.approx(0.25)}
    assert timer.report()["other_s"] == pytest.approx(0.0)
    assert timer.report()["phases"]["rollout"]["count"] == 1


def test_phase_is_charged_even_when_the_block_raises(clock: ManualClock) -> None:
    timer = PhaseTimer(clock)
    with pytest.raises(KeyError), timer.phase("train"):
        clock.tick(0.5)
        raise KeyError("boom")
    assert timer.totals()["train"] == pytest.approx(0.5)


def test_add_steps_and_reset(clock: ManualClock) -> None:
    timer = PhaseTimer(clock)
    timer.add("sync", 0.2, count=2)
    timer.add_steps(40)
    clock.tick(2.0)
    report = timer.report(extra={"env_step_s": 3.0})
    assert report["steps_per_s"] == pytest.approx(20.0)
    assert report["phases"]["sync"]["count"] == 2
    assert report["extra"] == {"env_step_s": 3.0}
    assert timer.biggest() == ("sync", pytest.approx(0.1))
    timer.reset()
    assert timer.report()["phases"] == {}
    assert timer.steps == 0
    assert timer.biggest() is None


def test_stats_add_up_to_the_wall_time_within_10_percent() -> None:
    """Real clock: phases that cover the loop must account for the wall time measured outside."""
    timer = PhaseTimer()
    start = time.perf_counter()
    for _ in range(10):
        with timer.phase("wait"):
            time.sleep(0.006)
        with timer.phase("inference"):
            time.sleep(0.003)
    wall = time.perf_counter() - start
    phases = sum(timer.totals().values())
    assert abs(phases - wall) <= 0.1 * wall
    assert abs(timer.report()["wall_s"] - wall) <= 0.1 * wall


def test_format_report_orders_biggest_first(clock: ManualClock) -> None:
    timer = PhaseTimer(clock)
    timer.add("sync", 0.1)
    timer.add("wait", 3.0)
    clock.tick(4.0)
    text = format_report(timer.report(extra={"env_step_s": 5.0}), title="run")
    lines = text.splitlines()
    assert lines[0].startswith("run: wall 4.000 s")
    assert lines[2].split()[0] == "wait" and lines[3].split()[0] == "sync"
    assert "other" in lines[4] and "env_step_s" in lines[5]


def test_progress_bar_shows_steps_per_second_and_the_biggest_phase(clock: ManualClock) -> None:
    timer = PhaseTimer(clock)
    out = io.StringIO()
    with ProgressBar(timer, total=100, disable=False, file=out, extra=lambda: {"ret": 1.5}) as bar:
        with timer.phase("wait"):
            clock.tick(0.75)
        timer.add_steps(50)
        clock.tick(0.25)
        bar.update(50)
    text = out.getvalue()
    assert "sps=50" in text
    assert "top=wait 75%" in text
    assert "ret=1.5" in text
