"""Action checks: shape, dtype and space, before anything is sent; what passes reaches the env.

A scenario number in a docstring is that of the outside fault-injection run
(docs/reliability.md#19-outside-fault-scenarios).
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium import spaces as gym_spaces
from helpers import ones

from vecsample import errors
from vecsample._wire.spaces import bounds_checker, leaves
from vecsample.errors import ActionShapeError, ActionSpaceError
from vecsample.testing import SpaceEnv

# --- shape and dtype ------------------------------------------------------------------------------


def test_wrong_action_shape(sampler):
    with pytest.raises(errors.ActionShapeError, match=r"expected shape \(2,\).*got \(3,\)"):
        sampler.step_send(0, ones(3))
    sampler.step_send(0, ones(2))  # a later correct call still works


def test_a_ragged_action_is_an_action_shape_error(make_sampler):
    """Scenario 18 of the outside fault-injection run."""
    s = make_sampler([functools.partial(SpaceEnv, gym_spaces.Discrete(2),
                                        gym_spaces.Box(0, 1, (3,)), i) for i in range(2)])
    s.reset()
    with pytest.raises(errors.ActionShapeError, match="ragged"):
        s.step([[0.1, 0.2, 0.3], [0.4]])


def test_dict_action_missing_a_key(make_sampler):
    act = spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Box(-1, 1, (2,))})
    s = make_sampler([functools.partial(SpaceEnv, spaces.Discrete(3), act)], num_workers=1)
    s.reset()
    with pytest.raises(errors.ActionShapeError, match="'b'"):
        s.step({"a": np.zeros(1, dtype=np.int64)})


def test_wrong_action_dtype_and_nan_in_discrete(sampler):
    with pytest.raises(errors.ActionDtypeError, match=r"expected dtype int64.*float64"):
        sampler.step_send(0, np.array([0.5, 1.0]))
    with pytest.raises(errors.ActionDtypeError):
        sampler.step_send(0, np.array([np.nan, 1.0]))


# --- bounds ---------------------------------------------------------------------------------------


def test_discrete_action_out_of_space(sampler):
    with pytest.raises(errors.ActionSpaceError, match=r"rows \[1\].*Discrete\(4\)"):
        sampler.step_send(0, np.array([0, 7]))
    with pytest.raises(errors.ActionSpaceError):
        sampler.step(np.array([0, 1, 2, -1]))


@pytest.mark.parametrize("dtype", ["<i1", ">i8", "<u2", "<i8"])
def test_discrete_bounds_hold_for_every_integer_dtype_and_byte_order(sampler, dtype):
    """Small batches are checked with Python's min/max over ``tolist()``: every dtype and byte
    order must come out as the same numbers (large batches:
    test_discrete_bounds_checker_on_small_and_large_batches)."""
    low = -1 if np.dtype(dtype).kind == "i" else 4
    for bad in ([0, 1, 2, low], [0, 4, 1, 1], [3, 3, 3, 100]):
        with pytest.raises(errors.ActionSpaceError):
            sampler.step(np.array(bad, dtype=dtype))
    r = sampler.step(np.array([0, 1, 2, 3], dtype=dtype))
    np.testing.assert_array_equal(r.rewards, [0, 1, 2, 3])  # CountingEnv: reward = action


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


def test_box_action_out_of_bounds_and_nan(make_sampler):
    s = make_sampler([functools.partial(gym.make, "Pendulum-v1")] * 2, num_workers=1)
    s.reset()
    with pytest.raises(errors.ActionSpaceError, match="above high"):
        s.step(np.array([[0.0], [2.5]]))
    with pytest.raises(errors.ActionSpaceError, match="NaN"):
        s.step(np.array([[np.nan], [0.0]]))
    with pytest.raises(errors.ActionDtypeError):
        s.step(np.array([["a"], ["b"]]))
    s.step(np.zeros((2, 1), dtype=np.float32))


def test_pickled_action_outside_its_space_names_the_rows(make_sampler):
    s = make_sampler([functools.partial(SpaceEnv, spaces.Discrete(2), spaces.Text(3), i)
                      for i in range(3)], num_workers=1)
    s.reset()
    with pytest.raises(ActionSpaceError, match=r"rows \[1\].*contains"):
        s.step(("ok", "far too long", "x"))
    with pytest.raises(ActionShapeError, match="expected a sequence of 3 actions"):
        s.step(("a", "b"))
    s.step(("a", "b", "c"))  # nothing was sent: the sampler is still usable


# --- what passes ----------------------------------------------------------------------------------


def test_box_actions_reach_the_env(make_sampler):
    s = make_sampler([functools.partial(gym.make, "Pendulum-v1")] * 2, num_workers=2, seed=3)
    s.reset()
    r = s.step(np.full((2, 1), 2.0))  # float64 input is cast to the space's float32
    assert r.obs.shape == (2, 3) and np.all(np.isfinite(r.rewards))


def test_action_checks_can_be_turned_off_but_shape_is_still_checked(make_sampler):
    s = make_sampler([functools.partial(gym.make, "Pendulum-v1")], check_actions=False)
    s.reset()
    s.step(np.array([[5.0]]))  # out of bounds, accepted: the env clips it
    with pytest.raises(errors.ActionShapeError):
        s.step(np.zeros((2, 1)))
