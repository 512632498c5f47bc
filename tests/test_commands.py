"""reset, reset_task, call, get_attr and set_attr: what each does, what each refuses, what a
failure in one leaves behind, and its deadline (which bounds a restart inside it too).

A scenario number in a docstring is that of the outside fault-injection run
(docs/reliability.md#19-outside-fault-scenarios).
"""

from __future__ import annotations

import functools
import os
import threading
import time

import numpy as np
import pytest
from helpers import kill_and_wait, ones, posix_only

from vecsample import errors
from vecsample.testing import CountingEnv, RaisingEnv, fns

# --- what each command does -----------------------------------------------------------------------


def test_call_get_attr_set_attr(make_sampler):
    s = make_sampler(fns(CountingEnv, 4, length=10), num_workers=2)
    assert s.get_attr("env_index") == [0, 1, 2, 3]
    s.set_attr("length", [1, 2, 3, 4])
    assert s.get_attr("length") == [1, 2, 3, 4]
    s.set_attr("length", 9)
    assert s.call("process_info")[0]["omp"] == "1" and s.get_attr("length") == [9] * 4


class TaskEnv(CountingEnv):
    def reset_task(self, task: float) -> None:
        self.task = task


def test_reset_task_gives_each_env_its_task(make_sampler):
    s = make_sampler([functools.partial(TaskEnv, i) for i in range(4)], num_workers=2)
    s.reset_task([0.5, 1.5, 2.5, 3.5])
    assert s.get_attr("task") == [0.5, 1.5, 2.5, 3.5]


class OptionsEnv(CountingEnv):
    def reset(self, *, seed=None, options=None):
        self.seen_options = options
        return super().reset(seed=seed, options=options)


def test_reset_options_reach_the_envs_as_gymnasium_passes_them(make_vector_env):
    """Scenario 19 of the outside fault-injection run."""
    env = make_vector_env([functools.partial(OptionsEnv, i) for i in range(2)], num_workers=1)
    env.reset(options="junk")  # gymnasium does not check options: the envs get them
    assert env.get_attr("seen_options") == ("junk", "junk")


@pytest.mark.parametrize("options", [5, 2.5, ["reset_mask"]])
def test_options_that_are_not_a_dict_reach_the_envs_too(make_vector_env, options):
    """Scenario 19 of the outside fault-injection run.

    Only a dict can hold a "reset_mask"; anything else is the envs' business, as in
    gymnasium (whose own ``"reset_mask" in options`` raises an untyped TypeError for an int)."""
    env = make_vector_env([functools.partial(OptionsEnv, i) for i in range(2)], num_workers=1)
    obs, _ = env.reset(options=options)
    assert env.get_attr("seen_options") == (options, options)
    np.testing.assert_array_equal(obs[:, 1], [0, 0])


# --- what each command refuses --------------------------------------------------------------------


@pytest.mark.parametrize("call", ["reset", "step", "reset_task", "get_attr"])
def test_synchronous_calls_while_steps_are_pending(sampler, call):
    sampler.step_send(1, ones(2))
    args = {"reset": (), "step": (ones(4),), "reset_task": ([0] * 4,), "get_attr": ("t",)}
    with pytest.raises(errors.PendingCallError, match=r"workers \[1\] are pending"):
        getattr(sampler, call)(*args[call])
    sampler.step_recv()
    sampler.reset()


def test_reset_task_on_a_plain_env_names_the_fix(sampler):
    with pytest.raises(errors.WorkerError, match="reset_task"):
        sampler.reset_task([0] * 4)


def test_bad_reset_arguments(sampler):
    with pytest.raises(errors.ConfigError, match="one entry per env"):
        sampler.reset(seed=[1, 2])
    with pytest.raises(errors.ConfigError, match="bool array"):
        sampler.reset(mask=[True] * 4)
    with pytest.raises(errors.ConfigError, match="no env"):
        sampler.reset(mask=np.zeros(4, dtype=bool))
    with pytest.raises(errors.ConfigError, match="one entry per env"):
        sampler.reset_task([1])
    with pytest.raises(errors.ConfigError, match="pickled"):
        sampler.call("t", lambda: 0)
    sampler.reset(seed=3)


class LockEnv(CountingEnv):
    def __init__(self, env_index: int = 0) -> None:
        super().__init__(env_index)
        self.lock = threading.Lock()


def test_an_unpicklable_reply_is_typed_and_the_worker_lives_on(make_sampler):
    """Scenario 13 of the outside fault-injection run."""
    s = make_sampler([functools.partial(LockEnv, i) for i in range(2)], num_workers=2)
    s.reset()
    pids = s.worker_pids()
    with pytest.raises(errors.ReplyPicklingError, match=r"get_attr\('lock'\).*pickle"):
        s.get_attr("lock")
    assert s.get_attr("env_index") == [0, 1]  # the same workers, still serving
    assert s.worker_pids() == pids


# --- a failure in a command -----------------------------------------------------------------------


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


# --- a command's deadline bounds a restart inside it ----------------------------------------------


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
def test_reset_wait_timeout_bounds_a_restart_inside_it(make_vector_env, tmp_path, where):
    """Scenario 3 of the outside fault-injection run."""
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
def test_call_wait_timeout_bounds_a_restart_inside_it(make_vector_env, tmp_path, where, slow,
                                                      timeout):
    """Scenario 3 of the outside fault-injection run."""
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
def test_a_commands_deadline_bounds_a_restart_inside_it(make_sampler, tmp_path, command):
    """Scenario 3 of the outside fault-injection run."""
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
