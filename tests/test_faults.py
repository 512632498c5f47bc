"""The second reliability pass: the outside fault scenarios, one test each (docs/reliability.md).

Each test names its scenario number from the reliability issue. Restarts happen at the next call
that touches a dead worker, whatever call it is; interrupts lose nothing; bad shapes and bad
arguments are typed errors.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
import time
from typing import Any

import numpy as np
import psutil
import pytest

from vecsample import VecSampler, errors
from vecsample.signals import critical
from vecsample.testing import CountingEnv, SlowEnv, fns

posix_only = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX signals")


def ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.int64)


def kill_and_wait(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} did not die")


class SlowResetEnv(CountingEnv):
    """A reset that takes ``reset_time`` seconds (after the first one, made at build time)."""

    def __init__(self, env_index: int = 0, reset_time: float = 1.6) -> None:
        super().__init__(env_index=env_index)
        self.reset_time = reset_time
        self.resets = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.resets += 1
        if self.resets > 1:
            time.sleep(self.reset_time)
        return super().reset(seed=seed, options=options)


# --- 1-3: restart really restarts ---------------------------------------------------------------


@posix_only
@pytest.mark.parametrize("call", ["step", "step_send", "reset"])
def test_1_2_a_worker_killed_between_calls_is_respawned_by_the_next_call(make_sampler, call):
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


@posix_only
def test_1_without_restart_the_death_is_typed_and_the_others_results_arrive(make_sampler):
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


def _fails_when_rebuilt(env_index: int, marker: str) -> CountingEnv:
    if env_index < 2:
        return CountingEnv(env_index)
    if os.path.exists(marker):
        raise RuntimeError("no licence left for a second build")
    return SlowEnv(env_index, step_time=5.0)  # still stepping when it is killed


@posix_only
def test_4_a_failed_rebuild_keeps_the_other_workers_results(make_sampler, tmp_path):
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


# --- 5-6: interrupts lose nothing ---------------------------------------------------------------


def _interrupt_after(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    return timer


@posix_only
@pytest.mark.parametrize("restart", [False, True])
def test_5_ctrl_c_during_reset_leaves_a_working_sampler(make_sampler, restart):
    s = make_sampler([functools.partial(SlowResetEnv, i, 1.0) for i in range(2)], num_workers=2,
                     restart=restart, deadline=10, context="forkserver")
    s.reset()  # the slow one, at build time it was fast
    timer = _interrupt_after(0.3)
    with pytest.raises(KeyboardInterrupt):
        s.reset()
    timer.join()
    obs, _ = s.reset(seed=1)  # the interrupted replies are read first, then this reset runs
    assert obs.shape == (2, 4)
    r = s.step(ones(2))
    np.testing.assert_array_equal(r.obs[:, 1], [1, 1])
    assert s.restart_log == []


class InfoSlowEnv(SlowEnv):
    """SlowEnv with an info dict on every step, so each reply travels on the pipe too."""

    def step(self, action: Any):
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"t": self.t, "pad": "x" * 512}


def _interrupt_loop(s: VecSampler, seconds: float, seed: int) -> tuple[dict, dict, int]:
    """step_send/step_recv(timeout) with a SIGINT every 0.5-10 ms; the test's own bookkeeping
    runs inside ``critical`` (a SIGINT there waits for its end), so only the library's calls
    are interrupted. An interrupted step_send that went through shows as WorkerBusyError."""
    rng = np.random.default_rng(seed)
    workers = range(s.num_workers)
    sent, received, todo = dict.fromkeys(workers, 0), dict.fromkeys(workers, 0), list(workers)
    interrupts, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        timers: list[threading.Timer] = []
        try:
            try:
                timers.append(_interrupt_after(float(rng.uniform(5e-4, 1e-2))))
                _send_and_receive(s, sent, received, todo)
            finally:
                for timer in timers:
                    timer.cancel()
                    timer.join()
            time.sleep(0.001)  # a SIGINT sent just before the cancel lands here
        except KeyboardInterrupt:
            interrupts += 1
    return sent, received, interrupts


def _send_and_receive(s: VecSampler, sent: dict, received: dict, todo: list) -> None:
    while True:
        while todo:
            with contextlib.suppress(errors.WorkerBusyError):
                s.step_send(todo[0], ones(2))
            with critical:
                sent[todo.pop(0)] += 1
        results = s.step_recv(1e-4)
        with critical:
            for r in results:
                received[r.worker] += 1
                todo.append(r.worker)


@posix_only
def test_6_interrupts_in_a_partial_batch_loop_lose_and_duplicate_nothing(make_sampler):
    """After each caught KeyboardInterrupt the loop goes on; every step sent is received once,
    and no worker is reported hung (the drain below runs under a 10 s deadline)."""
    env_fns = [functools.partial(InfoSlowEnv, env_index=i, step_time=2e-4, tail="uniform",
                                 spread=1.0) for i in range(6)]
    s = make_sampler(env_fns, num_workers=3, deadline=10, context="forkserver")
    s.reset()
    sent, received, interrupts = _interrupt_loop(s, 4.0, seed=0)
    while True:  # drain what is still in flight: nothing lost, nothing twice
        try:
            results = s.step_recv(None)
        except errors.NoPendingError:
            break
        for r in results:
            received[r.worker] += 1
    assert interrupts > 20
    # Counted by the sampler as it hands results over (the test's own count can miss one that
    # an interrupt caught between step_recv's return and the count itself).
    assert s.stats()["workers_received"] == sum(sent.values())
    assert all(received[w] <= sent[w] for w in sent)
    state = s.handshake_state()
    np.testing.assert_array_equal(state.finished, state.posted)
