"""Evaluates a saved MAML policy on fresh tasks after 0, 1, ..., k inner steps (docs/maml.md).

Reads ``policy.th`` and ``config.json`` from ``--run-dir`` (what examples/maml_trpo.py
writes). One ``sample(tasks, num_steps=k)`` per batch of tasks gives the episodes sampled with
the parameters after 0..k-1 steps (``train[j]``) and after k steps (``valid``). Prints the mean
return per number of steps and writes it to ``<run-dir>/adaptation.json``.

Run: ``python examples/maml_test.py --run-dir runs/maml_trpo --num-steps 3``
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import tyro
from tqdm import trange

import vecsample.envs  # noqa: F401  (registers the task envs)
from vecsample.maml import (
    LinearFeatureBaseline,
    MultiTaskSampler,
    get_input_size,
    get_policy_for_env,
    load_config,
)


@dataclass
class Args:
    run_dir: str = "runs/maml_trpo"
    """the output directory of examples/maml_trpo.py"""
    num_steps: int = 3
    """largest number of inner gradient steps evaluated (0..num_steps)"""
    num_batches: int = 10
    """batches of fresh tasks"""
    meta_batch_size: int = 40
    """tasks per batch"""
    num_workers: int = 2
    """vecsample worker processes"""
    seed: int = 2
    """seeds the tasks, the envs and the action noise (use another seed than training)"""


def main(args: Args) -> dict[str, list[float]]:
    run = Path(args.run_dir)
    cfg = load_config(run / "config.json")
    env = gym.make(cfg.env_name, **cfg.env_kwargs)
    policy = get_policy_for_env(env, cfg.hidden_sizes, cfg.nonlinearity)
    policy.load_state_dict(torch.load(run / "policy.th", map_location="cpu"))
    baseline = LinearFeatureBaseline(get_input_size(env))
    returns: list[list[float]] = [[] for _ in range(args.num_steps + 1)]
    with MultiTaskSampler(
        cfg.env_name, cfg.env_kwargs, cfg.fast_batch_size, policy, baseline, env=env,
        seed=args.seed, num_workers=args.num_workers,
    ) as sampler:  # fmt: skip
        for _ in trange(args.num_batches, desc=f"{cfg.env_name}, 0..{args.num_steps} steps"):
            tasks = sampler.sample_tasks(args.meta_batch_size)
            train, valid = sampler.sample(
                tasks, num_steps=args.num_steps, fast_lr=cfg.fast_lr, gamma=cfg.gamma,
                gae_lambda=cfg.gae_lambda,
            )  # fmt: skip
            for steps, batches in enumerate([*train, valid]):
                returns[steps] += [b.rewards.sum(dim=0).mean().item() for b in batches]
    summary = {
        "steps": list(range(args.num_steps + 1)),
        "mean_return": [float(np.mean(r)) for r in returns],
        "std_over_tasks": [float(np.std(r)) for r in returns],
    }
    record = {"args": dataclasses.asdict(args), **summary}
    (run / "adaptation.json").write_text(json.dumps(record, indent=2))
    return summary


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line)."""
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    result = main(parse_args())
    for steps, mean, std in zip(
        result["steps"], result["mean_return"], result["std_over_tasks"], strict=True
    ):
        print(f"{steps} inner steps: mean return {mean:9.3f}  (std over tasks {std:.3f})")
