"""RaySampler against one local VecSampler of as many workers (docs/lab/distributed.md).

The figures of "Ray against local" and "On a fake cluster, with a node lost" in
docs/lab/distributed.md come from here. Both sides run the same chunk collection
(vecsample.ray.ChunkCollector) with the same tiny torch MLP policy on CartPole-v1.

* Default: through a local Ray (2 actors on this node by default), one collector per actor over
  ``workers_per_actor`` workers, against one local collector over all the workers and envs.
* ``--fake-nodes N``: a fake cluster (``ray.cluster_utils.Cluster``) of N nodes of one CPU, one
  actor of one worker per node. Each repeat measures all N nodes, then removes one node mid-run
  (no node has a CPU to spare, so its actor stays restarting) and measures the N - 1 left,
  beside local collectors of N and N - 1 workers on the same CPUs.

The sides are measured in alternation, several repeats each, and the table shows medians;
``--json`` keeps every measurement. The load average is printed before and after: the numbers
mean little on a machine other jobs share.

    python experiments/bench_ray.py
    python experiments/bench_ray.py --fake-nodes 3 --json ray_cluster.json
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import ray
import torch
import tyro
from ray.cluster_utils import Cluster
from torch import nn

from vecsample import AutoresetMode, VecSampler
from vecsample.ray import ChunkCollector, RaySampler, TorchPolicy


@dataclass
class Args:
    env_id: str = "CartPole-v1"
    """gymnasium id with CartPole's shapes (the policy takes 4 observations, picks 1 of 2)"""
    actors: int = 2
    """Ray actors, all on this node (not with --fake-nodes: one actor per node there)"""
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
    fake_nodes: int = 0
    """0: a local Ray on this machine; N: a fake cluster of N one-CPU nodes, one of which is
    removed mid-run in each repeat"""
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


def measure_local(args: Args, workers: int) -> float:
    """Env steps per second of one local collector over ``workers`` workers, each with
    ``envs_per_actor`` envs per ``workers_per_actor`` (the envs of the actors it stands for)."""
    envs = workers // args.workers_per_actor * args.envs_per_actor
    with VecSampler(args.env_id, num_envs=envs, num_workers=workers, seed=0, infos=False,
                    autoreset_mode=AutoresetMode.SAME_STEP) as sampler:
        collector = ChunkCollector(sampler, TorchPolicy(ArgmaxMLP), seed=0)
        collector.collect(args.chunk_length)  # warm-up
        start = time.perf_counter()
        steps = sum(collector.collect(args.chunk_length).env_steps for _ in range(args.rounds))
        return steps / (time.perf_counter() - start)


def _ray_sampler(args: Args, actors: int) -> RaySampler:
    return RaySampler(args.env_id, functools.partial(TorchPolicy, ArgmaxMLP),
                      num_envs=args.envs_per_actor, num_actors=actors,
                      workers_per_actor=args.workers_per_actor, chunk_length=args.chunk_length,
                      seed=0, infos=False)


def _rounds(sampler: RaySampler, rounds: int) -> tuple[float, float, float]:
    """Chunks/s and env steps/s received in ``rounds`` full recvs, and the share of that time
    the actors spent collecting (the rest is Ray's transport, plus actors idle)."""
    start = time.perf_counter()
    chunks = [c for _ in range(rounds) for c in sampler.recv()]
    seconds = time.perf_counter() - start
    actors = len({c.actor_id for c in chunks})
    busy = sum(c.sample_s for c in chunks) / max(1, actors) / seconds
    return len(chunks) / seconds, sum(c.env_steps for c in chunks) / seconds, busy


def measure_ray(args: Args) -> tuple[float, float]:
    """Env steps per second received by the driver from ``args.actors`` actors, and the share
    of the driver's wall time the actors spent collecting."""
    with _ray_sampler(args, args.actors) as sampler:
        sampler.recv()  # warm-up: the pipeline is full from here on
        _, rate, busy = _rounds(sampler, args.rounds)
        return rate, busy


# --- a fake cluster, with a node lost -----------------------------------------------------------


@contextlib.contextmanager
def fake_cluster(nodes: int) -> Iterator[Cluster]:
    """A head with no CPU (the driver's; no actor lands there) and ``nodes`` nodes of one
    CPU each, the driver connected; everything shut down on the way out."""
    # No dashboard: its processes would take CPU from the measurement on every node.
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(nodes):
            cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, logging_level=logging.WARNING)  # keep the table clean
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def measure_node_loss(args: Args, cluster: Cluster) -> dict[str, float]:
    """All nodes, then one removed mid-run: chunks/s and env steps/s of each phase, and what
    the removal cost (the first full recv after it, the chunks lost)."""
    while len(cluster.worker_nodes) < args.fake_nodes:  # the node the last repeat removed
        cluster.add_node(num_cpus=1)
    with _ray_sampler(args, args.fake_nodes) as sampler:
        sampler.recv()  # warm-up: the pipeline is full from here on
        out = dict(zip(("all_chunks_s", "all_steps_s", "all_busy"),
                       _rounds(sampler, args.rounds), strict=True))
        victim = sampler.actor_nodes()[-1]
        cluster.remove_node(next(n for n in cluster.worker_nodes if n.node_id == victim))
        start = time.perf_counter()
        sampler.recv()  # the removed actor's chunk is lost here; the others' arrive
        out["transition_s"] = time.perf_counter() - start
        out.update(zip(("left_chunks_s", "left_steps_s", "left_busy"),
                       _rounds(sampler, args.rounds), strict=True))
        stats = sampler.stats()
        out.update(chunks_lost=stats["chunks_lost"], actor_deaths=stats["actor_deaths"],
                   actors_restarting=stats["actors_restarting"])
    return out


def run_fake_cluster(args: Args) -> dict[str, Any]:
    """Alternates, ``repeats`` times: local collectors of N and N - 1 workers, then the node
    loss on the fake cluster."""
    args.workers_per_actor = 1  # one CPU per node
    nodes = args.fake_nodes
    runs: dict[str, Any] = {"local_all": [], "local_left": [], "ray": []}
    with fake_cluster(nodes) as cluster:
        for repeat in range(args.repeats):
            runs["local_all"].append(measure_local(args, nodes))
            runs["local_left"].append(measure_local(args, nodes - 1))
            runs["ray"].append(measure_node_loss(args, cluster))
            ray_run = runs["ray"][-1]
            print(f"repeat {repeat}: local {runs['local_all'][-1]:.0f} / "
                  f"{runs['local_left'][-1]:.0f} steps/s, ray {ray_run['all_steps_s']:.0f} / "
                  f"{ray_run['left_steps_s']:.0f} steps/s (all nodes / one removed)", flush=True)
    return runs


def print_fake_cluster(args: Args, runs: dict[str, Any]) -> None:
    def median(key: str) -> float:
        return statistics.median(r[key] for r in runs["ray"])

    def ratio(key: str, local: str) -> float:  # per repeat: the two sides ran side by side
        return statistics.median(r[key] / loc for r, loc in zip(runs["ray"], runs[local],
                                                                 strict=True))

    n, chunk_steps = args.fake_nodes, args.chunk_length * args.envs_per_actor
    local_all, local_left = (statistics.median(runs[k]) for k in ("local_all", "local_left"))
    print("| nodes | backend | chunks/s | env steps/s | Ray / local (median of ratios) |")
    print("|---|---|---|---|---|")
    print(f"| all {n} | RaySampler, {n} actors x 1 worker x {args.envs_per_actor} envs "
          f"| {median('all_chunks_s'):.2f} | {median('all_steps_s'):.0f} "
          f"| {ratio('all_steps_s', 'local_all'):.2f} |")
    print(f"| all {n} | local VecSampler, {n} workers | ({local_all / chunk_steps:.2f}) "
          f"| {local_all:.0f} | |")
    print(f"| {n - 1} left | RaySampler, {n - 1} actors (the third restarting) "
          f"| {median('left_chunks_s'):.2f} | {median('left_steps_s'):.0f} "
          f"| {ratio('left_steps_s', 'local_left'):.2f} |")
    print(f"| {n - 1} left | local VecSampler, {n - 1} workers | ({local_left / chunk_steps:.2f}) "
          f"| {local_left:.0f} | |")
    print(f"\nthe removal (medians): first full recv after it {median('transition_s'):.2f} s, "
          f"chunks lost {median('chunks_lost'):.0f}, actor deaths {median('actor_deaths'):.0f}, "
          f"actors restarting at the end {median('actors_restarting'):.0f}. Local chunks/s in "
          f"parentheses: env steps/s over a chunk's {chunk_steps} steps.")


# --- the local Ray runs -------------------------------------------------------------------------


def run_local_ray(args: Args) -> dict[str, Any]:
    ray.init(num_cpus=args.actors * args.workers_per_actor, include_dashboard=False,
             logging_level=logging.WARNING)
    local, remote, busy = [], [], []
    try:
        for repeat in range(args.repeats):
            local.append(measure_local(args, args.actors * args.workers_per_actor))
            rate, share = measure_ray(args)
            remote.append(rate)
            busy.append(share)
            print(f"repeat {repeat}: local {local[-1]:.0f} steps/s, ray {remote[-1]:.0f} "
                  f"steps/s, actors collecting {share:.0%} of the time", flush=True)
    finally:
        ray.shutdown()
    return {"local": local, "ray": remote, "busy": busy}


def print_local_ray(args: Args, runs: dict[str, Any]) -> None:
    local, remote, busy = runs["local"], runs["ray"], runs["busy"]
    ratios = [r / loc for r, loc in zip(remote, local, strict=True)]
    print(f"| backend | env steps/s (median of {args.repeats}) |")
    print("|---|---|")
    print(f"| local VecSampler, {args.actors * args.workers_per_actor} workers "
          f"| {statistics.median(local):.0f} |")
    print(f"| RaySampler, {args.actors} actors | {statistics.median(remote):.0f} |")
    print(f"| ratio Ray / local (median of per-repeat ratios) | {statistics.median(ratios):.2f} |")
    print(f"| actors' time spent collecting (median) | {statistics.median(busy):.0%} |")


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line)."""
    return tyro.cli(Args, description=__doc__, args=argv)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)  # the driver's policy gets one thread, like each actor's
    load_before = os.getloadavg()
    runs = run_fake_cluster(args) if args.fake_nodes else run_local_ray(args)
    load_after = os.getloadavg()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    shape = (f"{args.fake_nodes} fake nodes of 1 CPU" if args.fake_nodes
             else f"{args.actors} actors x {args.workers_per_actor} workers")
    print(f"\n{args.env_id}, {shape}, {args.envs_per_actor} envs per actor, chunks of "
          f"{args.chunk_length} steps, median of {args.repeats}; python "
          f"{platform.python_version()}, ray {ray.__version__}, torch {torch.__version__}, "
          f"numpy {np.__version__}, commit {commit}; load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after, on {os.cpu_count()} CPUs")
    (print_fake_cluster if args.fake_nodes else print_local_ray)(args, runs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": asdict(args), "commit": commit, "load": [load_before, load_after],
                       **runs}, f, indent=2)


if __name__ == "__main__":
    main()
