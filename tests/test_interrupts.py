"""SIGTERM and SIGINT: in the parent they close the workers cleanly; in a call they lose nothing.

A Ctrl-C during a call leaves a working sampler (or a closed one). ``step_send`` and ``send_all``
raise KeyboardInterrupt only before their post; from the post on, a SIGINT is held and raised by
the next vecsample call, before that call does anything (docs/semantics.md, "Interrupts"). The
held-interrupt tests inject the SIGINT at fixed points of the call; the storm test sends one at a
random point of a send/recv loop, round after round, and checks the same invariant after each: a
call that raised changed nothing, a call that returned did its work.

A scenario number in a docstring is that of the outside fault-injection run
(docs/reliability.md#19-outside-fault-scenarios).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from helpers import ones, posix_only

from vecsample import VecSampler, errors
from vecsample._parent import signals
from vecsample._parent.signals import critical
from vecsample.testing import CountingEnv, SlowEnv, fns

# --- SIGTERM and Ctrl-C in the parent -------------------------------------------------------------


SIGNAL_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    from vecsample import VecSampler
    from vecsample.testing import CloseRecordingEnv, fns
    if __name__ == "__main__":
        s = VecSampler(fns(CloseRecordingEnv, 4, marker=sys.argv[1], step_time=0.01),
                       num_workers=2, context=sys.argv[2])
        s.reset()
        s.step(np.ones(4, dtype=np.int64))
        print(" ".join(map(str, s.worker_pids())), flush=True)
        while True:  # the signal arrives while a step is in flight, most of the time
            s.step(np.ones(4, dtype=np.int64))
""")


@pytest.mark.parametrize(("sig", "context"), [(signal.SIGTERM, "forkserver"),
                                              (signal.SIGTERM, "fork"),
                                              (signal.SIGINT, "forkserver")])
def test_sigterm_and_sigint_in_the_parent_close_the_workers_cleanly(tmp_path, sig, context):
    script, marker = tmp_path / "child.py", tmp_path / "closed.txt"
    script.write_text(SIGNAL_CHILD)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    # A new session, so SIGINT goes to the whole process group, as Ctrl-C in a terminal does.
    with subprocess.Popen([sys.executable, str(script), str(marker), context],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
                          start_new_session=True) as parent:
        try:
            pids = [int(p) for p in parent.stdout.readline().split()]
            assert len(pids) == 2, parent.stderr.read()
            time.sleep(0.2)
            # SIGINT to the whole group, as Ctrl-C in a terminal; SIGTERM to the parent, as
            # `kill PID` (a group-wide SIGTERM kills the workers directly, see reliability.md).
            if sig == signal.SIGINT:
                os.killpg(parent.pid, sig)
            else:
                parent.send_signal(sig)
            code = parent.wait(10)
            stderr = parent.stderr.read()
        finally:
            if parent.poll() is None:
                os.killpg(parent.pid, signal.SIGKILL)
    assert code == -sig, stderr  # died of the signal (Python re-raises an uncaught SIGINT)
    closed = [line.split() for line in marker.read_text().splitlines()]
    # Every env was closed by its worker (the parent's probe env, closed in the parent, aside).
    assert sorted(int(env) for env, pid in closed if int(pid) in pids) == [0, 1, 2, 3]
    assert all(not psutil.pid_exists(p) or psutil.Process(p).status() == "zombie" for p in pids)
    if sig == signal.SIGINT:  # the workers ignored Ctrl-C: one traceback, the parent's
        assert stderr.count("KeyboardInterrupt") == 1, stderr


def test_sigterm_handler_is_installed_once_and_never_replaces_a_users(make_sampler):
    from vecsample._parent import signals

    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        make_sampler(fns(CountingEnv, 1), context="fork")
        assert signals.installed()

        def user_handler(signum, frame):
            raise AssertionError("never called")

        signal.signal(signal.SIGTERM, user_handler)
        make_sampler(fns(CountingEnv, 1), context="fork")
        assert signal.getsignal(signal.SIGTERM) is user_handler
    finally:
        signal.signal(signal.SIGTERM, previous)


# --- Ctrl-C in a call loses nothing ---------------------------------------------------------------


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


def _interrupt_after(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    return timer


@posix_only
@pytest.mark.parametrize("restart", [False, True])
def test_ctrl_c_during_reset_leaves_a_working_sampler(make_sampler, restart):
    """Scenario 5 of the outside fault-injection run."""
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
    as WorkerBusyError on the retry (a send that raises has posted nothing: the held-interrupt
    tests below)."""
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
    """Sends and receives until the SIGINT set for this round raises; fails if it never does
    (an interrupt lost, as one was inside a finalizer), rather than looping until the suite's
    timeout."""
    give_up = time.monotonic() + 5.0
    while time.monotonic() < give_up:
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
    raise AssertionError("no KeyboardInterrupt 5 s after the SIGINT of this round: it was lost")


@posix_only
def test_interrupts_in_a_partial_batch_loop_lose_and_duplicate_nothing(make_sampler):
    """Scenario 6 of the outside fault-injection run.

    After each caught KeyboardInterrupt the loop goes on; every step sent is received once,
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


@posix_only
@pytest.mark.parametrize("mode", ["SameStep", "NextStep", "Disabled"])
def test_interrupts_anywhere_leave_a_usable_or_closed_sampler(mode):
    """experiments/interrupt_soak.py on a small budget: a SIGINT 0.5-10 ms into a random call
    (reset, step, step_send/step_recv, call, get_attr, close), then the checks it makes."""
    spec = importlib.util.spec_from_file_location(
        "interrupt_soak", Path(__file__).resolve().parents[1] / "experiments/interrupt_soak.py")
    assert spec is not None and spec.loader is not None
    soak = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = soak  # its dataclasses look their module up there
    spec.loader.exec_module(soak)
    report = soak.run(seconds=3.0, seed=1, mode=mode)
    assert report.interrupts > 30 and report.closes >= 1, report


# --- held interrupts: a send that raises KeyboardInterrupt has not taken effect -------------------


def _outcome(call: Callable[..., object], *args: object) -> str:
    """What ``call`` did: "returned" or "KeyboardInterrupt" (the test asserts which)."""
    try:
        call(*args)
    except KeyboardInterrupt:
        return "KeyboardInterrupt"
    return "returned"


def _sigint_after(target: Any, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``target.name`` does its work, then this process gets a SIGINT (handled at once)."""
    inner = getattr(target, name)

    def with_sigint(*args: object, **kwargs: object) -> object:
        result = inner(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)
        return result

    monkeypatch.setattr(target, name, with_sigint)


#: Where the SIGINT lands, and what the call must then do: raise with nothing posted (before
#: the post), or return with the step posted (the SEQ write done, or the worker rung too).
POINTS = {
    "after the actions are written": ("_actions", "write", "KeyboardInterrupt"),
    "right after the SEQ write": ("_channel._hs", "{post}", "returned"),
    "after the wake-up": ("_channel", "ring", "returned"),
}


def _send(s: VecSampler, call: str) -> None:
    if call == "step_send":
        s.step_send(0, ones(2))
    else:
        s.send_all(ones(2 * s.num_workers))


def _target(s: VecSampler, path: str) -> Any:
    obj: Any = s
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


@posix_only
@pytest.mark.parametrize("call", ["step_send", "send_all"])
@pytest.mark.parametrize("point", list(POINTS))
def test_a_send_that_raises_keyboard_interrupt_posted_nothing(make_sampler, monkeypatch,
                                                              call, point):
    """Raised: no step posted, nothing to receive. Returned: posted, and the SIGINT comes out
    of the next call (step_recv) before it hands anything over; the one after returns it."""
    s = make_sampler(fns(CountingEnv, 4, length=100), num_workers=2, deadline=10)
    s.reset()
    assert signal.getsignal(signal.SIGINT) is signals._on_sigint, "the test would prove nothing"
    path, name, expected = POINTS[point]
    _sigint_after(_target(s, path), name.format(post="post" if call == "step_send" else
                                                "post_all"), monkeypatch)
    outcome = _outcome(_send, s, call)
    monkeypatch.undo()
    sent = [0] if call == "step_send" else [0, 1]
    posted = s.handshake_state().posted
    if outcome == "KeyboardInterrupt":  # the invariant, whatever the point
        assert (outcome, posted.tolist()) == (expected, [0, 0])
        with pytest.raises(errors.NoPendingError):
            s.step_recv(None)
        return
    assert (outcome, posted[sent].tolist()) == (expected, [1] * len(sent))
    assert _outcome(s.step_recv, None) == "KeyboardInterrupt"  # the held SIGINT, nothing taken
    results = s.step_recv(None)
    assert sorted(r.worker for r in results) == sent
    assert all(r.obs[:, 1].tolist() == [1, 1] for r in results)  # stepped once, not twice


# --- the storm: a SIGINT at a random point of a send/recv loop, round after round -----------------


#: The calls a KeyboardInterrupt can come out of, by their code.
CALLS = {VecSampler.step_send.__code__: "step_send", VecSampler.step_recv.__code__: "step_recv"}


def _raised_in(exc: BaseException) -> str:
    """The vecsample call ``exc`` came out of, or "test" for the test's own code."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in CALLS:
            return CALLS[tb.tb_frame.f_code]
        tb = tb.tb_next
    return "test"


def _was_held(exc: BaseException) -> bool:
    """Whether ``exc`` is a SIGINT that a send held (it landed after the post)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_name != "raise_held":
        tb = tb.tb_next
    return tb is not None


@dataclass
class Tally:
    rounds: int = 0
    interrupts: Counter[str] = field(default_factory=Counter)  # by the call they came out of
    violations: list[str] = field(default_factory=list)
    before: int = 0  # worker 0's posted steps before the step_send in progress


def _posted(s: VecSampler) -> int:
    return int(s.handshake_state().posted[0])


def _received(s: VecSampler) -> int:
    return int(s.stats()["workers_received"])


def _check_result(s: VecSampler, t: np.ndarray, tally: Tally) -> None:
    """CountingEnv's obs[1] counts the env's steps: each posted step is run exactly once."""
    if t.tolist() != [_posted(s)] * 2:
        tally.violations.append(f"a result with t={t.tolist()} after {_posted(s)} posts")


def _cycle(s: VecSampler, tally: Tally) -> None:
    tally.before = _posted(s)
    s.step_send(0, ones(2))
    if _posted(s) != tally.before + 1:
        tally.violations.append(f"step_send returned without posting (posted {_posted(s)})")
    (r,) = s.step_recv(None)
    _check_result(s, r.obs[:, 1], tally)


def _cycles_until_interrupted(s: VecSampler, tally: Tally, timer: threading.Timer) -> None:
    for _ in range(2):  # a SIGINT sent is raised within two cycles of it, or it was lost
        while not timer.finished.is_set():
            _cycle(s, tally)
        _cycle(s, tally)
    tally.violations.append("a SIGINT was sent and never raised")


def _after_interrupt(s: VecSampler, exc: BaseException, tally: Tally) -> None:
    """The checks, once the round's one SIGINT was raised (no other comes)."""
    where = _raised_in(exc)
    tally.interrupts[where] += 1
    tally.interrupts["held"] += _was_held(exc)
    if where == "step_send" and _posted(s) != tally.before:
        tally.violations.append(f"step_send raised KeyboardInterrupt after posting step "
                                f"{_posted(s)}")
    if _posted(s) == _received(s):  # nothing in flight: step_recv must find nothing either
        with pytest.raises(errors.NoPendingError):
            s.step_recv(None)
        return
    (r,) = s.step_recv(None)  # the step in flight, handed over now and only now
    _check_result(s, r.obs[:, 1], tally)


def _round(s: VecSampler, tally: Tally, delay: float) -> None:
    tally.rounds += 1
    timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
    try:
        try:
            timer.start()
            _cycles_until_interrupted(s, tally, timer)
        finally:
            timer.cancel()
            timer.join()
    except KeyboardInterrupt as exc:
        timer.join()  # it has sent its SIGINT: nothing more comes this round
        _after_interrupt(s, exc, tally)


@posix_only
def test_a_storm_of_sigints_never_leaves_a_raised_send_posted(make_sampler, handshake_path):
    """At least 3 s of rounds, each with one SIGINT at a random point of step_send/step_recv
    cycles (a uniform delay over a few cycles). After each caught KeyboardInterrupt: one out of
    step_send left the worker's step unposted and nothing to receive; one out of step_recv
    handed nothing over (the next step_recv returns that step, run once)."""
    s = make_sampler(fns(CountingEnv, 2, length=10**9), num_workers=1, deadline=10)
    s.reset()
    assert signal.getsignal(signal.SIGINT) is signals._on_sigint, "the test would prove nothing"
    rng, tally = np.random.default_rng(0), Tally()
    start = time.monotonic()
    # 3 s at least, and on until 5 SIGINTs have landed after a post (a loaded machine lands
    # fewer there: 4 in 3 s once in CI) and 100 in step_recv (55 in 3 s once under CI's load);
    # 30 s at most, then the asserts below say what was seen.
    def covered() -> bool:
        held = handshake_path != "python" or tally.interrupts["held"] >= 5
        return held and tally.interrupts["step_recv"] >= 100

    while time.monotonic() - start < 3.0 or (not covered() and time.monotonic() - start < 30.0):
        _round(s, tally, float(rng.uniform(0.0, 1e-3)))
    assert tally.violations == [], (tally.violations[:5], len(tally.violations))
    # SIGINTs landed after a post (held) and everywhere else: the windows were all exercised.
    # On the C path a send spends a microsecond or so between its post and its return, and the
    # waits run in C with the GIL released (a SIGINT acts when they return, in step_recv), so a
    # random SIGINT lands after a post only rarely: there the window is exercised on purpose by
    # test_a_send_that_raises_keyboard_interrupt_posted_nothing, on both paths.
    held = 5 if handshake_path == "python" else 0
    assert tally.interrupts["held"] >= held and tally.interrupts["step_recv"] >= 100, tally
    assert _posted(s) == _received(s)  # every posted step handed over exactly once


class _Finalized:
    """An object whose finalizer a test controls."""


@posix_only
def test_a_sigint_that_lands_in_a_finalizer_is_raised_after_it(make_sampler):
    """Python drops an exception raised inside a weakref finalizer (it prints "Exception
    ignored"), so a KeyboardInterrupt raised by a SIGINT handled there would be lost: the CI
    hang of test_interrupts_in_a_partial_batch_loop_lose_and_duplicate_nothing, whose one SIGINT
    landed in a finalizer run by the garbage collector. vecsample's handler
    sees the finalizer and delivers the interrupt again once it is over."""
    make_sampler(fns(CountingEnv, 2), num_workers=1)  # installs vecsample's SIGINT handler
    assert signal.getsignal(signal.SIGINT) is signals._on_sigint
    ran = []

    def finalizer() -> None:
        signal.raise_signal(signal.SIGINT)  # handled at the next bytecode: inside this frame
        ran.append(sum(range(1000)))

    obj = _Finalized()
    weakref.finalize(obj, finalizer)
    with pytest.raises(KeyboardInterrupt):
        del obj  # the finalizer runs here; the interrupt must come out after it, not be lost
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            time.sleep(0.01)
    assert ran == [sum(range(1000))]  # the finalizer ran to its end: it was not cut short


# --- samplers made in a thread, and samplers side by side -----------------------------------------


@pytest.fixture
def python_sigint() -> Any:
    """Python's own SIGINT handler for the test, as in a process whose main thread has made no
    sampler yet; the handler from before it afterwards."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


#: ``step_send_many``'s code, to tell its KeyboardInterrupts apart.
SEND_MANY = VecSampler.step_send_many.__code__
THREAD_WORKERS = 4


def _in_send_many(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code is not SEND_MANY:
        tb = tb.tb_next
    return tb is not None


def _send_many_round(s: VecSampler, tally: Tally, delay: float) -> None:
    """Full rounds of step_send_many then step_recv until one SIGINT (sent ``delay`` s in)
    raises; then what it left pending is received. A KeyboardInterrupt out of step_send_many
    (not a held one) must have posted nothing; every posted step is handed over once, run once."""
    tally.rounds += 1
    workers, actions = list(range(THREAD_WORKERS)), [ones(1)] * THREAD_WORKERS
    timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
    before = int(s.handshake_state().posted.sum())
    try:
        try:
            timer.start()
            while True:
                before = int(s.handshake_state().posted.sum())
                s.step_send_many(workers, actions)
                _receive_all(s, tally)
        finally:
            timer.cancel()
            timer.join()
    except KeyboardInterrupt as exc:
        tally.interrupts["step_send_many" if _in_send_many(exc) else "other"] += 1
        posted = int(s.handshake_state().posted.sum())
        if _in_send_many(exc) and not _was_held(exc) and posted != before:
            tally.violations.append(f"step_send_many raised after posting {posted - before}")
        _receive_all(s, tally)


def _receive_all(s: VecSampler, tally: Tally) -> None:
    """step_recv until nothing is pending; each result's env counted exactly its posted steps."""
    while True:
        try:
            results = s.step_recv(None)
        except errors.NoPendingError:
            return
        posted = s.handshake_state().posted
        for r in results:
            if r.obs[0, 1] != posted[r.worker]:
                tally.violations.append(f"worker {r.worker}: t={r.obs[0, 1]} after "
                                        f"{posted[r.worker]} posts")


def _made_in_a_thread(make_sampler: Callable[..., VecSampler]) -> VecSampler:
    """A sampler of 4 workers made in a threading.Thread (closed by the fixture)."""
    made: list[VecSampler] = []
    thread = threading.Thread(target=lambda: made.append(make_sampler(
        fns(CountingEnv, THREAD_WORKERS, length=10**9), num_workers=THREAD_WORKERS,
        deadline=10)))
    thread.start()
    thread.join()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # not from a thread
    return made[0]


#: Where a SIGINT lands in step_send_many, once the first worker's step is posted.
POSTED_POINTS = {"right after the first post": ("_channel._hs", "post"),
                 "after the wake-up": ("_channel", "ring")}


@posix_only
@pytest.mark.parametrize("point", list(POSTED_POINTS))
def test_a_sampler_made_in_a_thread_holds_a_sigint_that_comes_after_the_post(
        python_sigint, make_sampler, monkeypatch, point):
    """Issue 42, item 5: vecsample's SIGINT handler was installed only by a sampler made in the
    main thread, so a sampler made in a thread and stepped by the main thread raised
    KeyboardInterrupt out of step_send_many after posting (22-52 times in an outside storm
    run, and posted steps were never handed over). The main thread's first call to it installs
    the handler now: such a SIGINT is held, step_send_many returns, the next call raises it."""
    s = _made_in_a_thread(make_sampler)
    s.reset()
    assert signal.getsignal(signal.SIGINT) is signals._on_sigint  # the main thread's first call
    path, name = POSTED_POINTS[point]
    target = _target(s, path)
    inner = getattr(target, name)

    def once_then_sigint(*args: object) -> object:
        monkeypatch.setattr(target, name, inner)
        result = inner(*args)
        signal.raise_signal(signal.SIGINT)
        return result

    monkeypatch.setattr(target, name, once_then_sigint)
    workers = list(range(THREAD_WORKERS))
    outcome = _outcome(s.step_send_many, workers, [ones(1)] * THREAD_WORKERS)
    assert (outcome, s.handshake_state().posted.tolist()) == ("returned", [1] * THREAD_WORKERS)
    assert _outcome(s.step_recv, None) == "KeyboardInterrupt"  # the held SIGINT, nothing taken
    tally = Tally()
    _receive_all(s, tally)
    assert tally.violations == [] and s.stats()["workers_received"] == THREAD_WORKERS


@posix_only
def test_a_storm_of_sigints_on_a_sampler_made_in_a_thread_loses_nothing(python_sigint,
                                                                        make_sampler):
    """Issue 42, item 5, as the outside run found it: 3 s of rounds, each with one SIGINT at
    a random point of step_send_many/step_recv rounds over 4 workers made in a thread. After
    each: a KeyboardInterrupt out of step_send_many posted nothing, each posted step is handed
    over once, run once."""
    s = _made_in_a_thread(make_sampler)
    s.reset()
    rng, tally, start = np.random.default_rng(0), Tally(), time.monotonic()
    while time.monotonic() - start < 3.0:
        _send_many_round(s, tally, float(rng.uniform(0.0, 2e-3)))
    assert tally.violations == [], (tally.violations[:5], len(tally.violations))
    assert sum(tally.interrupts.values()) == tally.rounds > 100, tally
    state = s.handshake_state()
    assert s.stats()["workers_received"] == state.posted.sum()  # each posted step handed over
    np.testing.assert_array_equal(state.finished, state.posted)


def _users_handler(signum: int, frame: Any) -> None:
    """A SIGINT handler of the user's own, which raises at once: vecsample keeps it."""
    raise KeyboardInterrupt


@posix_only
def test_a_section_an_interrupt_cut_at_its_end_does_not_touch_a_later_sampler(
        python_sigint, make_sampler, monkeypatch):
    """Issue 42, item 5: after the storms on a sampler made in a thread, a sampler made in the
    main thread of the same process lost a whole round of steps and raised false
    WorkerBusyErrors (2 runs of 3). A handler that is not vecsample's (Python's own, there; a
    user's) raises a SIGINT at once, so one that lands on the first bytecode of a section's end
    (``signals.leave``) left the main thread's sections open for good: the later sampler's
    handler then held every SIGINT and undid every hand-over after one (its results returned,
    its workers left stepping). The open section is simulated here, exactly: the first call of
    ``leave`` raises KeyboardInterrupt before its body. Installing vecsample's handler forgets
    it, and the later sampler goes through SIGINT rounds unharmed."""
    signal.signal(signal.SIGINT, _users_handler)
    first = make_sampler(fns(CountingEnv, 2), num_workers=2)
    first.reset()
    leave = signals.leave

    def leave_cut_short() -> None:
        monkeypatch.setattr(signals, "leave", leave)
        raise KeyboardInterrupt  # where the user's handler raises, before leave's body

    monkeypatch.setattr(signals, "leave", leave_cut_short)
    first.step_send(0, ones(1))
    with pytest.raises(KeyboardInterrupt):
        first.step_recv(None)
    first.close()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    s = make_sampler(fns(CountingEnv, 2, length=10**9), num_workers=1, deadline=10)
    assert signal.getsignal(signal.SIGINT) is signals._on_sigint
    s.reset()
    rng, tally = np.random.default_rng(1), Tally()
    for _ in range(40):
        _round(s, tally, float(rng.uniform(0.0, 1e-3)))
    assert tally.violations == [], (tally.violations[:5], len(tally.violations))
    assert _posted(s) == _received(s)


@posix_only
def test_a_sigint_is_never_raised_in_a_sampler_of_another_thread(make_sampler):
    """A sampler stepped in another thread while SIGINTs come to the main thread: each comes out
    in the main thread. The main thread's sections were counted with every thread's: a SIGINT
    that came while the other thread was in one of its sections was held, then raised in that
    thread at the section's end (or undid its hand-over), and the main thread never saw it."""
    s = make_sampler(fns(CountingEnv, 2, length=10**9), num_workers=2, deadline=10)
    assert signal.getsignal(signal.SIGINT) is signals._on_sigint
    s.reset()
    stop, in_thread = threading.Event(), []

    def loop() -> None:
        while not stop.is_set():
            try:
                s.step(ones(2))
            except BaseException as exc:  # what the thread must never see
                in_thread.append(repr(exc))
                return

    thread = threading.Thread(target=loop)
    thread.start()
    caught = 0
    try:
        for _ in range(100):
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.5)  # the handler runs here, at once: the sleep is cut short
            except KeyboardInterrupt:
                caught += 1
    finally:
        stop.set()
        thread.join()
    assert (in_thread, caught) == ([], 100)
