"""vecsample.VectorEnv returns exactly what gymnasium's SyncVectorEnv returns, step for step, and
takes AsyncVectorEnv's keywords, asynchronous API and error types (gymnasium's own tests run in
test_gymnasium_suite.py)."""

from __future__ import annotations

import functools
import multiprocessing
import os
import re
import time
import warnings
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import error as gym_error
from gymnasium import spaces
from helpers import assert_same, record_calls, run_file

from vecsample import errors, make_vec
from vecsample.adapters import errors as adapter_errors
from vecsample.machine import usable_cores
from vecsample.testing import CountingEnv, RaisingEnv, SlowEnv, SpaceEnv, fns

NESTED_OBS = spaces.Dict({
    "pos": spaces.Box(-1.0, 1.0, (2,), np.float32),
    "inner": spaces.Tuple((spaces.Discrete(5), spaces.MultiBinary(3))),
})
NESTED_ACT = spaces.Tuple((spaces.Discrete(3), spaces.Box(-1.0, 1.0, (2,), np.float64)))

ENVS = {
    "CartPole": lambda i: gym.make("CartPole-v1"),
    "Pendulum": lambda i: gym.make("Pendulum-v1", max_episode_steps=15),
    "Counting+infos": lambda i: CountingEnv(i, length=3 + i, truncate=i % 2 == 0, info=True),
    "Nested spaces": lambda i: SpaceEnv(NESTED_OBS, NESTED_ACT, i, length=4 + i),
}


def build(name: str, i: int) -> gym.Env:
    return ENVS[name](i)


def factories(name: str, n: int = 4) -> list:
    return [functools.partial(build, name, i) for i in range(n)]


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
@pytest.mark.parametrize("name", list(ENVS))
def test_matches_sync_vector_env(make_vector_env, name, mode):
    ref = gym.vector.SyncVectorEnv(factories(name), autoreset_mode=mode)
    ours = make_vector_env(factories(name), num_workers=2, autoreset_mode=mode)
    try:
        assert ours.single_observation_space == ref.single_observation_space
        assert ours.action_space == ref.action_space
        assert_same(ref.reset(seed=11), ours.reset(seed=11), "reset")
        ref.action_space.seed(5)
        for t in range(40):
            actions = ref.action_space.sample()
            expected, got = ref.step(actions), ours.step(actions)
            assert_same(expected, got, f"step {t}")
            # gymnasium's own tests compare types (data_equivalence): a dict, not a subclass.
            assert type(got[4]) is dict, f"step {t}: infos are a {type(got[4]).__name__}"
            done = expected[2] | expected[3]
            if mode == "Disabled" and done.any():
                options = {"reset_mask": done}
                assert_same(ref.reset(options=dict(options)), ours.reset(options=options))
    finally:
        ref.close()


def test_disabled_mode_refuses_to_step_ended_envs(make_vector_env):
    env = make_vector_env(factories("Counting+infos", 2), num_workers=1, autoreset_mode="Disabled")
    env.reset(seed=0)
    for _ in range(3):
        env.step(np.ones(2, dtype=np.int64))
    with pytest.raises(errors.PendingCallError, match="reset_mask"):
        env.step(np.ones(2, dtype=np.int64))
    env.reset(options={"reset_mask": np.array([True, False])})
    env.step(np.ones(2, dtype=np.int64))


def test_make_vec_and_attribute_calls():
    env = make_vec("CartPole-v1", 4, num_workers=2)
    try:
        obs, _ = env.reset(seed=[1, 2, 3, 4])
        assert obs.shape == (4, 4) and env.num_envs == 4
        assert env.get_attr("spec")[0].id == "CartPole-v1"
        assert len(env.call("render")) == 4
        assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
        assert env.sampler.num_workers == 2
    finally:
        env.close()
    assert env.sampler.closed


def test_copy_false_returns_views(make_vector_env):
    env = make_vector_env(factories("Counting+infos", 2), num_workers=1, copy=False)
    obs, _ = env.reset()
    env.step(np.ones(2, dtype=np.int64))
    assert obs[0, 1] == 1  # the reset obs array now shows step 1: it is the shared buffer


def test_step_wait_without_step_async(make_vector_env):
    env = make_vector_env(factories("CartPole", 2), num_workers=1)
    env.reset()
    with pytest.raises(errors.NoPendingError):
        env.step_wait()
    with pytest.raises(errors.ConfigError):
        env.reset(seed="seven")
    with pytest.raises(errors.ConfigError, match="one seed per env, expected 2, got 3"):
        env.reset(seed=[1, 2, 3])


# --- AsyncVectorEnv's API and errors -------------------------------------------------------------


class CountEnv(gym.Env[int, np.int64]):
    """Discrete observations as Python ints (as gymnasium's toy-text envs return them): the step
    count; ends after ``length`` steps; info names the env."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 7}

    def __init__(self, env_index: int = 0, length: int = 2, render_mode: str | None = None):
        self.observation_space = spaces.Discrete(10)
        self.action_space = spaces.Discrete(3)
        self.env_index, self.length, self.render_mode = env_index, length, render_mode
        self.count = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        time.sleep((options or {}).get("sleep", 0.0))
        self.count = 0
        return self.count, {"options": options}

    def step(self, action: Any):
        self.count += 1
        return self.count, float(action), self.count >= self.length, False, {"env": self.env_index}

    def render(self) -> np.ndarray:
        return np.full((2, 2, 3), self.env_index, dtype=np.uint8)

    def explode(self) -> None:
        raise KeyError(f"env {self.env_index} exploded")


class OddSpace(gym.Space[Any]):
    """A custom space: shared memory cannot hold it."""

    def contains(self, x: Any) -> bool:
        return True


def test_the_async_api_out_of_order_raises_gymnasiums_errors(make_vector_env):
    env = make_vector_env(fns(CountEnv, 2), num_workers=1)
    with pytest.raises(gym_error.NoAsyncCallError, match=re.escape(
            "Calling `reset_wait` without any prior call to `reset_async`.")) as no_call:
        env.reset_wait()
    assert isinstance(no_call.value, errors.NoPendingError) and no_call.value.name == "reset"
    assert not isinstance(no_call.value, gym_error.AlreadyPendingCallError)
    env.reset_async(seed=0)
    expected = "Calling `step_async` while waiting for a pending call to `reset` to complete"
    with pytest.raises(gym_error.AlreadyPendingCallError, match=re.escape(expected)) as busy:
        env.step_async(np.zeros(2, dtype=np.int64))
    assert isinstance(busy.value, adapter_errors.AlreadyPendingError) and busy.value.name == "reset"
    with pytest.raises(errors.NoPendingError, match="`reset` is pending"):
        env.step_wait()
    obs, infos = env.reset_wait()
    assert obs.tolist() == [0, 0] and infos["options"].tolist() == [None, None]
    env.step_async(np.ones(2, dtype=np.int64))
    with pytest.raises(gym_error.AlreadyPendingCallError, match="pending call to `step`"):
        env.call("render")
    with pytest.warns(UserWarning, match=re.escape(
            "Calling `close` while waiting for a pending call to `step` to complete.")):
        env.close(terminate=True)
    with pytest.raises(gym_error.ClosedEnvironmentError, match="VectorEnv is closed") as closed:
        env.reset()
    assert isinstance(closed.value, errors.ClosedError)


def test_call_async_render_metadata_and_seeds(make_vector_env):
    env = make_vector_env([functools.partial(CountEnv, i, render_mode="rgb_array")
                           for i in range(3)], num_workers=1)
    assert env.render_mode == "rgb_array" and env.metadata["render_fps"] == 7
    assert "autoreset_mode" not in CountEnv.metadata
    env.reset(seed=5)
    assert env.np_random_seed == (5, 6, 7)
    frames = env.render()
    assert isinstance(frames, tuple) and [f[0, 0, 0] for f in frames] == [0, 1, 2]
    env.call_async("render")
    assert len(env.call_wait(timeout=10.0)) == 3
    assert env.get_attr("length") == (2, 2, 2)


class KeywordEnv(CountingEnv):
    def bound(self, *, deadline: float) -> float:
        return deadline * 2


def test_call_passes_a_keyword_named_deadline_to_the_envs(make_vector_env):
    env = make_vector_env(fns(KeywordEnv, 2), num_workers=1, deadline=30)
    env.call_async("bound", deadline=3.0)  # the env method's keyword, not the call's bound
    assert env.call_wait(timeout=10.0) == (6.0, 6.0)
    assert env.sampler.call_with("bound", (), {"deadline": 1.0}, deadline=10.0) == [2.0, 2.0]


def test_step_wait_timeout_is_a_multiprocessing_timeout_and_keeps_the_step(make_vector_env):
    env = make_vector_env(fns(SlowEnv, 2, step_time=0.5), num_workers=2)
    env.reset(seed=0)
    env.step_async(np.ones(2, dtype=np.int64))
    with pytest.raises(multiprocessing.TimeoutError) as late:
        env.step_wait(timeout=0.05)
    assert isinstance(late.value, errors.DeadlineExceededError)
    obs, rewards, *_ = env.step_wait()  # the late step was kept, not lost
    assert obs[:, 1].tolist() == [1, 1] and rewards.tolist() == [1.0, 1.0]


def test_reset_wait_timeout(make_vector_env):
    env = make_vector_env(fns(CountEnv, 2), num_workers=1)
    env.reset_async(seed=0, options={"sleep": 0.01})
    assert env.reset_wait(timeout=10.0)[0].tolist() == [0, 0]
    env.reset_async(options={"sleep": 0.5})
    with pytest.raises(multiprocessing.TimeoutError, match=r"deadline=0\.05"):
        env.reset_wait(timeout=0.05)
    with pytest.raises(errors.NoPendingError):
        env.reset_wait()  # the timed-out reset is over, as in gymnasium


@pytest.mark.parametrize(("mask", "error", "message"), [
    ([True, False], TypeError, "must be a numpy array, got <class 'list'>"),
    (np.array([True]), ValueError, "must have shape `(2,)`, got (1,)"),
    (np.array([[True, True]]), ValueError, "must have shape `(2,)`, got (1, 2)"),
    (np.array([1, 0]), TypeError, "must have `dtype=np.bool_`, got int64"),
    (np.array([False, False]), ValueError,
     "must contain a boolean array with at least one True value, got reset_mask=[False False]"),
])
def test_reset_mask_errors_match_gymnasium(make_vector_env, mask, error, message):
    env = make_vector_env(fns(CountEnv, 2), num_workers=1, autoreset_mode="Disabled")
    with pytest.raises(error, match=re.escape(f"`options['reset_mask']` {message}")) as info:
        env.reset(options={"reset_mask": mask})
    assert isinstance(info.value, errors.ResetMaskError)


def test_reset_mask_leaves_the_callers_options_alone(make_vector_env):
    env = make_vector_env(fns(CountEnv, 2), num_workers=1, autoreset_mode="Disabled")
    env.reset()
    options = {"reset_mask": np.array([False, True]), "level": 3}
    _, infos = env.reset(options=options)
    assert "reset_mask" in options
    assert infos["_options"].tolist() == [False, True]
    assert infos["options"]["level"].tolist() == [0, 3]  # gymnasium's vector info of a dict


def test_action_count_checks(make_vector_env):
    env = make_vector_env(fns(CountEnv, 2), num_workers=1)
    env.reset()
    with pytest.raises(TypeError, match="expected a batch of 2 actions") as scalar:
        env.step(0)
    assert isinstance(scalar.value, adapter_errors.ActionCountError)
    for wrong in (np.zeros(1, dtype=np.int64), np.zeros(3, dtype=np.int64)):
        with pytest.raises(ValueError, match="one row per env"):
            env.step(wrong)
    env.step([0, 1])  # a list of single actions is a batch


def test_same_step_final_obs_are_what_the_env_returned(make_vector_env):
    env = make_vector_env(fns(CountEnv, 2, length=1), num_workers=1, autoreset_mode="SameStep")
    env.reset()
    _, _, terminated, _, infos = env.step(np.ones(2, dtype=np.int64))
    assert terminated.tolist() == [True, True]
    assert [type(x) for x in infos["final_obs"]] == [int, int]  # as SyncVectorEnv: no 0-d arrays
    assert infos["final_info"]["env"].tolist() == [0, 1]


def test_env_exceptions_are_logged_as_gymnasium_logs_them(make_vector_env):
    env = make_vector_env(fns(RaisingEnv, 2, at_step=1, bad_index=1), num_workers=1)
    env.reset()
    with warnings.catch_warnings(record=True) as caught, \
            pytest.raises(RuntimeError, match="injected failure in step 1 of env 1") as info:
        warnings.simplefilter("always")
        env.step(np.zeros(2, dtype=np.int64))
    assert isinstance(info.value, errors.WorkerError) and info.value.env == 1
    lines = [str(w.message) for w in caught]
    assert len(lines) == 3 and "Received the following error from Worker-1" in lines[0]
    assert "RuntimeError: injected failure" in lines[1] and "Raising the last" in lines[2]


def test_env_exceptions_keep_their_builtin_type(make_vector_env):
    env = make_vector_env(fns(CountEnv, 2), num_workers=1)
    with warnings.catch_warnings(), pytest.raises(KeyError, match="env 0 exploded") as info:
        warnings.simplefilter("ignore")
        env.call("explode")
    assert isinstance(info.value, errors.WorkerError)  # and still vecsample's error


def test_shared_memory_false_returns_copies(make_vector_env):
    env = make_vector_env(factories("Counting+infos", 2), num_workers=1, shared_memory=False,
                          copy=False)
    obs, _ = env.reset()
    env.step(np.ones(2, dtype=np.int64))
    assert obs[0, 1] == 0 and env.shared_memory is False


@pytest.mark.parametrize(("space", "error", "message"), [
    (spaces.Graph(spaces.Discrete(3), None), TypeError,
     "Graph has a dynamic shape so its not possible to make a static shared memory."),
    (spaces.Dict({"a": spaces.Sequence(spaces.Discrete(2))}), TypeError,
     "Sequence (at a) has a dynamic shape"),
    (OddSpace(), ValueError, "OddSpace is a custom space"),
])
def test_shared_memory_refuses_what_asyncvectorenv_refuses(space, error, message):
    env_fn = functools.partial(SpaceEnv, space, spaces.Discrete(2))
    with pytest.raises(error, match=re.escape(message)) as info:
        errors_vector_env([env_fn] * 2)
    assert isinstance(info.value, adapter_errors.SharedMemorySpaceError)
    assert "shared_memory=False" in str(info.value)


def errors_vector_env(env_fns: list) -> None:
    from vecsample import VectorEnv

    VectorEnv(env_fns, shared_memory=True).close()  # raises before any worker starts


def test_asyncvectorenv_keywords(make_vector_env):
    env = make_vector_env(fns(CountEnv, 4), shared_memory=True, copy=True, context=None,
                          daemon=True, worker=None, observation_mode="same",
                          autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, max_concurrency=2)
    assert env.sampler.num_workers <= 2 and env.autoreset_mode is gym.vector.AutoresetMode.SAME_STEP
    assert env.metadata["autoreset_mode"] is gym.vector.AutoresetMode.SAME_STEP


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"worker": print}, adapter_errors.UnsupportedOptionError, "custom worker function cannot run"),
    ({"observation_mode": "different"}, adapter_errors.UnsupportedOptionError,
     "equal the first env's"),
    ({"observation_mode": (spaces.Discrete(2), spaces.Discrete(2))},
     adapter_errors.UnsupportedOptionError, "observation_mode must be 'same'"),
    ({"observation_mode": "sometimes"}, errors.ConfigError, "observation_mode must be 'same'"),
    ({"max_concurrency": 0}, errors.ConfigError, "max_concurrency must be an int >= 1"),
    ({"max_concurrency": 1, "num_workers": 2}, errors.ConfigError, "pass num_workers <= 1"),
    ({"num_workers": False}, errors.ConfigError, "pass shared_memory= and the other"),
])
def test_options_vecsample_cannot_honour(kwargs, error, message):
    from vecsample import VectorEnv

    with pytest.raises(error, match=re.escape(message)):
        VectorEnv(fns(CountEnv, 2), **kwargs).close()


def test_daemon_false_warns(make_vector_env):
    with pytest.warns(UserWarning, match="always daemonic"):
        env = make_vector_env(fns(CountEnv, 2), num_workers=1, daemon=False)
    assert env.daemon is True


def test_any_env_count_gets_a_worker_count(make_vector_env):
    env = make_vector_env(fns(CountEnv, 3, length=5), num_workers=2)
    env.reset()
    assert env.step(np.ones(3, dtype=np.int64))[0].tolist() == [1, 1, 1]
    default = make_vector_env(fns(CountEnv, 5))
    assert default.sampler.num_workers == min(5, usable_cores())


@pytest.mark.parametrize("shared_memory", [True, False])
def test_observations_with_no_fixed_shape_are_tuples_as_in_gymnasium(make_vector_env,
                                                                      shared_memory):
    space = spaces.Dict({"text": spaces.Text(5), "n": spaces.Discrete(3)})
    env = make_vector_env([functools.partial(SpaceEnv, space, spaces.Discrete(2), i)
                           for i in range(2)], shared_memory=shared_memory)
    obs, _ = env.reset(seed=0)
    assert isinstance(obs["text"], tuple) and all(isinstance(t, str) for t in obs["text"])
    assert obs["n"].shape == (2,) and obs in env.observation_space


def test_every_failing_worker_is_read_and_reported(make_vector_env):
    env = make_vector_env(fns(RaisingEnv, 4, at_step=1), num_workers=2)  # every env raises
    env.reset()
    with warnings.catch_warnings(record=True) as caught, pytest.raises(RuntimeError) as info:
        warnings.simplefilter("always")
        env.step(np.zeros(4, dtype=np.int64))
    lines = [str(w.message) for w in caught]
    assert len(lines) == 5 and "Raising the last exception" in lines[4]
    assert {re.search(r"Worker-(\d)", line)[1] for line in lines[0:4:2]} == {"0", "2"}
    assert info.value.env in (0, 2)
    with pytest.raises(errors.WorkerLostError):  # not WorkerBusyError: no step was left unread
        env.reset()


def test_step_hands_the_core_over_between_posting_and_waiting(make_vector_env, monkeypatch):
    env = make_vector_env(fns(CountingEnv, 4, length=100), num_workers=2)
    env.reset(seed=0)
    # A spy on the sampler's channel; nothing of VectorEnv's own state is touched.
    calls = record_calls(env._sampler._channel, ("send_all", "collect_batch"), monkeypatch)
    monkeypatch.setattr(os, "sched_yield", lambda: calls.append("hand_over"))  # send_all's yield
    env.step(np.ones(4, dtype=np.int64))
    # VectorEnv.step is VecSampler.step, one call: its post yields the core itself (issue 31),
    # and the wait is the full batch in one call (issue 32); the wait's own spin may yield
    # after it.
    assert calls[:3] == ["send_all", "hand_over", "collect_batch"]


def test_stats_show_what_vector_env_adds_to_a_step(make_vector_env):
    env = make_vector_env(fns(CountingEnv, 4, length=100, info=True), num_workers=2)
    env.reset(seed=0)
    stats = env.sampler.stats()
    assert stats["vector_infos_s"] == stats["obs_copy_s"] == 0.0
    for _ in range(5):
        env.step(np.ones(4, dtype=np.int64))  # the infos are built at every step
    stats = env.sampler.stats()
    assert stats["vector_infos_s"] > 0 and stats["obs_copy_s"] > 0
    assert stats["vector_infos_pct"] + stats["obs_copy_pct"] < 100


GUARDED_REGISTRATIONS = """
import functools, threading
import gymnasium as gym
import vecsample
from vecsample import EnvMaker, HostedVector, VecSampler, VectorEnv
from vecsample.testing import CountingEnv

class TopLevelEnv(CountingEnv):
    pass

if __name__ == "__main__":
    class GuardedEnv(CountingEnv):
        pass

    gym.register("TopLevelClass-v0", entry_point=TopLevelEnv)
    gym.register("MainString-v0", entry_point="__main__:TopLevelEnv")
    gym.register("GuardedClass-v0", entry_point=GuardedEnv)
    stop = threading.Event()  # a thread, as SummaryWriter starts: "auto" picks forkserver
    thread = threading.Thread(target=stop.wait)
    thread.start()
    space = CountingEnv().observation_space, CountingEnv().action_space
    ways = {
        "make_vec": lambda: vecsample.make_vec("TopLevelClass-v0", 2, num_workers=1),
        "EnvMaker": lambda: VectorEnv([EnvMaker("MainString-v0")] * 2, num_workers=1),
        "partial": lambda: VectorEnv([functools.partial(gym.make, "GuardedClass-v0")] * 2,
                                     num_workers=1),
        "env id": lambda: VecSampler("GuardedClass-v0", num_envs=2),
        "hosted": lambda: VecSampler(HostedVector("GuardedClass-v0", "sync"), num_envs=2,
                                     autoreset_mode="NextStep"),
        "closure": lambda: VectorEnv([lambda: gym.make("GuardedClass-v0")] * 2, num_workers=1,
                                     observation_space=space[0], action_space=space[1]),
    }
    try:
        for way, make in ways.items():
            try:
                made = make()
            except Exception as exc:
                print(f"{way}: {type(exc).__name__}: {exc}")
                continue
            print(f"{way}: {made.context}: {made.reset()[0][:, 0].tolist()}")
            made.close()
    finally:
        stop.set()
        thread.join()
"""


def test_envs_registered_under_the_main_guard_reach_forkserver_workers(tmp_path):
    """Issue 33, item 8: with a thread running, "auto" picks forkserver, whose workers run the
    main script without its guard: an env registered there was missing (NameNotFound). The
    workers now get the parent's registrations of the ids an env id, EnvMaker, make_vec,
    functools.partial(gym.make, id) or a hosted env names; a closure gets an error that says
    why and what to do (docs/gymnasium.md)."""
    script = tmp_path / "registers_under_the_guard.py"
    script.write_text(GUARDED_REGISTRATIONS)
    proc = run_file(script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    said = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
    for way in ("make_vec", "EnvMaker", "partial", "env id", "hosted"):
        assert said[way] == "forkserver: [0.0, 0.0]", f"{way}: {said[way]}"
    closure = said["closure"]
    assert closure.startswith("EnvNotRegisteredError: worker 0 could not build its envs "
                              "(env 0): "), closure
    for words in ("NameNotFound", "context='forkserver'", 'if __name__ == "__main__":',
                  "EnvMaker(id)", "functools.partial(gymnasium.make, id)", "context='fork'"):
        assert words in closure, words
    assert "Traceback" not in proc.stderr, proc.stderr
