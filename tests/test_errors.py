"""Every misuse and every worker failure gives a typed error that says what to do; nothing hangs."""

from __future__ import annotations

import functools
import inspect
import pickle
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from vecsample import VecSampler, errors
from vecsample.testing import CountingEnv, DyingEnv, HangingEnv, RaisingEnv, SpaceEnv, fns


def ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.int64)


@pytest.fixture
def sampler(make_sampler):
    s = make_sampler(fns(CountingEnv, 4, length=100), num_workers=2)
    s.reset()
    return s


# --- state machine ----------------------------------------------------------------------------


def test_recv_with_nothing_pending(sampler):
    with pytest.raises(errors.NoPendingError, match="step_send"):
        sampler.step_recv()


def test_send_to_a_busy_worker(sampler):
    sampler.step_send(0, ones(2))
    with pytest.raises(errors.WorkerBusyError, match=r"worker 0.*step_recv"):
        sampler.step_send(0, ones(2))
    assert [r.worker for r in sampler.step_recv()] == [0]  # still usable
    sampler.step_send(0, ones(2))


@pytest.mark.parametrize("call", ["reset", "step", "reset_task", "get_attr"])
def test_synchronous_calls_while_steps_are_pending(sampler, call):
    sampler.step_send(1, ones(2))
    args = {"reset": (), "step": (ones(4),), "reset_task": ([0] * 4,), "get_attr": ("t",)}
    with pytest.raises(errors.PendingCallError, match=r"workers \[1\] are pending"):
        getattr(sampler, call)(*args[call])
    sampler.step_recv()
    sampler.reset()


def test_every_call_after_close(make_sampler):
    s = make_sampler(fns(CountingEnv, 2), num_workers=1)
    s.close()
    s.close()  # idempotent
    for call, args in [("reset", ()), ("step", (ones(2),)), ("step_send", (0, ones(2))),
                       ("step_recv", ()), ("call", ("t",)), ("reset_task", ([1, 2],))]:
        with pytest.raises(errors.ClosedError, match="closed"):
            getattr(s, call)(*args)


@pytest.mark.parametrize("worker", [2, -1, 1.0, True, "0"])
def test_worker_index_out_of_range_or_not_an_int(sampler, worker):
    with pytest.raises(errors.WorkerIndexError, match="worker"):
        sampler.step_send(worker, ones(2))


# --- actions ----------------------------------------------------------------------------------


def test_wrong_action_shape(sampler):
    with pytest.raises(errors.ActionShapeError, match=r"expected shape \(2,\).*got \(3,\)"):
        sampler.step_send(0, ones(3))
    sampler.step_send(0, ones(2))  # a later correct call still works


def test_wrong_action_dtype_and_nan_in_discrete(sampler):
    with pytest.raises(errors.ActionDtypeError, match=r"expected dtype int64.*float64"):
        sampler.step_send(0, np.array([0.5, 1.0]))
    with pytest.raises(errors.ActionDtypeError):
        sampler.step_send(0, np.array([np.nan, 1.0]))


def test_discrete_action_out_of_space(sampler):
    with pytest.raises(errors.ActionSpaceError, match=r"rows \[1\].*Discrete\(4\)"):
        sampler.step_send(0, np.array([0, 7]))
    with pytest.raises(errors.ActionSpaceError):
        sampler.step(np.array([0, 1, 2, -1]))


@pytest.mark.parametrize("dtype", ["<i1", ">i8", "<u2", "<i8"])
def test_discrete_bounds_hold_for_every_integer_dtype_and_byte_order(sampler, dtype):
    """Small batches are checked with Python's min/max over ``tolist()``: every dtype and byte
    order must come out as the same numbers (tests/test_spaces.py covers large batches)."""
    low = -1 if np.dtype(dtype).kind == "i" else 4
    for bad in ([0, 1, 2, low], [0, 4, 1, 1], [3, 3, 3, 100]):
        with pytest.raises(errors.ActionSpaceError):
            sampler.step(np.array(bad, dtype=dtype))
    r = sampler.step(np.array([0, 1, 2, 3], dtype=dtype))
    np.testing.assert_array_equal(r.rewards, [0, 1, 2, 3])  # CountingEnv: reward = action


def test_box_action_out_of_bounds_and_nan(make_sampler):
    s = make_sampler([functools.partial(gym.make, "Pendulum-v1")] * 2, num_workers=1)
    s.reset()
    with pytest.raises(errors.ActionSpaceError, match="above high"):
        s.step(np.array([[0.0], [2.5]]))
    with pytest.raises(errors.ActionSpaceError, match="NaN"):
        s.step(np.array([[np.nan], [0.0]]))
    with pytest.raises(errors.ActionDtypeError):
        s.step(np.array([["a"], ["b"]]))
    s.step(np.zeros((2, 1), dtype=np.float32))


def test_action_checks_can_be_turned_off_but_shape_is_still_checked(make_sampler):
    s = make_sampler([functools.partial(gym.make, "Pendulum-v1")], check_actions=False)
    s.reset()
    s.step(np.array([[5.0]]))  # out of bounds, accepted: the env clips it
    with pytest.raises(errors.ActionShapeError):
        s.step(np.zeros((2, 1)))


def test_dict_action_missing_a_key(make_sampler):
    act = spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Box(-1, 1, (2,))})
    s = make_sampler([functools.partial(SpaceEnv, spaces.Discrete(3), act)], num_workers=1)
    s.reset()
    with pytest.raises(errors.ActionShapeError, match="'b'"):
        s.step({"a": np.zeros(1, dtype=np.int64)})


# --- construction -----------------------------------------------------------------------------


def test_indivisible_env_count_suggests_divisors():
    with pytest.raises(errors.ConfigError, match=r"not divisible.*\[1, 2, 3, 6\]"):
        VecSampler(fns(CountingEnv, 6), num_workers=4)


@pytest.mark.parametrize("kwargs", [
    {"num_workers": 0}, {"num_workers": True}, {"deadline": -1.0}, {"context": "thread"},
    {"autoreset_mode": "sometimes"}, {"seed": -3}, {"seed": 1.5}, {"cpu_affinity": [[0]]},
    {"spin_us": -1},
])
def test_bad_configuration(kwargs):
    with pytest.raises(errors.ConfigError):
        VecSampler(fns(CountingEnv, 2), **{"num_workers": 2, **kwargs})


@pytest.mark.parametrize("env_fns", [[], [CountingEnv()], "CartPole-v1"])
def test_bad_env_fns(env_fns):
    with pytest.raises(errors.ConfigError):
        VecSampler(env_fns)


def test_an_env_without_a_gymnasium_space_is_refused_at_construction():
    with pytest.raises(errors.UnsupportedSpaceError, match=r"expected a gymnasium.spaces.Space"):
        VecSampler([functools.partial(SpaceEnv, "not a space", spaces.Discrete(2))])


def _locked_factory(lock: threading.Lock) -> CountingEnv:
    assert lock is not None
    return CountingEnv()


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_unpicklable_factory_under_spawn(context):
    """cloudpickle carries lambdas and closures; an object it cannot pickle is a typed error."""
    lock = threading.Lock()
    with pytest.raises(errors.EnvFactoryError, match=r"picklable by cloudpickle.*lock"):
        VecSampler([lambda: _locked_factory(lock)] * 2, num_workers=2, context=context)


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_lambdas_and_closures_work_under_every_start_method(make_sampler, context):
    def make_env(index: int):  # CleanRL's pattern: a factory that returns a local closure
        def thunk() -> CountingEnv:
            return CountingEnv(env_index=index)

        return thunk

    s = make_sampler([make_env(i) for i in range(2)], num_workers=2, context=context)
    obs, _ = s.reset()
    np.testing.assert_array_equal(obs[:, 0], [0, 1])


def test_unpicklable_factory_works_under_fork(make_sampler):
    # Lambdas cannot be pickled; fork copies them into the workers instead. Each builds its own
    # env index, so the observations also show that every worker built the env it was given.
    env_fns = [lambda i=i: CountingEnv(env_index=i) for i in range(2)]
    s = make_sampler(env_fns, num_workers=2, context="fork")
    obs, _ = s.reset()
    np.testing.assert_array_equal(obs, [[0, 0, 0, -1], [1, 0, 0, -1]])  # [env, t, episode, a]


def boom() -> CountingEnv:
    raise RuntimeError("factory exploded")


def test_factory_that_raises_in_the_parent():
    with pytest.raises(errors.EnvFactoryError, match="factory exploded"):
        VecSampler([boom, boom])


def maybe_boom(i: int) -> CountingEnv:
    if i == 3:
        raise RuntimeError("only env 3 explodes")
    return CountingEnv(i)


def test_factory_that_raises_in_a_worker_names_the_env():
    with pytest.raises(errors.EnvFactoryError, match=r"worker 1.*env 3") as info:
        VecSampler([functools.partial(maybe_boom, i) for i in range(4)], num_workers=2)
    assert "only env 3 explodes" in info.value.__cause__.remote_traceback


def mismatched(i: int) -> gym.Env:
    return SpaceEnv(spaces.Discrete(3 + i), spaces.Discrete(2))


def test_envs_with_mismatched_spaces():
    with pytest.raises(errors.EnvFactoryError, match="observation_space"):
        VecSampler([functools.partial(mismatched, i) for i in range(2)], num_workers=1)


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


# --- failures in workers ----------------------------------------------------------------------


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
    assert "vecsample/testing.py" in str(err.__cause__)  # remote frames, chained as the cause
    s.close()


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


# --- errors cross processes ---------------------------------------------------------------------

#: A value for every keyword a vecsample error takes; a new keyword must be added here.
_FIELDS = {
    "feature": "set_attr", "reason": "it has none", "fix": "do not", "env": 1, "env_mode":
    "same-step", "sampler_mode": "next-step", "script": "run.py", "line": 3, "context": "spawn",
    "call": "step", "workers": [1], "worker": 1, "current": "IDLE", "requested": "STEP",
    "num_workers": 2, "tb": "Traceback: boom", "command": "STEP", "pid": 7, "exitcode": 255,
    "message": "cannot pickle", "state": "STEP", "hung_workers": [1], "deadline": 1.5,
    "history": ["died"], "max_restarts": 2, "path": "log.vsr", "problem": "truncated",
    "expected": "step", "got": "reset", "what": "call", "package": "torch", "extra": "train",
    "step": "map", "nbytes": 4096,
}


def _every_error_class() -> list[type[BaseException]]:
    return [c for c in vars(errors).values() if isinstance(c, type) and
            issubclass(c, BaseException) and c.__module__ == errors.__name__]


@pytest.mark.parametrize("cls", _every_error_class(), ids=lambda c: c.__name__)
def test_every_error_survives_pickling_with_its_fields(cls):
    # A Ray actor's error reaches its driver pickled; Exception's own pickling calls cls(*args),
    # which a keyword-only __init__ refuses (the driver then saw UnserializableException).
    required = [p.name for p in inspect.signature(cls.__init__).parameters.values()
                if p.default is inspect.Parameter.empty and p.name != "self"
                and p.kind is not inspect.Parameter.VAR_POSITIONAL
                and p.kind is not inspect.Parameter.VAR_KEYWORD]
    kwargs = {name: _FIELDS[name] for name in required}
    error = cls(**kwargs) if kwargs else cls("what went wrong")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cls and str(copy) == str(error)
    assert vars(copy).keys() == vars(error).keys()
    for name in kwargs:
        if hasattr(error, name):
            assert getattr(copy, name) == getattr(error, name), name


def test_an_env_error_from_a_worker_survives_pickling_with_its_traceback(make_sampler):
    s = make_sampler(fns(RaisingEnv, 2, at_step=1), num_workers=1)
    s.reset()
    with pytest.raises(errors.WorkerError) as caught:
        s.step(ones(2))
    copy = pickle.loads(pickle.dumps(caught.value))
    assert str(copy) == str(caught.value) and copy.env == caught.value.env
    assert isinstance(copy.__cause__, errors.RemoteTraceback)
    assert "RuntimeError" in str(copy.__cause__)
