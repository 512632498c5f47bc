"""R8: vecsample equals a serial reference bit for bit, over random spaces, splits and timeouts.
R9: the same seed gives identical trajectories across runs, start methods and worker splits.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, iterate
from helpers import assert_same
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from vecsample import VecSampler
from vecsample._wire.spaces import copy_tree
from vecsample.seeding import env_seeds
from vecsample.testing import SpaceEnv

FLOATS = [np.float16, np.float32, np.float64]
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


@st.composite
def leaf_spaces(draw: st.DrawFn) -> spaces.Space[Any]:
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    kind = draw(st.sampled_from(["float", "int", "discrete", "multidiscrete", "multibinary"]))
    if kind == "float":
        dtype = draw(st.sampled_from(FLOATS))
        return spaces.Box(-2.0, 3.0, shape, dtype=dtype)
    if kind == "int":
        dtype = draw(st.sampled_from(INTS))
        return spaces.Box(0, 100, shape, dtype=dtype)
    if kind == "discrete":
        return spaces.Discrete(draw(st.integers(1, 5)), start=draw(st.integers(-3, 3)))
    if kind == "multidiscrete":
        return spaces.MultiDiscrete(np.full(shape or (2,), draw(st.integers(2, 6))))
    return spaces.MultiBinary(list(shape or (3,)))


def nested_spaces(max_leaves: int = 4) -> st.SearchStrategy[spaces.Space[Any]]:
    return st.recursive(
        leaf_spaces(),
        lambda children: st.one_of(
            st.lists(children, min_size=1, max_size=3).map(lambda xs: spaces.Tuple(xs)),
            st.dictionaries(st.sampled_from("abcd"), children, min_size=1, max_size=3)
            .map(lambda d: spaces.Dict(d)),
        ),
        max_leaves=max_leaves,
    )


def serial_rollout(env_fns: list[Any], seed: int, actions: list[Any]) -> list[list[Any]]:
    """The reference: plain envs stepped one by one, with same-step autoreset."""
    envs = [fn() for fn in env_fns]
    for env, env_seed in zip(envs, env_seeds(seed, len(envs)), strict=True):
        env.reset(seed=env_seed)
    out = []
    for batch in actions:
        step = []
        for env, action in zip(envs, batch, strict=True):
            o, r, term, trunc, _ = env.step(action)
            final = None
            if term or trunc:
                final, (o, _) = o, env.reset()
            step.append((o, r, term, trunc, final))
        out.append(step)
    return out


def sampler_rollout(s: VecSampler, batches: list[Any], timeouts: list[float | None]
                    ) -> list[dict[int, Any]]:
    """Every worker sent each round, received through recvs with the given timeouts."""
    rounds = []
    for k, batch in enumerate(batches):
        per = s.envs_per_slot
        for w in range(s.num_slots):
            s.step_send(w, _rows(batch, w * per, (w + 1) * per))
        got: dict[int, Any] = {}
        i = 0
        while len(got) < s.num_slots:
            for r in s.step_recv(timeouts[(k + i) % len(timeouts)], copy=True):
                assert r.worker not in got
                got[r.worker] = r
            i += 1
        rounds.append(got)
    return rounds


def _rows(batch: Any, lo: int, hi: int) -> Any:
    if isinstance(batch, dict):
        return {k: _rows(v, lo, hi) for k, v in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_rows(v, lo, hi) for v in batch)
    return batch[lo:hi]


def _row(tree: Any, j: int) -> Any:
    if isinstance(tree, dict):
        return {k: _row(v, j) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_row(v, j) for v in tree)
    return tree[j]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(obs_space=nested_spaces(), act_space=nested_spaces(3),
       workers=st.integers(1, 3), per_worker=st.integers(1, 3),
       timeouts=st.lists(st.sampled_from([None, 0.0, 0.001]), min_size=1, max_size=3),
       seed=st.integers(0, 2**32))
# Found by this test: a Dict/Tuple holding a single leaf went through the bare-leaf fast path.
@example(obs_space=spaces.Box(-2.0, 3.0, (), np.float16),
         act_space=spaces.Tuple([spaces.Box(-2.0, 3.0, (), np.float16)]),
         workers=1, per_worker=1, timeouts=[None], seed=0)
@example(obs_space=spaces.Dict({"a": spaces.Discrete(3)}), act_space=spaces.MultiBinary(3),
         workers=2, per_worker=2, timeouts=[0.0], seed=1)
def test_sampler_equals_the_serial_reference_bit_for_bit(obs_space, act_space, workers,
                                                          per_worker, timeouts, seed):
    n = workers * per_worker
    env_fns = [functools.partial(SpaceEnv, obs_space, act_space, env_index=i, length=3)
               for i in range(n)]
    batched = batch_space(act_space, n)
    batched.seed(seed)
    batches = [batched.sample() for _ in range(5)]
    per_env = [list(iterate(batched, b)) for b in batches]
    reference = serial_rollout(env_fns, seed, per_env)
    with VecSampler(env_fns, num_workers=workers, seed=seed, context="fork") as s:
        s.reset()
        rounds = sampler_rollout(s, batches, timeouts)
    for k, (got, want) in enumerate(zip(rounds, reference, strict=True)):
        for r in got.values():
            for j, env in enumerate(r.env_ids):
                o, rew, term, trunc, final = want[env]
                where = f"round {k} env {env}"
                assert_same(_row(r.obs, j), o, where)
                assert_same(r.rewards[j], np.float64(rew), where)
                assert (r.terminated[j], r.truncated[j]) == (term, trunc), where
                assert bool(r.has_final_obs[j]) == (final is not None), where
                if final is not None:
                    assert_same(_row(r.final_obs, j), final, where)


# --- R9: determinism --------------------------------------------------------------------------


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
