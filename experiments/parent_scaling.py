"""The parent's cost per batch as the worker count grows, with sleep envs (docs/lab/benchmarks.md).

Every worker's block holds envs whose batch is one sleep of ``--sleep`` seconds
(``vecsample.testing.SleepEnv``), so the workers use no CPU and the parent's own work per batch
shows, on 2 cores, for up to 16 workers and more (issue 15). For
each worker count and for full and partial batches it reports the workers' utilization U (time
inside the env loop ÷ wall time) and the parent's µs per batch: posting (send), blocked waiting
(wait), reading finished steps (return), the rest of the loop (outside), and the parent's CPU
time per batch outside its waits, which counts only its own work whatever else runs on the
machine. Medians of
``--repeats`` runs, the configurations interleaved repeat by repeat.

Run: ``python experiments/parent_scaling.py --workers 1 2 4 8 16 --repeats 3``
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import tyro
from _sleep_sampler import sleeping

from vecsample.tools.bench import timed_run


@dataclass
class Args:
    workers: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    """worker counts to measure"""
    envs_per_worker: int = 4
    """envs in each worker's block (the first one sleeps)"""
    sleep: float = 0.0005
    """seconds of sleep per worker batch"""
    timeout: float = 0.0005
    """step_recv timeout of the partial batches"""
    seconds: float = 1.0
    """duration of one measurement"""
    repeats: int = 3
    """measurements per configuration; the median is reported"""


KEYS = ("send", "wait", "return", "outside", "cpu")


def main(args: Args) -> None:
    configs = [(w, kind) for w in args.workers for kind in ("full", "partial")]
    runs: dict[tuple[int, str], list[dict[str, float]]] = {c: [] for c in configs}
    samplers = {}
    try:
        for w, kind in configs:
            samplers[(w, kind)] = sleeping(w, args.envs_per_worker, args.sleep, args.timeout,
                                           partial=kind == "partial")
        for _ in range(args.repeats):
            for c in configs:
                _, _, profile = timed_run(samplers[c], args.seconds, c[0])
                assert profile is not None
                runs[c].append(profile)
    finally:
        for sampler in samplers.values():
            sampler.close()
    print(f"{'workers':>7} {'batches':<8}{'U':>7}" + "".join(f"{k + ' µs':>12}" for k in KEYS))
    for (w, kind), profiles in runs.items():
        med = {k: statistics.median(p[k] for p in profiles) for k in ("utilization", *KEYS)}
        print(f"{w:>7} {kind:<8}{med['utilization']:>7.3f}"
              + "".join(f"{med[k]:>12.1f}" for k in KEYS))


def parse_args(argv: Sequence[str] | None = None) -> Args:
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    main(parse_args())
