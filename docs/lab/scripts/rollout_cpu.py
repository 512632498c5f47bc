"""How much of the machine the hand loop and the rollout use (docs/lab/rollout.md).

CartPole-v1 x 64, 2 workers, the configurations of ``experiments/rollout_vs_loop.py``: for each,
in three rounds of 2 s, env steps per second and the CPU seconds of the parent and of the
workers (from ``/proc/<pid>/stat``) per second of wall time.

Run from the checkout: ``PYTHONPATH=. python docs/lab/scripts/rollout_cpu.py``
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "experiments"))
import rollout_vs_loop as R  # the experiment's own loop and rollout


def cpu_of(pid: int) -> float:
    """The CPU seconds (user + system) the kernel has charged ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    torch.set_num_threads(1)  # as CleanRL sets it
    args = R.Args(num_envs=64, num_workers=2)
    with R.make_sampler("CartPole-v1", args) as sampler:
        policy = R.policy_of(sampler, 0)
        pids = [os.getpid(), *set(sampler.worker_pids())]
        runs = {c: R.collector(c, sampler, policy, 128) for c in args.configs}
        for collect in runs.values():
            collect()
        for _ in range(3):
            for name, collect in runs.items():
                before, start, n = [cpu_of(p) for p in pids], time.perf_counter(), 0
                while time.perf_counter() - start < 2.0:
                    collect()
                    n += 1
                wall = time.perf_counter() - start
                used = [cpu_of(p) - b for p, b in zip(pids, before, strict=True)]
                print(f"{name:>13} {n * 128 * 64 / wall:8.0f} steps/s  cores used "
                      f"{sum(used) / wall:.2f} (parent {used[0] / wall:.2f}, "
                      f"workers {sum(used[1:]) / wall:.2f})")


if __name__ == "__main__":
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        main()
