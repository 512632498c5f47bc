"""The scaling measurements (issue 15) behave: E in one process, U and the parent's cost in the
bench, the sleep-env scenario, and the W sweep. Never a speed: only shapes and invariants."""

from __future__ import annotations

import functools
import importlib
import subprocess
import types
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


#: handshake_floor.py's kinds, in the order of its rows: the C floor's, then vecsample's.
FLOOR_KINDS = ("flat", "tree", "partial", "pipelined", "vecsample", "vecsample partial",
               "vecsample pipelined")


def floor_rows(stdout: str) -> list[list[str]]:
    """handshake_floor.py's rows (after its two header lines): workers, kind, then the
    numbers."""
    return [[line[:7].strip(), line[8:28].strip(), *line[28:].split()]
            for line in stdout.splitlines()[2:]]


@pytest.mark.parametrize("straggler", [True, False])
def test_handshake_floor_prints_every_kind_for_each_worker_count(straggler):
    """The floor and vecsample of each batch kind (full, partial, pipelined), with and without
    the straggler model; vecsample's rows carry their ratios to the floor of their kind."""
    flags = ["--straggler"] if straggler else []
    proc = run_script("handshake_floor", "--workers", "1", "3", "--seconds", "0.05",
                      "--repeats", "1", *flags)
    assert proc.returncode == 0, proc.stderr
    head = proc.stdout.splitlines()[0]
    assert head.startswith("block 1.1 ms, ") and (
        "straggler model p 0.1, jitter ±5 %, seed 0" if straggler else "no straggler model"
    ) in head, head
    rows = floor_rows(proc.stdout)
    assert [(r[0], r[1]) for r in rows] == [(w, k) for w in ("1", "3") for k in FLOOR_KINDS]
    for w, kind, u, per_recv, parent, worker, u_ratio, cpu_ratio in rows:
        assert 0.0 < float(u) <= 1.0 and float(parent) > 0 and float(worker) > 0, kind
        if kind in ("flat", "tree", "vecsample"):  # a full batch lasts its slowest block
            assert float(per_recv) >= (0.95 if straggler else 1.0) * 1100.0, (w, kind)
        if kind.startswith("vecsample"):
            assert float(u_ratio) > 0 and float(cpu_ratio) > 0, (w, kind)
        else:
            assert (u_ratio, cpu_ratio) == ("-", "-"), (w, kind)


def straggler_model():
    """experiments/_straggler_model.py, as handshake_floor.py imports it (its folder on the
    path)."""
    from tests.test_flags import load

    load("handshake_floor")
    return importlib.import_module("_straggler_model")


def test_the_c_floor_sleeps_the_schedule_of_vecsamples_sleep_envs(tmp_path):
    """handshake_floor.c's generator gives every (slot, block) the delay that the Python
    model gives it, to the nanosecond, for several seeds and chances, and none without the
    model."""
    from tests.test_flags import load

    model = straggler_model()
    binary = load("handshake_floor").build(str(tmp_path))
    for m in (model.Stragglers(0.1, 0.05, 0), model.Stragglers(0.3, 0.02, 2**63 + 12345),
              model.OFF):
        out = subprocess.run([binary, "schedule", "1100000", repr(m.p), repr(m.jitter),
                              str(m.seed), "8", "300"], capture_output=True, text=True,
                             check=True).stdout
        c = [[int(x) for x in line.split()] for line in out.splitlines()]
        assert c == [[m.delay_ns(1_100_000, s, k) for k in range(300)] for s in range(8)], m
    assert {x for row in c for x in row} == {1_100_000}  # the model off: the base, always


def test_the_straggler_model_straggles_with_its_chance_and_within_its_ranges():
    model = straggler_model()
    m = model.Stragglers(p=0.1, jitter=0.05, seed=7)
    factors = np.array([[m.factor(s, k) for k in range(500)] for s in range(64)])
    slow = factors >= 1.5
    assert 0.09 < slow.mean() < 0.11  # 3200 draws: p within ±1 % (more than 3 sigma)
    assert (factors[slow] <= 2.0).all() and factors[slow].max() > 1.95
    assert ((factors[~slow] >= 0.95) & (factors[~slow] <= 1.05)).all()
    assert slow.any(axis=1).all()  # every slot straggles now and then
    again = np.array([[m.factor(s, k) for k in range(500)] for s in range(64)])
    np.testing.assert_array_equal(factors, again)  # a function of (seed, slot, block) only
    other = model.Stragglers(p=0.1, jitter=0.05, seed=8)
    assert other.factor(0, 0) != m.factor(0, 0) and m.factor(1, 0) != m.factor(0, 1)


def test_the_sleep_env_sleeps_its_slots_schedule_from_its_reset(monkeypatch):
    model = straggler_model()
    slept: list[float] = []  # what each step sleeps, recorded instead of slept
    monkeypatch.setattr(model, "time", types.SimpleNamespace(sleep=slept.append))
    m = model.Stragglers(p=0.5, jitter=0.05, seed=3)
    fns = model.scheduled_fns(8, 4, 1_000_000, m, slots_per_process=2)
    made = [fn() for fn in fns]
    assert [(e.slot, e.base_ns) for e in made] == [
        (0, 500_000), (0, 0), (1, 500_000), (1, 0), (2, 500_000), (2, 0), (3, 500_000), (3, 0)]
    env = made[2]
    env.reset(seed=0)
    for _ in range(5):
        env.step(0)
    env.reset()
    env.step(0)
    made[3].step(0)  # the block's other envs return at once
    expected = [m.delay_ns(500_000, 1, k) * 1e-9 for k in (0, 1, 2, 3, 4, 0)]
    assert slept == expected


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
