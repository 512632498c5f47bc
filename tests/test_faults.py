"""The second reliability pass: the outside fault scenarios, one test each (docs/reliability.md).

Each test names its scenario number from the reliability issue. Restarts happen at the next call
that touches a dead worker, whatever call it is; interrupts lose nothing; bad shapes and bad
arguments are typed errors.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from gymnasium import spaces as gym_spaces
from helpers import kill_and_wait

from vecsample import VecSampler, errors
from vecsample._parent.signals import critical
from vecsample.testing import CountingEnv, SlowEnv, SpaceEnv, fns

posix_only = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX signals")


def ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.int64)


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
    are interrupted. A step_send that returned, with the SIGINT landing before its count, shows
    as WorkerBusyError on the retry (a send that raises has posted nothing: test_signals.py)."""
    rng = np.random.default_rng(seed)
    workers = range(s.num_slots)
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
    for w in todo:  # a send an interrupt cut off from its count: count it (or make it) now
        with contextlib.suppress(errors.WorkerBusyError):
            s.step_send(w, ones(2))
        sent[w] += 1
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


# --- 9-10: processes that live and die with the right owner ---------------------------------


@posix_only
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_9_a_sampler_made_in_a_thread_outlives_the_thread(context):
    made: list[VecSampler] = []
    thread = threading.Thread(target=lambda: made.append(
        VecSampler(fns(CountingEnv, 2), num_workers=2, context=context, deadline=10)))
    thread.start()
    thread.join()
    (s,) = made
    try:
        time.sleep(0.5)  # PR_SET_PDEATHSIG would have killed the workers by now
        s.reset()
        np.testing.assert_array_equal(s.step(ones(2)).obs[:, 1], [1, 1])
    finally:
        s.close()


FORKING_PARENT = """
import os, sys
import numpy as np
from vecsample import VecSampler
from vecsample.testing import CountingEnv, fns
if __name__ == "__main__":
    s = VecSampler(fns(CountingEnv, 2), num_workers=2, context=sys.argv[1], deadline=10)
    s.reset()
    child = os.fork()
    if child == 0:
        sys.exit(0)  # a normal exit: atexit and finalizers run in the child
    os.waitpid(child, 0)
    print(s.step(np.ones(2, dtype=np.int64)).obs[:, 1].tolist())
    s.close()
"""


@posix_only
@pytest.mark.parametrize("context", ["fork", "forkserver"])
def test_10_a_forked_child_that_exits_leaves_the_parents_sampler_working(tmp_path, context):
    script = tmp_path / "forking.py"
    script.write_text(FORKING_PARENT)
    proc = subprocess.run([sys.executable, str(script), context], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[1.0, 1.0]"


# --- 11, 17, 18: shapes -------------------------------------------------------------------------


class FlatObsEnv(CountingEnv):
    """Declares Box(2, 2) but returns (2,) observations from step."""

    def __init__(self, env_index: int = 0) -> None:
        super().__init__(env_index)
        self.observation_space = gym_spaces.Box(-np.inf, np.inf, (2, 2), np.float64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros((2, 2)), {}

    def step(self, action):
        super().step(action)
        return np.array([1.0, 2.0]), 0.0, False, False, {}


@pytest.mark.parametrize("mode", ["SameStep", "NextStep"])
def test_11_an_observation_of_the_wrong_shape_is_never_broadcast(make_sampler, mode):
    s = make_sampler([functools.partial(FlatObsEnv, i) for i in range(2)], num_workers=1,
                     autoreset_mode=mode)
    s.reset()
    with pytest.raises(errors.WorkerError, match=r"env 0 .*shape \(2,\), expected \(2, 2\)"):
        s.step(ones(2))


class StringObsEnv(CountingEnv):
    """Declares Box(shape, float64); env 1 returns a string observation from ``where``."""

    def __init__(self, env_index: int = 0, where: str = "step", shape: tuple = ()) -> None:
        super().__init__(env_index)
        self.observation_space = gym_spaces.Box(-np.inf, np.inf, shape, np.float64)
        self.where = where

    def _obs_at(self, where: str) -> Any:
        if self.env_index == 1 and self.where == where:
            return "tall"
        return np.zeros(self.observation_space.shape)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs_at("reset"), {}

    def step(self, action):
        super().step(action)
        return self._obs_at("step"), 0.0, False, False, {}


STRING_OBS = r"env 1 in worker 0 raised EnvOutputError during {}: observation .* is a str .*float64"


@pytest.mark.parametrize("shape", [(), (4,)])
def test_11_a_string_observation_from_reset_names_its_env_and_both_types(make_sampler, shape):
    s = make_sampler([functools.partial(StringObsEnv, i, "reset", shape) for i in range(2)])
    with pytest.raises(errors.WorkerError, match=STRING_OBS.format("RESET")) as info:
        s.reset()
    assert info.value.env == 1


@pytest.mark.parametrize("shape", [(), (4,)])
@pytest.mark.parametrize("mode", ["SameStep", "NextStep", "Disabled"])
def test_11_a_string_observation_from_step_names_its_env_and_both_types(make_sampler, mode,
                                                                         shape):
    s = make_sampler([functools.partial(StringObsEnv, i, "step", shape) for i in range(2)],
                     autoreset_mode=mode)
    s.reset()
    with pytest.raises(errors.WorkerError, match=STRING_OBS.format("STEP")) as info:
        s.step(ones(2))
    assert info.value.env == 1


class VectorRewardEnv(CountingEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, np.array([reward]), terminated, truncated, info


@pytest.mark.parametrize("mode", ["SameStep", "NextStep", "Disabled"])
def test_17_a_reward_of_shape_1_is_one_typed_error_in_every_mode(make_sampler, mode):
    env_fns = [CountingEnv, functools.partial(VectorRewardEnv, 1)]
    s = make_sampler(env_fns, num_workers=1, autoreset_mode=mode)
    s.reset()
    with pytest.raises(errors.WorkerError, match=r"env 1 .*reward has shape \(1,\)"):
        s.step(ones(2))


def test_18_a_ragged_action_is_an_action_shape_error(make_sampler):
    s = make_sampler([functools.partial(SpaceEnv, gym_spaces.Discrete(2),
                                        gym_spaces.Box(0, 1, (3,)), i) for i in range(2)])
    s.reset()
    with pytest.raises(errors.ActionShapeError, match="ragged"):
        s.step([[0.1, 0.2, 0.3], [0.4]])


# --- 12-16: bounds and messages -----------------------------------------------------------------


def _hangs_in_a_worker(parent: int) -> CountingEnv:
    if os.getpid() != parent:
        time.sleep(3600)
    return CountingEnv()


def test_12_startup_is_bounded_by_its_own_deadline_and_says_so():
    start = time.monotonic()
    with pytest.raises(errors.DeadlineExceededError, match=r"building envs.*1\.0 s.*startup"):
        VecSampler([functools.partial(_hangs_in_a_worker, os.getpid())] * 2, num_workers=2,
                   deadline=0.5, startup_deadline=1.0)
    assert time.monotonic() - start < 5.0


class LockEnv(CountingEnv):
    def __init__(self, env_index: int = 0) -> None:
        super().__init__(env_index)
        self.lock = threading.Lock()


def test_13_an_unpicklable_reply_is_typed_and_the_worker_lives_on(make_sampler):
    s = make_sampler([functools.partial(LockEnv, i) for i in range(2)], num_workers=2)
    s.reset()
    pids = s.worker_pids()
    with pytest.raises(errors.ReplyPicklingError, match=r"get_attr\('lock'\).*pickle"):
        s.get_attr("lock")
    assert s.get_attr("env_index") == [0, 1]  # the same workers, still serving
    assert s.worker_pids() == pids


@pytest.mark.parametrize("deadline", [float("inf"), 1e7])
def test_14_an_infinite_or_huge_deadline_works(make_sampler, deadline):
    s = make_sampler(fns(CountingEnv, 2), num_workers=2, deadline=deadline)
    s.reset()
    np.testing.assert_array_equal(s.step(ones(2)).obs[:, 1], [1, 1])


@pytest.mark.parametrize("timeout", [None, float("inf")])
def test_15_close_with_no_bound_closes_and_reaps(timeout):
    s = VecSampler(fns(CountingEnv, 2), num_workers=2)
    pids = s.worker_pids()
    s.close(timeout=timeout)
    assert s.closed
    assert not [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_15_a_bad_close_timeout_is_refused_before_anything_is_torn_down(make_sampler):
    s = make_sampler(fns(CountingEnv, 2), num_workers=2)
    with pytest.raises(errors.ConfigError, match="timeout"):
        s.close(timeout=-1)
    assert not s.closed
    s.reset()


class StubbornCloseEnv(CountingEnv):
    """close() hangs, and SIGTERM is ignored from then on."""

    def close(self) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(3600)


@posix_only
@pytest.mark.parametrize("workers", [1, 4])
def test_16_close_timeout_bounds_the_whole_call(workers):
    probe = CountingEnv()  # given the spaces, the parent builds no env (whose close would hang)
    s = VecSampler(fns(StubbornCloseEnv, workers), num_workers=workers,
                   observation_space=probe.observation_space, action_space=probe.action_space)
    start = time.monotonic()
    s.close(timeout=0.5)
    elapsed = time.monotonic() - start
    assert elapsed < 0.5 + 0.5 + 0.5, elapsed  # timeout, the SIGTERM grace, slack


# --- 8: workers die with their parent, even stopped -------------------------------------------


class StoppingEnv(CountingEnv):
    """Env 1 stops its own process (SIGSTOP) at its first step, as a debugger or a stuck C call
    would hold it: no Python code of that worker runs again."""

    def step(self, action):
        if self.env_index == 1:
            os.kill(os.getpid(), signal.SIGSTOP)
        return super().step(action)


STOPPED_WORKER_PARENT = """
import sys
import numpy as np
from vecsample import VecSampler
from test_faults import StoppingEnv
from vecsample.testing import fns
if __name__ == "__main__":
    s = VecSampler(fns(StoppingEnv, 2), num_workers=2, context=sys.argv[1], deadline=60)
    s.reset()
    print(" ".join(map(str, s.worker_pids())), flush=True)
    s.step(np.ones(2, dtype=np.int64))  # worker 1 stops; we wait here until killed
"""


@posix_only
@pytest.mark.parametrize("context", ["forkserver", "spawn", "fork"])
def test_8_a_stopped_worker_dies_within_2s_of_its_parents_sigkill(tmp_path, context):
    script = tmp_path / "parent.py"
    script.write_text(STOPPED_WORKER_PARENT)
    path = os.pathsep.join([os.getcwd(), os.path.dirname(__file__)])
    with subprocess.Popen([sys.executable, str(script), context], stdout=subprocess.PIPE,
                          text=True, env={**os.environ, "PYTHONPATH": path}) as parent:
        pids = [int(p) for p in parent.stdout.readline().split()]
        try:
            time.sleep(0.5)
            assert psutil.Process(pids[1]).status() == psutil.STATUS_STOPPED
            parent.kill()
            parent.wait(5)
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and any(_alive(p) for p in pids):
                time.sleep(0.05)
            assert not [p for p in pids if _alive(p)]
        finally:
            for p in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# --- 3, 7, 19: the gymnasium API ----------------------------------------------------------------


@posix_only
def test_3_vector_env_with_restart_comes_back_after_a_kill(make_vector_env):
    env = make_vector_env(fns(CountingEnv, 4), num_workers=2, restart=True)
    env.reset(seed=0)
    env.step(ones(4))
    kill_and_wait(env.sampler.worker_pids()[1])
    obs, _, _, truncated, _ = env.step(ones(4))
    np.testing.assert_array_equal(obs[:, 1], [2, 2, 0, 0])
    assert truncated.tolist() == [False, False, True, True]
    obs, *_ = env.step(ones(4))
    np.testing.assert_array_equal(obs[:, 1], [3, 3, 1, 1])


class HangingResetEnv(CountingEnv):
    def reset(self, *, seed=None, options=None):
        time.sleep(3600)
        return super().reset(seed=seed, options=options)


def _hangs_when_rebuilt(env_index: int, marker: str, where: str) -> CountingEnv:
    """Worker 1's envs (2, 3), once ``marker`` exists: a build or a reset that takes an hour."""
    if env_index < 2 or not os.path.exists(marker):
        return CountingEnv(env_index)
    if where == "build":
        time.sleep(3600)
    return HangingResetEnv(env_index)


@posix_only
@pytest.mark.parametrize("where", ["build", "reset"])
def test_3_reset_wait_timeout_bounds_a_restart_inside_it(make_vector_env, tmp_path, where):
    marker = str(tmp_path / "rebuilt")
    env_fns = [functools.partial(_hangs_when_rebuilt, i, marker, where) for i in range(4)]
    env = make_vector_env(env_fns, num_workers=2, restart=True, deadline=5, startup_deadline=5)
    env.reset(seed=0)
    open(marker, "w").close()
    kill_and_wait(env.sampler.worker_pids()[1])
    env.reset_async()
    start = time.monotonic()
    with pytest.raises(errors.DeadlineExceededError, match=r"\[1\] .*deadline=0\.5 s"):
        env.reset_wait(timeout=0.5)  # respawns worker 1, whose rebuild or reset hangs
    elapsed = time.monotonic() - start
    assert elapsed < 0.5 + 1.0, elapsed  # the timeout, slack; not the sampler's 5 s bounds
    env.close(terminate=True)  # worker 1 hangs: the fixture's polite close would wait 5 s


class ProbedEnv(CountingEnv):
    """A CountingEnv whose ``reset``, ``probe()`` and ``reset_task`` take ``slow`` seconds in
    the places named by ``where`` ("reset", "call"; "build" is the factory's)."""

    def __init__(self, env_index: int, where: tuple[str, ...] = (), slow: float = 0.0) -> None:
        super().__init__(env_index)
        self.where, self.slow = where, slow

    def _wait(self, place: str) -> None:
        if place in self.where:
            time.sleep(self.slow)

    def reset(self, *, seed=None, options=None):
        self._wait("reset")
        return super().reset(seed=seed, options=options)

    def probe(self) -> int:
        self._wait("call")
        return self.env_index

    def reset_task(self, task: object) -> None:
        self._wait("call")


def _slow_when_rebuilt(env_index: int, marker: str, where: tuple[str, ...],
                       slow: float) -> ProbedEnv:
    """Env 2 (worker 1's), once ``marker`` exists: ``slow`` seconds to build (if "build" is in
    ``where``), reset or answer a command; every other env answers at once."""
    if env_index != 2 or not os.path.exists(marker):
        return ProbedEnv(env_index)
    if "build" in where:
        time.sleep(slow)
    return ProbedEnv(env_index, where, slow)


#: (where env 2 is slow once rebuilt, for how long, the call's timeout). The last: each part
#: fits in the timeout, the whole call does not (the timeout bounds the call, not each wait).
REBUILT_SLOW = [(("build",), 3600.0, 0.5), (("reset",), 3600.0, 0.5),
                (("build", "call"), 0.6, 1.0)]


@posix_only
@pytest.mark.parametrize(("where", "slow", "timeout"), REBUILT_SLOW)
def test_3_call_wait_timeout_bounds_a_restart_inside_it(make_vector_env, tmp_path, where, slow,
                                                        timeout):
    marker = str(tmp_path / "rebuilt")
    env_fns = [functools.partial(_slow_when_rebuilt, i, marker, where, slow) for i in range(4)]
    env = make_vector_env(env_fns, num_workers=2, restart=True, deadline=5, startup_deadline=5)
    env.reset(seed=0)
    open(marker, "w").close()
    kill_and_wait(env.sampler.worker_pids()[1])
    env.call_async("probe")
    start = time.monotonic()
    with pytest.raises(errors.DeadlineExceededError, match=rf"\[1\] .*deadline={timeout} s"):
        env.call_wait(timeout=timeout)  # respawns worker 1: its rebuild, reset or call is slow
    elapsed = time.monotonic() - start
    assert elapsed < timeout + 1.0, elapsed  # the timeout, slack; not the sampler's 5 s bounds
    assert env.sampler.options.deadline == 5  # the call's bound was passed down, not written here
    env.close(terminate=True)  # worker 1 hangs: the fixture's polite close would wait 5 s


@posix_only
@pytest.mark.parametrize("command", ["call", "get_attr", "set_attr", "reset_task"])
def test_3_a_commands_deadline_bounds_a_restart_inside_it(make_sampler, tmp_path, command):
    marker = str(tmp_path / "rebuilt")
    env_fns = [functools.partial(_slow_when_rebuilt, i, marker, ("build",), 3600.0)
               for i in range(4)]
    s = make_sampler(env_fns, num_workers=2, restart=True, deadline=5, startup_deadline=5)
    s.reset()
    open(marker, "w").close()
    kill_and_wait(s.worker_pids()[1])
    args = {"call": ("probe",), "get_attr": ("env_index",), "set_attr": ("length", 3),
            "reset_task": ([0, 1, 2, 3],)}[command]
    start = time.monotonic()
    with pytest.raises(errors.DeadlineExceededError, match=r"\[1\] .*deadline=0\.5 s"):
        getattr(s, command)(*args, deadline=0.5)  # respawns worker 1, whose rebuild hangs
    assert time.monotonic() - start < 0.5 + 1.0
    s.close(timeout=0.0)  # worker 1 hangs: the fixture's polite close would wait 2 s


@posix_only
def test_7_a_retried_step_wait_keeps_every_workers_infos(make_vector_env):
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


class OptionsEnv(CountingEnv):
    def reset(self, *, seed=None, options=None):
        self.seen_options = options
        return super().reset(seed=seed, options=options)


def test_19_reset_options_reach_the_envs_as_gymnasium_passes_them(make_vector_env):
    env = make_vector_env([functools.partial(OptionsEnv, i) for i in range(2)], num_workers=1)
    env.reset(options="junk")  # gymnasium does not check options: the envs get them
    assert env.get_attr("seen_options") == ("junk", "junk")


@pytest.mark.parametrize("options", [5, 2.5, ["reset_mask"]])
def test_19_options_that_are_not_a_dict_reach_the_envs_too(make_vector_env, options):
    """Only a dict can hold a "reset_mask"; anything else is the envs' business, as in
    gymnasium (whose own ``"reset_mask" in options`` raises an untyped TypeError for an int)."""
    env = make_vector_env([functools.partial(OptionsEnv, i) for i in range(2)], num_workers=1)
    obs, _ = env.reset(options=options)
    assert env.get_attr("seen_options") == (options, options)
    np.testing.assert_array_equal(obs[:, 1], [0, 0])


# --- the interrupt property: SIGINT anywhere, across calls and modes ----------------------------


@posix_only
@pytest.mark.parametrize("mode", ["SameStep", "NextStep", "Disabled"])
def test_interrupts_anywhere_leave_a_usable_or_closed_sampler(mode):
    """benchmarks/interrupt_soak.py on a small budget: a SIGINT 0.5-10 ms into a random call
    (reset, step, step_send/step_recv, call, get_attr, close), then the checks it makes."""
    spec = importlib.util.spec_from_file_location(
        "interrupt_soak", Path(__file__).resolve().parents[1] / "benchmarks/interrupt_soak.py")
    assert spec is not None and spec.loader is not None
    soak = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = soak  # its dataclasses look their module up there
    spec.loader.exec_module(soak)
    report = soak.run(seconds=3.0, seed=1, mode=mode)
    assert report.interrupts > 30 and report.closes >= 1, report
