"""Where a full batch's time goes (docs/benchmarks.md#where-the-time-goes).

One timeline per ``step()``, parent and workers on one clock; the per-batch breakdown in that
section of docs/benchmarks.md comes from here.

Each worker records when it picked up a step and when it published it (``time.perf_counter``
is CLOCK_MONOTONIC, shared by every process); the parent records ``send_all`` and the return of
``step_recv``. The script patches the worker's step handler, so it runs under ``fork`` (the
patched module is what the workers inherit). Random actions, as in ``vecsample bench``.

Run: ``python -m experiments.step_timeline --num-envs 128 --batches 3000``
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.sharedctypes import RawArray
from typing import Any

import numpy as np
import tyro

from vecsample import VecSampler
from vecsample._worker import main as worker_module


@dataclass
class Args:
    env_id: str = "CartPole-v1"
    """gymnasium id"""
    num_envs: int = 128
    """envs in all"""
    num_workers: int = 2
    """VecSampler workers"""
    batches: int = 3000
    """timed step() calls (after 300 untimed ones)"""
    pause_ms: float = 0.0
    """sleep between step() calls (a training update): the workers fall asleep and are rung"""
    spin_us: float = -1.0
    """VecSampler(spin_us=...); -1: the default (200 µs when every worker has a core)"""


WARMUP = 300


def patch_workers(stamps: Any, batches: int) -> None:
    """Makes every worker write (pick-up, publish) times of step i into ``stamps[w, i]``."""
    original = worker_module._Worker._step_posted

    def stamped(self: Any) -> None:
        i = self.side.seen - 1 - WARMUP
        start = time.perf_counter()
        original(self)
        if 0 <= i < batches:
            view = np.frombuffer(stamps, dtype=np.float64).reshape(-1, batches, 2)
            view[self.spec.index, i] = (start, time.perf_counter())

    worker_module._Worker._step_posted = stamped  # type: ignore[method-assign]


def run(args: Args) -> dict[str, np.ndarray]:
    stamps = RawArray(ctypes.c_double, args.num_workers * args.batches * 2)
    patch_workers(stamps, args.batches)
    n = args.num_envs
    spin = None if args.spin_us < 0 else args.spin_us
    with VecSampler(args.env_id, num_envs=n, num_workers=args.num_workers, infos=False,
                    seed=0, context="fork", spin_us=spin) as s:
        s.reset()
        s.single_action_space.seed(0)
        actions = [np.stack([s.single_action_space.sample() for _ in range(n)])
                   for _ in range(16)]
        for k in range(WARMUP):
            s.step(actions[k % 16])
        t = np.zeros((3, args.batches))
        for i in range(args.batches):
            if args.pause_ms > 0:
                time.sleep(args.pause_ms / 1e3)
            t[0, i] = time.perf_counter()
            s.send_all(actions[i % 16])
            t[1, i] = time.perf_counter()
            s.batch(s.step_recv(None))
            t[2, i] = time.perf_counter()
    w = np.frombuffer(stamps, dtype=np.float64).reshape(args.num_workers, args.batches, 2)
    if not (w > 0).all():
        raise RuntimeError("some workers recorded no times: the patch did not reach them "
                           "(this script needs the fork start method).")
    return {
        "step() call": t[2] - t[0],
        "send_all (check, copy, post)": t[1] - t[0],
        "send_all returned -> worker picked up (mean of workers)": (w[:, :, 0] - t[1]).mean(0),
        "send_all returned -> worker picked up (later worker)": (w[:, :, 0] - t[1]).max(0),
        "worker stepping its envs (slowest worker)": (w[:, :, 1] - w[:, :, 0]).max(0),
        "slowest minus fastest worker": np.ptp(w[:, :, 1] - w[:, :, 0], axis=0),
        "last publish -> step_recv returned": t[2] - w[:, :, 1].max(0),
    }


def main(args: Args) -> None:
    phases = run(args)
    per_env = args.num_envs // args.num_workers
    print(f"{args.env_id}, {args.num_workers} x {per_env}, {args.batches} step() calls "
          f"(µs: median / mean)")
    for name, values in phases.items():
        print(f"  {name:56s} {np.median(values) * 1e6:8.1f} / {np.mean(values) * 1e6:8.1f}")
    stepping = np.median(phases["worker stepping its envs (slowest worker)"])
    print(f"  per env step in the slowest worker: {stepping / per_env * 1e6:.2f} µs")


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line)."""
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    main(parse_args())
