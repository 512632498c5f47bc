"""What recording a replay log costs (docs/semantics.md, "Reproducing an asynchronous run").

Two ways, because on a loaded machine the first one is noisier than the effect it measures:

1. Throughput, side by side: two samplers (partial batches, the loop of ``vecsample compare``),
   one recording to a log and one not, take turns repeat by repeat; the table gives each one's
   median steps/s and the median of the per-repeat ratios (record ÷ plain).
2. The recorder's own time: its hooks are timed alone on the parent (µs per send, per recv),
   then multiplied by the sends and recvs per second that the recording run made. That is the
   share of the parent's wall time that recording takes, whatever else runs on the machine.

Run: ``python experiments/replay_overhead.py --seconds 2 --repeats 9``
"""

from __future__ import annotations

import os
import statistics
import tempfile
import timeit
from collections.abc import Sequence
from dataclasses import dataclass

import tyro

from vecsample import Options, VecSampler
from vecsample._parent.layout import Layout
from vecsample._parent.replay import Recorder
from vecsample.factories import Envs
from vecsample.results import StepResult
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
    hook_calls: int = 200_000
    """calls of each hook when timing it alone"""


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


def hook_costs(args: Args, path: str) -> tuple[float, float]:
    """µs per step_send and per step_recv (its hooks: schedule, arrange, hand-over) that a
    Recorder adds."""
    layout = Layout.build(Envs.of(args.env_id, args.num_envs),
                          Options(num_workers=args.num_workers))
    recorder = Recorder(path, layout, [])
    results = [StepResult(w, range(0), None, None, None, None, None, None, None)
               for w in range(args.num_workers)]

    def recv() -> None:
        _, _, made = recorder.schedule([], None, False)
        recorder.delivered(recorder.arrange(made + results))

    n = args.hook_calls
    send_us = timeit.timeit(lambda: recorder.send(0), number=n) / n * 1e6
    recv_us = timeit.timeit(recv, number=n) / n * 1e6
    recorder.close()
    return send_us, recv_us


def main(args: Args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        plain, record, last = throughput(args, os.path.join(tmp, "run.vsreplay"))
        size = os.path.getsize(os.path.join(tmp, "run.vsreplay"))
        send_us, recv_us = hook_costs(args, os.path.join(tmp, "hooks.vsreplay"))
    ratios = [r / p for p, r in zip(plain, record, strict=True)]
    sends_per_s = last.steps_sent / args.num_envs * args.num_workers / last.seconds
    recvs_per_s = last.recvs / last.seconds
    share = (send_us * sends_per_s + recv_us * recvs_per_s) * 1e-6
    print(f"{args.env_id}, {args.num_workers} workers × {args.num_envs // args.num_workers} "
          f"envs, partial batches (timeout {args.timeout * 1e3:g} ms), {args.repeats} "
          f"interleaved repeats of {args.seconds:g} s")
    print("| sampler | steps/s (median) |\n|---|---:|")
    print(f"| partial | {statistics.median(plain):,.0f} |")
    print(f"| partial + record | {statistics.median(record):,.0f} |")
    print(f"record ÷ plain: median of per-repeat ratios {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}–{max(ratios):.3f})")
    print(f"recorder alone: {send_us:.2f} µs per send, {recv_us:.2f} µs per recv; the last "
          f"recording run made {sends_per_s:,.0f} sends/s and {recvs_per_s:,.0f} recvs/s, so "
          f"recording took {100 * share:.2f} % of the parent's wall time")
    print(f"log: {size:,} bytes for {args.repeats} runs "
          f"({size / max(1, last.recvs * args.repeats):.1f} bytes per recv, about)")


def parse_args(argv: Sequence[str] | None = None) -> Args:
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    main(parse_args())
