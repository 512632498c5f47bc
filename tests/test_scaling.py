"""The scaling measurements (issue 15) behave: E in one process, U and the parent's cost in the
bench, the sleep-env scenario, and the W sweep. Never a speed: only shapes and invariants."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from helpers import run_script

from tests.test_bench import parse
from vecsample import VecSampler
from vecsample.testing import CountingEnv, SleepEnv, sleep_fns
from vecsample.tools import bench, efficiency
from vecsample.types import AutoresetMode

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_efficiency_times_the_worker_loop_of_each_mode(mode):
    fns = [functools.partial(CountingEnv, i, length=3) for i in range(4)]
    e = efficiency.measure(fns, mode, infos=True, seconds=0.01, repeats=3)
    assert e.mode == mode.value and e.envs == 4 and len(e.repeats) == 3
    assert e.bare_us > 0 and e.worker_us > 0
    # episodes of 3 steps: DISABLED's loop must reset its frozen envs, or it would time nothing
    assert e.worker_us > 0.05 * e.bare_us
    assert e.efficiency == pytest.approx(float(np.median(e.repeats)))


def test_sleep_fns_put_one_sleeper_in_each_block():
    made = [fn() for fn in sleep_fns(8, 2, 0.001)]
    assert [env.seconds for env in made] == [0.001, 0, 0, 0, 0.001, 0, 0, 0]
    env = SleepEnv(0.0)
    obs, _ = env.reset(seed=0)
    assert env.step(0)[0] is obs and env.observation_space.contains(obs)


def test_a_sampler_of_sleep_envs_steps_with_many_workers(make_sampler):
    s: VecSampler = make_sampler(sleep_fns(16, 8, 0.0005), num_workers=8)
    s.reset(seed=0)
    for _ in range(5):
        r = s.step(np.zeros(16, dtype=np.int64))
    assert not r.terminated.any()
    stats = s.stats()
    assert stats["recvs"] == 5 and stats["env_steps"] == 80
    assert 0 < stats["return_s"] <= stats["wait_s"]


def test_the_sleep_env_bench_reports_u_and_the_parent_for_vecsample_rows_only(capsys):
    args = parse(["--sleep-env", "0.0002", "--workers", "4", "--num-envs", "8", "--seconds",
                  "0.1", "--repeats", "1", "--latency-steps", "0", "--no-progress",
                  "--backends", "bare", "vecsample", "vecsample_partial", "vector_env", "sync"])
    assert bench.run(args) == 0
    out = capsys.readouterr().out
    assert "sleep 0.2 ms, 8 envs" in out and "only vecsample's rows run with sleep envs" in out
    assert all(len(line) <= 100 for line in out.splitlines())
    rows = [row for cfg in bench.configs(args) for row in bench.measure(cfg, args, lambda: None)]
    by = {r.backend: r for r in rows}
    for name in ("vecsample", "vecsample_partial", "vector_env"):
        r = by[name]
        assert r.utilization is not None and 0 < r.utilization <= 1.0
        assert r.parent_us is not None and set(r.parent_us) == {
            "send", "wait", "return", "outside", "cpu"}
        assert r.efficiency is None  # not measured for sleep envs
    assert by["bare"].skipped and by["sync"].skipped


def test_bench_rows_carry_the_efficiency_of_their_mode():
    args = parse(["--envs", "CartPole-v1", "--num-envs", "4", "--workers", "2", "--cores", "2",
                  "--seconds", "0.05", "--repeats", "1", "--latency-steps", "0",
                  "--no-progress", "--backends", "machine", "vecsample", "vector_env"])
    rows = {r.backend: r for cfg in bench.configs(args)
            for r in bench.measure(cfg, args, lambda: None)}
    assert rows["vecsample"].mode == "SameStep" and rows["vector_env"].mode == "NextStep"
    assert rows["vecsample"].efficiency and rows["vector_env"].efficiency
    assert rows["machine"].utilization is None and rows["machine"].parent_us is None


def test_parent_scaling_experiment_prints_each_worker_count():
    proc = run_script("parent_scaling", "--workers", "1", "4", "--seconds", "0.05",
                      "--repeats", "1")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[1:]]
    assert [(r[0], r[1]) for r in rows] == [("1", "full"), ("1", "partial"), ("4", "full"),
                                            ("4", "partial")], proc.stdout


def test_handshake_floor_prints_the_floor_and_vecsample_for_each_worker_count():
    proc = run_script("handshake_floor", "--workers", "1", "3", "--seconds", "0.05",
                      "--repeats", "1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()[1:]
    rows = [[*line[:8].split(), line[8:26].strip(), *line[26:].split()] for line in lines]
    kinds = ("flat", "tree", "partial", "vecsample", "vecsample partial")
    assert [(r[0], r[1]) for r in rows] == [(w, k) for w in ("1", "3") for k in kinds], lines
    for row in rows:  # U is a share of the wall time; a batch lasts at least its 0.5 ms sleep
        u, batch_us = float(row[2]), float(row[3])
        assert 0.0 < u <= 1.0 and batch_us >= 500.0, row


def test_handshake_floor_without_a_compiler_says_what_to_install(tmp_path, monkeypatch):
    from tests.test_flags import load

    floor = load("handshake_floor")
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no cc on it
    with pytest.raises(floor.NoCompilerError, match=r"needs a C compiler.*install one"):
        floor.build(str(tmp_path))


def test_hosted_ceiling_prints_the_ceiling_and_both_samplers_for_each_batch_size():
    proc = run_script("hosted_ceiling", "--num-envs", "8", "64", "--seconds", "0.02",
                      "--repeats", "1")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[1:]]
    assert [r[0] for r in rows] == ["8", "64"], proc.stdout
    for _, whole, share, *speedups in rows:  # the ceiling is the ratio of the two timings
        # the share through env_placement="share" is the fourth column since issue 32
        ceiling, hosted, by_hand, parent_share = (float(x.rstrip("x")) for x in speedups)
        assert ceiling == pytest.approx(float(whole) / float(share), abs=0.01)
        assert hosted > 0 and by_hand > 0 and parent_share > 0, rows


def test_hosted_ceiling_refuses_a_single_worker():
    proc = run_script("hosted_ceiling", "--workers", "1")
    assert proc.returncode != 0 and "--workers must be at least 2" in proc.stderr
