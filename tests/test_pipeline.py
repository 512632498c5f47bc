"""``pipeline=True``: each worker process serves its block as two halves, two workers of the step
API. The halves must behave exactly as two one-half workers would (same data, same env ids, same
commands), while sharing one process: its death loses both, and nothing else is lost."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import psutil
import pytest
from helpers import assert_same, kill_and_wait

from vecsample import VecSampler, errors
from vecsample.seeding import env_seeds, restart_seed
from vecsample.testing import CountingEnv, SlowEnv, fns
from vecsample.tools.compare import sampling_loop
from vecsample.tools.policies import Policy

ENVS = 8
MODES = ["SameStep", "NextStep", "Disabled"]


def _schedule(rng: np.random.Generator, workers: int, rounds: int) -> list[list[int]]:
    """Which workers each round sends to: a random nonempty subset of them."""
    return [sorted(rng.choice(workers, size=rng.integers(1, workers + 1), replace=False))
            for _ in range(rounds)]


def _run(sampler: VecSampler, schedule: list[list[int]], seed: int) -> list[tuple]:
    """Resets, then per round sends to its workers and receives them all (full, by worker);
    returns everything received, in order, with the envs' own ``t`` read back by ``call``."""
    obs, infos = sampler.reset(seed=seed)
    out: list[tuple] = [("reset", obs.copy(), tuple(dict(i) for i in infos))]
    for k, workers in enumerate(schedule):
        for w in workers:
            ids = sampler.worker_env_ids(w)
            sampler.step_send(w, np.full(len(ids), k % 3, dtype=np.int64))
        got = sorted(sampler.step_recv(timeout=None), key=lambda r: r.worker)
        assert [r.worker for r in got] == workers
        out += [(r.worker, list(r.env_ids), r.obs.copy(), r.rewards.copy(), r.terminated.copy(),
                 r.truncated.copy(), dict(r.infos)) for r in got]
    out.append(("t", sampler.call("t")))
    return out


@pytest.mark.parametrize("mode", MODES)
def test_the_halves_give_what_two_workers_give(make_sampler, mode):
    # 2 processes x 2 halves against 4 plain workers: the same blocks, so the same data.
    schedule = _schedule(np.random.default_rng(MODES.index(mode)), 4, 30)
    kwargs = {"autoreset_mode": mode, "context": "fork", "deadline": 10}
    piped = make_sampler(fns(CountingEnv, ENVS, length=3), num_workers=2, pipeline=True,
                         **kwargs)
    plain = make_sampler(fns(CountingEnv, ENVS, length=3), num_workers=4, **kwargs)
    assert piped.num_slots == plain.num_slots == plain.num_workers == 4
    assert piped.num_workers == 2 and piped.options.num_workers == 2
    assert [piped.worker_env_ids(w) for w in range(4)] == [plain.worker_env_ids(w)
                                                          for w in range(4)]
    got, expected = _run(piped, schedule, seed=5), _run(plain, schedule, seed=5)
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert_same(a, b, f"item {i}")


def test_each_process_serves_two_halves(make_sampler):
    s = make_sampler(fns(CountingEnv, ENVS), num_workers=2, pipeline=True)
    pids = s.worker_pids()
    assert pids[0] == pids[1] != pids[2] == pids[3]
    children = {p.pid for p in psutil.Process().children(recursive=True) if p.pid in pids}
    assert children == set(pids) and len(children) == 2


def test_a_half_is_received_while_the_other_is_not_sent(make_sampler):
    s = make_sampler(fns(CountingEnv, ENVS, length=100), num_workers=2, pipeline=True,
                     deadline=10)
    s.reset(seed=0)
    for _ in range(3):
        s.step_send(1, np.ones(2, dtype=np.int64))
        (result,) = s.step_recv(timeout=None)
        assert result.worker == 1 and list(result.env_ids) == [2, 3]
    t = s.call("t")
    assert t == [0, 0, 3, 3, 0, 0, 0, 0]  # the other half and the other process never moved


def test_a_killed_process_loses_both_halves_and_names_them(make_sampler):
    s = make_sampler(fns(CountingEnv, ENVS), num_workers=2, pipeline=True, deadline=10)
    s.reset(seed=0)
    kill_and_wait(s.worker_pids()[2])
    for w in range(4):
        s.step_send(w, np.ones(2, dtype=np.int64))
    with pytest.raises(errors.WorkerDiedError) as died:
        s.step_recv(timeout=None)
    assert died.value.worker == 2 and died.value.env_ids == [4, 5]
    assert sorted(r.worker for r in died.value.results) == [0, 1]  # the live process's halves
    for w in (2, 3):  # both halves were marked dead by the one death
        with pytest.raises(errors.WorkerLostError, match=f"worker {w}, which is dead"):
            s.step_send(w, np.ones(2, dtype=np.int64))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"num_workers": 3, "uneven_split": True}, "divisible by 2 \\* num_workers"),
    ({"num_workers": 4}, "divisible by 2 \\* num_workers = 8"),
    ({"num_workers": 2, "pipeline": 1}, "pipeline must be True or False"),
])
def test_what_pipelining_cannot_do_is_refused(kwargs, match):
    options = {"pipeline": True, **kwargs}
    with pytest.raises(errors.ConfigError, match=match):
        VecSampler(fns(CountingEnv, 12 if options["num_workers"] != 4 else 4), **options)


def test_the_pipelined_loop_loses_and_repeats_nothing(make_sampler):
    # The loop a throughput user runs: receive any ready half, act on it, send it back.
    s = make_sampler(fns(CountingEnv, ENVS, length=10**9), num_workers=2, pipeline=True,
                     deadline=10)
    policy: Policy = lambda obs: np.ones(len(obs), dtype=np.int64)  # noqa: E731
    result = sampling_loop(s, 0.0, seconds=0.5, policy=policy)
    assert result.steps_sent == result.steps_received > 0
    t = np.array(s.call("t"))
    per_half = t.reshape(4, 2)
    assert (per_half[:, 0] == per_half[:, 1]).all()  # a half's envs step together
    assert per_half.sum() == result.steps_received  # every step sent was taken exactly once


# --- restart=True: a dead process is respawned with both halves -----------------------------

PAUSE = 3  # the action that makes a PausingEnv sleep: its half stays pending until killed


class PausingEnv(CountingEnv):
    """A CountingEnv whose step with action ``PAUSE`` sleeps a minute: a half left pending."""

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if int(action) == PAUSE:
            time.sleep(60)
        return super().step(action)


def _restartable(make_sampler, **kwargs: Any) -> VecSampler:
    options = {"num_workers": 2, "pipeline": True, "restart": True, "context": "fork",
               "deadline": 20, "seed": 3, **kwargs}
    s = make_sampler(fns(PausingEnv, ENVS, length=10**6), **options)
    s.reset()
    s.step(np.ones(ENVS, dtype=np.int64))  # every env at t=1
    return s


def _act(s: VecSampler, w: int, action: int) -> None:
    s.step_send(w, np.full(len(s.worker_env_ids(w)), action, dtype=np.int64))


def _kill_process_of(s: VecSampler, w: int) -> int:
    """SIGKILLs the process serving worker ``w``; its pid."""
    pid = s.worker_pids()[w]
    kill_and_wait(pid)
    return pid


def _wait_finished(s: VecSampler, w: int) -> None:
    """Returns once worker ``w``'s posted step is finished (not yet received)."""
    end = time.monotonic() + 5
    while time.monotonic() < end:
        state = s.handshake_state()
        if state.finished[w] == state.posted[w]:
            return
        time.sleep(0.005)
    raise AssertionError(f"worker {w} did not finish its step")


def _assert_restarted(r: Any, s: VecSampler) -> None:
    """``r``: worker r.worker's envs freshly reset (t=0), flagged restarted and truncated."""
    ids = list(s.worker_env_ids(r.worker))
    assert list(r.env_ids) == ids
    np.testing.assert_array_equal(r.obs[:, 0], ids)
    np.testing.assert_array_equal(r.obs[:, 1], 0)  # t: reset
    assert r.restarted.all() and r.truncated.all() and not r.terminated.any()
    assert not r.rewards.any() and not r.has_final_obs.any()


def _assert_respawned(s: VecSampler, old_pid: int) -> None:
    """One new process serves both halves; two processes in all, the old one gone."""
    pids = s.worker_pids()
    assert pids[2] == pids[3] != old_pid and pids[0] == pids[1]
    assert not psutil.pid_exists(old_pid) or \
        psutil.Process(old_pid).status() == psutil.STATUS_ZOMBIE
    # every live process below us, but multiprocessing's long-lived helpers (a forkserver and a
    # resource tracker started by an earlier test of the session stay up until it ends)
    children = {p.pid for p in psutil.Process().children(recursive=True)
                if p.status() != psutil.STATUS_ZOMBIE
                and not any(h in " ".join(p.cmdline()) for h in ("forkserver", "resource_tracker"))}
    assert children == set(pids) and len(children) == 2


def test_a_killed_process_with_a_pending_half_and_an_idle_half_restarts_both(make_sampler):
    s = _restartable(make_sampler)
    _act(s, 3, 1)
    (held,) = s.step_recv(timeout=None)  # views of half 3, kept while half 2 restarts
    assert held.worker == 3 and (held.obs[:, 1] == 2).all()
    _act(s, 2, PAUSE)
    old = _kill_process_of(s, 2)
    (r2,) = s.step_recv(timeout=None)
    assert r2.worker == 2
    _assert_restarted(r2, s)
    assert "exit code -9" in r2.infos[4]["restart_reason"]
    _assert_respawned(s, old)
    np.testing.assert_array_equal(held.obs[:, 1], 2)  # still valid: half 3 was not sent again
    assert not held.restarted.any()
    # The idle half's next step is its restart (its actions not applied), then steps go on.
    _act(s, 3, 1)
    (r3,) = s.step_recv(timeout=None)
    assert r3.worker == 3
    _assert_restarted(r3, s)
    whole = s.batch()  # every env's rows agree with the results: half 3 holds its restart now
    np.testing.assert_array_equal(whole.obs[6:, 1], 0)
    assert whole.restarted[6:].all() and not whole.restarted[:4].any()
    _act(s, 3, 1)
    (nxt,) = s.step_recv(timeout=None)
    np.testing.assert_array_equal(nxt.obs[:, 1], 1)
    assert not nxt.restarted.any() and not nxt.truncated.any()
    assert len(s.restart_log) == 1  # one process death, one restart
    streams = env_seeds(3, ENVS)
    assert s.get_attr("np_random_seed") == [
        *streams[:4], *(restart_seed(stream, 1) for stream in streams[4:])]


@pytest.mark.parametrize("timeout", [None, 0.0])
def test_a_finished_half_is_delivered_with_its_data_from_before_the_death(make_sampler,
                                                                           timeout):
    s = _restartable(make_sampler)
    _act(s, 3, 2)
    _wait_finished(s, 3)  # finished, not received
    _act(s, 2, PAUSE)
    old = _kill_process_of(s, 2)
    got = {}  # views, not copies
    while len(got) < 2:  # a partial batch may return half 3 before the death is seen
        got.update((r.worker, r) for r in s.step_recv(timeout=timeout))
    assert sorted(got) == [2, 3]
    _assert_restarted(got[2], s)
    r3 = got[3]  # its step, as the dead process finished it
    np.testing.assert_array_equal(r3.obs, [[6, 2, 0, 2], [7, 2, 0, 2]])
    np.testing.assert_array_equal(r3.rewards, [2.0, 2.0])
    assert not r3.restarted.any() and not r3.truncated.any()
    _assert_respawned(s, old)
    _act(s, 3, 1)  # its next step: the restart
    (again,) = s.step_recv(timeout=None)
    _assert_restarted(again, s)
    assert len(s.restart_log) == 1


@pytest.mark.parametrize("timeout", [None, 0.0])
def test_a_killed_process_with_both_halves_pending_returns_both_restarted(make_sampler,
                                                                          timeout):
    s = _restartable(make_sampler)
    _act(s, 2, PAUSE)
    _act(s, 3, PAUSE)
    _act(s, 0, 1)
    _wait_finished(s, 0)
    old = _kill_process_of(s, 2)
    calls = []
    while sum(len(c) for c in calls) < 3:  # a partial batch may return half 0 alone first
        calls.append({r.worker: r for r in s.step_recv(timeout=timeout)})
    assert any(sorted(c) == [2, 3] or sorted(c) == [0, 2, 3] for c in calls)  # in one call
    got = {w: r for c in calls for w, r in c.items()}
    assert sorted(got) == [0, 2, 3]
    np.testing.assert_array_equal(got[0].obs[:, 1], 2)
    _assert_restarted(got[2], s)
    _assert_restarted(got[3], s)
    _assert_respawned(s, old)
    assert len(s.restart_log) == 1
    out = s.step(np.ones(ENVS, dtype=np.int64))  # both halves step on, unflagged
    np.testing.assert_array_equal(out.obs[:, 1], [3, 3, 2, 2, 1, 1, 1, 1])
    assert not out.restarted.any()


def test_max_restarts_counts_one_per_process_death(make_sampler):
    s = _restartable(make_sampler, max_restarts=1)
    _act(s, 2, PAUSE)
    _act(s, 3, PAUSE)
    _kill_process_of(s, 2)
    assert sorted(r.worker for r in s.step_recv(timeout=None)) == [2, 3]
    _act(s, 2, PAUSE)
    _act(s, 3, PAUSE)
    _kill_process_of(s, 3)
    with pytest.raises(errors.RestartLimitError, match="max_restarts=1"):
        s.step_recv(timeout=None)
    assert len(s.restart_log) == 1


@pytest.mark.parametrize("seed", range(4))
def test_a_random_schedule_with_a_kill_loses_and_repeats_nothing(make_sampler, seed):
    rng = np.random.default_rng(seed)
    s = make_sampler(fns(SlowEnv, ENVS, step_time=0.01), num_workers=2, pipeline=True,
                     restart=True, context="fork", deadline=20)
    s.reset(seed=seed)
    t = np.zeros(ENVS, dtype=np.int64)  # the model: each env's steps since its reset
    sent = np.zeros(4, dtype=np.int64)
    received = np.zeros(4, dtype=np.int64)
    kill_at = int(rng.integers(5, 25))
    for k in range(40):
        idle = [w for w in range(4) if sent[w] == received[w]]
        for w in rng.permutation(idle)[: rng.integers(1, len(idle) + 1)] if idle else []:
            _act(s, int(w), 1)
            sent[w] += 1
        if k == kill_at:
            _kill_process_of(s, int(rng.integers(0, 4)))
        timeout = None if rng.random() < 0.5 else 0.0
        for r in s.step_recv(timeout=timeout):
            received[r.worker] += 1
            ids = list(r.env_ids)
            t[ids] = 0 if r.restarted.all() else t[ids] + 1
            assert not r.restarted.any() or r.restarted.all()
            np.testing.assert_array_equal(r.obs[:, 1], t[ids], err_msg=f"round {k}")
    while (sent > received).any():  # the steps still pending
        for r in s.step_recv(timeout=None):
            received[r.worker] += 1
            ids = list(r.env_ids)
            t[ids] = 0 if r.restarted.all() else t[ids] + 1
            np.testing.assert_array_equal(r.obs[:, 1], t[ids])
    np.testing.assert_array_equal(sent, received)  # one result per send: none lost or repeated
    assert s.call("t") == t.tolist()
    assert len(s.restart_log) == 1
    assert len(set(s.worker_pids())) == 2
