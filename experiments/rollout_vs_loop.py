"""Rollout.collect against the loop a user writes by hand (docs/lab/rollout.md).

CleanRL's ``ppo.py`` collects a rollout with a loop over ``envs.step``: the policy (an MLP
(64, 64), one torch thread) picks every env's action, the step returns every env's, and
observations, actions, rewards and dones go into preallocated ``(T, N)`` tensors. That loop
waits for the slowest worker at every step. ``vecsample.train.Rollout`` fills the same
tensors; with its defaults it sends each worker its next actions as soon as that worker's step
arrives (partial batches, ``recv_batch(timeout)`` and ``step_send_many``), so the workers step
while the policy runs.

Each configuration collects rollouts of ``--num-steps`` steps from the same ``VecSampler``, in
interleaved rounds (each round times every configuration for ``--seconds``, in turn): ``loop``
is the hand-written loop over ``VecSampler.step``; ``rollout`` is ``Rollout`` with its
defaults; ``rollout_full`` is ``Rollout(timeout=None)`` (full batches, as the loop). The table
gives each configuration's median env steps per second and its ratio to ``loop``: the median
of the per-round ratios, with their range, and the load average before and after.

Run: ``python experiments/rollout_vs_loop.py --envs CartPole-v1 --num-envs 64 --num-workers 2``
and ``--envs straggler --num-workers 16`` (``vecsample.testing.StragglerEnv``, 0.2 ms median).
"""

from __future__ import annotations

import json
import os
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

from vecsample import AutoresetMode, VecSampler
from vecsample.testing import StragglerEnv, fns
from vecsample.train import Rollout


@dataclass
class Args:
    envs: list[str] = field(default_factory=lambda: ["CartPole-v1"])
    """gymnasium ids, or "straggler" (StragglerEnv, 0.2 ms median step, a heavy tail)"""
    num_envs: int = 64
    """envs per sampler"""
    num_workers: int = 2
    """worker processes"""
    num_steps: int = 128
    """T: steps per env per rollout"""
    configs: list[str] = field(default_factory=lambda: ["loop", "rollout", "rollout_full"])
    """what to time; ratios are to "loop" (keep it first)"""
    seconds: float = 2.0
    """how long each configuration collects in a round"""
    rounds: int = 5
    """interleaved rounds; the medians are over them"""
    seed: int = 0
    """the envs' seed and the policy's"""
    json: str | None = None
    """write every round's figures to this file"""


def make_sampler(env: str, args: Args) -> VecSampler:
    same = AutoresetMode.SAME_STEP  # Rollout's mode, and the loop's
    if env == "straggler":
        return VecSampler(fns(StragglerEnv, args.num_envs, step_time=2e-4),
                          num_workers=args.num_workers, seed=args.seed, autoreset_mode=same)
    return VecSampler(env, num_envs=args.num_envs, num_workers=args.num_workers, seed=args.seed,
                      autoreset_mode=same)


def policy_of(sampler: VecSampler, seed: int) -> nn.Module:
    """CleanRL's actor at its size: an MLP (64, 64) with tanh; logits for a discrete space."""
    torch.manual_seed(seed)
    obs_dim = int(np.prod(sampler.single_observation_space.shape or (1,)))
    space = sampler.single_action_space
    out = int(space.n) if isinstance(space, gym.spaces.Discrete) else int(np.prod(space.shape))
    return nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                         nn.Linear(64, out))


def act(policy: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    return policy(obs).argmax(dim=1)


class HandLoop:
    """CleanRL's collection loop over ``VecSampler.step``, into preallocated tensors."""

    def __init__(self, sampler: VecSampler, policy: nn.Module, steps: int) -> None:
        n, shape = sampler.num_envs, sampler.single_observation_space.shape or ()
        self.sampler, self.policy, self.steps = sampler, policy, steps
        self.obs = torch.zeros((steps, n, *shape))
        self.actions = torch.zeros((steps, n), dtype=torch.int64)
        self.rewards = torch.zeros((steps, n))
        self.dones = torch.zeros((steps, n))
        obs, _ = sampler.reset(seed=0)
        self.next_obs = torch.tensor(np.asarray(obs), dtype=torch.float32)

    def collect(self) -> None:
        for t in range(self.steps):
            self.obs[t] = self.next_obs
            with torch.no_grad():
                action = act(self.policy, self.next_obs)
            self.actions[t] = action
            r = self.sampler.step(action.numpy())
            self.rewards[t] = torch.from_numpy(r.rewards)
            self.dones[t] = torch.from_numpy(r.terminated | r.truncated)
            self.next_obs = torch.tensor(np.asarray(r.obs), dtype=torch.float32)


def collector(config: str, sampler: VecSampler, policy: nn.Module,
              steps: int) -> Callable[[], Any]:
    if config == "loop":
        return HandLoop(sampler, policy, steps).collect
    timeout = {"rollout_full": {"timeout": None}}.get(config, {})
    rollout = Rollout(sampler, policy, steps, act=act, device="cpu", seed=0, **timeout)
    return rollout.collect


def steps_per_s(collect: Callable[[], Any], env_steps: int, seconds: float) -> float:
    done, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        collect()
        done += env_steps
    return done / elapsed


def measure(args: Args, env: str) -> dict[str, Any]:
    with make_sampler(env, args) as sampler:
        policy = policy_of(sampler, args.seed)
        runs = {c: collector(c, sampler, policy, args.num_steps) for c in args.configs}
        for collect in runs.values():  # warm up: the first collect resets and learns infos
            collect()
        rounds = [{c: steps_per_s(collect, args.num_steps * args.num_envs, args.seconds)
                   for c, collect in runs.items()} for _ in range(args.rounds)]
    return {"env": env, "rounds": rounds}


def report(result: dict[str, Any], base: str) -> None:
    rounds = result["rounds"]
    print(f"\n{result['env']}: env steps/s, median of {len(rounds)} rounds; ratio to {base}")
    for config in rounds[0]:
        ratios = [r[config] / r[base] for r in rounds]
        print(f"  {config:>13} {statistics.median(r[config] for r in rounds):>10.0f}"
              f"  {statistics.median(ratios):.2f} x ({min(ratios):.2f}-{max(ratios):.2f})")


def main(args: Args) -> None:
    torch.set_num_threads(1)  # as CleanRL sets it
    print(f"load average before: {os.getloadavg()}")
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for env in args.envs:
            results.append(measure(args, env))
            report(results[-1], args.configs[0])
    print(f"load average after: {os.getloadavg()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": asdict(args), "results": results}, f, indent=1)


def parse_args(argv: Sequence[str] | None = None) -> Args:
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    main(parse_args())
