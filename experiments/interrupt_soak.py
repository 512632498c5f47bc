"""Ctrl-C at random points, over and over (docs/reliability.md#signals).

A timer thread sends SIGINT to this process 0.5-10 ms into a random call: reset, step, a
step_send/step_recv round, call, get_attr, or close. After each caught KeyboardInterrupt the
sampler must be usable (the next calls work, none reports a worker hung) or, after an
interrupted close, closed with no worker left. At the end, every step sent was received once
(the sampler's own count) and the handshake's counters agree. tests/test_interrupts.py runs it
on a small budget; this script runs it as long as you like.

Run: ``python experiments/interrupt_soak.py --seconds 60 --autoreset-mode NextStep``
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import psutil
import tyro

from vecsample import VecSampler, errors
from vecsample.testing import SlowEnv


@dataclass
class Args:
    seconds: float = 10.0
    """how long to keep interrupting"""
    seed: int = 0
    """seeds the choice of calls and delays"""
    autoreset_mode: Literal["SameStep", "NextStep", "Disabled"] = "SameStep"
    """the sampler's autoreset mode"""


@dataclass
class Report:
    interrupts: int
    rounds: int
    closes: int


def _sampler(mode: str) -> VecSampler:
    env_fns = [functools.partial(SlowEnv, env_index=i, step_time=5e-4, tail="uniform",
                                 spread=1.0, length=50) for i in range(4)]
    return VecSampler(env_fns, num_workers=2, autoreset_mode=mode, deadline=10.0, infos=True,
                      context="forkserver")


def _calls(s: VecSampler) -> dict[str, Callable[[], object]]:
    ones = np.ones(4, dtype=np.int64)

    def send_recv() -> None:
        for w in range(2):  # an interrupted send posted nothing: no WorkerBusyError (issue 23)
            s.step_send(w, ones[:2])
        s.step_recv(1e-4)

    return {"reset": s.reset, "step": lambda: s.step(ones), "send_recv": send_recv,
            "call": lambda: s.call("process_info"), "get_attr": lambda: s.get_attr("t"),
            "close": lambda: s.close(timeout=1.0)}


def _settle(s: VecSampler) -> None:
    """After an interrupt: receive what is in flight (none reported hung: the deadline is
    10 s), then a reset and a full step must work, and every posted step was finished."""
    with contextlib.suppress(errors.NoPendingError):
        while True:
            s.step_recv(None)
    s.reset()
    s.step(np.ones(4, dtype=np.int64))
    state = s.handshake_state()
    if not (state.finished == state.posted).all():
        raise AssertionError(f"posted {state.posted} but finished {state.finished}")


def run(seconds: float, seed: int, mode: str) -> Report:
    rng = np.random.default_rng(seed)
    s, report = _sampler(mode), Report(0, 0, 0)
    s.reset()
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            report.rounds += 1
            name = str(rng.choice(["reset", "step", "send_recv", "call", "get_attr", "close"],
                                  p=[0.15, 0.3, 0.3, 0.1, 0.1, 0.05]))
            if _interrupted(_calls(s)[name], float(rng.uniform(5e-4, 1e-2))):
                report.interrupts += 1
            if s.closed:
                _check_closed(s)
                report.closes += 1
                s = _sampler(mode)
                s.reset()
                continue
            _settle(s)
    finally:
        s.close()
    return report


def _interrupted(call: Callable[[], object], delay: float) -> bool:
    timers: list[threading.Timer] = []
    try:
        try:
            timers.append(threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT)))
            timers[0].start()
            call()
            time.sleep(0.011)  # the interrupt may still come: let it land here
        finally:
            for timer in timers:
                timer.cancel()
                timer.join()
        time.sleep(0.001)
    except KeyboardInterrupt:
        return True
    return False


def _check_closed(s: VecSampler) -> None:
    """An interrupted close still closes: no worker of this process is left running."""
    s.close(timeout=1.0)  # idempotent; finishes what the interrupt cut short
    leftovers = [p for p in psutil.Process().children(recursive=True)
                 if p.status() != psutil.STATUS_ZOMBIE and "forkserver" not in " ".join(
                     p.cmdline()) and "resource_tracker" not in " ".join(p.cmdline())]
    if leftovers:
        raise AssertionError(f"workers left after an interrupted close: {leftovers}")


def parse_args(argv: Sequence[str] | None = None) -> Args:
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    args = parse_args()
    print(run(args.seconds, args.seed, args.autoreset_mode))
