"""What waiting for a worker process adds to a step: auto's ROUND_TRIP_S (docs/lab/benchmarks.md).

``env_placement="auto"`` (vecsample/_parent/autoplace.py) prices the envs stepped one after
another in the trainer's process against two blocks stepped at once, one here and one in a
worker process, which costs one block plus what the wait for the worker adds (its
``ROUND_TRIP_S``). This script measures both with CleanRL's MLP between steps
(``experiments/small_workloads.py``'s policy, one torch thread), timing the ``step()`` calls
alone, in interleaved rounds: ``"parent"`` (every env in one loop here: ``F + 2 * block``,
``F`` being the step's fixed cost) and ``"share"`` (``F + block + round_trip``), and reads the
round trip off them, ``share - parent + block``, with ``block`` auto's own timing of half the
envs (``time_block``, what it prices). It prints, per workload, the median step time of each
placement, that block, and the round trip of each round (median, min–max).

Run from the checkout: ``PYTHONPATH=. python docs/lab/scripts/round_trip.py``
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "experiments"))
from small_workloads import build, policy_of

from vecsample.inprocess import time_block

WORKLOADS = [("CartPole-v1", 4), ("CartPole-v1", 16), ("HalfCheetah-v5", 4),
             ("HalfCheetah-v5", 16)]
ROUNDS, SECONDS = 5, 1.0


def step_time(env, act, obs, seconds: float) -> tuple[float, np.ndarray]:
    """Mean seconds of one ``step()`` call over ``seconds`` of the loop obs -> act -> step."""
    spent, steps, start = 0.0, 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        actions = act(obs)
        t = time.perf_counter()
        obs = env.step(actions)[0]
        spent += time.perf_counter() - t
        steps += 1
    return spent / steps, obs


def block_time(env_id: str, n: int) -> float:
    """auto's own timing of the first block (n / 2 envs), as ``autoplace.resolve`` takes it."""
    env = build("parent", env_id, n)
    try:
        size, layout = n // 2, env.sampler.layout
        spaces = (env.single_observation_space, env.single_action_space)
        envs = layout.hosted if layout.hosted is not None else layout.env_fns[:size]
        return float(time_block(envs, layout.options.autoreset_mode, spaces,
                                list(range(size)), 0.25))
    finally:
        env.close()


def measure(env_id: str, n: int) -> dict[str, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        envs = {p: build(p, env_id, n) for p in ("parent", "share")}
    try:
        act = policy_of(envs["parent"], 0)
        obs = {p: e.reset(seed=0)[0] for p, e in envs.items()}
        times: dict[str, list[float]] = {p: [] for p in envs}
        for _ in range(ROUNDS):
            for p, e in envs.items():
                t, obs[p] = step_time(e, act, obs[p], SECONDS)
                times[p].append(t)
    finally:
        for e in envs.values():
            e.close()
    med = {p: statistics.median(ts) for p, ts in times.items()}
    block = block_time(env_id, n)
    trips = [s - p + block for s, p in zip(times["share"], times["parent"], strict=True)]
    return {**med, "round_trip": statistics.median(trips), "low": min(trips),
            "high": max(trips), "block": block}


def main() -> None:
    torch.set_num_threads(1)  # CleanRL's setting; the policy stays on one core
    print("| workload | parent step µs | share step µs | round trip µs (min–max) | "
          "auto's block µs |")
    print("|---|---|---|---|---|")
    for env_id, n in WORKLOADS:
        r = measure(env_id, n)
        print(f"| {env_id} × {n} | {r['parent'] * 1e6:.0f} | {r['share'] * 1e6:.0f} | "
              f"{r['round_trip'] * 1e6:.0f} ({r['low'] * 1e6:.0f}–{r['high'] * 1e6:.0f}) | "
              f"{r['block'] * 1e6:.0f} |", flush=True)


if __name__ == "__main__":
    main()
