"""Create/close cycles by hand, any start method (docs/lab/reliability.md#200-createclose-cycles).

Create/close cycles must leak no process, fd or memory. The CI test (tests/test_lifetime.py)
runs 200 cycles under fork, the fastest start method; this script runs them under the others too
(forkserver: 1.2 to 1.7 s per cycle on 2 cores).

Run: ``python experiments/cycles.py --context forkserver --cycles 200``
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import psutil
import tyro

from vecsample import VecSampler
from vecsample.testing import CountingEnv, fns


@dataclass
class Args:
    cycles: int = 200
    """create/close cycles measured"""
    warmup: int = 10
    """cycles run first, before the baseline is taken (imports, caches, the forkserver)"""
    context: Literal["fork", "forkserver", "spawn"] = "forkserver"
    """multiprocessing start method"""


def children(me: psutil.Process) -> int:
    return sum(1 for p in me.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE)


def cycle(context: str) -> None:
    with VecSampler(fns(CountingEnv, 4), num_workers=2, context=context) as s:
        s.reset(seed=1)
        s.step(np.ones(4, dtype=np.int64))


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line)."""
    return tyro.cli(Args, description=__doc__, args=argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    me = psutil.Process()
    for _ in range(args.warmup):
        cycle(args.context)
    gc.collect()
    before = (children(me), me.num_fds(), me.memory_info().rss)
    start = time.monotonic()
    for _ in range(args.cycles):
        cycle(args.context)
    gc.collect()
    after = (children(me), me.num_fds(), me.memory_info().rss)
    growth = 100 * (after[2] / before[2] - 1)
    print(f"{args.context}: {args.cycles} cycles in {time.monotonic() - start:.1f}s: children "
          f"{before[0]} -> {after[0]}, open fds {before[1]} -> {after[1]}, RSS "
          f"{before[2] / 2**20:.1f} -> {after[2] / 2**20:.1f} MiB ({growth:+.2f}%)")
    leak = after[0] > before[0] or after[1] > before[1] or growth >= 10.0
    return 1 if leak else 0


if __name__ == "__main__":
    sys.exit(main())
