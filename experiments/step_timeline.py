"""Where a full batch's time goes (docs/lab/benchmarks.md#where-the-time-goes).

One timeline per ``step()``, parent and workers on one clock; the per-batch breakdown in that
section of docs/lab/benchmarks.md comes from here.

Each worker records when it picked up its last step and when it published it
(``VecSampler.worker_stats()``; ``time.perf_counter`` is CLOCK_MONOTONIC, shared by every
process), read after each batch; the parent records ``send_all`` and the return of
``step_recv``. Random actions, as in ``vecsample bench``.

Run: ``python -m experiments.step_timeline --num-envs 128 --batches 3000``
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tyro

from vecsample import VecSampler


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


def run(args: Args) -> dict[str, np.ndarray]:
    w = np.zeros((args.num_workers, args.batches, 2))
    n = args.num_envs
    spin = None if args.spin_us < 0 else args.spin_us
    with VecSampler(args.env_id, num_envs=n, num_workers=args.num_workers, infos=False,
                    seed=0, spin_us=spin) as s:
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
            stamps = s.worker_stats()  # outside the timed call: the batch is over
            w[:, i] = np.stack([stamps["step_picked_up"], stamps["step_published"]], axis=1)
    return {
        "step() call": t[2] - t[0],
        # send_all ends by yielding the core where the sampler spins: a worker then often
        # picks its step up before send_all returns (a negative gap below).
        "send_all (check, copy, post, yield)": t[1] - t[0],
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
