"""PPO on CartPole-v1 through RaySampler, one VecSampler per Ray actor (docs/distributed.md).

The "PPO through Ray" figures of docs/lab/distributed.md come from this script.

Self-contained on purpose: the PPO example of issue 7 (examples/ppo.py) has not landed yet;
once it has, this file should become that script with its sampler swapped for RaySampler.

    python examples/ppo_ray.py                       # a local Ray instance
    RAY_ADDRESS=auto python examples/ppo_ray.py      # an existing cluster (ray start ...)
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import ray
import torch
import tyro
from torch import nn
from torch.distributions import Categorical

from vecsample.ray import Chunk, RaySampler, TorchPolicy, numpy_weights


@dataclass
class Args:
    env_id: str = "CartPole-v1"
    """gymnasium id with CartPole's shapes (the agent takes 4 observations, picks 1 of 2)"""
    total_steps: int = 100_000
    """env steps over all actors"""
    actors: int = 0
    """Ray actors; 0: one per node of the cluster"""
    workers_per_actor: int = 1
    """env processes per actor (and its num_cpus)"""
    envs_per_actor: int = 8
    """envs per actor"""
    chunk_length: int = 128
    """steps per env per chunk: one PPO rollout per actor"""
    in_flight: int = 1
    """requests queued per actor; 1: strictly on-policy, 2: sampling overlaps the update"""
    lr: float = 2.5e-3
    """Adam step size"""
    gamma: float = 0.99
    """discount"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    epochs: int = 4
    """passes over each iteration's chunks"""
    minibatches: int = 4
    """minibatches per epoch"""
    clip: float = 0.2
    """PPO ratio clip"""
    seed: int = 0
    """seeds torch and the actors' envs"""

class Agent(nn.Module):
    """Actor-critic MLP. ``forward`` is what the Ray actors run: action, log-prob and value."""

    def __init__(self, obs_dim: int = 4, n_actions: int = 2) -> None:
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 1))
        self.actor = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, n_actions))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        dist = Categorical(logits=self.actor(obs))
        action = dist.sample()
        return action, {"logprob": dist.log_prob(action), "value": self.value(obs)}


# torch.tensor, not torch.as_tensor: chunk arrays from Ray are read-only, so copy them.


def advantages(agent: Agent, chunk: Chunk, args: Args) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over one chunk. SAME_STEP autoreset: a truncated episode bootstraps from its final
    observation, a terminated one from zero, and ``obs[t + 1]`` already starts the next one."""
    obs = torch.tensor(chunk.obs, dtype=torch.float32)
    with torch.no_grad():
        values = agent.value(obs)
        following = torch.cat([obs[1:], torch.tensor(chunk.next_obs[None], dtype=torch.float32)])
        next_values = agent.value(following)
        truncated = torch.tensor(chunk.truncated)
        finals = agent.value(torch.tensor(chunk.final_obs, dtype=torch.float32))
    next_values = torch.where(truncated, finals, next_values)
    next_values[torch.tensor(chunk.terminated)] = 0.0
    done = torch.tensor(chunk.terminated | chunk.truncated, dtype=torch.float32)
    delta = torch.tensor(chunk.rewards) + args.gamma * next_values - values
    adv = torch.zeros_like(delta)
    running = torch.zeros(delta.shape[1])
    for t in reversed(range(len(delta))):
        running = delta[t] + args.gamma * args.gae_lambda * (1.0 - done[t]) * running
        adv[t] = running
    return adv, adv + values


def update(agent: Agent, optimizer: torch.optim.Optimizer, chunks: list[Chunk],
           args: Args) -> float:
    """PPO's clipped objective over every chunk received; returns the last loss."""
    parts = [advantages(agent, c, args) for c in chunks]
    obs = torch.cat([torch.tensor(c.obs, dtype=torch.float32).flatten(0, 1) for c in chunks])
    actions = torch.cat([torch.tensor(c.actions).flatten() for c in chunks])
    old_logprob = torch.cat([torch.tensor(c.extras["logprob"]).flatten() for c in chunks])
    adv = torch.cat([a.flatten() for a, _ in parts])
    returns = torch.cat([r.flatten() for _, r in parts])
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    loss = torch.zeros(())
    for _ in range(args.epochs):
        for idx in torch.randperm(len(obs)).chunk(args.minibatches):
            dist = Categorical(logits=agent.actor(obs[idx]))
            ratio = (dist.log_prob(actions[idx]) - old_logprob[idx]).exp()
            clipped = ratio.clamp(1 - args.clip, 1 + args.clip)
            policy_loss = -torch.min(ratio * adv[idx], clipped * adv[idx]).mean()
            value_loss = 0.5 * (agent.value(obs[idx]) - returns[idx]).pow(2).mean()
            loss = policy_loss + value_loss - 0.01 * dist.entropy().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return float(loss.detach())


def train(args: Args) -> list[float]:
    """Trains for ``total_steps``; returns the mean episode return of each iteration."""
    torch.manual_seed(args.seed)
    agent = Agent()
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.lr)
    curve: list[float] = []
    with RaySampler(args.env_id, functools.partial(TorchPolicy, Agent),
                    num_envs=args.envs_per_actor, num_actors=args.actors or None,
                    workers_per_actor=args.workers_per_actor, chunk_length=args.chunk_length,
                    in_flight=args.in_flight, weights=numpy_weights(agent),
                    seed=args.seed) as sampler:
        steps, start = 0, time.perf_counter()
        while steps < args.total_steps:
            chunks = sampler.recv()  # one chunk per actor
            steps += sum(c.env_steps for c in chunks)
            loss = update(agent, optimizer, chunks, args)
            sampler.set_weights(numpy_weights(agent))
            returns = np.concatenate([c.episode_returns for c in chunks])
            curve.append(float(returns.mean()) if len(returns) else float("nan"))
            print(f"steps {steps:>7}  return {curve[-1]:7.1f}  loss {loss:7.3f}  "
                  f"versions {sorted({c.version for c in chunks})}  "
                  f"{steps / (time.perf_counter() - start):.0f} steps/s", flush=True)
        print(f"stats: {sampler.stats()}")
    return curve


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line)."""
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    arguments = parse_args()
    if not ray.is_initialized():
        # RAY_ADDRESS (or `ray start` on this machine) connects to a cluster; else a local one.
        ray.init(include_dashboard=False, logging_level=logging.WARNING)
    train(arguments)
