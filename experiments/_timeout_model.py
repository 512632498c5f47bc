"""A model of the sampling loop: when do partial batches pay? (docs/timeout.md)

The loop has W workers of n envs each and one parent. A worker's round takes S = the sum of its
n step times. The parent, per recv, pays ``overhead`` per worker received (pipe, send, copy) and
``policy_cost(batch)`` once. A full batch waits for the slowest worker, so per round of N = W*n
steps it pays ``E[max_w S_w] + policy_cost(N) + W*overhead``. A partial batch lets each worker go
on as soon as its own policy call is done, but makes more calls. It pays when the straggler gap
``E[max_w S_w] - E[S]`` is larger than the policy time the extra calls add.

``simulate`` plays the loop event by event with measured costs (bootstrapped step times, a
measured policy cost per batch size, a calibrated per-worker overhead), so it predicts steps/s,
workers per recv and the crossover. ``straggler_gap`` is the closed-form part.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from vecsample.testing import SlowEnv


@dataclass
class Costs:
    """Measured inputs of the model (seconds)."""

    #: Samples of one env step's duration.
    step_times: np.ndarray
    #: Seconds of one policy call on a batch of that size.
    policy_cost: Mapping[int, float]
    #: Parent time per worker received and sent again (IPC, copies).
    overhead: float


@dataclass
class Prediction:
    """What ``simulate`` predicts for one configuration."""

    steps_per_s: float
    workers_per_recv: float
    policy_calls_per_1000_steps: float


def round_sums(step_times: np.ndarray, n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` bootstrapped sums of ``n`` step times: one worker's round each."""
    sums: np.ndarray = rng.choice(step_times, size=(size, n)).sum(axis=1)
    return sums


def straggler_gap(step_times: np.ndarray, workers: int, n: int, rounds: int = 2000,
                  seed: int = 0) -> tuple[float, float]:
    """``(E[S], E[max_w S_w] - E[S])``: the mean round of a worker and what waiting for the
    slowest of ``workers`` adds to it (Monte Carlo over bootstrapped step times)."""
    rng = np.random.default_rng(seed)
    sums = round_sums(step_times, n, rounds * workers, rng).reshape(rounds, workers)
    return float(sums.mean()), float(sums.max(axis=1).mean() - sums.mean())


def _recv(finish: np.ndarray, now: float, timeout: float | None) -> tuple[np.ndarray, float]:
    """Which workers one ``step_recv(timeout)`` returns, and when it returns."""
    if timeout is None:
        return np.ones(len(finish), dtype=bool), max(now, float(finish.max()))
    first = max(now, float(finish.min()))
    ready = finish <= first + timeout
    end = max(first, float(finish.max())) if ready.all() else first + timeout
    return ready, end


def simulate(costs: Costs, workers: int, n: int, timeout: float | None, recvs: int = 2000,
             seed: int = 0) -> Prediction:
    """Plays ``recvs`` receives of the loop with these costs; a steady-state prediction."""
    rng = np.random.default_rng(seed)
    finish = round_sums(costs.step_times, n, workers, rng)
    now, steps, got = 0.0, 0, 0
    for _ in range(recvs):
        ready, now = _recv(finish, now, timeout)
        m = int(ready.sum())
        now += m * costs.overhead + costs.policy_cost[m * n]
        finish[ready] = now + round_sums(costs.step_times, n, m, rng)
        steps += m * n
        got += m
    return Prediction(steps / now, got / recvs, 1000.0 * recvs / steps)


# --- measuring the inputs ------------------------------------------------------------------------


def sleep_step_times(tail: str, step_time: float, count: int = 5000, probes: int = 300,
                     seed: int = 0) -> np.ndarray:
    """Step times of a SlowEnv: its drawn delays plus oversleeps of ``time.sleep`` measured here
    (``probes`` of them, resampled), so the OS's jitter counts as spread too."""
    env = SlowEnv(step_time=step_time, tail=tail, seed=seed)
    delays = np.array([env.draw_delay() for _ in range(count)])
    over = np.array([_timed(time.sleep, step_time) - step_time for _ in range(probes)])
    times: np.ndarray = delays + np.random.default_rng(seed).choice(over, size=count)
    return times


def env_step_times(env: Any, count: int = 2000, seed: int = 0) -> np.ndarray:
    """Step times of a real env, timed in this process with random actions."""
    env.reset(seed=seed)
    env.action_space.seed(seed)
    out = np.empty(count)
    for i in range(count):
        action = env.action_space.sample()
        start = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(action)
        out[i] = time.perf_counter() - start
        if terminated or truncated:
            env.reset()
    return out


def policy_costs(policy: Callable[[np.ndarray], Any], obs: np.ndarray, sizes: list[int],
                 repeats: int = 7) -> dict[int, float]:
    """Median seconds of ``policy`` per batch size (``obs`` is one observation)."""
    costs = {}
    for b in sizes:
        batch = np.repeat(np.asarray(obs)[None], b, axis=0)
        policy(batch)  # warm-up
        costs[b] = float(np.median([_timed(policy, batch) for _ in range(repeats)]))
    return costs


def _timed(fn: Callable[[Any], Any], arg: Any) -> float:
    start = time.perf_counter()
    fn(arg)
    return time.perf_counter() - start


def calibrate_overhead(workers: int, seconds: float = 1.0) -> float:
    """Parent seconds per worker per round, from a full-batch loop on zero-time sleep envs."""
    from vecsample.sampler import VecSampler
    from vecsample.tools.compare import sampling_loop
    from vecsample.tools.policies import random_policy
    from vecsample.tools.workloads import env_factories

    with VecSampler(env_factories("sleep", workers, 0.0), num_workers=workers,
                    infos=False) as sampler:
        r = sampling_loop(sampler, None, seconds, random_policy(sampler.single_action_space))
    return max(0.0, (r.seconds - r.policy_s) / r.recvs / workers)
