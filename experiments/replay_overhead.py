"""What recording a replay log costs (docs/lab/semantics.md#what-recording-a-replay-log-costs).

Throughput, side by side: two samplers (partial batches, the loop of ``vecsample compare``),
one recording to a log and one not, take turns repeat by repeat; the table gives each one's
median steps/s and the median of the per-repeat ratios (record ÷ plain), and the log's size.
(Up to eefba75 the script also timed the recorder's hooks alone, through private names; the
figures in docs/lab/semantics.md from that part name that commit.)

Run: ``python experiments/replay_overhead.py --seconds 2 --repeats 9``
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

import tyro

from vecsample import VecSampler
from vecsample.tools.compare import LoopResult, sampling_loop
from vecsample.tools.policies import random_policy


@dataclass
class Args:
    env_id: str = "CartPole-v1"
    """a gymnasium id"""
    num_envs: int = 64
    """envs in all"""
    num_workers: int = 2
    """worker processes"""
    timeout: float = 0.0005
    """step_recv timeout of the partial batches (seconds)"""
    seconds: float = 2.0
    """duration of one measurement"""
    repeats: int = 9
    """measurements per sampler, interleaved"""


def throughput(args: Args, path: str) -> tuple[list[float], list[float], LoopResult]:
    """Steps/s of (plain, recording) per repeat, and the last recording run's counts."""
    plain_rates, record_rates = [], []
    kwargs = {"num_envs": args.num_envs, "num_workers": args.num_workers, "infos": False}
    with VecSampler(args.env_id, **kwargs) as plain, \
            VecSampler(args.env_id, record=path, **kwargs) as recording:
        policy = random_policy(plain.single_action_space)
        last = None
        for _ in range(args.repeats):
            plain_rates.append(sampling_loop(plain, args.timeout, args.seconds, policy)
                               .steps_per_s)
            last = sampling_loop(recording, args.timeout, args.seconds, policy)
            record_rates.append(last.steps_per_s)
    assert last is not None
    return plain_rates, record_rates, last


def main(args: Args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        plain, record, last = throughput(args, os.path.join(tmp, "run.vsreplay"))
        size = os.path.getsize(os.path.join(tmp, "run.vsreplay"))
    ratios = [r / p for p, r in zip(plain, record, strict=True)]
    sends_per_s = last.steps_sent / args.num_envs * args.num_workers / last.seconds
    recvs_per_s = last.recvs / last.seconds
    print(f"{args.env_id}, {args.num_workers} workers × {args.num_envs // args.num_workers} "
          f"envs, partial batches (timeout {args.timeout * 1e3:g} ms), {args.repeats} "
          f"interleaved repeats of {args.seconds:g} s")
    print("| sampler | steps/s (median) |\n|---|---:|")
    print(f"| partial | {statistics.median(plain):,.0f} |")
    print(f"| partial + record | {statistics.median(record):,.0f} |")
    print(f"record ÷ plain: median of per-repeat ratios {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}–{max(ratios):.3f})")
    print(f"the last recording run made {sends_per_s:,.0f} sends/s and {recvs_per_s:,.0f} "
          f"recvs/s")
    print(f"log: {size:,} bytes for {args.repeats} runs "
          f"({size / max(1, last.recvs * args.repeats):.1f} bytes per recv, about)")


def parse_args(argv: Sequence[str] | None = None) -> Args:
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    main(parse_args())
