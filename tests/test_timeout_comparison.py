"""experiments/timeout_comparison.py on a tiny budget, the policies, and the loop model.

Behaviour only: fields, counts and orderings that hold on any machine. No speed is claimed here;
the measured numbers live in docs/lab/timeout.md.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from experiments import _timeout_model as tm
from experiments import timeout_comparison as tc
from vecsample.errors import ConfigError
from vecsample.testing import StragglerEnv, fakes
from vecsample.tools import compare

FIELDS = {"env", "timeout", "workers", "envs_per_worker", "steps", "seconds", "steps_per_s",
          "workers_per_recv", "policy_calls_per_1000_steps", "wait_s", "policy_s", "env_step_s",
          "steps_sent", "steps_received", "recvs", "policy_calls", "send_s", "policy", "repeat"}


def test_script_writes_json_and_plots_and_counts_add_up(tmp_path):
    out = tmp_path / "run"
    argv = ["--envs", "sleep", "straggler", "--workers", "2", "--envs-per-worker", "1", "2",
            "--timeouts", "none", "0.001", "--policies", "random", "mlp:8", "--seconds", "0.1",
            "--repeats", "1", "--step-time", "0.0005", "--out-dir", str(out), "--no-progress"]
    assert tc.main(argv) == 0
    report = json.loads((out / "results.json").read_text())
    results = report["results"]
    assert len(results) == 2 * 2 * 2 * 2  # envs x envs/worker x policies x timeouts
    for r in results:
        assert set(r) >= FIELDS
        assert r["steps_sent"] == r["steps_received"] == r["steps"] > 0
        assert r["steps"] % r["envs_per_worker"] == 0  # whole workers only
        assert 1.0 <= r["workers_per_recv"] <= r["workers"]
        if r["timeout"] is None:  # a full batch returns every worker, every time
            assert r["workers_per_recv"] == r["workers"]
    assert {r["policy"] for r in results} == {"random", "mlp:8"}
    assert len(report["summary"]) == 16
    assert all(row["x full"] == 1.0 for row in report["summary"] if row["timeout"] == "full")
    assert report["environment"]["commit"]
    for name in report["plots"]:
        assert (out / name).read_bytes().startswith(b"\x89PNG")


def test_iterations_budget_and_model_columns(tmp_path):
    argv = ["--envs", "straggler", "--workers", "2", "--envs-per-worker", "3", "--timeouts",
            "none", "0.0001", "--policies", "random", "--iterations", "20", "--repeats", "1",
            "--step-time", "0.0002", "--model", "--out-dir", str(tmp_path), "--no-progress"]
    assert tc.main(argv) == 0
    report = json.loads((tmp_path / "results.json").read_text())
    for r in report["results"]:
        assert r["steps_received"] >= 20 * 6  # 20 steps per env at least, then drained
        assert r["steps_sent"] == r["steps_received"]
    for row in report["summary"]:
        assert row["model steps/s"] > 0 and 1 <= row["model workers/recv"] <= 2


def test_presets_and_flags_override():
    args = tc.parse_args(["--preset", "halfcheetah-8x20", "--scale", "0.1", "--repeats", "1"])
    grid = tc.grid_of(args)
    assert grid.envs_per_worker == [2] and grid.iterations == 100 and grid.repeats == 1
    assert grid.timeouts == [None, 0.1, 0.01, 0.001, 0.0001] and grid.workers == [8]
    assert tc.grid_of(tc.parse_args(["--preset", "halfcheetah-8x4000"])).envs_per_worker == [4000]
    with pytest.raises(SystemExit):
        tc.parse_args(["--preset", "nope"])


def test_earlier_preset_names_still_work_as_aliases():
    """The dated results' commands (docs/lab/timeout.md) use the earlier names."""
    assert set(tc.PRESET_ALIASES.values()) <= set(tc.PRESETS)
    assert not set(tc.PRESET_ALIASES) & set(tc.PRESETS)
    for old, new in tc.PRESET_ALIASES.items():
        assert tc.parse_args(["--preset", old, "--repeats", "2"]).preset == new
        assert tc.grid_of(tc.parse_args([f"--preset={old}"])) == tc.PRESETS[new]
    assert tc.unalias(["--envs", "p6", "--preset", "p6"]) == ["--envs", "p6", "--preset",
                                                              "sleep-scaling"]


def test_policies_respect_the_action_space():
    box = gym.spaces.Box(-2.0, 3.0, (6,), np.float32)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (17,), np.float64)
    obs = np.random.default_rng(0).normal(size=(5, 17))
    for spec in ("random", "mlp:16,16"):
        act = compare.make_policy(spec, obs_space, box)(obs)
        assert act.shape == (5, 6) and act.dtype == np.float32
        assert all(box.contains(a) for a in act)
    disc = gym.spaces.Discrete(3, start=1)
    for spec in ("random", "mlp:4"):
        act = compare.make_policy(spec, obs_space, disc)(obs)
        assert act.shape == (5,) and set(act.tolist()) <= {1, 2, 3}
    with pytest.raises(ConfigError, match="mlp:H1"):
        compare.make_policy("cnn", obs_space, disc)
    with pytest.raises(ConfigError, match="hidden"):
        compare.parse_hidden("mlp:0")


def test_straggler_env_has_a_heavy_tail(monkeypatch):
    slept: list[float] = []  # what each step sleeps, recorded instead of slept
    monkeypatch.setattr(fakes, "time", SimpleNamespace(sleep=slept.append))
    env = StragglerEnv(step_time=1.0)
    env.reset(seed=0)
    for _ in range(20_000):
        env.step(0)
    delays = np.array(slept)
    assert len(delays) == 20_000
    median = np.median(delays)
    assert 0.9 < median < 1.3  # Pareto(1.5) + 0.5 has median ~1.09
    assert np.quantile(delays, 0.99) > 10 * median


def _costs(times: np.ndarray, workers: int, n: int, c0: float) -> tm.Costs:
    return tm.Costs(times, {m * n: c0 for m in range(1, workers + 1)}, overhead=1e-5)


def test_model_full_batch_receives_everyone_and_partial_pays_only_with_spread():
    rng = np.random.default_rng(0)
    constant = np.full(100, 1e-3)
    heavy = 1e-3 * (rng.pareto(1.5, 5000) + 0.5)
    full = tm.simulate(_costs(constant, 8, 1, 1e-4), 8, 1, None, recvs=300)
    assert full.workers_per_recv == 8 and full.policy_calls_per_1000_steps == 125
    # No spread, and a per-call cost: partial batches cannot win.
    part = tm.simulate(_costs(constant, 8, 1, 1e-4), 8, 1, 1e-5, recvs=300)
    assert part.steps_per_s <= full.steps_per_s * 1.001
    # A heavy tail and a cheap call: partial batches win.
    h_full = tm.simulate(_costs(heavy, 8, 1, 1e-5), 8, 1, None, recvs=1000)
    h_part = tm.simulate(_costs(heavy, 8, 1, 1e-5), 8, 1, 1e-5, recvs=1000)
    assert h_part.steps_per_s > 1.5 * h_full.steps_per_s
    mean, gap = tm.straggler_gap(heavy, 8, 1)
    assert gap > mean and tm.straggler_gap(constant, 8, 1)[1] == 0


def test_interleaved_groups_take_turns_each_repeat():
    grid = compare.Grid(envs=["sleep"], workers=[1, 2], envs_per_worker=[1], timeouts=[None],
                        policies=["random"], step_time=1e-4, seconds=0.05, repeats=2,
                        interleave_groups=True)
    results = compare.sweep(grid)
    assert [(r.repeat, r.workers) for r in results] == [(0, 1), (0, 2), (1, 1), (1, 2)]
    assert all(r.steps_sent == r.steps_received > 0 for r in results)
    rows = tc.scaling(results)
    assert [row["workers"] for row in rows] == [1, 2] and rows[0]["x fewest workers"] == 1.0


# --- the report of ``vecsample compare`` ---------------------------------------------------------

#: The columns of the report after the row name; the legend explains each on its own line.
COLUMNS = ("steps/s", "× full", "per repeat", "W/recv", "calls/1k", "wait %", "policy %")


def check_layout(text: str) -> None:
    """At most 100 columns, no trailing spaces, one number format: no exponent, and every number
    from 1,000 up with thousands separators."""
    for line in text.splitlines():
        assert len(line) <= 100, line
        assert line == line.rstrip(), repr(line)
    assert not re.search(r"\d[eE][+-]?\d", text), "a number in e notation"
    assert not re.search(r"(?<![\d.,])\d{4,}", text), "a number without thousands separators"


def cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def compare_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    compare.add_arguments(parser)
    return parser.parse_args(argv)


def test_compare_report_reads_at_a_glance(tmp_path, capsys):
    out = tmp_path / "compare.json"
    argv = ["--envs", "sleep", "straggler", "--envs-per-worker", "1", "--policies", "random",
            "--step-time", "0.0005", "--seconds", "0.1", "--repeats", "3", "--no-progress",
            "--json", str(out)]
    assert compare.run(compare_args(argv)) == 0
    text, results = capsys.readouterr().out, json.loads(out.read_text())
    check_layout(text)
    lines = text.splitlines()
    for column in COLUMNS:  # the legend: one line per column
        assert sum(line.startswith(f"  {column}  ") for line in lines) == 1, column
    for k, env in enumerate(("sleep", "straggler")):
        full = {r["repeat"]: r["steps_per_s"] for r in results
                if r["env"] == env and r["timeout"] is None}
        part = {r["repeat"]: r["steps_per_s"] for r in results
                if r["env"] == env and r["timeout"] == 0.0005}
        ratios = [part[i] / full[i] for i in full]
        x = statistics.median(ratios)
        start = lines.index(f"{env}: W = 2 workers × 1 envs, policy random")
        full_row, part_row = cells(lines[start + 2]), cells(lines[start + 3])
        assert full_row[:3] == ["full batches", f"{statistics.median(full.values()):,.0f}", "1.00"]
        assert part_row[:4] == ["partial batches (timeout 0.5 ms)",
                                f"{statistics.median(part.values()):,.0f}", f"{x:.2f}",
                                f"{min(ratios):.2f}–{max(ratios):.2f}"]
        # The ratio of the two medians shown lies within the per-repeat range shown.
        shown = statistics.median(part.values()) / statistics.median(full.values())
        assert min(ratios) <= shown <= max(ratios)
        # The last lines give the table's ratio, partial ÷ full, whoever won.
        last = lines[len(lines) - 2 + k]
        assert last.startswith(f"{env}: ") and f" {x:.2f}× full (0.5 ms)" in last, (lines[-2:], x)


def fake(env: str, timeout: float | None, repeat: int, steps_per_s: float) -> compare.LoopResult:
    return compare.LoopResult(
        env=env, timeout=timeout, workers=2, envs_per_worker=4, steps=800, seconds=1.0,
        steps_per_s=steps_per_s, workers_per_recv=2.0, policy_calls_per_1000_steps=125.0,
        wait_s=0.5, policy_s=0.1, env_step_s=1.0, steps_sent=800, steps_received=800,
        policy="random", repeat=repeat)


def test_report_names_the_winner_and_its_factor_per_env():
    rates = {  # env: per repeat, (full, partial 0.5 ms, partial 0.1 ms) steps/s
        "a": [(1000.0, 1500.0, 2000.0), (1000.0, 1500.0, 2500.0), (1200.0, 1500.0, 1800.0)],
        "b": [(93290.0, 45000.0, 40000.0), (90000.0, 60000.0, 40000.0),
              (80000.0, 100000.0, 40000.0)],
    }
    results = [fake(env, t, i, rate) for env, reps in rates.items() for i, rep in enumerate(reps)
               for t, rate in zip((None, 0.0005, 0.0001), rep, strict=True)]
    text = compare.report(results)
    check_layout(text)
    assert "90,000" in text and "partial batches (timeout 0.1 ms)" in text
    assert text.splitlines()[-2:] == [
        "a: partial batches win, 2.00× full (0.1 ms, best of 2); per repeat 1.50–2.50",
        "b: a tie, partial 0.67× full (0.5 ms, best of 2); per repeat 0.48–1.25, not all agree",
    ]


def test_a_long_conclusion_leaves_out_the_range_to_fit_100_columns():
    results = []
    for policy, latency in (("random", 0.0), ("mlp:64,64", 0.001)):  # labels name the policy
        for i, rep in enumerate([(1000.0, 900.0), (1000.0, 1100.0), (1000.0, 800.0)]):
            for t, rate in zip((None, 0.0005), rep, strict=True):
                results.append(fake("HalfCheetahVel-v5", t, i, rate))
                results[-1].policy, results[-1].policy_latency = policy, latency
    text = compare.report(results)
    check_layout(text)
    assert text.splitlines()[-1] == ("HalfCheetahVel-v5 (2 × 4, mlp:64,64+1ms): a tie, partial "
                                     "0.90× full (0.5 ms), not all agree")


def test_format_table_never_writes_an_exponent():
    rows = [{"name": "x", "steps/s": 93290.4, "timeout": 1e-05, "ratio": 0.66961, "note": "a"},
            {"name": "y", "steps/s": 12.0, "timeout": 0.5, "ratio": 1.0, "note": "longer"}]
    lines = compare.format_table(rows).splitlines()
    assert cells(lines[1]) == ["x", "93,290", "0.00001", "0.6696", "a"]
    assert lines[1].endswith("0.6696  a") and lines[2].endswith("     1  longer")  # numbers right
    assert all(line == line.rstrip() for line in lines)


def test_every_option_of_compare_has_help():
    parser = argparse.ArgumentParser()
    compare.add_arguments(parser)
    for action in parser._actions:
        assert action.help, f"{action.option_strings} has no help text"
