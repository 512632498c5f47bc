"""Building a sampler: the options it refuses, the env factories it takes (and how one that fails
is reported), every start method, the workers' settings, and the startup deadline.

A scenario number in a docstring is that of the outside fault-injection run
(docs/reliability.md#19-outside-fault-scenarios).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from helpers import ones

from vecsample import EnvMaker, VecSampler, VectorEnv, errors
from vecsample._parent import startup
from vecsample.testing import CountingEnv, SpaceEnv, fns

# --- options --------------------------------------------------------------------------------------


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


def test_env_id_with_kwargs_and_env_maker(make_sampler):
    s = make_sampler("CartPole-v1", num_envs=2, env_kwargs={"max_episode_steps": 3})
    s.reset()
    s.step(ones(2))
    s.step(ones(2))
    assert s.step(ones(2)).truncated.all()
    assert EnvMaker("CartPole-v1")().spec.id == "CartPole-v1"


def test_workers_cap_threads_and_can_be_pinned(make_sampler):
    s = make_sampler(fns(CountingEnv, 2), num_workers=2, cpu_affinity=True)
    info = s.call("process_info")
    assert {i["omp"] for i in info} == {"1"}
    assert len({i["pid"] for i in info}) == 2
    assert all(len(i["affinity"]) == 1 for i in info)
    s2 = make_sampler(fns(CountingEnv, 1), threads_per_worker=3)
    assert s2.call("process_info")[0]["omp"] == "3"


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux core masks")
def test_a_core_this_process_cannot_run_on_is_refused_naming_the_usable_ones(make_sampler):
    """Issue 33, item 3: cpu_affinity=[[999]] passed every check, then the worker died in
    sched_setaffinity and the error blamed the env ("segfault, OOM kill")."""
    usable = sorted(os.sched_getaffinity(0))
    missing = 999 if 999 not in usable else max(usable) + 1
    with pytest.raises(errors.ConfigError) as info:
        make_sampler(fns(CountingEnv, 1), cpu_affinity=[[missing]])
    message = str(info.value)
    assert message.startswith("cpu_affinity must be cores this process may run on")
    assert f"cores [{missing}] are not usable here" in message and str(usable) in message


def test_spin_before_block_is_automatic_and_configurable(make_sampler):
    import os

    cores = len(os.sched_getaffinity(0))
    auto = make_sampler(fns(CountingEnv, 2), num_workers=1)
    assert auto.layout.spin_s == pytest.approx(200e-6)  # one worker always fits the cores
    if cores > 1:  # a core left for the parent: it spins too
        assert auto.layout.parent_spin_s == pytest.approx(200e-6)
    full = make_sampler(fns(CountingEnv, cores), num_workers=cores)
    # As many workers as cores: they spin, the parent does not (it would take a worker's core).
    assert full.layout.spin_s == pytest.approx(200e-6) and full.layout.parent_spin_s == 0.0
    assert full._pool.side.spin_s == 0.0
    # "share": this process steps the last block, so one worker process fewer: it spins.
    shared = make_sampler(fns(CountingEnv, cores), num_workers=cores, env_placement="share")
    assert shared.layout.parent_spin_s == pytest.approx(200e-6)
    assert shared._pool.side.spin_s == pytest.approx(200e-6)
    crowded = make_sampler(fns(CountingEnv, cores + 1), num_workers=cores + 1)
    assert crowded.layout.spin_s == 0.0  # more workers than cores: spinning would steal their CPU
    off = make_sampler(fns(CountingEnv, 2), num_workers=2, spin_us=0)
    pinned = make_sampler(fns(CountingEnv, cores), num_workers=cores, spin_us=50)
    assert pinned.layout.parent_spin_s == pytest.approx(50e-6)  # asked for: both spin
    for s in (auto, full, crowded, off, pinned):
        s.reset()
        assert s.step(ones(s.num_envs)).obs[0, 1] == 1


def test_the_sampler_has_one_name_for_each_thing():
    """``layout`` (no ``config`` alias) and no ``hand_over()``: ``send_all`` hands the core over
    itself. Nothing was released under the old names, so they went without a warning period."""
    assert not hasattr(VecSampler, "config") and not hasattr(VecSampler, "hand_over")



# --- env factories and start methods --------------------------------------------------------------


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_every_start_method_works(make_sampler, context):
    s = make_sampler(fns(CountingEnv, 4, length=100), num_workers=2, context=context)
    s.reset()
    r = s.step(ones(4))
    np.testing.assert_array_equal(r.obs[:, 1], 1)


def _locked_factory(lock: threading.Lock) -> CountingEnv:
    assert lock is not None
    return CountingEnv()


@pytest.fixture
def another_thread():
    """A second Python thread, alive for the test: what makes forking the parent unsafe."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="another-thread")
    thread.start()
    yield thread
    stop.set()
    thread.join()


@pytest.mark.parametrize("front", [VecSampler, VectorEnv])
def test_the_fork_with_threads_warning_points_at_the_users_line(another_thread, monkeypatch,
                                                                front):
    """Issue 33, item 14: the warning pointed at vecsample's own frames (sampler.py, or
    config.py through VectorEnv): only frames under vecsample/_parent counted as vecsample's."""
    monkeypatch.setattr(startup, "_warned", set())  # given once per process: once more here
    line = sys._getframe().f_lineno + 3  # the `front(...)` line below
    with (pytest.warns(RuntimeWarning, match="context='fork' with other threads") as caught,
          contextlib.closing(
              front(fns(CountingEnv, 2), num_workers=1, context="fork"))):
        pass
    (warning,) = [w for w in caught if "context='fork'" in str(w.message)]
    assert (warning.filename, warning.lineno) == (__file__, line)


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


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_a_factory_whose_module_a_worker_cannot_import_names_it_and_the_fix(
        make_sampler, tmp_path, monkeypatch, context):
    """Issue 33, item 4: the module was importable here only (a path added after the workers'
    interpreter was set up); the worker died unpickling the factory, and the error blamed the
    env ("died during BUILD ... segfault, OOM kill"), the ModuleNotFoundError only on stderr."""
    name = f"only_here_{context}"
    (tmp_path / f"{name}.py").write_text("from vecsample.testing import CountingEnv\n\n\n"
                                          "def make():\n    return CountingEnv()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(name)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])
    del sys.modules[name]
    monkeypatch.setitem(sys.modules, name, module)  # kept here for the test, gone after it
    with pytest.raises(errors.FactoryImportError) as info:
        make_sampler([module.make], num_workers=1, context=context)
    message = str(info.value)
    for words in (f"it needs the module '{name}'", f"context='{context}'",
                  f"No module named '{name}'", "Install", "context='fork'"):
        assert words in message, words
    assert isinstance(info.value, errors.EnvFactoryError)


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


def test_an_env_without_a_gymnasium_space_is_refused_at_construction():
    with pytest.raises(errors.UnsupportedSpaceError, match=r"expected a gymnasium.spaces.Space"):
        VecSampler([functools.partial(SpaceEnv, "not a space", spaces.Discrete(2))])


# --- the startup deadline -------------------------------------------------------------------------


def _hangs_in_a_worker(parent: int) -> CountingEnv:
    if os.getpid() != parent:
        time.sleep(3600)
    return CountingEnv()


def test_startup_is_bounded_by_its_own_deadline_and_says_so():
    """Scenario 12 of the outside fault-injection run."""
    start = time.monotonic()
    with pytest.raises(errors.DeadlineExceededError, match=r"building envs.*1\.0 s.*startup"):
        VecSampler([functools.partial(_hangs_in_a_worker, os.getpid())] * 2, num_workers=2,
                   deadline=0.5, startup_deadline=1.0)
    assert time.monotonic() - start < 5.0


_FD_SCRIPT = """
import resource, sys, numpy as np
from vecsample import VecSampler, errors
from vecsample.testing import CountingEnv, fns
resource.setrlimit(resource.RLIMIT_NOFILE, (100, int(sys.argv[1])))
try:
    with VecSampler(fns(CountingEnv, 40), num_workers=40, context="fork") as s:
        s.reset()
        print("stepped", s.step(np.ones(40, dtype=np.int64)).obs.shape[0],
              resource.getrlimit(resource.RLIMIT_NOFILE)[0])
except errors.ConfigError as exc:
    print("refused:", exc)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_NOFILE on Linux")
@pytest.mark.parametrize("hard", [150, 400])
def test_the_fd_limit_is_raised_for_many_workers_or_refused_naming_it(hard):
    """Issue 42 item 6: 520 workers met a bare ValueError mid-run (the C wait's 511 fds, now
    any number). The workers' pipes and pidfds need about 3 fds each: a soft limit too low is
    raised within the hard one; a hard one too low is a ConfigError before any worker starts."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", _FD_SCRIPT, str(hard)], capture_output=True,
                         text=True, timeout=120, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.returncode == 0, out.stderr
    if hard == 150:
        assert "refused:" in out.stdout and "file-descriptor limit (150" in out.stdout
        assert "ulimit -Hn" in out.stdout
    else:
        words = out.stdout.split()
        assert words[:2] == ["stepped", "40"] and 100 < int(words[2]) <= 400, out.stdout
