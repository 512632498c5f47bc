"""The handshake's floor here, beside vecsample, with sleep envs (docs/lab/benchmarks.md).

``handshake_floor.c`` is the least any sampler can do per batch: C worker processes that each
sleep one env step, one futex word to wake them (``flat``, as vecsample's Bell) or a wake tree
(``tree``: the parent wakes two workers, each woken worker two more), and a counter to learn
that all are done; ``partial`` is flat with partial batches (the first worker, then up to
``--timeout`` for more, as a ``step_recv(timeout)`` loop). Nothing else: no Python, no actions,
no results, no infos. Beside it, VecSampler runs the same sleep envs
(``vecsample.testing.sleep_fns``), full and partial batches. For each worker count it prints U
(time inside the sleeps ÷ W × wall, as parent_scaling.py's), the µs per batch (per recv for
partial ones), and the CPU per batch of the parent and of each worker (from the kernel's
schedstat, so spinning counts). The floor is an upper bound for any handshake, native code
included, on this machine: a U target above it cannot be met here by changing vecsample.

Both spin 200 µs before sleeping when every worker has a core (vecsample's default), else not.
Medians of ``--repeats`` runs, the configurations interleaved repeat by repeat. Needs a C
compiler (``cc``) and Linux.

Run: ``python experiments/handshake_floor.py --workers 1 2 4 8 16 --repeats 3``
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tyro
from _sleep_sampler import sleeping

from vecsample.machine import usable_cores
from vecsample.options import AUTO_SPIN_US
from vecsample.tools.bench import timed_run
from vecsample.tools.bench_backends import Sampler

SOURCE = Path(__file__).with_name("handshake_floor.c")
#: The C floor's modes, then VecSampler's full and partial batches.
FLOORS = ("flat", "tree", "partial")
KINDS = (*FLOORS, "vecsample", "vecsample partial")


@dataclass
class Args:
    workers: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    """worker counts to measure"""
    sleep: float = 0.0005
    """seconds of sleep per worker batch"""
    timeout: float = 0.0005
    """step_recv timeout of the partial batches (both the floor's and vecsample's)"""
    seconds: float = 1.0
    """duration of one measurement"""
    repeats: int = 3
    """measurements per configuration; the median is reported"""


class NoCompilerError(RuntimeError):
    """The floor is C: without a compiler it cannot be built."""

    def __init__(self) -> None:
        super().__init__("experiments/handshake_floor.py needs a C compiler: found no `cc` on "
                         "PATH; install one (apt install gcc) or run on a machine that has it.")


def build(directory: str) -> str:
    """Compiles handshake_floor.c into ``directory``; the binary's path."""
    if shutil.which("cc") is None:
        raise NoCompilerError()
    binary = os.path.join(directory, "handshake_floor")
    subprocess.run(["cc", "-O2", "-o", binary, str(SOURCE)], check=True)
    return binary


def spin_us(workers: int) -> float:
    """vecsample's default spin for ``workers`` (config.spin_seconds), in µs."""
    return AUTO_SPIN_US if workers <= usable_cores() else 0.0


def floor(binary: str, workers: int, mode: str, args: Args) -> dict[str, float]:
    """One run of the C floor: U, µs per batch, parent and per-worker CPU µs per batch."""
    out = subprocess.run([binary, str(workers), str(round(args.sleep * 1e6)), str(args.seconds),
                          mode, str(round(spin_us(workers))), str(round(args.timeout * 1e6))],
                         check=True, capture_output=True, text=True,
                         timeout=60 + 10 * args.seconds).stdout.split()
    return {"U": float(out[4]), "batch": float(out[5]), "parent": float(out[6]),
            "worker": float(out[7])}


def schedstat(pid: int) -> float:
    """The CPU seconds the kernel has run ``pid`` (exact, not clock ticks)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) * 1e-9


def vecsample_run(sampler: Sampler, workers: int, args: Args) -> dict[str, float]:
    """One run of VecSampler over the sleep envs, measured as the floor is."""
    pids = sampler.pids()
    before = [schedstat(p) for p in (os.getpid(), *pids)]
    recvs, start = sampler.sampler.stats()["recvs"], time.perf_counter()
    _, _, profile = timed_run(sampler, args.seconds, workers)
    wall = time.perf_counter() - start
    spent = [schedstat(p) - b for p, b in zip((os.getpid(), *pids), before, strict=True)]
    assert profile is not None
    batches = sampler.sampler.stats()["recvs"] - recvs
    return {"U": profile["utilization"], "batch": wall / batches * 1e6,
            "parent": spent[0] / batches * 1e6, "worker": sum(spent[1:]) / batches / workers * 1e6}


def main(args: Args) -> None:
    runs: dict[tuple[int, str], list[dict[str, float]]] = {
        (w, k): [] for w in args.workers for k in KINDS}
    samplers: dict[tuple[int, str], Sampler] = {}
    try:  # built inside: one that fails to start leaves none of the others running
        for w in args.workers:
            for kind in KINDS[len(FLOORS):]:
                samplers[(w, kind)] = sleeping(w, 4, args.sleep, args.timeout,
                                               partial=kind == "vecsample partial")
        with tempfile.TemporaryDirectory() as directory:
            binary = build(directory)
            for _ in range(args.repeats):
                for w, kind in runs:
                    runs[(w, kind)].append(floor(binary, w, kind, args) if kind in FLOORS
                                           else vecsample_run(samplers[(w, kind)], w, args))
    finally:
        for sampler in samplers.values():
            sampler.close()
    print(f"{'workers':>7} {'kind':<18}{'U':>7}{'batch µs':>11}{'parent CPU µs':>15}"
          f"{'worker CPU µs':>15}")
    for (w, kind), results in runs.items():
        med = {k: statistics.median(r[k] for r in results) for k in results[0]}
        print(f"{w:>7} {kind:<18}{med['U']:>7.3f}{med['batch']:>11.1f}{med['parent']:>15.1f}"
              f"{med['worker']:>15.1f}")


def parse_args(argv: Sequence[str] | None = None) -> Args:
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    main(parse_args())
