"""The ceiling of hosted vector envs, the most a split over workers gives (docs/lab/benchmarks.md).

A hosted batch of ``n`` envs split over ``W`` worker processes (W cores) takes at least one
worker's share, a vector step of ``n / W`` envs. One process takes a vector step of ``n``. So
no sampler, with a free handshake and a free parent, beats one process by more than
``t(n) / t(n / W)``: the ceiling this prints. A vector env whose step has a large fixed cost
(numpy calls whose time does not grow with the envs) has a low ceiling at small ``n``.

Beside the ceiling, three samplers of the same ``n`` envs, as speedups over one process:
``hosted``, VecSampler with one vector env per worker (W worker processes, ``step``);
``by hand``, the parent's share built through the public step API before vecsample had it:
the parent steps one share itself, a vector env of its own, while W - 1 hosted workers step
the rest (``send_all``, the parent's own ``step``, then ``step_recv``); and ``share``, the
same design through the
option, ``env_placement="share"`` (``step``): W blocks, the last one stepped by the parent's
process when the wait for the batch begins. Everything is timed in this process, the
configurations interleaved, each the median of ``--repeats`` runs.

Run: ``python experiments/hosted_ceiling.py --num-envs 512 4096 --workers 2``
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import gymnasium as gym
import tyro

from vecsample import HostedVector, VecSampler


@dataclass
class Args:
    env_id: str = "CartPole-v1"
    """a gymnasium id with a vector entry point"""
    num_envs: list[int] = field(default_factory=lambda: [512, 4096])
    """batch sizes of one process (each split over ``workers``)"""
    workers: int = 2
    """processes a hosted sampler splits the batch over"""
    seconds: float = 0.5
    """how long each timing steps"""
    repeats: int = 5
    """timings per size; the median is reported"""


class SplitError(ValueError):
    """A split needs two processes or more."""

    def __init__(self, workers: int) -> None:
        super().__init__(f"--workers must be at least 2 (the batch split over processes), got "
                         f"{workers}; pass --workers 2 or more.")


def per_call_us(call: Callable[[int], object], seconds: float) -> float:
    """µs per ``call(i)`` over ``seconds``, ``i`` counting the calls from 0."""
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        call(calls)
        calls += 1
    return elapsed / calls * 1e6


def vector_step(env: gym.vector.VectorEnv) -> Callable[[int], object]:
    """Call i: one step of ``env`` with the i-th of 16 random action batches, drawn now."""
    actions = [env.action_space.sample() for _ in range(16)]
    return lambda i: env.step(actions[i % 16])


def sampler_batch(sampler: VecSampler, own: gym.vector.VectorEnv | None) -> Callable[[int], None]:
    """Call i: one full batch of ``sampler`` with pre-drawn actions: ``step`` (the full-batch
    path); with ``own``, ``send_all``, then ``own`` stepped by this process, then
    ``step_recv``."""
    space = gym.vector.utils.batch_space(sampler.single_action_space, sampler.num_envs)
    space.seed(0)
    actions = [space.sample() for _ in range(16)]
    if own is None:
        return lambda i: sampler.step(actions[i % 16])
    own_step = vector_step(own)

    def batch(i: int) -> None:
        sampler.send_all(actions[i % 16])
        own_step(i)
        sampler.step_recv(None)
    return batch


def _hosted(env_id: str, num_envs: int, workers: int, placement: str = "workers") -> VecSampler:
    # infos off and NextStep, as the bench's hosted rows (CartPole's vector infos are empty).
    sampler = VecSampler(HostedVector(env_id), num_envs=num_envs, num_workers=workers,
                         infos=False, autoreset_mode="NextStep", env_placement=placement)
    sampler.reset(seed=0)
    return sampler


def _make(env_id: str, n: int) -> gym.vector.VectorEnv:
    env = gym.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    env.action_space.seed(0)
    return env


def measure(args: Args) -> dict[tuple[str, int], float]:
    """Median µs per batch of each configuration, by (kind, n)."""
    w, wholes = args.workers, args.num_envs
    envs = {n: _make(args.env_id, n) for n in sorted({*wholes, *(n // w for n in wholes)})}
    samplers = {}
    try:
        for n in wholes:
            samplers[("hosted", n)] = _hosted(args.env_id, n, w)
            samplers[("by hand", n)] = _hosted(args.env_id, n - n // w, w - 1)
            samplers[("share", n)] = _hosted(args.env_id, n, w, "share")
        timers = {("vector", n): vector_step(env) for n, env in envs.items()}
        timers |= {(kind, n): sampler_batch(s, envs[n // w] if kind == "by hand" else None)
                   for (kind, n), s in samplers.items()}
        timings = [{key: per_call_us(call, args.seconds) for key, call in timers.items()}
                   for _ in range(args.repeats)]
    finally:
        for closable in [*samplers.values(), *envs.values()]:
            closable.close()
    return {key: statistics.median(t[key] for t in timings) for key in timings[0]}


def main(args: Args) -> None:
    if args.workers < 2:
        raise SplitError(args.workers)
    med = measure(args)
    print(f"{'envs':>6}{'one process µs':>16}{'one share µs':>14}{'ceiling':>9}{'hosted':>8}"
          f"{'by hand':>9}{'share':>8}")
    for n in args.num_envs:
        one, share = med[("vector", n)], med[("vector", n // args.workers)]
        print(f"{n:>6}{one:>16.1f}{share:>14.1f}{one / share:>8.2f}x"
              f"{one / med[('hosted', n)]:>7.2f}x{one / med[('by hand', n)]:>8.2f}x"
              f"{one / med[('share', n)]:>7.2f}x")


def parse_args(argv: Sequence[str] | None = None) -> Args:
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    main(parse_args())
