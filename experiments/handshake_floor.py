"""The handshake's floor here, beside vecsample, sleep envs (docs/lab/straggler_model.md).

``handshake_floor.c`` is the least any sampler can do per batch: C worker processes whose block
sleeps one env step, one futex word to wake them (``flat``, as vecsample's Bell) or a wake tree
(``tree``: the parent wakes two workers, each woken worker two more), and a counter to learn
that all are done; ``partial`` is flat with partial batches (the first worker, then up to
``--timeout`` for more, as ``recv_batch(timeout)``), and ``pipelined`` the same over two halves
per worker process, each sleeping half the block (as ``VecSampler(pipeline=True)``). Nothing
else: no Python, no actions, no results, no infos. Beside it, VecSampler runs the same sleep envs
(experiments/_straggler_model.py: the first env of each block sleeps, the others return at once),
full batches (``step``), partial ones and pipelined halves (``recv_batch(timeout)`` and
``step_send_many(result.workers, rows)``, the loop of ``vecsample compare``).

A block sleeps ``--block-ms`` per batch. With ``--straggler`` it follows the straggler model: a
block of slot s at its k-th batch sleeps that time × a factor drawn from (``--seed``, s, k), in
[1.5, 2] with probability ``--straggler-p``, else within ±5 %; the C floor draws the same
factors (the same generator, written in C), so each batch kind's floor is measured under the
same stragglers, block by block, as vecsample. Both restart the schedule at each measurement.

For each worker count and kind it prints U (time inside the sleeps ÷ W × wall, as
parent_scaling.py's), the µs per recv (per batch for full ones), and the CPU per recv of the
parent and of each worker process (from the kernel's schedstat, so spinning counts); for
vecsample's rows, its U ÷ the floor's U of the same batch kind (full: flat) and its parent CPU ÷
the floor's, the medians of the ratios of each repeat. The floor is an upper bound for any
handshake, native code included, on this machine: a U target above it cannot be met here by
changing vecsample.

Both spin 200 µs before sleeping when every worker has a core (vecsample's default), else not.
Medians of ``--repeats`` runs, the configurations interleaved repeat by repeat. Needs a C
compiler (``cc``) and Linux.

Run: ``python experiments/handshake_floor.py --workers 16 64 --repeats 3 --straggler``
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
from _straggler_model import OFF, Stragglers, scheduled_fns

from vecsample import VecSampler
from vecsample.machine import usable_cores
from vecsample.options import AUTO_SPIN_US
from vecsample.tools.bench import timed_run
from vecsample.tools.bench_backends import Config, Sampler

SOURCE = Path(__file__).with_name("handshake_floor.c")
#: The C floor's modes.
FLOORS = ("flat", "tree", "partial", "pipelined")
#: VecSampler's rows, each with the floor of its batch kind.
VECSAMPLE = {"vecsample": "flat", "vecsample partial": "partial",
             "vecsample pipelined": "pipelined"}
KINDS = (*FLOORS, *VECSAMPLE)
#: Envs in each worker process's block (the first of each slot's sleeps).
ENVS_PER_WORKER = 4
#: The spread of a block that does not straggle: its factor is within 1 ± this.
JITTER = 0.05


@dataclass
class Args:
    workers: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    """worker counts to measure"""
    block_ms: float = 1.1
    """milliseconds a worker's block sleeps per batch (the base of the straggler model)"""
    sleep: float | None = None
    """seconds of sleep per worker batch: the earlier spelling of --block-ms (given, it wins)"""
    timeout: float = 0.0005
    """the window of the partial and pipelined batches, seconds (the floor's and vecsample's)"""
    straggler: bool = False
    """the straggler model: a block now and then takes 1.5-2x its time, the same in C"""
    straggler_p: float = 0.1
    """with --straggler, the chance that a block straggles"""
    seed: int = 0
    """with --straggler, the seed of the schedule"""
    seconds: float = 1.0
    """duration of one measurement"""
    repeats: int = 3
    """measurements per configuration; the median is reported"""

    @property
    def block_ns(self) -> int:
        return round((self.sleep if self.sleep is not None else self.block_ms * 1e-3) * 1e9)

    @property
    def model(self) -> Stragglers:
        return Stragglers(self.straggler_p, JITTER, self.seed) if self.straggler else OFF


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
    """One run of the C floor: U, µs per recv, parent and per-worker CPU µs per recv."""
    model = args.model
    out = subprocess.run([binary, str(workers), str(args.block_ns), str(args.seconds), mode,
                          str(round(spin_us(workers))), str(round(args.timeout * 1e6)),
                          repr(model.p), repr(model.jitter), str(model.seed)],
                         check=True, capture_output=True, text=True,
                         timeout=60 + 10 * args.seconds).stdout.split()
    return {"U": float(out[4]), "batch": float(out[5]), "parent": float(out[6]),
            "worker": float(out[7])}


def schedstat(pid: int) -> float:
    """The CPU seconds the kernel has run ``pid`` (exact, not clock ticks)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) * 1e-9


def sampler(kind: str, workers: int, args: Args) -> Sampler:
    """VecSampler over the scheduled sleep envs, in the loop of ``kind``'s batches."""
    k = 2 if kind == "vecsample pipelined" else 1  # slots per process
    n = workers * ENVS_PER_WORKER
    fns = scheduled_fns(n, workers * k, args.block_ns, args.model, k)
    cfg = Config(f"sleep {args.block_ns * 1e-6:g} ms", n, workers, 2, args.timeout, "none",
                 args.block_ns * 1e-9)
    vec = VecSampler(fns, num_workers=workers, pipeline=k == 2)
    try:
        return Sampler(cfg, None if kind == "vecsample" else args.timeout, sampler=vec)
    except BaseException:
        vec.close()
        raise


def vecsample_run(sampler: Sampler, workers: int, args: Args) -> dict[str, float]:
    """One run of VecSampler over the sleep envs, measured as the floor is. The envs are reset
    first (outside the measurement), so that each slot's schedule starts at its block 0."""
    sampler.obs = sampler.sampler.reset(seed=0)[0]
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


Runs = dict[tuple[int, str], list[dict[str, float]]]


def measure(args: Args) -> Runs:
    """Every (worker count, kind), ``args.repeats`` times, interleaved repeat by repeat."""
    runs: Runs = {(w, k): [] for w in args.workers for k in KINDS}
    samplers: dict[tuple[int, str], Sampler] = {}
    try:  # built inside: one that fails to start leaves none of the others running
        for w in args.workers:
            for kind in VECSAMPLE:
                samplers[(w, kind)] = sampler(kind, w, args)
        with tempfile.TemporaryDirectory() as directory:
            binary = build(directory)
            for _ in range(args.repeats):
                for w, kind in runs:
                    runs[(w, kind)].append(floor(binary, w, kind, args) if kind in FLOORS
                                           else vecsample_run(samplers[(w, kind)], w, args))
    finally:
        for s in samplers.values():
            s.close()
    return runs


def ratio(runs: Runs, w: int, kind: str, key: str) -> float:
    """The median over repeats of vecsample's ``key`` ÷ the floor's of its batch kind, each
    from the same repeat."""
    mine, floors = runs[(w, kind)], runs[(w, VECSAMPLE[kind])]
    return statistics.median(a[key] / b[key] for a, b in zip(mine, floors, strict=True))


def table(runs: Runs, args: Args) -> list[str]:
    """The printed lines: what was measured, a header, one row per (worker count, kind)."""
    m = args.model
    model = (f"straggler model p {m.p:g}, jitter ±{m.jitter * 100:g} %, seed {m.seed}"
             if args.straggler else "no straggler model")
    lines = [f"block {args.block_ns * 1e-6:g} ms, {model}; window {args.timeout * 1e3:g} ms; "
             f"medians of {args.repeats}",
             f"{'workers':>7} {'kind':<20}{'U':>7}{'µs/recv':>10}{'parent CPU µs':>15}"
             f"{'worker CPU µs':>15}{'U ÷ floor':>11}{'CPU ÷ floor':>13}"]
    for (w, kind), results in runs.items():
        med = {k: statistics.median(r[k] for r in results) for k in results[0]}
        vs = (f"{ratio(runs, w, kind, 'U'):>11.3f}{ratio(runs, w, kind, 'parent'):>13.2f}"
              if kind in VECSAMPLE else f"{'-':>11}{'-':>13}")
        lines.append(f"{w:>7} {kind:<20}{med['U']:>7.3f}{med['batch']:>10.1f}"
                     f"{med['parent']:>15.1f}{med['worker']:>15.1f}{vs}")
    return lines


def main(args: Args) -> None:
    print("\n".join(table(measure(args), args)))


def parse_args(argv: Sequence[str] | None = None) -> Args:
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    main(parse_args())
