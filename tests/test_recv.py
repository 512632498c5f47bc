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
import threading
import time

import numpy as np
import pytest
from helpers import ones, posix_only

from vecsample import AutoresetMode, errors
from vecsample.testing import CountingEnv, HangingEnv, RaisingEnv, SlowEnv, fns

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


# --- deaths and deadlines of the fourth fault suite --------------------------------------------


@posix_only
def test_a_death_during_a_partial_batch_ends_it_timeout_after_the_loss(make_sampler):
    """A worker killed while a partial batch waits for its first arrival is a loss: the
    batch closes ``timeout`` after it (docs/semantics.md), not when another worker arrives
    (it took the whole 5.1 s step on both paths)."""
    s = make_sampler(fns(SlowEnv, 3, step_time=4.0), num_workers=3, deadline=20.0)
    s.reset()
    for w in range(3):
        s.step_send(w, ones(1))
    victim = s.worker_pids()[1]
    killer = threading.Timer(0.3, os.kill, (victim, signal.SIGKILL))
    killer.start()
    start = time.monotonic()
    try:
        with pytest.raises(errors.WorkerDiedError) as info:
            s.step_recv(0.2)
    finally:
        killer.join()
    assert info.value.worker == 1
    assert time.monotonic() - start < 2.0  # 0.3 s to the death, 0.2 s of window


@posix_only
@pytest.mark.parametrize("call", ["step", "recv_batch"])
def test_one_wait_for_a_full_batch_lasts_at_most_its_deadline(make_sampler, call):
    """The fast path's wait and the general one after it share the call's deadline: a
    stopped worker made step() and recv_batch() wait twice it."""
    s = make_sampler(fns(CountingEnv, 2), num_workers=2, deadline=1.0)
    s.reset()
    stopped = s.worker_pids()[1]
    os.kill(stopped, signal.SIGSTOP)
    try:
        start = time.monotonic()
        with pytest.raises(errors.DeadlineExceededError) as info:
            if call == "step":
                s.step(ones(2))
            else:
                s.send_all(ones(2))
                s.recv_batch(deadline=1.5)
        took = time.monotonic() - start
    finally:
        os.kill(stopped, signal.SIGCONT)
    bound = 1.0 if call == "step" else 1.5
    assert info.value.hung_workers == [1]
    assert bound <= took < bound + 0.6, took


@pytest.mark.parametrize("call", ["step", "step_recv", "recv_batch"])
def test_close_from_another_thread_ends_every_wait_at_once(make_sampler, call):
    """On the C path the waiting call ended only when the workers were gone (2.5 s after the
    close), and step() or recv_batch() could raise NoPendingError; the close now ends it at
    once, with ClosedError, on both paths."""
    s = make_sampler(fns(SlowEnv, 2, step_time=3.0), num_workers=2, deadline=20.0)
    s.reset()
    closed_at: list[float] = []

    def close() -> None:
        closed_at.append(time.monotonic())
        s.close(timeout=4.0)

    closer = threading.Timer(0.3, close)
    if call != "step":
        s.send_all(ones(2))
    closer.start()
    try:
        with pytest.raises(errors.ClosedError, match="another thread's close"):
            {"step": lambda: s.step(ones(2)), "step_recv": lambda: s.step_recv(None),
             "recv_batch": s.recv_batch}[call]()
        ended = time.monotonic()
    finally:
        closer.join()
    assert ended - closed_at[0] < 0.5, ended - closed_at[0]


# --- a partial batch as one result (recv_batch(timeout)) ------------------------------------------


@pytest.mark.parametrize("placement", ["workers", "share", "parent"])
def test_a_partial_batch_holds_the_rows_of_the_workers_it_names(make_sampler, placement):
    """recv_batch(timeout) gathers every worker done within the window into one result:
    ``workers`` and ``env_ids`` name its rows, which hold each env's own step (a CountingEnv's
    observation is its id and step count), and step_send_many(result.workers, rows) sends
    them again; over many rounds every env steps the same number of times as its block."""
    s = make_sampler(fns(CountingEnv, 12, length=7), num_workers=6, env_placement=placement)
    s.reset()
    s.send_all(ones(12))
    steps = np.zeros(12, dtype=np.int64)
    for _ in range(30):
        r = s.recv_batch(0.002)
        assert r.worker is None and r.workers is not None and len(r.workers) >= 1
        expected = np.concatenate([np.arange(2 * w, 2 * w + 2) for w in r.workers])
        np.testing.assert_array_equal(r.env_ids, expected)
        np.testing.assert_array_equal(r.obs[:, 0], r.env_ids)  # each row is its env's
        steps[r.env_ids] += 1
        assert (r.obs[:, 1] == steps[r.env_ids] % 7).all()  # t since reset: none lost
        s.step_send_many(r.workers, ones(len(r.env_ids)))
    assert (steps.reshape(6, 2)[:, 0] == steps.reshape(6, 2)[:, 1]).all()


@pytest.mark.parametrize("env", ["CartPole-v1", "counting"])
def test_a_partial_batch_equals_the_per_worker_results(make_sampler, env):
    """The same steps read as one result and worker by worker (step_recv) hold the same rows,
    flags, final observations and infos (columns: the counting env's, every step, and its
    reset infos, which each worker writes on other steps than the others, so a worker's stale
    rows must stay hidden), whatever the order."""
    envs = ("CartPole-v1",) if env == "CartPole-v1" else (
        [functools.partial(CountingEnv, env_index=i, length=3 + i // 2 + i % 2, info=True)
         for i in range(8)],)
    kw = {"num_envs": 8} if env == "CartPole-v1" else {}
    a = make_sampler(*envs, num_workers=4, seed=3, autoreset_mode=AutoresetMode.SAME_STEP, **kw)
    b = make_sampler(*envs, num_workers=4, seed=3, autoreset_mode=AutoresetMode.SAME_STEP, **kw)
    a.reset()
    b.reset()
    for t in range(40):
        actions = np.arange(8) % 2 if t % 3 else np.ones(8, dtype=np.int64)
        a.send_all(actions)
        b.send_all(actions)
        joined = _recv_every(a)
        per = sorted(_recv_all_workers(b), key=lambda r: r.block.start)
        order = np.argsort(joined.env_ids)
        np.testing.assert_array_equal(joined.obs[order], np.concatenate([r.obs for r in per]))
        for name in ("rewards", "terminated", "truncated", "has_final_obs"):
            np.testing.assert_array_equal(getattr(joined, name)[order],
                                          np.concatenate([getattr(r, name) for r in per]))
        ended = joined.has_final_obs[order]
        np.testing.assert_array_equal(joined.final_obs[order][ended],
                                      np.concatenate([r.final_obs for r in per])[ended])
        assert dict(joined.infos) == {k: v for r in per for k, v in r.infos.items()}
        assert dict(joined.reset_infos) == {k: v for r in per for k, v in r.reset_infos.items()}


def _recv_every(s):
    """recv_batch(0) until every worker's step is in, as one result (joined here)."""
    parts = [s.recv_batch(0.0)]
    while sum(len(p.workers) for p in parts) < s.num_slots:
        parts.append(s.recv_batch(0.0))
    if len(parts) == 1:
        return parts[0]
    merged = parts[0]
    for p in parts[1:]:
        merged = _concat(merged, p)
    return merged


def _concat(x, y):
    out = type(x)(None, np.concatenate([x.env_ids, y.env_ids]), np.concatenate([x.obs, y.obs]),
                  *(np.concatenate([getattr(x, n), getattr(y, n)]) for n in
                    ("rewards", "terminated", "truncated")),
                  np.concatenate([x.final_obs, y.final_obs]),
                  *(np.concatenate([getattr(x, n), getattr(y, n)]) for n in
                    ("has_final_obs", "restarted")),
                  workers=np.concatenate([x.workers, y.workers]))
    for part in (x, y):
        out.infos.absorb(part.infos)
        out.reset_infos.absorb(part.reset_infos)
    return out


def _recv_all_workers(s):
    got = []
    while len(got) < s.num_slots:
        got += s.step_recv(0.0)
    return got


def test_a_partial_batch_with_a_lost_worker_is_the_error_with_the_others(make_sampler):
    """The general path's errors and results: a worker whose env raises is a WorkerError that
    carries the results read in the same wait."""
    s = make_sampler(fns(RaisingEnv, 4, at_step=2, bad_index=3), num_workers=2)
    s.reset()
    s.send_all(ones(4))
    r = s.recv_batch(0.05)
    s.step_send_many(r.workers, ones(len(r.env_ids)))
    while True:
        try:
            r = s.recv_batch(0.05)
        except errors.WorkerError as exc:
            assert exc.worker == 1
            break
        s.step_send_many(r.workers, ones(len(r.env_ids)))


def test_step_send_many_with_rows_checks_everything_before_posting(make_sampler):
    s = make_sampler(fns(CountingEnv, 4), num_workers=2)
    s.reset()
    with pytest.raises(errors.ActionShapeError):
        s.step_send_many(np.array([0, 1]), ones(3))  # 4 rows needed
    with pytest.raises(errors.ConfigError, match="distinct workers"):
        s.step_send_many(np.array([1, 1]), ones(4))
    with pytest.raises(errors.WorkerIndexError):
        s.step_send_many(np.array([0, 2]), ones(4))
    assert s.handshake_state().posted.tolist() == s.handshake_state().finished.tolist()
    s.step_send_many(np.array([1]), ones(2))
    with pytest.raises(errors.WorkerBusyError):
        s.step_send_many(np.array([0, 1]), ones(4))
    [r] = s.step_recv(None)  # worker 1's step, posted once: nothing else was
    assert r.worker == 1
