"""The errors themselves: every kind of bad input is a typed error that says how to fix it,
and every error crosses processes (pickled) with its fields.

The table (R6) spans every call, so it stays one test here; each call's own refusals are in its
behaviour's file (test_recv.py, test_commands.py, test_actions.py, test_construction.py)."""

from __future__ import annotations

import copy
import inspect
import pickle
import time

import numpy as np
import pytest
from helpers import ones

from vecsample import VecSampler, errors
from vecsample.testing import CountingEnv, RaisingEnv, fns

# --- R6: bad input, one table ---------------------------------------------------------------------


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
    # The words Options gives a bad seed too (one check, seeding.check_seed).
    ("negative seed", lambda s: s.reset(seed=-1), errors.ConfigError,
     r"seed must be None or an int >= 0, got -1; pass a non-negative int"),
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


def test_a_sampler_cannot_be_pickled_and_the_error_says_what_to_pass(make_sampler,
                                                                      make_vector_env):
    """Issue 33, item 7: pickling one named an internal closure of the worker pool."""
    s = make_sampler(fns(CountingEnv, 2), num_workers=1, context="fork")
    env = make_vector_env(fns(CountingEnv, 2), 1, context="fork")
    for made, what, fix in ((s, "VecSampler", r"VecSampler\(env_fns, options=options\)"),
                            (env, "vecsample.VectorEnv", r"env.sampler.options.*VectorEnv\(")):
        for dump in (pickle.dumps, copy.deepcopy):
            with pytest.raises(TypeError, match=f"^a {what} cannot be pickled or copied: it owns "
                               f"the worker processes.*{fix}") as info:
                dump(made)
            assert isinstance(info.value, errors.SamplerPicklingError)
    s.reset()
    np.testing.assert_array_equal(s.step(ones(2)).obs[:, 1], [1, 1])  # still works


# --- errors cross processes -----------------------------------------------------------------------


#: A value for every keyword a vecsample error takes; a new keyword must be added here.
_FIELDS = {
    "feature": "set_attr", "reason": "it has none", "fix": "do not", "env": 1, "env_mode":
    "same-step", "sampler_mode": "next-step", "script": "run.py", "line": 3, "context": "spawn",
    "call": "step", "workers": [1], "worker": 1, "current": "IDLE", "requested": "STEP",
    "num_workers": 2, "tb": "Traceback: boom", "command": "STEP", "pid": 7, "exitcode": 255,
    "message": "cannot pickle", "state": "STEP", "hung_workers": [1], "deadline": 1.5,
    "history": ["died"], "max_restarts": 2, "path": "log.vsr", "problem": "truncated",
    "expected": "step", "got": "reset", "what": "call", "package": "torch", "extra": "train",
    "step": "map", "nbytes": 4096, "thread": "Thread-1", "holder": "MainThread",
    "doing": "is inside a call", "owner": 6,
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


@pytest.mark.parametrize("name", ["SharedMemorySpaceError", "UnsupportedOptionError",
                                  "AlreadyPendingError", "ActionCountError", "as_env_exception"])
def test_the_gymnasium_adapters_errors_live_only_beside_it(name):
    """No alias in vecsample.errors (nothing was released under the old names), and so no
    import of the adapter from the errors module."""
    from vecsample.adapters import errors as adapter_errors

    assert hasattr(adapter_errors, name)
    with pytest.raises(AttributeError, match=f"no attribute '{name}'"):
        getattr(errors, name)
