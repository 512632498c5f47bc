"""A MultiTaskSampler meta-batch against bare loops (docs/lab/maml.md#halfcheetahdir-sampling-time).

Wall time of one MultiTaskSampler meta-batch against a bare single-process loop; the timing in
that section of docs/lab/maml.md comes from this script.

The paper's HalfCheetahDir config: 40 tasks x 20 episodes x 100 steps, train and valid rounds,
so 160,000 env steps per meta-batch. The sampler's time is the median over ``--repeats`` calls
of ``sample()`` after one warm-up call (which starts the workers); it includes everything:
policy inference, baseline fits, advantages, the inner update.

Two bare loops, each run before and after the sampler (the mean is used), in this process, no
policy, resets at each episode's end:

* ``1env``: one HalfCheetahDir-v5 env, zero actions: the cheapest step there is;
* ``block``: as many envs as one worker steps (here 400), round-robin, N(0, 1) actions (what a
  fresh Gaussian policy sends): what a worker does, without the worker.

For each, the ideal time is ``steps / (cores * rate)`` and ``ratio`` = sampler time / ideal (the
issue's target is <= 1.25). On shared cores the wall ratio mostly measures the other processes,
so two contention-proof figures are reported too: ``cpu_ratio`` = CPU seconds of the whole
sampler (main process + workers) per meta-batch / bare CPU seconds for as many steps (on
dedicated cores with perfect overlap the wall ratio would equal it), and the workers' own
env.step time per step (``MultiTaskSampler.stats()``) against the bare loops'.

The sampler steps vecsample's batch-native MuJoCo task envs (``HalfCheetahDirBatch-v5``, one
per worker, one ``MjData`` per env: docs/mujoco_batch.md) where the config's env
has one, as ``MultiTaskSampler`` does by default; ``--no-batch-envs`` keeps gymnasium's single
envs (runs 1 to 3 of docs/lab/maml.md). The bare loops stay gymnasium's single envs either way:
issue 25's P8 asks the batch envs' sampler to beat that ideal (ratio to ``1env`` <= 1.0).

Run: ``python experiments/maml_timing.py --repeats 3`` (needs psutil, in the ``test`` extra)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import psutil
import torch
import tyro

import vecsample.envs  # noqa: F401  (registers the task envs)
from vecsample.maml import (
    LinearFeatureBaseline,
    MetaConfig,
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
    """steps of each bare loop run"""
    json: str = ""
    """optional path for the results"""
    batch_envs: bool = True
    """MultiTaskSampler's batch_envs: the batch-native MuJoCo task envs where the env has one"""


def bare_loop(cfg: MetaConfig, num_envs: int, gaussian: bool, steps: int) -> tuple[float, float]:
    """(steps per wall second, CPU seconds per step) of ``num_envs`` envs stepped round-robin."""
    envs = [gym.make(cfg.env_name, **cfg.env_kwargs) for _ in range(num_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    rng = np.random.default_rng(0)
    shape = envs[0].action_space.shape
    done = 0
    start, cpu = time.perf_counter(), time.process_time()
    while done < steps:
        for env in envs:
            action = rng.standard_normal(shape) if gaussian else np.zeros(shape)
            _, _, terminated, truncated, _ = env.step(action.astype(np.float32))
            if terminated or truncated:
                env.reset()
        done += num_envs
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    for env in envs:
        env.close()
    return done / wall, cpu / done


def tree_cpu_s() -> float:
    """CPU seconds (user + system) of this process and every live descendant (the workers)."""
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def time_sampler(cfg: MetaConfig, args: Args) -> dict[str, Any]:
    """Median wall time, CPU seconds and worker env.step seconds per sampled meta-batch."""
    torch.manual_seed(0)
    env = gym.make(cfg.env_name, **cfg.env_kwargs)
    policy = get_policy_for_env(env, cfg.hidden_sizes, cfg.nonlinearity)
    baseline = LinearFeatureBaseline(get_input_size(env))
    kwargs = {"num_steps": cfg.num_steps, "fast_lr": cfg.fast_lr, "gamma": cfg.gamma}
    times = []
    with MultiTaskSampler(
        cfg.env_name, cfg.env_kwargs, cfg.fast_batch_size, policy, baseline, env=env,
        seed=0, num_workers=args.num_workers, batch_envs=args.batch_envs,
    ) as sampler:  # fmt: skip
        batch_id = sampler.batch_id
        sampler.sample(sampler.sample_tasks(cfg.meta_batch_size), **kwargs)  # starts the workers
        stats, cpu = sampler.stats(), tree_cpu_s()
        for _ in range(args.repeats):
            tasks = sampler.sample_tasks(cfg.meta_batch_size)
            start = time.perf_counter()
            train, valid = sampler.sample(tasks, **kwargs)
            times.append(time.perf_counter() - start)
        cpu = (tree_cpu_s() - cpu) / args.repeats
        env_step_s = (sampler.stats()["env_step_s"] - stats["env_step_s"]) / args.repeats
    # The steps of one call (HalfCheetah never terminates: every call has as many).
    steps = sum(sum(b.lengths) for b in [*(e for t in train for e in t), *valid])
    return {"steps": steps, "times": times, "cpu_s": cpu, "worker_env_step_s": env_step_s,
            "batch_id": batch_id}


def main(args: Args) -> dict[str, Any]:
    cfg = load_config(args.config)
    torch.set_num_threads(1)  # the sampler's thread does the inference; keep main quiet
    block = cfg.meta_batch_size * cfg.fast_batch_size // args.num_workers
    variants = {"1env": (1, False), "block": (block, True)}
    bare = {name: [bare_loop(cfg, n, g, args.bare_steps)] for name, (n, g) in variants.items()}
    sampled = time_sampler(cfg, args)
    for name, (n, g) in variants.items():  # the cores are shared: once more, after
        bare[name].append(bare_loop(cfg, n, g, args.bare_steps))
    steps, wall = sampled["steps"], statistics.median(sampled["times"])
    result: dict[str, Any] = {
        "batch_id": sampled["batch_id"],  # the batch-native env sampled, or None: single envs
        "steps": steps,
        "sampler_s_median": wall,
        "sampler_s_all": sampled["times"],
        "sampler_cpu_s": sampled["cpu_s"],
        "worker_env_step_us": 1e6 * sampled["worker_env_step_s"] / steps,
        "wall_over_worker_step_time": wall / (sampled["worker_env_step_s"] / args.num_workers),
        "load_average_1min": os.getloadavg()[0],
    }
    for name, runs in bare.items():
        rate = statistics.mean(r for r, _ in runs)
        cpu = statistics.mean(c for _, c in runs)
        ideal = steps / (args.cores * rate)
        result[name] = {
            "envs": variants[name][0],
            "gaussian_actions": variants[name][1],
            "rates_before_after": [r for r, _ in runs],
            "step_us": 1e6 / rate,
            "cpu_step_us": 1e6 * cpu,
            "ideal_s": ideal,
            "ratio": wall / ideal,
            "cpu_ratio": sampled["cpu_s"] / (steps * cpu),
        }
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": dataclasses.asdict(args), **result}, f, indent=2)
    return result


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line)."""
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    r = main(parse_args())
    print(
        f"{r['batch_id'] or 'single envs'}: "
        f"{r['steps']} steps; sampler {r['sampler_s_median']:.2f} s (median), "
        f"{r['sampler_cpu_s']:.1f} CPU s; env.step in the workers {r['worker_env_step_us']:.0f} "
        f"us; wall / (worker step time / workers) {r['wall_over_worker_step_time']:.2f}; "
        f"load average {r['load_average_1min']:.1f}"
    )
    for name in ("1env", "block"):
        b = r[name]
        print(
            f"bare {name} ({b['envs']} envs): {b['step_us']:.0f} us/step, {b['cpu_step_us']:.0f} "
            f"CPU us/step; ideal {b['ideal_s']:.2f} s; ratio {b['ratio']:.2f}; "
            f"CPU ratio {b['cpu_ratio']:.2f}"
        )
