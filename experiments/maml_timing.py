# Docs: docs/maml.md#halfcheetahdir-sampling-time (the timing there comes from this script)
"""Wall time of one MultiTaskSampler meta-batch against the bare single-process loop.

The paper's HalfCheetahDir config: 40 tasks x 20 episodes x 100 steps, train and valid rounds,
so 160,000 env steps per meta-batch. The bare loop steps one HalfCheetahDir-v5 env (same
wrappers, zero actions, reset at each episode's end) in this process, with no policy: its rate
``r`` (the mean of a run before and one after the sampler's) gives the ideal time
``steps / (cores * r)``. The sampler's time is the median over
``--repeats`` calls of ``sample()`` after one warm-up call (the warm-up starts the workers), and
includes everything: policy inference, baseline fits, advantages, the inner update. On shared
cores the workers' own env.step time (``MultiTaskSampler.stats()``) is reported too: it shows
how much slower the envs ran inside the workers than in the bare loop.

Run: ``python experiments/maml_timing.py --repeats 3``
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import psutil
import torch

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
    config: str = "halfcheetah-dir"
    """a shipped config name or a JSON/YAML file"""
    num_workers: int = 2
    """vecsample worker processes"""
    cores: int = 2
    """cores in the ideal time steps / (cores * bare rate)"""
    repeats: int = 3
    """timed meta-batches (after one warm-up); the median is reported"""
    bare_steps: int = 20000
    """steps of the bare single-process loop"""
    json: str = ""
    """optional path for the results"""


def bare_rate(env_name: str, env_kwargs: dict[str, object], steps: int) -> tuple[float, float]:
    """Steps per wall second and CPU seconds per step of one env in this process."""
    env = gym.make(env_name, **env_kwargs)
    env.reset(seed=0)
    action = np.zeros(env.action_space.shape, dtype=np.float32)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start), (time.process_time() - cpu) / steps


def tree_cpu_s() -> float:
    """CPU seconds (user + system) of this process and every live descendant (the workers)."""
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def main(args: Args) -> dict[str, float]:
    cfg = load_config(args.config)
    torch.manual_seed(0)
    torch.set_num_threads(1)  # the sampler's own thread does the inference; keep main quiet
    env = gym.make(cfg.env_name, **cfg.env_kwargs)
    policy = get_policy_for_env(env, cfg.hidden_sizes, cfg.nonlinearity)
    baseline = LinearFeatureBaseline(get_input_size(env))
    bare = [bare_rate(cfg.env_name, cfg.env_kwargs, args.bare_steps)]
    times = []
    with MultiTaskSampler(
        cfg.env_name, cfg.env_kwargs, cfg.fast_batch_size, policy, baseline, env=env,
        seed=0, num_workers=args.num_workers,
    ) as sampler:  # fmt: skip
        for i in range(args.repeats + 1):
            tasks = sampler.sample_tasks(cfg.meta_batch_size)
            if i == 1:
                before, cpu_before = sampler.stats(), tree_cpu_s()
            start = time.perf_counter()
            train, valid = sampler.sample(
                tasks,
                num_steps=cfg.num_steps,
                fast_lr=cfg.fast_lr,
                gamma=cfg.gamma,
                gae_lambda=cfg.gae_lambda,
            )
            if i > 0:  # the first call starts the workers
                times.append(time.perf_counter() - start)
        after, cpu_after = sampler.stats(), tree_cpu_s()
        # The steps of the last call (HalfCheetah never terminates: every call has as many).
        steps = sum(sum(b.lengths) for b in [*(e for t in train for e in t), *valid])
    # The cores are shared: measure the bare loop before and after, and use the mean rate.
    bare.append(bare_rate(cfg.env_name, cfg.env_kwargs, args.bare_steps))
    rate = statistics.mean(r for r, _ in bare)
    bare_cpu = statistics.mean(c for _, c in bare)
    ideal = steps / (args.cores * rate)
    # What the workers spent inside env.step during the timed calls: on shared cores this shows
    # how much of the wall time is the envs running slower than the bare loop did.
    worker_step_s = (after["env_step_s"] - before["env_step_s"]) / args.repeats
    result = {
        "steps": steps,
        "bare_rate_steps_per_s": rate,
        "bare_rates_before_after": [r for r, _ in bare],
        "ideal_s": ideal,
        "sampler_s_median": statistics.median(times),
        "sampler_s_all": times,
        "ratio": statistics.median(times) / ideal,
        "worker_env_step_us": 1e6 * worker_step_s / steps,
        "bare_env_step_us": 1e6 / rate,
        "wall_over_worker_step_time": statistics.median(times) / (worker_step_s / args.num_workers),
        # Contention-proof view: CPU seconds the whole sampler (main + workers) spent per
        # meta-batch against the bare loop's CPU seconds for as many steps. On dedicated cores
        # with perfect overlap the wall-time ratio would equal it.
        "cpu_ratio": (cpu_after - cpu_before) / args.repeats / (steps * bare_cpu),
        "load_average_1min": os.getloadavg()[0],
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": dataclasses.asdict(args), **result}, f, indent=2)
    return result


def parse_args(argv: Sequence[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for field in dataclasses.fields(Args):
        default = getattr(Args(), field.name)
        parser.add_argument(
            f"--{field.name.replace('_', '-')}", type=type(default), default=default
        )
    return Args(**vars(parser.parse_args(argv)))


if __name__ == "__main__":
    r = main(parse_args())
    print(
        f"{r['steps']} steps; bare loop {r['bare_rate_steps_per_s']:.0f} steps/s; ideal "
        f"{r['ideal_s']:.2f} s; sampler {r['sampler_s_median']:.2f} s (median); "
        f"ratio {r['ratio']:.2f}; load average {r['load_average_1min']:.1f}"
    )
    print(
        f"env.step in the workers {r['worker_env_step_us']:.0f} us against "
        f"{r['bare_env_step_us']:.0f} us bare; wall / (worker step time / workers) "
        f"{r['wall_over_worker_step_time']:.2f}; CPU ratio {r['cpu_ratio']:.2f}"
    )
