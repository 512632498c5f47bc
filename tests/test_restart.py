"""A worker that dies, raises or hangs, and the restart policy.

Without ``restart``: a typed error naming the worker, found within 1 s, that keeps what the other
workers returned. With ``restart=True``: the next call that touches the worker respawns it,
re-seeded, with the tasks and attributes set on its envs, and returns its envs reset and flagged
``restarted`` and ``truncated``; ``max_restarts`` bounds how often. Also through VectorEnv, and
with ``pipeline=True``, where one process serves two halves (two workers of the step API).

A scenario number in a docstring is that of the outside fault-injection run
(docs/reliability.md#19-outside-fault-scenarios).
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import signal
import threading
import time
from typing import Any

import numpy as np
import psutil
import pytest
from helpers import kill_and_wait, ones, posix_only

from vecsample import EnvMaker, VecSampler, errors
from vecsample.seeding import env_seeds, restart_seed
from vecsample.testing import CountingEnv, DyingEnv, HangingEnv, RaisingEnv, SlowEnv, fns

#: Detection bound of the issue (1 s).
DETECT_S = 1.0

#: Respawning re-imports gymnasium and rebuilds the envs: generous on a loaded 2-core machine.
RESPAWN_S = 5.0



def counting_obs(env: int, t: int, episode: int, action: float) -> list[float]:
    return [float(env), float(t), float(episode), float(action)]


# --- without restart: a typed error, the others' results kept (R1, R2, R3) ------------------------


def test_sigkilled_worker_is_detected_within_1s_without_restart(make_sampler):
    s = make_sampler(fns(SlowEnv, 4, step_time=0.3), num_workers=2)
    s.reset()
    s.step_send(0, ones(2))
    s.step_send(1, ones(2))
    victim = s.worker_pids()[1]
    start = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    with pytest.raises(errors.WorkerDiedError, match=r"worker 1 .*exit code -9") as info:
        s.step_recv(None)
    assert time.monotonic() - start < DETECT_S
    assert info.value.worker == 1 and info.value.exitcode == -signal.SIGKILL
    s.close(timeout=1.0)
    assert s.closed


def test_dead_worker_is_detected_through_its_sentinel(make_sampler):
    s = make_sampler(fns(DyingEnv, 4, at_step=2, bad_index=2, exitcode=7), num_workers=2)
    s.reset()
    s.step(ones(4))
    start = time.monotonic()
    with pytest.raises(errors.WorkerDiedError, match=r"worker 1.*exit code 7") as info:
        s.step(ones(4))
    assert time.monotonic() - start < 1.0
    assert info.value.exitcode == 7 and info.value.worker == 1
    with pytest.raises(errors.WorkerLostError, match="dead"):
        s.step_send(1, ones(2))
    s.close()


@posix_only
def test_without_restart_the_death_is_typed_and_the_others_results_arrive(make_sampler):
    """Scenario 1 of the outside fault-injection run."""
    s = make_sampler(fns(CountingEnv, 4), num_workers=2, deadline=10)
    s.reset()
    kill_and_wait(s.worker_pids()[1])
    with pytest.raises(errors.WorkerDiedError, match="worker 1") as info:
        s.step(ones(4))
    assert [r.worker for r in info.value.results] == [0]
    with pytest.raises(errors.WorkerLostError, match=r"worker 1.*restart=True"):
        s.reset()
    with pytest.raises(errors.WorkerLostError):
        s.step(ones(4))


@pytest.mark.parametrize("where", ["step", "reset"])
def test_env_exception_carries_worker_env_and_remote_traceback(make_sampler, where):
    s = make_sampler(fns(RaisingEnv, 4, where=where, at_step=2, bad_index=3), num_workers=2)
    start = time.monotonic()
    with pytest.raises(errors.WorkerError) as info:
        s.reset()
        s.step(ones(4))
        s.step(ones(4))
    assert time.monotonic() - start < 1.0
    err = info.value
    assert (err.worker, err.env) == (1, 3) and err.command == where.upper()
    assert f"injected failure in {where}" in err.remote_traceback
    assert "vecsample/testing/fakes.py" in str(err.__cause__)  # remote frames, chained as the cause
    s.close()


def test_hung_worker_without_restart_raises_and_close_kills_it(make_sampler):
    s = make_sampler(fns(HangingEnv, 2, at_step=1, bad_index=0), num_workers=2, deadline=0.3)
    s.reset()
    pids = s.worker_pids()
    with pytest.raises(errors.DeadlineExceededError) as info:
        s.step(ones(2))
    assert info.value.hung_workers == [0]
    start = time.monotonic()
    s.close(timeout=0.2)
    assert time.monotonic() - start < 3.0
    assert all(not psutil.pid_exists(p) or psutil.Process(p).status() == "zombie" for p in pids)


class ForkingEnv(CountingEnv):
    """An env that starts a child process (as one that runs a simulator does): at its first
    step, or when ``call("fork_and_hang")`` calls it, it forks a child that sleeps 15 s, writes
    the child's pid to ``fd`` and hangs, so that the test kills its worker while the child
    lives on, holding every fd the worker had."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd

    def fork_and_hang(self) -> None:
        child = os.fork()
        if child == 0:
            time.sleep(15)
            os._exit(0)
        os.write(self.fd, child.to_bytes(4, "little"))
        time.sleep(60)

    def step(self, action: Any) -> Any:
        self.fork_and_hang()
        return super().step(action)


@pytest.fixture
def forked_children():
    """``(fd, read)``: an env writes the pids of the children it forks to ``fd``; ``read()``
    returns the next one (waiting up to 10 s). Every child written is SIGKILLed at teardown,
    read or not: they outlive the worker that forked them."""
    r, w = os.pipe()
    pids: list[int] = []

    def read() -> int:
        assert select.select([r], [], [], 10.0)[0], "the env forked no child within 10 s"
        pids.append(int.from_bytes(os.read(r, 4), "little"))
        return pids[-1]

    yield w, read
    os.set_blocking(r, False)
    with contextlib.suppress(BlockingIOError):
        data = os.read(r, 4096)
        pids += [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    os.close(r)
    os.close(w)


@posix_only
@pytest.mark.parametrize("where", ["step", "command"])
def test_a_death_is_seen_at_once_while_a_child_the_worker_forked_lives(make_sampler,
                                                                        forked_children, where):
    """Issue 33, item 1: under fork a child the env forked inherits the worker's process
    sentinel (a pipe), so a death seen through it waited for that child (15 s here, the
    deadline of 5 s before that). A pidfd, which no other process holds, sees it at once."""
    fd, read_child = forked_children
    s = make_sampler([functools.partial(ForkingEnv, fd)], num_workers=1, context="fork",
                     deadline=5.0)
    s.reset()
    worker = s.worker_pids()[0]
    killed_at: list[float] = []
    children: list[int] = []

    def kill_once_forked() -> None:
        children.append(read_child())
        os.kill(worker, signal.SIGKILL)
        killed_at.append(time.monotonic())

    if where == "step":
        s.step_send(0, ones(1))
        kill_once_forked()
        with pytest.raises(errors.WorkerDiedError, match="exit code -9"):
            s.step_recv(None)
    else:  # the command RPC's wait: the kill comes from a thread while call() waits
        killer = threading.Thread(target=kill_once_forked)
        killer.start()
        try:
            with pytest.raises(errors.WorkerDiedError, match="exit code -9"):
                s.call("fork_and_hang")
        finally:
            killer.join()
    assert time.monotonic() - killed_at[0] < 2 * DETECT_S
    assert psutil.Process(children[0]).status() != psutil.STATUS_ZOMBIE  # it still lives


# --- restart=True: deaths and raises --------------------------------------------------------------


def test_sigkilled_worker_is_respawned_flagged_and_others_untouched(make_sampler):
    s = make_sampler(fns(SlowEnv, 4, step_time=0.3), num_workers=2, restart=True, seed=5)
    s.reset()
    s.step(ones(4))  # every env at t=1
    old_pid = s.worker_pids()[1]
    s.step_send(0, np.array([2, 3]))
    s.step_send(1, ones(2))
    start = time.monotonic()
    os.kill(old_pid, signal.SIGKILL)
    results = {r.worker: r for r in s.step_recv(None, copy=True)}
    assert time.monotonic() - start < DETECT_S + RESPAWN_S  # detection + respawn + rebuild
    assert sorted(results) == [0, 1]
    # Worker 0 finished its step as if nothing happened.
    r0 = results[0]
    np.testing.assert_array_equal(r0.obs, [counting_obs(0, 2, 0, 2), counting_obs(1, 2, 0, 3)])
    np.testing.assert_array_equal(r0.rewards, [2.0, 3.0])
    assert not r0.restarted.any() and not r0.truncated.any()
    # Worker 1: a new process, its envs re-made and reset, flagged restarted and truncated.
    r1 = results[1]
    new_pid = s.worker_pids()[1]
    assert new_pid != old_pid and psutil.Process(new_pid).status() != psutil.STATUS_ZOMBIE
    np.testing.assert_array_equal(r1.obs, [counting_obs(2, 0, 0, -1), counting_obs(3, 0, 0, -1)])
    assert r1.restarted.all() and r1.truncated.all() and not r1.terminated.any()
    assert not r1.has_final_obs.any() and not r1.rewards.any()
    assert "exit code -9" in r1.infos[2]["restart_reason"]
    assert s.restart_log == [(1, "died with exit code -9")]
    # Re-seeded from each env's own stream: child 1 of SeedSequence(its seed).
    streams = env_seeds(5, 4)
    assert s.get_attr("np_random_seed") == [
        streams[0], streams[1], restart_seed(streams[2], 1), restart_seed(streams[3], 1)]
    # The next step clears the flags and continues normally.
    nxt = s.step(ones(4))
    assert not nxt.restarted.any() and not nxt.truncated.any()
    np.testing.assert_array_equal(nxt.obs[:, 1], [3, 3, 1, 1])


@posix_only
@pytest.mark.parametrize("call", ["step", "step_send", "reset"])
def test_a_worker_killed_between_calls_is_respawned_by_the_next_call(make_sampler, call):
    """Scenarios 1 and 2 of the outside fault-injection run."""
    s = make_sampler(fns(CountingEnv, 4), num_workers=2, restart=True, deadline=10)
    s.reset()
    s.step(ones(4))
    kill_and_wait(s.worker_pids()[1])
    if call == "step":
        r = s.step(ones(4))
        np.testing.assert_array_equal(r.obs[:, 1], [2, 2, 0, 0])  # worker 1: fresh episodes
        assert r.restarted.tolist() == r.truncated.tolist() == [False, False, True, True]
    elif call == "step_send":
        s.step_send(1, ones(2))
        (r,) = s.step_recv(None)
        assert r.worker == 1 and r.restarted.all() and r.truncated.all()
    else:
        obs, _ = s.reset()
        np.testing.assert_array_equal(obs[:, 1], [0, 0, 0, 0])
    assert [w for w, _ in s.restart_log] == [1]
    r = s.step(ones(4))  # and it goes on: flags cleared, every env stepping
    assert not r.restarted.any()


def test_exception_in_step_restarts_only_that_worker(make_sampler):
    s = make_sampler(fns(RaisingEnv, 4, where="step", at_step=2, bad_index=1), num_workers=2,
                     restart=True)
    s.reset()
    s.step(ones(4))
    start = time.monotonic()
    out = s.step(ones(4))
    assert time.monotonic() - start < DETECT_S + RESPAWN_S
    np.testing.assert_array_equal(out.restarted, [True, True, False, False])
    np.testing.assert_array_equal(out.truncated, [True, True, False, False])
    np.testing.assert_array_equal(out.obs[:, 1], [0, 0, 2, 2])  # others stepped to t=2
    assert "injected failure in step 2 of env 1" in s.restart_log[0][1]


def test_restart_in_a_partial_recv_returns_the_restarted_worker(make_sampler):
    s = make_sampler(fns(DyingEnv, 4, at_step=1, bad_index=0), num_workers=2, restart=True)
    s.reset()
    s.step_send(0, ones(2))
    got = s.step_recv(timeout=0.0)
    assert [r.worker for r in got] == [0] and got[0].restarted.all()
    s.step_send(1, ones(2))
    assert [r.worker for r in s.step_recv(None)] == [1]


def test_worker_failed_in_a_synchronous_call_is_healed_before_its_next_use(make_sampler):
    s = make_sampler(fns(CountingEnv, 4), num_workers=2, restart=True)
    s.reset()
    with pytest.raises(errors.WorkerError, match="no_such_method"):
        s.call("no_such_method")
    # Every worker was failed: each is respawned, and this step returns the restart (fresh
    # episodes, flagged restarted and truncated), never envs silently reset.
    out = s.step(ones(4))
    assert len(s.restart_log) == 2 and out.restarted.all() and out.truncated.all()
    np.testing.assert_array_equal(out.obs[:, 1], [0, 0, 0, 0])
    out = s.step(ones(4))  # then they step, the flags cleared
    assert not out.restarted.any()
    np.testing.assert_array_equal(out.obs[:, 1], [1, 1, 1, 1])


def _fails_when_rebuilt(env_index: int, marker: str) -> CountingEnv:
    if env_index < 2:
        return CountingEnv(env_index)
    if os.path.exists(marker):
        raise RuntimeError("no licence left for a second build")
    return SlowEnv(env_index, step_time=5.0)  # still stepping when it is killed


@posix_only
def test_a_failed_rebuild_keeps_the_other_workers_results(make_sampler, tmp_path):
    """Scenario 4 of the outside fault-injection run."""
    marker = str(tmp_path / "built")
    env_fns = [functools.partial(_fails_when_rebuilt, i, marker) for i in range(4)]
    s = make_sampler(env_fns, num_workers=2, restart=True, deadline=10)
    s.reset()
    open(marker, "w").close()
    s.step_send(0, ones(2))
    s.step_send(1, ones(2))
    time.sleep(0.2)  # worker 0's step is done; worker 1 is in its 5 s step
    kill_and_wait(s.worker_pids()[1])
    with pytest.raises(errors.WorkerError, match="licence") as info:
        s.step_recv(None)
    assert [r.worker for r in info.value.results] == [0]  # not lost
    with pytest.raises(errors.NoPendingError):
        s.step_recv(None)  # and not returned twice


# --- restart=True: hangs --------------------------------------------------------------------------


def test_hung_worker_is_killed_and_restarted_at_the_deadline(make_sampler):
    s = make_sampler(fns(HangingEnv, 4, at_step=2, bad_index=0), num_workers=2, deadline=0.5,
                     restart=True)
    s.reset()
    s.step(ones(4))
    hung_pid = s.worker_pids()[0]
    start = time.monotonic()
    out = s.step(ones(4))
    assert time.monotonic() - start < 0.5 + DETECT_S + RESPAWN_S
    np.testing.assert_array_equal(out.restarted, [True, True, False, False])
    np.testing.assert_array_equal(out.obs[:, 1], [0, 0, 2, 2])
    assert s.restart_log == [(0, "hung past the deadline")]
    assert not psutil.pid_exists(hung_pid) or psutil.Process(hung_pid).status() == "zombie"
    np.testing.assert_array_equal(s.step(ones(4)).obs[:, 1], [1, 1, 3, 3])  # no stale reply


# --- limits ---------------------------------------------------------------------------------------


def test_restarts_are_capped_then_a_typed_error_names_the_worker(make_sampler):
    s = make_sampler(fns(DyingEnv, 2, at_step=1, bad_index=1, exitcode=9), num_workers=2,
                     restart=True, max_restarts=2)
    s.reset()
    for _ in range(2):
        assert s.step(ones(2)).restarted[1]
    with pytest.raises(errors.RestartLimitError, match=r"worker 1 .*max_restarts=2") as info:
        s.step(ones(2))
    assert info.value.worker == 1
    assert [r.worker for r in info.value.results] == [0]  # what was received is not lost
    assert isinstance(info.value.__cause__, errors.WorkerDiedError)
    s.close(timeout=1.0)


# --- a restart keeps what the sampler set on its envs ---------------------------------------------


def _navigation(n: int) -> list:
    """EnvMaker registers vecsample's task envs in whichever process builds them (a lambda
    around gym.make would need the worker to have imported vecsample.envs first)."""
    return [EnvMaker("2DNavigation-v0")] * n


@pytest.mark.parametrize("where", ["step", "command"])
def test_a_restarted_worker_gets_back_its_tasks_and_attributes(make_sampler, where):
    """reset_task and set_attr values outlive a restart: the respawned envs get them again
    (in the order they were set) before their reset, so a meta-RL round never goes on sampling
    another task. Killed during a step, and between calls (healed by the next command)."""
    s = make_sampler(_navigation(4), num_workers=2, restart=True, seed=0)
    tasks = s.get_attr("unwrapped")[0].sample_tasks(4)
    s.reset_task(tasks)
    s.set_attr("marker", [10, 11, 12, 13])
    s.set_attr("marker", [20, 21, 22, 23])  # the latest value wins, as without a restart
    s.reset()
    old = s.worker_pids()[1]
    kill_and_wait(old)
    if where == "step":
        result = s.step(np.zeros((4, 2), dtype=np.float32))
        assert result.restarted[2:].all() and not result.restarted[:2].any()
    else:
        s.get_attr("marker")  # finds the dead worker and respawns it before asking
    assert s.worker_pids()[1] != old and len(s.restart_log) == 1
    got = [env._task for env in s.get_attr("unwrapped")]
    assert [t["goal"].tolist() for t in got] == [t["goal"].tolist() for t in tasks]
    assert s.get_attr("marker") == [20, 21, 22, 23]


# --- through VectorEnv ----------------------------------------------------------------------------


@posix_only
def test_vector_env_with_restart_comes_back_after_a_kill(make_vector_env):
    """Scenario 3 of the outside fault-injection run."""
    env = make_vector_env(fns(CountingEnv, 4), num_workers=2, restart=True)
    env.reset(seed=0)
    env.step(ones(4))
    kill_and_wait(env.sampler.worker_pids()[1])
    obs, _, _, truncated, _ = env.step(ones(4))
    np.testing.assert_array_equal(obs[:, 1], [2, 2, 0, 0])
    assert truncated.tolist() == [False, False, True, True]
    obs, *_ = env.step(ones(4))
    np.testing.assert_array_equal(obs[:, 1], [3, 3, 1, 1])


def test_vector_env_passes_restart_through(make_vector_env):
    env = make_vector_env(fns(DyingEnv, 4, at_step=2, bad_index=3), num_workers=2,
                          autoreset_mode="SameStep", restart=True)
    env.reset(seed=0)
    env.step(ones(4))
    obs, _, terminated, truncated, infos = env.step(ones(4))
    np.testing.assert_array_equal(truncated, [False, False, True, True])
    assert not terminated.any() and obs[2, 1] == 0 and obs[0, 1] == 2
    assert "exit code 3" in infos["restart_reason"][3]


# --- pipeline=True: one death loses both halves; a restart respawns both --------------------------


ENVS = 8


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
