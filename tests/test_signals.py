"""SIGINT and the send calls: one that raises KeyboardInterrupt has not taken effect (issue 23).

``step_send`` and ``send_all`` raise it only before their post; from the post on, a SIGINT is
held and raised by the next vecsample call, before that call does anything (docs/semantics.md,
"Interrupts"). The first tests inject the SIGINT at fixed points of the call; the storm test
sends one at a random point of a send/recv loop, round after round, and checks the same
invariant after each: a call that raised changed nothing, a call that returned did its work.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from vecsample import VecSampler, errors
from vecsample._parent import signals
from vecsample.testing import CountingEnv, fns

posix_only = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX signals")


def ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.int64)


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


# --- the storm: a SIGINT at a random point of a send/recv loop, round after round ---------------

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
def test_a_storm_of_sigints_never_leaves_a_raised_send_posted(make_sampler):
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
    # fewer there: 4 in 3 s once in CI); 30 s at most, then the asserts below say what was seen.
    while time.monotonic() - start < 3.0 or (tally.interrupts["held"] < 5 and
                                             time.monotonic() - start < 30.0):
        _round(s, tally, float(rng.uniform(0.0, 1e-3)))
    assert tally.violations == [], (tally.violations[:5], len(tally.violations))
    # SIGINTs landed after a post (held) and everywhere else: the windows were all exercised.
    assert tally.interrupts["held"] >= 5 and tally.interrupts["step_recv"] >= 100, tally
    assert _posted(s) == _received(s)  # every posted step handed over exactly once
