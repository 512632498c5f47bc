"""step_send/step_recv and step: full and partial batches, what each result names, the
deadline of a step, and nothing lost or repeated.

A scenario number in a docstring is that of the outside fault-injection run
(docs/reliability.md#19-outside-fault-scenarios).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import ones, posix_only

from vecsample import errors
from vecsample.testing import CountingEnv, HangingEnv, SlowEnv, fns

# --- full and partial batches ---------------------------------------------------------------------


def test_full_step_shapes_and_dtypes(make_sampler):
    s = make_sampler("CartPole-v1", num_envs=6, num_workers=3, seed=1)
    obs, infos = s.reset()
    assert obs.shape == (6, 4) and obs.dtype == np.float32
    assert infos == [{}] * 6
    r = s.step(np.zeros(6, dtype=np.int64))
    assert r.worker is None and r.env_ids == range(6)
    assert r.rewards.dtype == np.float64 and r.terminated.dtype == np.bool_
    assert r.obs.shape == (6, 4) and np.all(r.rewards == 1.0)


def test_each_result_names_its_worker_and_env_ids(make_sampler):
    s = make_sampler(fns(CountingEnv, 6, length=100), num_workers=3)
    s.reset()
    for w in range(3):
        s.step_send(w, ones(2))
    results = s.step_recv(None)
    assert sorted(r.worker for r in results) == [0, 1, 2]
    for r in results:
        assert r.env_ids == s.worker_env_ids(r.worker)
        np.testing.assert_array_equal(r.obs[:, 0], list(r.env_ids))  # obs[0] is the env index


def test_partial_recv_returns_early_and_the_rest_later(make_sampler):
    s = make_sampler([functools.partial(SlowEnv, env_index=i, step_time=0.3 * i)
                      for i in range(2)], num_workers=2)
    s.reset()
    s.step_send(0, ones(1))
    s.step_send(1, ones(1))
    first = s.step_recv(timeout=0.01)
    assert [r.worker for r in first] == [0]
    second = s.step_recv(timeout=0.01)
    assert [r.worker for r in second] == [1]


def test_views_alias_shared_memory_and_copy_does_not(make_sampler):
    s = make_sampler(fns(CountingEnv, 2, length=100), num_workers=1)
    s.reset()
    s.step_send(0, ones(2))
    view = s.step_recv(None)[0]
    s.step_send(0, ones(2))
    copied = s.step_recv(None, copy=True)[0]
    assert view.obs[0, 1] == 2  # the view now shows the second step: it aliases shm
    s.step_send(0, ones(2))
    s.step_recv(None)
    assert copied.obs[0, 1] == 2 and view.obs[0, 1] == 3


def test_stats_count_steps_and_time(make_sampler):
    s = make_sampler(fns(CountingEnv, 4, length=100), num_workers=2)
    s.reset()
    for _ in range(5):
        s.step(ones(4))
    stats = s.stats()
    assert stats["env_steps"] == 20 and stats["recvs"] == 5 and stats["workers_received"] == 10
    assert stats["env_step_s"] > 0 and stats["wait_s"] > 0


@pytest.mark.parametrize(("spin_us", "yields"), [(200.0, 1), (0.0, 0)])
def test_send_all_hands_the_core_over_only_where_the_sampler_spins(make_sampler, monkeypatch,
                                                                   spin_us, yields):
    # send_all yields the core itself (issue 31): one yield, counted as waiting.
    s = make_sampler(fns(CountingEnv, 2, length=100), num_workers=1, spin_us=spin_us)
    s.reset()
    calls: list[None] = []
    monkeypatch.setattr(os, "sched_yield", lambda: calls.append(None))
    waited = s.stats()["wait_s"]
    s.send_all(ones(2))
    monkeypatch.undo()
    assert len(calls) == yields  # one yield of the core, and nothing else
    assert (s.stats()["wait_s"] > waited) == bool(yields)  # counted as waiting
    assert s.step_recv(None)[0].rewards.tolist() == [1.0, 1.0]  # the step posted, once


# --- the step API's state machine -----------------------------------------------------------------


def test_recv_with_nothing_pending(sampler):
    with pytest.raises(errors.NoPendingError, match="step_send"):
        sampler.step_recv()


def test_send_to_a_busy_worker(sampler):
    sampler.step_send(0, ones(2))
    with pytest.raises(errors.WorkerBusyError, match=r"worker 0.*step_recv"):
        sampler.step_send(0, ones(2))
    assert [r.worker for r in sampler.step_recv()] == [0]  # still usable
    sampler.step_send(0, ones(2))


@pytest.mark.parametrize("worker", [2, -1, 1.0, True, "0"])
def test_worker_index_out_of_range_or_not_an_int(sampler, worker):
    with pytest.raises(errors.WorkerIndexError, match="worker"):
        sampler.step_send(worker, ones(2))


# --- step_send_many: several workers in one call -----------------------------------------------


def test_step_send_many_gives_what_step_send_gives_each_worker(make_sampler):
    one = make_sampler(fns(CountingEnv, 6, length=7), num_workers=3)
    many = make_sampler(fns(CountingEnv, 6, length=7), num_workers=3)
    for s in (one, many):
        s.reset(seed=0)
    for t in range(12):  # past an episode's end: the autoresets come through too
        order = [2, 0] if t % 2 else [1, 2, 0]  # a subset, in any order, as step_recv returns
        blocks = [np.array([(w + t) % 4, (w + 2 * t) % 4]) for w in order]
        for w, block in zip(order, blocks, strict=True):
            one.step_send(w, block)
        many.step_send_many(order, blocks)
        got = [{r.worker: r for r in s.step_recv(None)} for s in (one, many)]
        assert sorted(got[0]) == sorted(got[1]) == sorted(order)
        for w in order:
            for field in ("obs", "rewards", "terminated", "truncated", "has_final_obs"):
                np.testing.assert_array_equal(getattr(got[0][w], field),
                                              getattr(got[1][w], field), err_msg=f"{t} {w}")


def test_step_send_many_with_a_busy_worker_posts_nothing(sampler):
    sampler.step_send(1, ones(2))
    with pytest.raises(errors.WorkerBusyError, match=r"worker 1.*step_recv"):
        sampler.step_send_many([0, 1], [ones(2), ones(2)])
    assert [r.worker for r in sampler.step_recv(None)] == [1]  # worker 0 was never started
    with pytest.raises(errors.NoPendingError):
        sampler.step_recv(0.05)
    sampler.step_send_many([0, 1], [ones(2), ones(2)])  # still usable
    assert sorted(r.worker for r in sampler.step_recv(None)) == [0, 1]


@pytest.mark.parametrize(("workers", "blocks"), [([0, 0], 2), ([0, 1], 1), ([0], 2)])
def test_step_send_many_refuses_a_worker_twice_or_a_block_count_that_differs(
        sampler, workers, blocks):
    with pytest.raises(errors.ConfigError, match=r"step_send_many.*each worker once"):
        sampler.step_send_many(workers, [ones(2)] * blocks)
    with pytest.raises(errors.NoPendingError):  # nothing was posted
        sampler.step_recv(0.05)


def test_step_send_many_with_a_bad_block_posts_nothing(sampler):
    with pytest.raises(errors.ActionShapeError):
        sampler.step_send_many([0, 1], [ones(2), ones(3)])
    with pytest.raises(errors.NoPendingError):
        sampler.step_recv(0.05)
    with pytest.raises(errors.WorkerIndexError):
        sampler.step_send_many([0, 5], [ones(2), ones(2)])


# --- the deadline of a step -----------------------------------------------------------------------


def test_deadline_reports_hung_workers_keeps_results_and_close_kills(make_sampler):
    s = make_sampler(fns(HangingEnv, 4, at_step=1, bad_index=0), num_workers=2, deadline=0.5)
    s.reset()
    s.step_send(0, ones(2))
    s.step_send(1, ones(2))
    with pytest.raises(errors.DeadlineExceededError) as info:
        s.step_recv(None)
    assert info.value.hung_workers == [0]
    assert [r.worker for r in info.value.results] == [1]  # nothing received is lost
    with pytest.raises(errors.DeadlineExceededError):
        s.step_recv(0.0, deadline=0.1)
    start = time.monotonic()
    s.close(timeout=0.5)
    assert time.monotonic() - start < 3.0


@pytest.mark.parametrize("deadline", [float("inf"), 1e7])
def test_an_infinite_or_huge_deadline_works(make_sampler, deadline):
    """Scenario 14 of the outside fault-injection run."""
    s = make_sampler(fns(CountingEnv, 2), num_workers=2, deadline=deadline)
    s.reset()
    np.testing.assert_array_equal(s.step(ones(2)).obs[:, 1], [1, 1])


@posix_only
def test_a_retried_step_wait_keeps_every_workers_infos(make_vector_env):
    """Scenario 7 of the outside fault-injection run."""
    env = make_vector_env([functools.partial(CountingEnv, i, info=True) for i in range(4)],
                          num_workers=2)
    env.reset(seed=0)
    pid = env.sampler.worker_pids()[0]
    os.kill(pid, signal.SIGSTOP)
    try:
        env.step_async(ones(4))
        with pytest.raises(errors.DeadlineExceededError):
            env.step_wait(timeout=0.3)
    finally:
        os.kill(pid, signal.SIGCONT)
    *_, infos = env.step_wait()
    assert infos["_t"].tolist() == [True, True, True, True]
    np.testing.assert_array_equal(infos["t"], [1, 1, 1, 1])


# --- nothing lost or repeated ---------------------------------------------------------------------


def test_mixed_timeouts_lose_and_duplicate_nothing(make_sampler):
    """Thousands of rounds of partial and full recvs: every step sent comes back exactly once."""
    workers, per = 4, 2
    s = make_sampler(fns(SlowEnv, workers * per, step_time=2e-5, tail="uniform", spread=1.0),
                     num_workers=workers, infos=False)
    s.reset()
    rng = np.random.default_rng(0)
    sent = np.zeros(workers, dtype=int)
    got = np.zeros(workers, dtype=int)
    for w in range(workers):
        s.step_send(w, ones(per))
        sent[w] += 1
    partial_rounds = 0
    for _ in range(3000):
        timeout = [None, 0.0, 1e-5, 1e-4][rng.integers(4)]
        results = s.step_recv(timeout)
        assert len({r.worker for r in results}) == len(results)  # no worker twice in one recv
        partial_rounds += len(results) < workers
        for r in results:
            got[r.worker] += 1
            # the counter in the obs says how many steps this env has done: exactly what we sent
            np.testing.assert_array_equal(r.obs[:, 1], sent[r.worker])
            s.step_send(r.worker, ones(per))
            sent[r.worker] += 1
    while (got < sent).any():
        for r in s.step_recv(None):
            got[r.worker] += 1
    np.testing.assert_array_equal(got, sent)
    assert s.stats()["env_steps"] == sent.sum() * per
    assert partial_rounds > 100, "the test did not exercise partial batches"


def test_soak_100k_steps_counters_match(tmp_path):
    out = tmp_path / "soak.json"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run(
        [sys.executable, "experiments/soak.py", "--steps", "100000", "--report-every", "2",
         "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=240,
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["parent_steps"] == result["worker_steps"] >= 100_000
    assert result["parent_steps_per_worker"] == result["worker_steps_per_worker"]
    assert result["recvs"] > 100 and len(result["rss"]) >= 2


def test_worker_stats_give_each_worker_its_counters_and_its_last_steps_times(make_sampler):
    s = make_sampler(fns(CountingEnv, 4, length=100), num_workers=2)
    s.reset()
    before = time.perf_counter()
    for _ in range(3):
        s.step(ones(4))
    after = time.perf_counter()
    per = s.worker_stats()
    assert per["env_steps"].tolist() == [6.0, 6.0]  # 3 steps of 2 envs each
    assert per["env_step_s"].sum() == pytest.approx(s.stats()["env_step_s"])
    picked, published = per["step_picked_up"], per["step_published"]
    assert ((before < picked) & (picked <= published) & (published < after)).all()
    s.step(ones(4))  # a later step moves the stamps: they are the last step's
    assert (s.worker_stats()["step_picked_up"] > published).all()
