"""Meta-batch sampling time on Meta-World+: vecsample against their vector envs (docs/lab/maml.md).

The timing in docs/lab/maml.md#meta-world-sampling-time comes from this script. One meta-batch is
what MAML-TRPO samples per outer step: ``meta_batch_size`` tasks x ``episodes_per_task``
episodes x ``max_path_length`` steps, a train round and a valid round, so
``2 * M * E * L`` env steps. Backends, timed in turn (the order rotates every repeat, so each
sees the same mix of the machine's other load):

* ``vecsample``: ``MultiTaskSampler.sample`` with ``num_workers`` workers, each stepping a block
  of ``M * E / num_workers`` envs; everything included (inference, baseline fits, advantages,
  the inner update).
* ``async`` / ``sync``: ``metaworld.make_ml_envs(..., vector_strategy=...)``, one env per task
  (``M`` envs; ``async`` is one process per env), as Meta-World's baselines build them; each
  round plays ``E`` episodes per env back to back (same-step autoreset) with the same policy's
  forward and sampling per vector step. No baseline fit or inner update here (favours them).

The bare loop: 20 envs of the meta-batch's tasks (cycled), stepped round-robin in this process
with uniform actions, no policy. ``ideal = steps / (cores * bare rate)``. The block loop: as
many envs as one worker steps (``M * E / num_workers``), the same way, once after the backends:
what a worker does, without the worker (many Sawyer envs do not stay in cache).
Printed: each backend's median, ``async / vecsample`` (the issue's target: >= 1.4 on ML10) and
``vecsample / ideal`` (target: <= 1.15 on ML10, <= 1.25 on ML1 reach).

Run: ``python experiments/maml_timing_metaworld.py --benchmark ML10 --repeats 3``
(needs the metaworld extra, and psutil for the CPU seconds)
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import tyro
from maml_timing import tree_cpu_s

import vecsample.envs  # noqa: F401  (registers MetaWorld-v3)
from vecsample.maml import LinearFeatureBaseline, MultiTaskSampler, Policy, get_policy_for_env


@dataclass
class Args:
    benchmark: str = "ML10"
    """ML1, ML10 or ML45"""
    env_name: str = "reach-v3"
    """the class of ML1"""
    meta_batch_size: int = 20
    """tasks per meta-batch (Meta-World's and garage's default)"""
    episodes_per_task: int = 10
    """episodes per task and round (garage's default)"""
    max_path_length: int = 500
    """episode length (Meta-World's)"""
    num_workers: int = 2
    """vecsample worker processes"""
    cores: int = 2
    """cores in the ideal time steps / (cores * bare rate)"""
    repeats: int = 3
    """timed meta-batches per backend (after one warm-up each); medians are reported"""
    backends: tuple[str, ...] = ("vecsample", "async", "sync")
    """which to time"""
    bare_steps: int = 20000
    """steps of each bare-loop run (one before and one after the backends)"""
    json: str = ""
    """optional path for the results"""


def make_policy(env: gym.Env[Any, Any]) -> Policy:
    torch.manual_seed(0)
    return get_policy_for_env(env, (100, 100), "tanh")  # garage's Meta-World policy


class Vecsample:
    """One MultiTaskSampler meta-batch."""

    def __init__(self, args: Args) -> None:
        kwargs = {"benchmark": args.benchmark, "env_name": args.env_name,
                  "max_path_length": args.max_path_length}  # fmt: skip
        env = gym.make("MetaWorld-v3", **kwargs)
        policy = make_policy(env)
        self.sampler = MultiTaskSampler(
            "MetaWorld-v3", kwargs, args.episodes_per_task, policy,
            LinearFeatureBaseline(39), env=env, seed=0, num_workers=args.num_workers,
        )  # fmt: skip
        self.tasks = self.sampler.sample_tasks(args.meta_batch_size)
        self.worker_step_s = 0.0

    def __call__(self) -> int:
        before = self.sampler.stats().get("env_step_s", 0.0)
        train, valid = self.sampler.sample(self.tasks, num_steps=1, fast_lr=0.1, gamma=0.99)
        self.worker_step_s = self.sampler.stats()["env_step_s"] - before
        return sum(sum(e.lengths) for e in [*train[0], *valid])

    def close(self) -> None:
        self.sampler.close()


class MetaWorldVector:
    """One meta-batch on Meta-World's own ``make_ml_envs`` vector env (one env per task)."""

    def __init__(self, args: Args, strategy: str) -> None:
        import metaworld  # here: the module loads (--help, tests) without the extra

        name = args.env_name if args.benchmark == "ML1" else args.benchmark
        self.envs = metaworld.make_ml_envs(
            name, seed=0, meta_batch_size=args.meta_batch_size, vector_strategy=strategy,
            split="train", terminate_on_success=False, task_select="pseudorandom",
            max_episode_steps=args.max_path_length,
        )  # fmt: skip
        # Their pseudorandom task wrapper has no task until sample_tasks (their baselines call
        # it once per meta-batch); a plain reset() before it fails on _last_rand_vec.
        self.envs.call("sample_tasks")
        self.policy = make_policy(gym.make("MetaWorld-v3", benchmark="ML1", env_name="reach-v3"))
        self.steps_per_round = args.episodes_per_task * args.max_path_length

    def __call__(self) -> int:
        for _ in range(2):  # train round, valid round
            obs, _ = self.envs.reset()
            for _ in range(self.steps_per_round):
                with torch.no_grad():
                    pi = self.policy(torch.as_tensor(obs, dtype=torch.float32))
                    actions = pi.sample().numpy()
                obs, *_ = self.envs.step(actions)
        return 2 * self.steps_per_round * self.envs.num_envs

    def close(self) -> None:
        self.envs.close()


def bare_loop(args: Args, steps: int, num_envs: int = 20) -> tuple[float, float]:
    """(steps per wall second, CPU seconds per step) of ``num_envs`` envs of the meta-batch's
    tasks (cycled) stepped round-robin in one process."""
    env = gym.make("MetaWorld-v3", benchmark=args.benchmark, env_name=args.env_name)
    env.reset(seed=0)
    tasks = env.unwrapped.sample_tasks(args.meta_batch_size)
    tasks = [tasks[i % len(tasks)] for i in range(num_envs)]
    envs = []
    for task in tasks:
        e = gym.make("MetaWorld-v3", benchmark=args.benchmark, env_name=args.env_name,
                     max_path_length=args.max_path_length)  # fmt: skip
        e.unwrapped.reset_task(task)
        e.reset(seed=0)
        envs.append(e)
    rng = np.random.default_rng(0)
    done, start, cpu = 0, time.perf_counter(), time.process_time()
    while done < steps:
        for e in envs:
            _, _, terminated, truncated, _ = e.step(rng.uniform(-1, 1, 4).astype(np.float32))
            if terminated or truncated:
                e.reset()
        done += len(envs)
    rate, cpu = done / (time.perf_counter() - start), (time.process_time() - cpu) / done
    for e in [env, *envs]:
        e.close()
    return rate, cpu


def time_backends(args: Args) -> dict[str, dict[str, Any]]:
    """Builds each backend, warms it up, then times ``repeats`` meta-batches in rotation."""
    makers: dict[str, Callable[[], Any]] = {
        "vecsample": lambda: Vecsample(args),
        "async": lambda: MetaWorldVector(args, "async"),
        "sync": lambda: MetaWorldVector(args, "sync"),
    }
    runners = {name: makers[name]() for name in args.backends}
    out: dict[str, dict[str, Any]] = {n: {"times": [], "cpu_s": []} for n in runners}
    try:
        for name, run in runners.items():
            out[name]["steps"] = run()  # warm-up: starts workers, builds the envs
        for r in range(args.repeats):
            order = list(runners)[r % len(runners):] + list(runners)[: r % len(runners)]
            for name in order:
                cpu, start = tree_cpu_s(), time.perf_counter()
                runners[name]()
                out[name]["times"].append(time.perf_counter() - start)
                out[name]["cpu_s"].append(tree_cpu_s() - cpu)
                if name == "vecsample":
                    out[name].setdefault("worker_step_s", []).append(runners[name].worker_step_s)
    finally:
        for run in runners.values():
            run.close()
    return out


def block_envs(args: Args) -> int:
    return args.meta_batch_size * args.episodes_per_task // args.num_workers


def main(args: Args) -> dict[str, Any]:
    torch.set_num_threads(1)  # the sampler's thread does the inference; keep main quiet
    rates = [bare_loop(args, args.bare_steps)]
    backends = time_backends(args)
    rates.append(bare_loop(args, args.bare_steps))  # the cores are shared: once more, after
    # What one worker steps (its block of envs), without the worker: once, after.
    block_rate, block_cpu = bare_loop(args, args.bare_steps, block_envs(args))
    rate = statistics.mean(r for r, _ in rates)
    cpu = statistics.mean(c for _, c in rates)
    result: dict[str, Any] = {"bare_rates_before_after": [r for r, _ in rates],
                              "bare_step_us": 1e6 / rate, "bare_cpu_step_us": 1e6 * cpu,
                              "block_envs": block_envs(args), "block_step_us": 1e6 / block_rate,
                              "block_cpu_step_us": 1e6 * block_cpu,
                              "load_average_1min": os.getloadavg()[0]}  # fmt: skip
    for name, b in backends.items():
        b["median_s"] = statistics.median(b["times"])
        b["ideal_s"] = b["steps"] / (args.cores * rate)
        b["ratio_to_ideal"] = b["median_s"] / b["ideal_s"]
        # CPU seconds of the whole backend (main + its processes) over the bare loop's for as
        # many steps: what other processes' load does not inflate.
        b["cpu_ratio"] = statistics.median(b["cpu_s"]) / (b["steps"] * cpu)
        b["ratio_to_block_ideal"] = b["median_s"] / (b["steps"] / (args.cores * block_rate))
        b["cpu_ratio_to_block"] = statistics.median(b["cpu_s"]) / (b["steps"] * block_cpu)
        result[name] = b
    if "vecsample" in backends:
        for name in ("async", "sync"):
            if name in backends:
                result[f"{name}_over_vecsample"] = backends[name]["median_s"] / backends[
                    "vecsample"]["median_s"]  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": dataclasses.asdict(args), **result}, f, indent=2)
    return result


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line)."""
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    r = main(parse_args())
    print(f"bare loop {r['bare_step_us']:.0f} us/step ({r['bare_cpu_step_us']:.0f} CPU us/step); "
          f"block of {r['block_envs']} envs {r['block_step_us']:.0f} us/step "
          f"({r['block_cpu_step_us']:.0f} CPU us/step); load average {r['load_average_1min']:.1f}")
    for name in ("vecsample", "async", "sync"):
        if name in r:
            b = r[name]
            print(
                f"{name}: {b['steps']} steps, median {b['median_s']:.2f} s "
                f"(all {', '.join(f'{t:.2f}' for t in b['times'])}), "
                f"CPU {statistics.median(b['cpu_s']):.1f} s; ideal {b['ideal_s']:.2f} s; "
                f"ratio to ideal {b['ratio_to_ideal']:.2f}; CPU ratio {b['cpu_ratio']:.2f}; "
                f"to the block loop: {b['ratio_to_block_ideal']:.2f}, CPU "
                f"{b['cpu_ratio_to_block']:.2f}"
            )
    for name in ("async", "sync"):
        if f"{name}_over_vecsample" in r:
            print(f"{name} / vecsample: {r[f'{name}_over_vecsample']:.2f}x")
