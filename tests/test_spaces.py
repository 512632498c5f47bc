"""Every supported space goes through shared memory unchanged: VecSampler vs a serial loop.

R8: over random nested spaces, worker splits and recv timeouts, vecsample equals a serial
reference bit for bit (hypothesis). Action checks: tests/test_actions.py."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, iterate
from helpers import assert_same
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from vecsample import VecSampler
from vecsample._wire.spaces import copy_tree, flatten, leaves
from vecsample.seeding import env_seeds
from vecsample.testing import SpaceEnv

ALL_DTYPES = spaces.Dict({
    "f16": spaces.Box(-2, 2, (3,), np.float16),
    "f32": spaces.Box(-2, 2, (2, 2), np.float32),
    "f64": spaces.Box(-2, 2, (), np.float64),
    "i8": spaces.Box(-5, 5, (2,), np.int8),
    "u8": spaces.Box(0, 255, (4,), np.uint8),
    "i64": spaces.Box(-9, 9, (1,), np.int64),
    "nest": spaces.Tuple((
        spaces.Discrete(7, start=-3),
        spaces.MultiDiscrete([3, 4, 5]),
        spaces.MultiBinary((2, 2)),
        spaces.Dict({"deep": spaces.Box(0, 1, (2,), np.float32)}),
    )),
})

ACTIONS = spaces.Tuple((spaces.MultiDiscrete([2, 3]), spaces.Dict({"b": spaces.Box(-1, 1, (2,))})))


def test_leaves_flatten_every_nesting():
    names = [leaf.name for leaf in leaves(ALL_DTYPES)]
    nest = ["nest/0", "nest/1", "nest/2", "nest/3/deep"]
    expected = [x for k in ALL_DTYPES.spaces for x in (nest if k == "nest" else [k])]
    assert names == expected  # depth-first, in the space's own key order
    sample = ALL_DTYPES.sample()
    assert len(flatten(ALL_DTYPES, sample)) == len(names)


def serial(n: int, seed: int, actions: list) -> list:
    envs = [SpaceEnv(ALL_DTYPES, ACTIONS, i) for i in range(n)]
    seeds = env_seeds(seed, n)
    out = [[env.reset(seed=s)[0] for env, s in zip(envs, seeds, strict=True)]]
    for batch in actions:
        row = []
        for j, env in enumerate(envs):
            obs, reward, terminated, truncated, _ = env.step(batch[j])
            if terminated or truncated:
                obs, _ = env.reset()
            row.append((obs, reward))
        out.append(row)
    return out


@pytest.mark.parametrize("workers", [1, 3])
def test_nested_spaces_of_every_dtype_match_a_serial_loop(make_sampler, workers):
    n, steps = 3, 12
    ACTIONS.seed(0)
    per_env = [[ACTIONS.sample() for _ in range(n)] for _ in range(steps)]
    expected = serial(n, 4, per_env)
    s = make_sampler([functools.partial(SpaceEnv, ALL_DTYPES, ACTIONS, i) for i in range(n)],
                     num_workers=workers, seed=4)
    obs, _ = s.reset()
    for j in range(n):
        assert_same(copy_tree(_row(obs, j)), _cast(expected[0][j]), f"reset env {j}")
    for t, batch in enumerate(per_env):
        stacked = (np.stack([a[0] for a in batch]), {"b": np.stack([a[1]["b"] for a in batch])})
        r = s.step(stacked)
        for j in range(n):
            exp_obs, exp_reward = expected[t + 1][j]
            assert_same(copy_tree(_row(r.obs, j)), _cast(exp_obs), f"step {t} env {j}")
            assert r.rewards[j] == exp_reward


def _row(tree, j):
    if isinstance(tree, dict):
        return {k: _row(v, j) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_row(v, j) for v in tree)
    return tree[j]


def _cast(value):
    """The env's own values as numpy arrays, for a dtype-exact comparison."""
    if isinstance(value, dict):
        return {k: _cast(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_cast(v) for v in value)
    return np.asarray(value)


# --- R8: random spaces, splits and timeouts against a serial reference ----------------------------


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


# --- pickled leaves: spaces with no fixed shape ride the pipe -------------------------------------


class Coin(spaces.Space[str]):
    """A custom space gymnasium knows nothing about: heads or tails."""

    def sample(self, mask=None, probability=None):
        return "HT"[int(self.np_random.integers(2))]

    def contains(self, x):
        return x in ("H", "T")

    def __eq__(self, other):  # workers compare the spaces their envs build with the parent's
        return isinstance(other, Coin)


PICKLED_OBS = {
    "text": spaces.Text(6),
    "sequence": spaces.Sequence(spaces.Box(0, 1, (2,))),
    "graph": spaces.Graph(spaces.Box(0, 1, (3,)), spaces.Discrete(2)),
    "oneof": spaces.OneOf((spaces.Discrete(3), spaces.Box(0, 1, (2,)))),
    "custom": Coin(),
    "mixed": spaces.Dict({"tag": spaces.Text(4), "x": spaces.Box(-1, 1, (2,)),
                          "t": spaces.Tuple((Coin(), spaces.Discrete(5)))}),
}

PICKLED_ACT = spaces.Dict({"say": spaces.Text(3), "d": spaces.Discrete(4)})


def _bytes(value) -> bytes:
    """Bit-exact identity of any observation (arrays, strings, graphs, nested tuples)."""
    import pickle

    if isinstance(value, dict):
        return pickle.dumps({k: _bytes(v) for k, v in value.items()})
    return pickle.dumps(value)


@pytest.mark.parametrize("name", list(PICKLED_OBS))
@pytest.mark.parametrize("workers", [1, 2])
def test_pickled_leaves_match_a_serial_loop(make_sampler, name, workers):
    space, n, steps = PICKLED_OBS[name], 4, 9
    PICKLED_ACT.seed(1)
    per_env = [[PICKLED_ACT.sample() for _ in range(n)] for _ in range(steps)]
    envs = [SpaceEnv(space, PICKLED_ACT, i) for i in range(n)]
    expected = [env.reset(seed=s)[0] for env, s in zip(envs, env_seeds(3, n), strict=True)]
    s = make_sampler([functools.partial(SpaceEnv, space, PICKLED_ACT, i) for i in range(n)],
                     num_workers=workers, seed=3)
    obs, _ = s.reset()
    assert [_bytes(_row(obs, j)) for j in range(n)] == [_bytes(e) for e in expected]
    for batch in per_env:
        r = s.step({"say": tuple(a["say"] for a in batch),
                    "d": np.array([a["d"] for a in batch])})
        for j, (env, action) in enumerate(zip(envs, batch, strict=True)):
            exp_obs, reward, terminated, _, _ = env.step(action)
            if terminated:
                assert _bytes(_row(r.final_obs, j)) == _bytes(exp_obs), f"final obs env {j}"
                exp_obs, _ = env.reset()
            assert _bytes(_row(r.obs, j)) == _bytes(exp_obs), f"env {j}"
            assert r.rewards[j] == reward  # the reward hashes the action: routing is right


@pytest.mark.parametrize("context", ["forkserver", "spawn"])
def test_pickled_leaves_under_every_start_method(make_sampler, context):
    s = make_sampler([functools.partial(SpaceEnv, PICKLED_OBS["mixed"], spaces.Text(3), i)
                      for i in range(2)], num_workers=2, seed=0, context=context)
    obs, _ = s.reset()
    assert obs["tag"].dtype == object and obs["x"].dtype == np.float32  # each leaf its lane
    r = s.step(("a", "bc"))
    assert all(isinstance(t, str) for t in r.obs["tag"])
