"""RaySampler against one local VecSampler of as many workers (docs/distributed.md).

The figures of "Ray against local" in docs/distributed.md come from here. Both sides run the
same chunk collection (vecsample.ray.ChunkCollector) with the same tiny torch MLP policy on
CartPole-v1: locally, one collector over ``2 * workers_per_actor`` workers; through Ray (2
actors on this node by default), one collector per actor over ``workers_per_actor`` workers,
each with half the envs. The two are measured in alternation, several repeats each, and the
table shows medians and their ratio.

    python experiments/bench_ray.py
"""

from __future__ import annotations

import functools
import json
import logging
import platform
import statistics
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import ray
import torch
import tyro
from torch import nn

from vecsample import AutoresetMode, VecSampler
from vecsample.ray import ChunkCollector, RaySampler, TorchPolicy


@dataclass
class Args:
    env_id: str = "CartPole-v1"
    """gymnasium id with CartPole's shapes (the policy takes 4 observations, picks 1 of 2)"""
    actors: int = 2
    """Ray actors, all on this node"""
    workers_per_actor: int = 1
    """worker processes per actor; the local sampler gets actors x this many"""
    envs_per_actor: int = 16
    """envs per actor; the local sampler steps actors x this many"""
    chunk_length: int = 1000
    """steps per env in one chunk"""
    rounds: int = 3
    """chunks per actor (Ray) and collects (local) in one measurement"""
    repeats: int = 5
    """measurements per side, alternating; the table shows the medians"""
    json: str | None = None
    """write every measurement to this JSON file"""


class ArgmaxMLP(nn.Module):
    """obs -> 64 -> 64 -> logits; the greedy action. Deterministic and cheap, like a real actor."""

    def __init__(self, obs_dim: int = 4, n_actions: int = 2) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                                 nn.Linear(64, n_actions))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs).argmax(-1)


def measure_local(args: Args) -> float:
    """Env steps per second of one local collector over the same total workers and envs."""
    workers = args.actors * args.workers_per_actor
    envs = args.actors * args.envs_per_actor
    with VecSampler(args.env_id, num_envs=envs, num_workers=workers, seed=0, infos=False,
                    autoreset_mode=AutoresetMode.SAME_STEP) as sampler:
        collector = ChunkCollector(sampler, TorchPolicy(ArgmaxMLP), seed=0)
        collector.collect(args.chunk_length)  # warm-up
        start = time.perf_counter()
        steps = sum(collector.collect(args.chunk_length).env_steps for _ in range(args.rounds))
        return steps / (time.perf_counter() - start)


def measure_ray(args: Args) -> tuple[float, float]:
    """Env steps per second received by the driver from ``args.actors`` actors, and the share
    of the driver's wall time the actors spent collecting (the rest is Ray's transport, plus
    actors idle for lack of a request)."""
    with RaySampler(args.env_id, functools.partial(TorchPolicy, ArgmaxMLP),
                    num_envs=args.envs_per_actor, num_actors=args.actors,
                    workers_per_actor=args.workers_per_actor, chunk_length=args.chunk_length,
                    seed=0, infos=False) as sampler:
        sampler.recv()  # warm-up: the pipeline is full from here on
        start = time.perf_counter()
        chunks = [c for _ in range(args.rounds) for c in sampler.recv()]
        seconds = time.perf_counter() - start
        busy = sum(c.sample_s for c in chunks) / args.actors
        return sum(c.env_steps for c in chunks) / seconds, busy / seconds


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line)."""
    return tyro.cli(Args, description=__doc__, args=argv)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)  # the driver's policy gets one thread, like each actor's
    ray.init(num_cpus=args.actors * args.workers_per_actor, include_dashboard=False,
             logging_level=logging.WARNING)
    local, remote, busy = [], [], []
    for repeat in range(args.repeats):
        local.append(measure_local(args))
        rate, share = measure_ray(args)
        remote.append(rate)
        busy.append(share)
        print(f"repeat {repeat}: local {local[-1]:.0f} steps/s, ray {remote[-1]:.0f} steps/s, "
              f"actors collecting {share:.0%} of the time", flush=True)
    ray.shutdown()
    ratios = [r / loc for r, loc in zip(remote, local, strict=True)]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    print(f"\n{args.env_id}, {args.actors} actors x {args.workers_per_actor} workers x "
          f"{args.envs_per_actor} envs, chunks of {args.chunk_length} steps; "
          f"python {platform.python_version()}, ray {ray.__version__}, torch {torch.__version__}, "
          f"numpy {np.__version__}, commit {commit}")
    print(f"| backend | env steps/s (median of {args.repeats}) |")
    print("|---|---|")
    print(f"| local VecSampler, {args.actors * args.workers_per_actor} workers "
          f"| {statistics.median(local):.0f} |")
    print(f"| RaySampler, {args.actors} actors | {statistics.median(remote):.0f} |")
    print(f"| ratio Ray / local (median of per-repeat ratios) | {statistics.median(ratios):.2f} |")
    print(f"| actors' time spent collecting (median) | {statistics.median(busy):.0%} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": asdict(args), "local": local, "ray": remote, "busy": busy}, f,
                      indent=2)


if __name__ == "__main__":
    main()
