"""Seeding (R9): one seed gives identical trajectories across runs, start methods and worker
splits; env seeds come from a SeedSequence; other seeds give other data."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np

from vecsample import VecSampler
from vecsample._wire.spaces import copy_tree
from vecsample.seeding import env_seeds


def rollout(sampler, steps: int) -> list[np.ndarray]:
    rng = np.random.default_rng(123)
    obs, _ = sampler.reset()
    out = [obs.copy()]
    for _ in range(steps):
        r = sampler.step(rng.integers(0, 2, sampler.num_envs))
        out += [r.obs.copy(), r.rewards.copy(), r.terminated.copy(), r.final_obs.copy()]
    return out


def test_same_seed_is_bit_identical_across_worker_splits(make_sampler):
    runs = []
    for workers in (1, 2, 8):
        runs.append(rollout(make_sampler("CartPole-v1", num_envs=8, num_workers=workers,
                                         seed=7), 60))
    for other in runs[1:]:
        for a, b in zip(runs[0], other, strict=True):
            np.testing.assert_array_equal(a, b)


def test_seeds_come_from_seed_sequence_not_seed_plus_i():
    a, b = env_seeds(0, 8), env_seeds(1, 8)
    assert len(set(a)) == 8 and not set(a) & set(b)
    assert env_seeds(None, 3) == [None] * 3


def test_different_seeds_give_different_data(make_sampler):
    a = rollout(make_sampler("CartPole-v1", num_envs=2, seed=1), 1)[0]
    b = rollout(make_sampler("CartPole-v1", num_envs=2, seed=2), 1)[0]
    assert not np.array_equal(a, b)


def cartpole_rollout(context: str, workers: int, seed: int, steps: int = 60) -> np.ndarray:
    actions = np.random.default_rng(seed).integers(0, 2, size=(steps, 4))
    fns = [functools.partial(gym.make, "CartPole-v1")] * 4
    with VecSampler(fns, num_workers=workers, seed=seed, context=context) as s:
        obs, _ = s.reset()
        trace = [copy_tree(obs)]
        for a in actions:
            r = s.step(a, copy=True)
            trace += [r.obs, r.rewards[:, None].astype(np.float32),
                      r.terminated[:, None].astype(np.float32)]
    return np.concatenate(trace, axis=1)


def test_same_seed_is_identical_across_runs_start_methods_and_splits():
    reference = cartpole_rollout("fork", 1, seed=11)
    for context, workers in [("fork", 1), ("fork", 4), ("forkserver", 2), ("spawn", 2)]:
        np.testing.assert_array_equal(cartpole_rollout(context, workers, seed=11), reference,
                                      err_msg=f"{context} x {workers} workers")
    assert not np.array_equal(cartpole_rollout("fork", 2, seed=12), reference)
