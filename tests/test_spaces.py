"""Every supported space goes through shared memory unchanged: VecSampler vs a serial loop."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from gymnasium import spaces
from helpers import assert_same

from vecsample._wire.spaces import bounds_checker, copy_tree, flatten, leaves
from vecsample.errors import ActionShapeError, ActionSpaceError
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


@pytest.mark.parametrize("size", [4, 1000])  # the Python min/max path and numpy's reductions
@pytest.mark.parametrize("dtype", ["<i1", ">i8", "<u2", "<i8"])
def test_discrete_bounds_checker_on_small_and_large_batches(size, dtype):
    check = bounds_checker(leaves(spaces.Discrete(4))[0])
    good = np.arange(size, dtype=dtype) % 4
    check(good)
    for bad_value in ([-1] if np.dtype(dtype).kind == "i" else []) + [4, 100]:
        bad = good.copy()
        bad[size // 2] = bad_value
        with pytest.raises(ActionSpaceError, match=rf"rows \[{size // 2}\]"):
            check(bad)


@pytest.mark.parametrize("size", [4, 1000])
def test_box_bounds_checker_catches_nan_and_out_of_range(size):
    check = bounds_checker(leaves(spaces.Box(-1.0, 1.0, (3,), np.float32))[0])
    good = np.zeros((size, 3), dtype=np.float32)
    check(good)
    for bad_value, message in ((np.nan, "NaN"), (1.5, "above high"), (-2.0, "below low")):
        bad = good.copy()
        bad[size - 1, 2] = bad_value
        with pytest.raises(ActionSpaceError, match=message):
            check(bad)


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


def test_pickled_action_outside_its_space_names_the_rows(make_sampler):
    s = make_sampler([functools.partial(SpaceEnv, spaces.Discrete(2), spaces.Text(3), i)
                      for i in range(3)], num_workers=1)
    s.reset()
    with pytest.raises(ActionSpaceError, match=r"rows \[1\].*contains"):
        s.step(("ok", "far too long", "x"))
    with pytest.raises(ActionShapeError, match="expected a sequence of 3 actions"):
        s.step(("a", "b"))
    s.step(("a", "b", "c"))  # nothing was sent: the sampler is still usable
