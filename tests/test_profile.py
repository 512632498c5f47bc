"""Tests for vecsample.train.profile: exclusive phase time, reports that add up, the live bar."""

from __future__ import annotations

import io
import time

import pytest

from vecsample._parent.stats import merged_totals, wall_split
from vecsample.train.profile import (
    PhaseTimer,
    ProgressBar,
    format_report,
    format_stats,
    phase_totals,
    stats_delta,
)


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


def test_stats_merge_a_timers_phases_into_one_wall_split(clock: ManualClock) -> None:
    """What ``VecSampler.stats()`` does with a timer registered through ``add_phases``: its
    phases and the sampler's own (``send``, ``wait``) split one wall time."""
    timer = PhaseTimer(clock)
    with timer.phase("inference"):
        clock.tick(1.0)
    clock.tick(3.0)
    totals = merged_totals([timer], {"wait": 2.0, "send": 0.5})
    flat = wall_split(totals, timer.wall_s, 80)
    assert flat["wall_s"] == pytest.approx(4.0)
    assert flat["inference_s"] == pytest.approx(1.0) and flat["inference_pct"] == pytest.approx(25)
    assert flat["wait_pct"] == pytest.approx(50) and flat["send_pct"] == pytest.approx(12.5)
    assert flat["other_s"] == pytest.approx(0.5) and flat["other_pct"] == pytest.approx(12.5)
    assert flat["steps_per_s"] == pytest.approx(20)


def test_format_stats_renders_a_flat_sampler_dict() -> None:
    stats = {
        "env_step_s": 3.0,
        "env_steps": 100.0,
        "send_s": 0.1,
        "wait_s": 1.5,
        "recvs": 10.0,
        "wall_s": 2.0,
        "send_pct": 5.0,
        "wait_pct": 75.0,
        "inference_s": 0.3,
        "inference_pct": 15.0,
        "other_s": 0.1,
        "other_pct": 5.0,
        "steps_per_s": 50.0,
    }
    assert phase_totals(stats) == {"send": 0.1, "wait": 1.5, "inference": 0.3}
    lines = format_stats(stats, title="ppo", workers=2).splitlines()
    assert lines[0] == "ppo: wall 2.000 s, 50.0 env steps/s"
    assert [line.split()[0] for line in lines[2:]] == [
        "wait",
        "inference",
        "send",
        "other",
        "env_step",
    ]
    assert "75.0% of 2 worker(s)' wall time" in lines[-1]


def test_progress_bar_can_rank_phases_timed_elsewhere(clock: ManualClock) -> None:
    timer = PhaseTimer(clock)
    out = io.StringIO()
    with timer.phase("inference"):
        clock.tick(0.1)
    clock.tick(0.9)
    with ProgressBar(
        timer, disable=False, file=out, totals=lambda: {"wait": 0.6, "inference": 0.1}
    ) as bar:
        bar.update(1)
    assert "top=wait 60%" in out.getvalue()


def test_stats_delta_profiles_only_the_interval() -> None:
    before = {
        "wall_s": 10.0,
        "wait_s": 8.0,
        "wait_pct": 80.0,
        "other_s": 2.0,
        "other_pct": 20.0,
        "env_steps": 100.0,
        "steps_per_s": 10.0,
    }
    after = {
        "wall_s": 14.0,
        "wait_s": 9.0,
        "wait_pct": 64.3,
        "other_s": 5.0,
        "other_pct": 35.7,
        "env_steps": 300.0,
        "steps_per_s": 21.4,
    }
    delta = stats_delta(before, after)
    assert delta["wall_s"] == pytest.approx(4.0)
    assert delta["wait_pct"] == pytest.approx(25.0) and delta["other_pct"] == pytest.approx(75.0)
    assert delta["steps_per_s"] == pytest.approx(50.0)
