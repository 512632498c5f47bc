"""Soak test (R7): mixed recv timeouts, step counts checked (docs/lab/reliability.md, R7: soak).

Many CartPole steps through VecSampler. Each round picks a timeout from ``--timeouts`` (None =
full batch, a float = partial batch), receives whichever workers are done, and sends those
workers new random actions at once. The parent counts every env step it received; the workers
count every env step they did (in shared memory, ``stats()["env_steps"]``). The two must match
exactly: a lost, duplicated or stale reply would make them differ. Parent and worker RSS are
sampled over time.

Run: ``python experiments/soak.py --steps 10000000 --timeouts None 0.0 0.0002 0.002``
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import psutil
import tyro

from vecsample import VecSampler


@dataclass
class Args:
    steps: int = 10_000_000
    """env steps to run (counted on the parent side)"""
    env_id: str = "CartPole-v1"
    """gymnasium env id"""
    num_envs: int = 32
    """envs in all"""
    num_workers: int = 2
    """worker processes"""
    timeouts: list[float | None] = field(default_factory=lambda: [None, 0.0, 0.0002, 0.002])
    """recv timeouts cycled through, one per recv (None = full batch)"""
    seed: int = 0
    """sampler seed (per-env SeedSequence children) and action RNG seed"""
    report_every: float = 10.0
    """seconds between RSS samples"""
    context: Literal["fork", "forkserver", "spawn"] = "forkserver"
    """multiprocessing start method"""
    out: str = ""
    """write the result as JSON to this path"""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line)."""
    return tyro.cli(Args, description=__doc__, args=argv)


def rss_mib(procs: list[psutil.Process]) -> float:
    return sum(p.memory_info().rss for p in procs) / 2**20


def soak(args: Args) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    me = psutil.Process()
    with VecSampler(args.env_id, num_envs=args.num_envs, num_workers=args.num_workers,
                    seed=args.seed, context=args.context) as s:
        workers = [psutil.Process(pid) for pid in s.worker_pids()]
        per = s.envs_per_slot
        s.reset()
        received = recvs = 0
        per_worker = np.zeros(s.num_slots, dtype=np.int64)
        samples: list[dict[str, float]] = []
        start = last = time.monotonic()
        samples.append({"t_s": 0.0, "steps": 0, "parent_rss_mib": rss_mib([me]),
                        "workers_rss_mib": rss_mib(workers)})
        for w in range(s.num_slots):
            s.step_send(w, rng.integers(0, 2, size=per))
        in_flight = s.num_slots
        while in_flight:
            timeout = args.timeouts[recvs % len(args.timeouts)]
            results = s.step_recv(timeout)
            recvs += 1
            for r in results:
                assert r.worker is not None
                received += len(r.env_ids)
                per_worker[r.worker] += len(r.env_ids)
                in_flight -= 1
                if received < args.steps:
                    s.step_send(r.worker, rng.integers(0, 2, size=per))
                    in_flight += 1
            now = time.monotonic()
            if now - last >= args.report_every:
                last = now
                samples.append({"t_s": now - start, "steps": received,
                                "parent_rss_mib": rss_mib([me]),
                                "workers_rss_mib": rss_mib(workers)})
                print(f"{now - start:8.1f}s {received:>11,d} steps  parent RSS "
                      f"{samples[-1]['parent_rss_mib']:.1f} MiB  workers RSS "
                      f"{samples[-1]['workers_rss_mib']:.1f} MiB", flush=True)
        elapsed = time.monotonic() - start
        samples.append({"t_s": elapsed, "steps": received, "parent_rss_mib": rss_mib([me]),
                        "workers_rss_mib": rss_mib(workers)})
        worker_steps = s.worker_stats()["env_steps"].astype(np.int64)
        return {
            "args": asdict(args),
            "parent_steps": int(received),
            "worker_steps": int(worker_steps.sum()),
            "parent_steps_per_worker": per_worker.tolist(),
            "worker_steps_per_worker": worker_steps.tolist(),
            "recvs": recvs,
            "elapsed_s": elapsed,
            "steps_per_s": received / elapsed,
            "rss": samples,
        }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    result = soak(args)
    first, last = result["rss"][1 if len(result["rss"]) > 2 else 0], result["rss"][-1]
    match = (result["parent_steps"] == result["worker_steps"]
             and result["parent_steps_per_worker"] == result["worker_steps_per_worker"])
    print(f"steps: parent {result['parent_steps']:,d}, workers {result['worker_steps']:,d} "
          f"({'match' if match else 'MISMATCH'}); per worker parent "
          f"{result['parent_steps_per_worker']} workers {result['worker_steps_per_worker']}")
    print(f"{result['recvs']:,d} recvs in {result['elapsed_s']:.1f}s "
          f"({result['steps_per_s']:,.0f} steps/s)")
    print(f"RSS parent {first['parent_rss_mib']:.1f} -> {last['parent_rss_mib']:.1f} MiB, "
          f"workers {first['workers_rss_mib']:.1f} -> {last['workers_rss_mib']:.1f} MiB "
          f"(from the first sample after warm-up to the end)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if match else 1


if __name__ == "__main__":
    sys.exit(main())
