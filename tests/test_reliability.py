"""Fault injection (issue 3): restart, hung workers, signals in the parent, create/close cycles.

Each test injects one fault through vecsample.testing's fake envs or by signalling a process.
R1, R4 and most of R6 also live in tests/test_errors.py and tests/test_lifetime.py.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import psutil
import pytest
from helpers import kill_and_wait

from vecsample import EnvMaker, VecSampler, errors
from vecsample.seeding import env_seeds, restart_seed
from vecsample.testing import CountingEnv, DyingEnv, HangingEnv, RaisingEnv, SlowEnv, fns

#: Detection bound of the issue (1 s).
DETECT_S = 1.0
#: Respawning re-imports gymnasium and rebuilds the envs: generous on a loaded 2-core machine.
RESPAWN_S = 5.0


def ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.int64)


def counting_obs(env: int, t: int, episode: int, action: float) -> list[float]:
    return [float(env), float(t), float(episode), float(action)]


# --- R1/R2: a worker that raises or dies ----------------------------------------------------------


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


def test_failed_synchronous_call_leaves_no_stale_reply(make_sampler):
    s = make_sampler(fns(RaisingEnv, 4, where="reset", bad_index=0), num_workers=2)
    with pytest.raises(errors.WorkerError, match="env 0 in worker 0"):
        s.reset()
    # Worker 1's reply to the same reset was read, so its next answer is to the next call.
    s.step_send(1, ones(2))
    (r,) = s.step_recv(None)
    np.testing.assert_array_equal(r.obs[:, 1], [1, 1])
    with pytest.raises(errors.WorkerLostError, match="failed"):
        s.step_send(0, ones(2))


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


# --- R3: hung workers -------------------------------------------------------------------------


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


# --- signals in the parent --------------------------------------------------------------------

SIGNAL_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    from vecsample import VecSampler
    from vecsample.testing import CloseRecordingEnv, fns
    if __name__ == "__main__":
        s = VecSampler(fns(CloseRecordingEnv, 4, marker=sys.argv[1], step_time=0.01),
                       num_workers=2, context=sys.argv[2])
        s.reset()
        s.step(np.ones(4, dtype=np.int64))
        print(" ".join(map(str, s.worker_pids())), flush=True)
        while True:  # the signal arrives while a step is in flight, most of the time
            s.step(np.ones(4, dtype=np.int64))
""")


@pytest.mark.parametrize(("sig", "context"), [(signal.SIGTERM, "forkserver"),
                                              (signal.SIGTERM, "fork"),
                                              (signal.SIGINT, "forkserver")])
def test_sigterm_and_sigint_in_the_parent_close_the_workers_cleanly(tmp_path, sig, context):
    script, marker = tmp_path / "child.py", tmp_path / "closed.txt"
    script.write_text(SIGNAL_CHILD)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    # A new session, so SIGINT goes to the whole process group, as Ctrl-C in a terminal does.
    with subprocess.Popen([sys.executable, str(script), str(marker), context],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
                          start_new_session=True) as parent:
        try:
            pids = [int(p) for p in parent.stdout.readline().split()]
            assert len(pids) == 2, parent.stderr.read()
            time.sleep(0.2)
            # SIGINT to the whole group, as Ctrl-C in a terminal; SIGTERM to the parent, as
            # `kill PID` (a group-wide SIGTERM kills the workers directly, see reliability.md).
            if sig == signal.SIGINT:
                os.killpg(parent.pid, sig)
            else:
                parent.send_signal(sig)
            code = parent.wait(10)
            stderr = parent.stderr.read()
        finally:
            if parent.poll() is None:
                os.killpg(parent.pid, signal.SIGKILL)
    assert code == -sig, stderr  # died of the signal (Python re-raises an uncaught SIGINT)
    closed = [line.split() for line in marker.read_text().splitlines()]
    # Every env was closed by its worker (the parent's probe env, closed in the parent, aside).
    assert sorted(int(env) for env, pid in closed if int(pid) in pids) == [0, 1, 2, 3]
    assert all(not psutil.pid_exists(p) or psutil.Process(p).status() == "zombie" for p in pids)
    if sig == signal.SIGINT:  # the workers ignored Ctrl-C: one traceback, the parent's
        assert stderr.count("KeyboardInterrupt") == 1, stderr


def test_sigterm_handler_is_installed_once_and_never_replaces_a_users(make_sampler):
    from vecsample._parent import signals

    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        make_sampler(fns(CountingEnv, 1), context="fork")
        assert signals.installed()

        def user_handler(signum, frame):
            raise AssertionError("never called")

        signal.signal(signal.SIGTERM, user_handler)
        make_sampler(fns(CountingEnv, 1), context="fork")
        assert signal.getsignal(signal.SIGTERM) is user_handler
    finally:
        signal.signal(signal.SIGTERM, previous)


# --- R5: create/close cycles ------------------------------------------------------------------


def _children() -> int:
    return sum(1 for p in psutil.Process().children(recursive=True)
               if p.status() != psutil.STATUS_ZOMBIE)


def test_200_create_close_cycles_leak_no_process_fd_or_memory():
    me = psutil.Process()
    env_fns = fns(CountingEnv, 4)

    def cycle() -> None:
        with VecSampler(env_fns, num_workers=2, context="fork") as s:
            s.reset(seed=1)
            s.step(ones(4))

    for _ in range(10):  # warm-up: imports, allocator arenas, the forkserver-free baseline
        cycle()
    gc.collect()
    before = (_children(), me.num_fds(), me.memory_info().rss)
    start = time.monotonic()
    for _ in range(200):
        cycle()
    gc.collect()
    after = (_children(), me.num_fds(), me.memory_info().rss)
    print(f"\nR5 200 cycles in {time.monotonic() - start:.1f}s: children {before[0]} -> "
          f"{after[0]}, open fds {before[1]} -> {after[1]}, RSS {before[2] / 2**20:.1f} -> "
          f"{after[2] / 2**20:.1f} MiB ({100 * (after[2] / before[2] - 1):+.2f}%)")
    assert after[0] <= before[0]
    assert after[1] <= before[1]
    assert after[2] < 1.10 * before[2]


# --- R6: bad input, one table ---------------------------------------------------------------


def _unpicklable_under_spawn(s):
    import threading

    lock = threading.Lock()  # cloudpickle carries lambdas, but not a lock they close over
    VecSampler([lambda: CountingEnv() if lock else None] * 2, num_workers=2, context="spawn")


def _no_license(env_index: int = 0) -> CountingEnv:
    if env_index == 1:
        raise RuntimeError("no simulator license")
    return CountingEnv(env_index)


def _raising_factory(s):
    VecSampler(fns(_no_license, 2), num_workers=2, context="fork")


def _bad_timeout(s):
    s.step_send(0, ones(2))
    try:
        s.step_recv(-1.0)
    finally:
        s.step_recv(None)


def _unsupported_space(s):
    from gymnasium import spaces

    from vecsample.testing import SpaceEnv

    VecSampler([lambda: SpaceEnv(spaces.Text(4), "discrete")], context="fork")


def _busy(s):
    s.step_send(0, ones(2))
    try:
        s.step_send(0, ones(2))
    finally:
        s.step_recv(None)


def _after_close(s):
    closed = VecSampler(fns(CountingEnv, 2), num_workers=1, context="fork")
    closed.close()
    closed.step(ones(2))


#: (kind, call, error, what the message must say: expected vs got, or how to fix it)
BAD_INPUT = [
    ("wrong shape", lambda s: s.step(ones(3)), errors.ActionShapeError,
     r"expected shape \(4,\).*got \(3,\)"),
    ("wrong dtype", lambda s: s.step(np.full(4, 0.5)), errors.ActionDtypeError,
     r"expected dtype int64.*got float64.*Convert"),
    ("out-of-space action", lambda s: s.step(np.array([0, 1, 2, 9])), errors.ActionSpaceError,
     r"rows \[3\] are outside Discrete\(4\).*Clip or resample"),
    ("NaN in a Discrete action", lambda s: s.step(np.array([0.0, np.nan, 1, 1])),
     errors.ActionDtypeError, r"expected dtype int64.*got float64"),
    ("send to a busy worker", _busy, errors.WorkerBusyError, r"still pending.*step_recv"),
    ("recv with nothing pending", lambda s: s.step_recv(), errors.NoPendingError,
     r"no step in flight.*step_send"),
    ("use after close", _after_close, errors.ClosedError, r"closed; create a new one"),
    ("indivisible env count", lambda s: VecSampler(fns(CountingEnv, 6), num_workers=4),
     errors.ConfigError, r"not divisible.*choose num_workers from \[1, 2, 3, 6\]"),
    ("unsupported space", _unsupported_space, errors.UnsupportedSpaceError,
     r"expected a gymnasium.spaces.Space.*got str.*gymnasium.spaces"),
    ("unpicklable factory under spawn", _unpicklable_under_spawn, errors.EnvFactoryError,
     r"picklable by cloudpickle.*lock"),
    ("env factory that raises", _raising_factory, errors.EnvFactoryError,
     r"worker 1 could not build its envs \(env 1\).*no simulator license"),
    ("worker index out of range", lambda s: s.step_send(2, ones(2)), errors.WorkerIndexError,
     r"out of range.*2 workers \(0\.\.1\)"),
    ("negative seed", lambda s: s.reset(seed=-1), errors.ConfigError,
     r"non-negative int or None, got -1"),
    ("seed list of the wrong length", lambda s: s.reset(seed=[1, 2]), errors.ConfigError,
     r"one entry per env: expected 4, got 2"),
    ("mask of the wrong shape", lambda s: s.reset(mask=np.ones(3, dtype=bool)),
     errors.ConfigError, r"shape \(4,\)"),
    ("negative timeout", _bad_timeout, errors.ConfigError,
     r"timeout must be None or a number of seconds >= 0, got -1.0"),
    ("tasks of the wrong length", lambda s: s.reset_task([1]), errors.ConfigError,
     r"expected 4, got 1"),
    ("unpicklable call argument", lambda s: s.call("t", lambda: 0), errors.ConfigError,
     r"cannot be pickled.*plain data"),
    ("bad max_restarts",
     lambda s: VecSampler(fns(CountingEnv, 2), restart=True, max_restarts=-1),
     errors.ConfigError, r"max_restarts must be an int >= 0"),
]


@pytest.mark.parametrize(("kind", "call", "error", "says"), BAD_INPUT,
                         ids=[row[0] for row in BAD_INPUT])
def test_bad_input_is_a_typed_error_that_says_how_to_fix_it(make_sampler, kind, call, error,
                                                             says):
    s = make_sampler(fns(CountingEnv, 4, length=100), num_workers=2, context="fork")
    s.reset()
    start = time.monotonic()
    with pytest.raises(error, match=says):
        call(s)
    assert time.monotonic() - start < 10.0, f"{kind} took too long"
    before = s.batch(copy=True).obs
    out = s.step(ones(4))  # a later correct call still works, each env one step further
    np.testing.assert_array_equal(out.obs[:, :2], before[:, :2] + [0, 1])


def test_vector_env_passes_restart_through(make_vector_env):
    env = make_vector_env(fns(DyingEnv, 4, at_step=2, bad_index=3), num_workers=2,
                          autoreset_mode="SameStep", restart=True)
    env.reset(seed=0)
    env.step(ones(4))
    obs, _, terminated, truncated, infos = env.step(ones(4))
    np.testing.assert_array_equal(truncated, [False, False, True, True])
    assert not terminated.any() and obs[2, 1] == 0 and obs[0, 1] == 2
    assert "exit code 3" in infos["restart_reason"][3]


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
