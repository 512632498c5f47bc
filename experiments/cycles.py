# docs: docs/reliability.md#r5-200-createclose-cycles. Run: python experiments/cycles.py
"""R5 by hand, for any start method: create/close cycles must leak no process, fd or memory.

The CI test (tests/test_reliability.py) runs 200 cycles under fork, the fastest start method;
this script runs them under the others too (forkserver: 1.2 to 1.7 s per cycle on 2 cores).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time

import numpy as np
import psutil

from vecsample import VecSampler
from vecsample.testing import CountingEnv, fns


def children(me: psutil.Process) -> int:
    return sum(1 for p in me.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE)


def cycle(context: str) -> None:
    with VecSampler(fns(CountingEnv, 4), num_workers=2, context=context) as s:
        s.reset(seed=1)
        s.step(np.ones(4, dtype=np.int64))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cycles", type=int, default=200)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--context", default="forkserver")
    args = p.parse_args()
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
