"""Fixtures that own process lifetimes: whatever a test creates is closed, even when it fails.

And the two handshake paths: every test of the modules in ``BOTH_PATHS`` runs once on the C
path (where it was built) and once on the pure-Python one, as two parametrised cases of the
same run (``[native]``, ``[python]``), so that one ``pytest`` run checks both.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
from helpers import force_transport

from vecsample import VecSampler, VectorEnv
from vecsample._wire import handshake
from vecsample.testing import CountingEnv, fns

# A suite started in the background by a non-interactive shell (`cmd &` in a script, as a CI
# runner may start it) inherits SIGINT ignored (POSIX), and Python then installs no
# KeyboardInterrupt handler: every Ctrl-C test would fail, and their subprocesses with them
# (an ignored signal survives exec). Python's own handler here, where the launcher left none;
# a handler set on purpose stays.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

#: The test modules that exercise the step handshake: each test of them runs on both paths.
BOTH_PATHS = frozenset({
    "test_recv", "test_restart", "test_pipeline", "test_interrupts", "test_lifetime",
    "test_commands", "test_handshake", "test_replay", "test_autoreset", "test_env_output",
    "test_hosted", "test_info_columns", "test_scaling", "test_share",
})
#: The paths this machine can run: the C one only where it was built.
PATHS = ("native", "python") if handshake.MACHINE.native else ("python",)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module.__name__.rpartition(".")[2] in BOTH_PATHS:
        metafunc.parametrize("handshake_path", PATHS, indirect=True)


@pytest.fixture(autouse=True)
def handshake_path(request: pytest.FixtureRequest,
                   monkeypatch: pytest.MonkeyPatch) -> str:
    """The handshake path of this test's samplers: "python" makes every sampler it builds take
    the pure-Python path (as ``handshake="python"`` would); "native" or "auto" leaves the
    choice to the options (the C path where it was built)."""
    path: str = getattr(request, "param", "auto")
    if path == "python":
        force_transport(monkeypatch, dataclasses.replace(handshake.MACHINE, native=False))
    return path


@pytest.fixture
def make_sampler() -> Iterator[Callable[..., VecSampler]]:
    """``make_sampler(env_fns, **kwargs)``: a VecSampler closed at teardown, pass or fail."""
    made: list[VecSampler] = []

    def make(*args: Any, **kwargs: Any) -> VecSampler:
        sampler = VecSampler(*args, **kwargs)
        made.append(sampler)
        return sampler

    yield make
    for sampler in made:
        sampler.close(timeout=2.0)


@pytest.fixture
def sampler(make_sampler):
    s = make_sampler(fns(CountingEnv, 4, length=100), num_workers=2)
    s.reset()
    return s


@pytest.fixture
def make_vector_env() -> Iterator[Callable[..., VectorEnv]]:
    """``make_vector_env(env_fns, **kwargs)``: a vecsample.VectorEnv closed at teardown."""
    made: list[VectorEnv] = []

    def make(*args: Any, **kwargs: Any) -> VectorEnv:
        env = VectorEnv(*args, **kwargs)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


@pytest.fixture(autouse=True)
def no_leaked_workers() -> Iterator[None]:
    """Every test must leave no vecsample worker behind (after its own fixtures closed)."""
    yield
    leaked = [p for p in psutil.Process().children(recursive=True) if _is_worker(p)]
    assert not leaked, f"processes left behind: {[(p.pid, p.cmdline()) for p in leaked]}"


def _is_worker(proc: psutil.Process) -> bool:
    """Anything alive below us except multiprocessing's own long-lived helper servers."""
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        helper = any(h in " ".join(proc.cmdline()) for h in ("forkserver", "resource_tracker"))
        return not (helper and proc.ppid() == os.getpid())
    except psutil.NoSuchProcess:
        return False
