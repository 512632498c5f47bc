"""The Python path's futex bell against pipe rings, sleep envs (docs/lab/transport.md).

Where the C handshake was not built on x86-64 Linux, the Python path wakes sleeping workers
with one futex system call for all of them (``handshake.Bell``, through ctypes) instead of one
byte on each sleeper's pipe. This script decides, with a measurement, whether that third wake
path earns its place beside the C one and the pipes: VecSampler with the Python handshake over
sleep envs (``vecsample.testing.sleep_fns``: a worker's block sleeps ``--sleep`` seconds, its
core free), full batches, the bell on and off (``Transport.futex``), with the spin off (every
wake-up goes through a ring) and on (vecsample's default). It prints batches per second and the
parent's CPU per batch, medians of ``--repeats`` interleaved runs, and their ratio.

It reaches into private names to pick the transport, so it lives beside its lab page, not in
experiments/ (whose scripts use public names only). Run from the checkout:
``PYTHONPATH=. python docs/lab/scripts/futex_bell.py --workers 16 64 --repeats 3``
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import tyro

from vecsample import VecSampler
from vecsample._parent import layout
from vecsample._wire.handshake import Transport
from vecsample.testing import sleep_fns


@dataclass
class Args:
    workers: list[int] = field(default_factory=lambda: [16, 64])
    """worker counts"""
    sleep: float = 0.0005
    """seconds a worker's block sleeps a step"""
    seconds: float = 1.5
    """how long each run steps"""
    repeats: int = 3
    """interleaved runs per configuration; medians are over them"""


def run(workers: int, futex: bool, spin_us: float | None, args: Args) -> tuple[float, float]:
    """Batches per second and the parent's CPU µs per batch, the bell on or off."""
    transport = Transport(native=False, ordered=True, futex=futex)
    chosen = layout.decide_transport
    layout.decide_transport = lambda requested: transport  # type: ignore[assignment]
    try:
        s = VecSampler(sleep_fns(workers, workers, args.sleep), num_workers=workers,
                       spin_us=spin_us, context="fork")
    finally:
        layout.decide_transport = chosen  # type: ignore[assignment]
    try:
        s.reset()
        actions = np.zeros(workers, dtype=np.int64)
        for _ in range(20):
            s.step(actions)
        batches, start, cpu = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - start < args.seconds:
            s.step(actions)
            batches += 1
        wall = time.perf_counter() - start
        return batches / wall, (time.process_time() - cpu) / batches * 1e6
    finally:
        s.close()


def main(args: Args) -> None:
    print(f"{'workers':>7} {'spin':>5} {'bell /s':>9} {'pipes /s':>9} {'ratio':>6}"
          f" {'bell CPU µs':>12} {'pipes CPU µs':>13}")
    for w in args.workers:
        for spin in (0.0, None):
            runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
            for _ in range(args.repeats):
                for futex in (True, False):
                    runs[futex].append(run(w, futex, spin, args))
            rate = {f: statistics.median(r[0] for r in runs[f]) for f in runs}
            cpu = {f: statistics.median(r[1] for r in runs[f]) for f in runs}
            print(f"{w:>7} {'off' if spin == 0 else 'auto':>5} {rate[True]:>9.0f}"
                  f" {rate[False]:>9.0f} {rate[True] / rate[False]:>6.2f} {cpu[True]:>12.0f}"
                  f" {cpu[False]:>13.0f}")


def parse_args(argv: Sequence[str] | None = None) -> Args:
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        main(parse_args())
