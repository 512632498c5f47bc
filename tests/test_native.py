"""The step handshake's C path (vecsample/_wire/_native.c) beside the pure-Python one.

The behaviour tests of the core run on both paths (conftest.py, ``BOTH_PATHS``); these check
what is the C path's own: its layout equals handshake.py's, both paths return the same data,
a full batch costs the same Python calls whatever the number of workers, and a machine without
the C path says so and refuses to pretend it has it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vecsample import VecSampler, errors
from vecsample._parent import startup
from vecsample._parent.stepping import StepChannel
from vecsample._wire import handshake
from vecsample.testing import CountingEnv, SlowEnv, fns

needs_native = pytest.mark.skipif(not handshake.MACHINE.native,
                                  reason=str(handshake.NATIVE_MISSING))
PATHS = ("native", "python") if handshake.MACHINE.native else ("python",)


@needs_native
def test_the_c_layout_is_the_python_one():
    native = handshake._native
    assert native is not None
    for name in ("CONTROL_WORDS", "SEQ", "DONE", "REPLY", "SLEEPING", "INFO_STEP", "INFO_RESET",
                 "PARENT_SLEEPING", "CLOSING", "SCHEMA", "BELL"):
        assert getattr(native, name) == getattr(handshake, name), name
    assert round(handshake.MAX_SLEEP * 1000) == native.MAX_SLEEP_MS


def _run(make_sampler: Callable[..., VecSampler], path: str) -> list[Any]:
    """Full batches, then partial ones, of envs with infos: everything they return."""
    s = make_sampler(fns(SlowEnv, 6, info=True), num_workers=3, seed=1, handshake=path)
    out: list[Any] = [s.reset()[0].copy()]
    for t in range(20):
        r = s.step(np.full(6, t % 3, dtype=np.int64))
        out += [r.obs.copy(), r.rewards.copy(), r.terminated.copy(), dict(r.infos.items())]
    for w in range(s.num_slots):
        s.step_send(w, np.ones(2, dtype=np.int64))
    for _ in range(10):
        for r in sorted(s.step_recv(None), key=lambda r: r.worker):
            out += [r.worker, r.obs.copy(), r.rewards.copy(), dict(r.infos.items())]
            s.step_send(r.worker, np.ones(2, dtype=np.int64))
    s.step_recv(None)
    return out


@needs_native
def test_both_paths_return_the_same_data(make_sampler):
    native, python = _run(make_sampler, "native"), _run(make_sampler, "python")
    assert len(native) == len(python)
    for a, b in zip(native, python, strict=True):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
        else:
            assert a == b


def _python_calls(step: Callable[[], object]) -> int:
    """The Python function calls ``step`` makes, the wait for the workers left out (its calls
    follow how often the parent was woken, not how many workers there are): everything inside
    ``StepChannel._wait_batch``, and the handshake's own wait functions."""
    waits = str(Path(handshake.__file__).resolve())
    wait_batch = StepChannel._wait_batch.__code__
    calls, inside = 0, 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls, inside
        if frame.f_code is wait_batch:
            inside += 1 if event == "call" else -1 if event == "return" else 0
        elif event == "call" and not inside and frame.f_code.co_filename != waits:
            calls += 1

    sys.setprofile(profile)
    try:
        step()
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize("path", PATHS)
def test_a_full_batch_costs_the_same_python_calls_whatever_the_number_of_workers(
        make_sampler, path):
    """step() posts once, wakes once, waits once and reads every row once: no Python per
    worker (on the C path and on the Python one, which does the same with numpy)."""
    counts = {}
    for workers in (2, 8):
        s = make_sampler(fns(CountingEnv, 2 * workers, length=100), num_workers=workers,
                         handshake=path)
        s.reset()
        actions = np.ones(2 * workers, dtype=np.int64)
        for _ in range(3):  # the first steps learn the info columns (messages on the pipes)
            s.step(actions)
        counts[workers] = _python_calls(lambda: s.step(actions))  # noqa: B023
    assert counts[2] == counts[8], counts


@needs_native
def test_a_partial_batch_costs_the_same_python_calls_whatever_the_number_of_workers(
        make_sampler):
    """recv_batch(timeout) and step_send_many(result.workers, rows): one wait, one gather, one
    post and one wake for all of them, on the C path: no Python per worker in either."""
    counts = {}
    for workers in (2, 8):
        s = make_sampler(fns(CountingEnv, 2 * workers, length=100), num_workers=workers)
        s.reset()
        s.send_all(np.ones(2 * workers, dtype=np.int64))
        for _ in range(3):  # the first steps learn the info columns (messages on the pipes)
            s.recv_batch(None)
            s.send_all(np.ones(2 * workers, dtype=np.int64))
        while s.handshake_state().finished.tolist() != s.handshake_state().posted.tolist():
            time.sleep(0.001)  # every worker done: the batch holds all of them

        def recv_and_send(s: VecSampler = s) -> None:
            r = s.recv_batch(0.0)
            assert len(r.workers) == s.num_slots  # type: ignore[arg-type]
            s.step_send_many(r.workers, np.ones(len(r.env_ids), dtype=np.int64))

        counts[workers] = _python_calls(recv_and_send)
    assert counts[2] == counts[8], counts


def test_native_where_it_cannot_run_is_refused_with_the_reason(make_sampler, monkeypatch):
    monkeypatch.setattr(handshake, "MACHINE",
                        dataclasses.replace(handshake.MACHINE, native=False))
    monkeypatch.setattr(handshake, "NATIVE_MISSING", "the reason, in one line")
    with pytest.raises(errors.ConfigError, match=r"handshake.*'native'.*the reason, in one line"):
        VecSampler(fns(CountingEnv, 2), num_workers=1, handshake="native")


def test_auto_without_the_c_path_says_so_once_and_runs_python(make_sampler, monkeypatch):
    monkeypatch.setattr(handshake, "MACHINE",
                        dataclasses.replace(handshake.MACHINE, native=False))
    monkeypatch.setattr(handshake, "NATIVE_MISSING", "the reason, in one line")
    monkeypatch.setattr(startup, "_warned", set())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        first = VecSampler(fns(CountingEnv, 2), num_workers=1)  # here: the user's line
        try:
            assert not first.layout.native
            make_sampler(fns(CountingEnv, 2), num_workers=1)
        finally:
            first.close()
    said = [w for w in seen if "the reason" in str(w.message)]
    assert [str(w.message) for w in said] == ["the reason, in one line."]  # once per process
    assert said[0].filename == __file__  # pointing at the user's line
    second = make_sampler(fns(CountingEnv, 2), num_workers=1)
    assert not second.layout.native
    second.reset()
    assert second.step(np.ones(2, dtype=np.int64)).rewards.tolist() == [1.0, 1.0]


def test_a_build_older_than_its_source_is_declined(tmp_path):
    """A checkout changed after ``pip install -e .`` keeps its old build: the digest setup.py
    stamps into it no longer matches the source beside it, and the build is declined (an
    install that ships the build without its source is taken as it is)."""
    source = tmp_path / "_native.c"
    source.write_text("int posts;\n")
    built = types.ModuleType("_native")
    built.SOURCE_DIGEST = handshake.source_digest(source)  # type: ignore[attr-defined]
    assert not handshake.is_stale(built, source)
    source.write_text("int posts, post_many;\n")
    assert handshake.is_stale(built, source)
    assert handshake.is_stale(types.ModuleType("_native"), source)  # built before the stamp
    assert not handshake.is_stale(built, tmp_path / "not_shipped.c")


def test_this_checkout_runs_its_own_build_or_says_why_not():
    """The build this suite runs is the one of the source here; a stale one fails this test
    with the command that rebuilds it (the rest of the suite would quietly run Python)."""
    assert not handshake._STALE, handshake.NATIVE_MISSING
    assert handshake.MACHINE.native or handshake.NATIVE_MISSING


def test_python_is_always_there(make_sampler):
    s = make_sampler(fns(CountingEnv, 2), num_workers=1, handshake="python")
    assert not s.layout.native
    s.reset()
    assert s.step(np.ones(2, dtype=np.int64)).rewards.tolist() == [1.0, 1.0]


@needs_native
def test_the_c_wait_watches_any_number_of_death_fds():
    """Issue 42 item 6: past 511 death fds the C wait raised a bare ValueError mid-run; its
    poll array is now sized to what it watches (one readable fd, listed 600 times here)."""
    from vecsample._wire import _native

    control = np.zeros((2, handshake.CONTROL_WORDS), dtype=np.int64)
    doorbell, died = os.pipe(), os.pipe()
    try:
        os.write(died[1], b"x")  # a death fd polls readable
        os.set_blocking(doorbell[0], False)  # as the parent's side sets its doorbell
        parent = _native.Parent(control, 1, doorbell[0], 0.0)
        parent.post(0)  # a step in flight, never done
        fired = parent.wait([0], 1, time.monotonic() + 5.0, [died[0]] * 600)
        assert fired == [died[0]] * 600
    finally:
        for fd in (*doorbell, *died):
            os.close(fd)
