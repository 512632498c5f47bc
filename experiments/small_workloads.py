"""Small workloads: VectorEnv against SyncVectorEnv, a policy in the loop (docs/lab/benchmarks.md).

CleanRL's ``ppo_continuous_action.py`` steps 4 HalfCheetahs with a torch MLP in the trainer's
process, on machines of 2 cores: a batch that small does not pay for a round trip to worker
processes, and ``vecsample.VectorEnv`` with its defaults was slower there than gymnasium's
``SyncVectorEnv``, which steps the envs in the trainer's process. This script times that loop,
``obs -> policy -> step``, with the policy of CleanRL's size (an MLP (64, 64), one torch thread,
as CleanRL sets it), for each env id and env count given, in these configurations:

* ``sync``: ``gymnasium.vector.SyncVectorEnv``, the baseline of every ratio;
* ``vecsample``: ``vecsample.VectorEnv`` with its defaults (one worker process per core);
* ``auto``: ``VectorEnv(..., env_placement="auto")``, which times a step at start and chooses
  where the envs step (it says what it chose: the table's last column);
* ``workers``, ``share``, ``parent``: each placement pinned (``--placements``).

All are built with the same seed and NextStep autoreset (gymnasium's default), then stepped in
interleaved rounds: each round times every configuration for ``--seconds``, in turn, so that a
change in the machine's load hits them all alike. The table gives each configuration's median
steps per second over the rounds (env steps: batches times envs) and its ratio to ``sync``:
the median of the per-round ratios (each against the ``sync`` of the same round), with their
range. The load average before and after is printed with it: on a machine that other jobs
load, the configurations that need a second core lose most. ``--json PATH`` writes every
round.

Run: ``python experiments/small_workloads.py --env-ids HalfCheetah-v5 CartPole-v1 --num-envs 4 16``
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import tyro
from torch import nn

import vecsample
from vecsample import EnvMaker, VectorEnv
from vecsample.errors import PlacementNotice
from vecsample.machine import usable_cores


@dataclass
class Args:
    env_ids: list[str] = field(default_factory=lambda: ["HalfCheetah-v5", "CartPole-v1"])
    """gymnasium ids to step (MuJoCo ids need gymnasium[mujoco])"""
    num_envs: list[int] = field(default_factory=lambda: [4, 16])
    """env counts, each run with every id"""
    placements: list[str] = field(default_factory=lambda: ["workers", "share", "parent"])
    """the env_placement values to pin, besides the defaults and "auto" (none: leave them out)"""
    seconds: float = 1.0
    """how long each configuration steps in a round"""
    rounds: int = 5
    """interleaved rounds; the medians are over them"""
    seed: int = 0
    """the envs' seed and the policy's"""
    json: str | None = None
    """write every round's figures to this file"""


def policy_of(env: gym.vector.VectorEnv, seed: int) -> Callable[[np.ndarray], np.ndarray]:
    """CleanRL's actor at its size: an MLP (64, 64) with tanh, one torch thread; Box actions
    from the mean (clipped to the space), Discrete ones from the logits' argmax."""
    torch.manual_seed(seed)
    obs_dim = int(np.prod(env.single_observation_space.shape))
    space = env.single_action_space
    discrete = isinstance(space, gym.spaces.Discrete)
    out = int(space.n) if discrete else int(np.prod(space.shape))
    net = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                        nn.Linear(64, out))

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            y = net(torch.as_tensor(obs, dtype=torch.float32).reshape(len(obs), -1)).numpy()
        if discrete:
            return y.argmax(axis=1)
        return np.clip(y, space.low, space.high)  # type: ignore[attr-defined]

    return act


def build(config: str, env_id: str, n: int) -> gym.vector.VectorEnv:
    """The vector env of one configuration."""
    fns = [EnvMaker(env_id)] * n
    if config == "sync":
        return gym.vector.SyncVectorEnv(fns)
    if config == "vecsample":
        return VectorEnv(fns)
    return VectorEnv(fns, env_placement=config)


def chosen(env: gym.vector.VectorEnv) -> str:
    """Where a VectorEnv steps its envs: its placement and its worker count."""
    if not isinstance(env, VectorEnv):
        return "this process"
    layout, n = env.sampler.layout, env.sampler.num_workers
    return f"{layout.env_placement}, {n} block{'s' if n != 1 else ''}"


def steps_per_s(env: gym.vector.VectorEnv, act: Callable[[np.ndarray], np.ndarray],
                obs: np.ndarray, seconds: float) -> tuple[float, np.ndarray]:
    """Env steps per second of the loop ``obs -> act -> step`` over ``seconds``; the last obs."""
    batches, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        obs = env.step(act(obs))[0]
        batches += 1
    return batches * env.num_envs / elapsed, obs


def measure(args: Args, env_id: str, n: int) -> dict[str, Any]:
    """Every configuration of ``env_id`` x ``n``, in ``args.rounds`` interleaved rounds."""
    configs = ["sync", "vecsample", "auto", *args.placements]
    envs: dict[str, gym.vector.VectorEnv] = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PlacementNotice)  # the table says what it chose
            for config in configs:
                envs[config] = build(config, env_id, n)
        obs = {c: e.reset(seed=args.seed)[0] for c, e in envs.items()}
        acts = {c: policy_of(e, args.seed) for c, e in envs.items()}
        rounds: list[dict[str, float]] = []
        for _ in range(args.rounds):
            row = {}
            for c in configs:
                row[c], obs[c] = steps_per_s(envs[c], acts[c], obs[c], args.seconds)
            rounds.append(row)
        return {"env_id": env_id, "num_envs": n, "rounds": rounds,
                "placed": {c: chosen(e) for c, e in envs.items()}}
    finally:
        for env in envs.values():
            env.close()


def table(results: Sequence[dict[str, Any]]) -> str:
    lines = [f"{'env':<16}{'n':>4}  {'config':<10}{'steps/s':>10}{'÷ sync':>8}"
             f"{'range':>12}  where"]
    for res in results:
        sync = [r["sync"] for r in res["rounds"]]
        for c in res["rounds"][0]:
            runs = [r[c] for r in res["rounds"]]
            ratios = [a / b for a, b in zip(runs, sync, strict=True)]
            lines.append(f"{res['env_id']:<16}{res['num_envs']:>4}  {c:<10}"
                         f"{statistics.median(runs):>10,.0f}{statistics.median(ratios):>8.2f}"
                         f"{min(ratios):>7.2f}–{max(ratios):<4.2f}  {res['placed'][c]}")
    return "\n".join(lines)


def main(args: Args) -> None:
    torch.set_num_threads(1)  # as CleanRL: one thread for a policy this small
    before = os.getloadavg()
    results = [measure(args, env_id, n) for env_id in args.env_ids for n in args.num_envs]
    after = os.getloadavg()
    print(table(results))
    print(f"{usable_cores()} cores; load average (1, 5, 15 min) before "
          f"{' '.join(f'{x:.2f}' for x in before)}, after {' '.join(f'{x:.2f}' for x in after)}")
    if args.json:
        versions = {"python": platform.python_version(), "vecsample": vecsample.__version__,
                    "gymnasium": gym.__version__, "torch": torch.__version__,
                    "numpy": np.__version__}
        machine = {"cores": usable_cores(), "load_before": before, "load_after": after}
        with open(args.json, "w") as f:
            json.dump({"args": asdict(args), "versions": versions, "machine": machine,
                       "results": results}, f, indent=1)


def parse_args(argv: Sequence[str] | None = None) -> Args:
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    main(parse_args())
