"""The step handshake (vecsample/_wire/handshake.py): counters in shared memory, pipes as doorbells.

Each test drives the paths that do not show in a plain benchmark: both sides asleep on every
step (spinning off), the unordered protocol of non-x86 platforms, infos larger than a pipe
buffer, and infos that cannot be pickled.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np
import pytest
from helpers import force_transport, ones

from vecsample import errors
from vecsample._parent import layout
from vecsample._wire import handshake
from vecsample.testing import CountingEnv, DyingEnv, SlowEnv, fns


def mixed_rounds(sampler: Any, workers: int, per: int, rounds: int, seed: int = 0) -> int:
    """Random partial and full recvs; checks every env's step counter. Returns partial rounds."""
    rng = np.random.default_rng(seed)
    sent = np.zeros(workers, dtype=int)
    for w in range(workers):
        sampler.step_send(w, ones(per))
        sent[w] += 1
    partial = 0
    for _ in range(rounds):
        results = sampler.step_recv([None, 0.0, 1e-4][rng.integers(3)])
        partial += len(results) < workers
        for r in results:
            np.testing.assert_array_equal(r.obs[:, 1], sent[r.worker])
            sampler.step_send(r.worker, ones(per))
            sent[r.worker] += 1
    for r in sampler.step_recv(None):
        np.testing.assert_array_equal(r.obs[:, 1], sent[r.worker])
    assert sampler.stats()["env_steps"] == sent.sum() * per
    return partial


@pytest.mark.parametrize("pipeline", [False, True])
def test_a_command_does_not_wait_for_a_spinning_worker(make_sampler, monkeypatch, pipeline):
    """Issue 33, item 5: a worker that spins for its next step polled only its counters, so a
    command (reset, call, close) waited on its pipe for the whole spin: 2 s with spin_us=2e6.
    Options now caps the spin at 10 ms; here a 3 s spin is forced past that cap, and each
    command must still be read at once (the worker sees its COMMANDS word move)."""
    monkeypatch.setattr(layout, "spin_seconds", lambda spin_us, processes: 3.0)
    s = make_sampler(fns(CountingEnv, 4), num_workers=2, pipeline=pipeline, context="fork")
    assert s.layout.spin_s == 3.0
    s.reset()
    for _ in range(3):
        s.step(ones(4))  # then every worker spins for its next step
        start = time.monotonic()
        s.reset()
        assert s.get_attr("env_index") == [0, 1, 2, 3]
        assert time.monotonic() - start < 1.0
    start = time.monotonic()
    s.close(timeout=2.0)  # CLOSE is a command too: no worker is terminated after the timeout
    assert time.monotonic() - start < 1.0


@pytest.mark.parametrize("pipeline", [False, True])
@pytest.mark.parametrize("spin_us", [0, 30])
def test_no_wake_up_is_lost(make_sampler, monkeypatch, spin_us, pipeline):
    """With sleeps made 60 s long, one lost ring would blow the 10 s deadline.

    ``spin_us=0`` puts both sides to sleep on every step, so each step needs a ring both ways;
    the envs' random 0-60 µs sleeps move the race between "going to sleep" and "posting".
    fork carries the patched MAX_SLEEP into the workers. With ``pipeline`` each process sleeps
    for two workers at once (handshake.Waiter).
    """
    monkeypatch.setattr(handshake, "MAX_SLEEP", 60.0)
    s = make_sampler(fns(SlowEnv, 4, step_time=3e-5, tail="uniform", spread=1.0),
                     num_workers=2, infos=False, context="fork", spin_us=spin_us, deadline=10.0,
                     pipeline=pipeline)
    s.reset()
    mixed_rounds(s, workers=s.num_slots, per=s.envs_per_slot, rounds=1500)


@pytest.mark.parametrize(("context", "pipeline"), [("fork", False), ("forkserver", False),
                                                   ("fork", True)])
def test_unordered_platform_protocol(make_sampler, monkeypatch, context, pipeline):
    """The protocol used off x86: every post and reply rings, readiness comes from the rings
    (with ``pipeline``, a process sleeps on both its workers' pipes)."""
    force_transport(monkeypatch, handshake.Transport(native=False, ordered=False, futex=False))
    s = make_sampler(fns(SlowEnv, 6, step_time=2e-5, tail="uniform", spread=1.0),
                     num_workers=3, infos=False, context=context, pipeline=pipeline)
    assert not s.handshake_state().ordered
    s.reset()
    assert mixed_rounds(s, workers=s.num_slots, per=s.envs_per_slot, rounds=600) > 20


class BigInfoEnv(CountingEnv):
    """Every step's info holds ``size`` bytes: far more than a pipe buffer holds."""

    def __init__(self, env_index: int = 0, size: int = 1 << 21) -> None:
        super().__init__(env_index=env_index, length=1000)
        self.size = size

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"blob": bytes([self.env_index]) * self.size}


def test_infos_larger_than_a_pipe_buffer_arrive(make_sampler):
    s = make_sampler(fns(BigInfoEnv, 4), num_workers=2, deadline=30.0)
    s.reset()
    for _ in range(3):
        r = s.step(ones(4))
        assert sorted(r.infos) == [0, 1, 2, 3]
        for i, info in r.infos.items():
            assert info["blob"] == bytes([i]) * (1 << 21)


class LambdaInfoEnv(CountingEnv):
    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"fn": lambda: None}


def test_unpicklable_infos_are_a_typed_error_not_a_hang(make_sampler):
    s = make_sampler([functools.partial(LambdaInfoEnv, env_index=i) for i in range(2)],
                     num_workers=2, deadline=10.0)
    s.reset()
    with pytest.raises(errors.WorkerError, match="cannot be pickled") as info:
        s.step(ones(2))
    assert info.value.command == "STEP"
    # Both workers' infos hold a lambda: both are read in the one wait and reported, none left.
    assert {info.value.worker, *(e.worker for e in info.value.others)} == {0, 1}
    with pytest.raises(errors.WorkerLostError):
        s.step(ones(2))  # the failed worker is not silently reused


def test_restart_resets_the_counters(make_sampler):
    """A respawned worker starts at the parent's counter, so its first step is a fresh one."""
    s = make_sampler(fns(DyingEnv, 2, at_step=3, bad_index=1), num_workers=2, restart=True,
                     max_restarts=4)
    s.reset()
    seen_restart = False
    for _ in range(8):
        r = s.step(ones(2))
        seen_restart |= bool(r.restarted.any())
    assert seen_restart
    state = s.handshake_state()
    # Every posted step finished: DONE caught up with SEQ on both workers.
    np.testing.assert_array_equal(state.finished, state.posted)


class TextActionEnv(CountingEnv):
    """Text actions: a pickled leaf, sent on the worker's pipe right after its step is posted."""

    def __init__(self, env_index: int = 0) -> None:
        super().__init__(env_index=env_index, length=10**9)
        from gymnasium import spaces

        self.action_space = spaces.Text(4)

    def step(self, action: Any) -> Any:
        return super().step(len(action))


def test_pickled_actions_to_sleeping_workers_are_never_read_as_commands(make_sampler):
    # spin_us=0: every worker goes to sleep after each step, so each post wakes a sleeper and
    # its actions reach the pipe while it wakes. A worker that looked at the pipe after the
    # post but before seeing SEQ used to take those actions for a command and die (fixed in
    # handshake.WorkerSide._sleep_on_bell; this loop failed within 20,000 steps before).
    s = make_sampler(fns(TextActionEnv, 4), num_workers=4, spin_us=0)
    s.reset(seed=0)
    for _ in range(20_000):
        r = s.step(("a", "bb", "ccc", "dddd"))
    np.testing.assert_array_equal(r.rewards, [1, 2, 3, 4])
