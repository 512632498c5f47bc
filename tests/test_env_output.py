"""What envs return, as a worker writes it to shared memory: odd but valid values are written
like arrays; a value of the wrong shape or type is a typed error naming the env, never broadcast.

These cases pin the hot path: a batched write (one slice copy per field instead of one write per
env; tried for issue 4, see docs/benchmarks.md) could differ from per-env writes where numpy would
broadcast a scalar across rows, for plain lists, for an observation of the wrong shape (its env
must be named), and for an env that raises halfway through a worker's batch (the envs before it
are still written). Infos: tests/test_info_columns.py; spaces: tests/test_spaces.py.

A scenario number in a docstring is that of the outside fault-injection run
(docs/reliability.md, "The second pass").
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces as gym_spaces
from helpers import ones

from vecsample import errors
from vecsample.testing import CountingEnv, fns

# --- odd but valid values -------------------------------------------------------------------------


class ListObsEnv(CountingEnv):
    """Observations as plain Python lists, rewards as numpy float32, flags as numpy bools."""

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs.tolist(), np.float32(reward), np.bool_(terminated), np.bool_(truncated), info


def test_lists_and_numpy_scalars_are_written_like_arrays(make_sampler):
    s = make_sampler(fns(ListObsEnv, 4, length=2), num_workers=2, autoreset_mode="NextStep")
    s.reset()
    r = s.step(np.array([0, 1, 2, 3]))
    np.testing.assert_array_equal(r.obs[:, :2], [[0, 1], [1, 1], [2, 1], [3, 1]])
    np.testing.assert_array_equal(r.rewards, [0, 1, 2, 3])
    r = s.step(np.array([1, 1, 1, 1]))
    assert r.terminated.all() and not r.truncated.any()
    r = s.step(np.array([1, 1, 1, 1]))  # NextStep: this step resets instead
    assert not r.terminated.any() and np.all(r.rewards == 0) and np.all(r.obs[:, 1] == 0)


class LateRaisingEnv(CountingEnv):
    """Env ``bad_index`` raises at its second step; the others keep counting."""

    def __init__(self, env_index: int = 0, bad_index: int = 2) -> None:
        super().__init__(env_index=env_index, length=100)
        self.bad = env_index == bad_index

    def step(self, action: Any) -> Any:
        if self.bad and self.t == 1:
            raise RuntimeError(f"env {self.env_index} fails at step 2")
        return super().step(action)


def test_envs_before_a_raising_env_are_written(make_sampler):
    s = make_sampler(fns(LateRaisingEnv, 4), num_workers=1)
    s.reset()
    s.step(np.ones(4, dtype=np.int64))
    with pytest.raises(errors.WorkerError, match="fails at step 2") as info:
        s.step(np.ones(4, dtype=np.int64))
    assert info.value.env == 2
    obs = s.batch().obs
    np.testing.assert_array_equal(obs[:, 1], [2, 2, 1, 1])  # envs 0, 1 stepped twice; 2, 3 once


# --- observations of the wrong shape or type ------------------------------------------------------


class ScalarObsEnv(CountingEnv):
    """Returns its env index as a bare float: a per-env write fills the whole row with it."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return float(self.env_index), {}

    def step(self, action: Any) -> Any:
        _, reward, terminated, truncated, info = super().step(action)
        return float(self.env_index) + 0.5, reward, terminated, truncated, info


def test_scalar_observations_for_a_vector_space_are_refused_not_broadcast(make_sampler):
    # 4 envs of a (4,)-space returning bare floats: numpy would broadcast each across its row;
    # a shape mismatch is a typed error naming the env and both shapes (reliability item 11).
    s = make_sampler(fns(ScalarObsEnv, 4), num_workers=1)
    with pytest.raises(errors.WorkerError, match=r"env 0 .*shape \(\), expected \(4,\)"):
        s.reset()


class WrongShapeEnv(CountingEnv):
    """Env ``bad_index`` returns a 5-vector for a 4-vector space at its first step."""

    def __init__(self, env_index: int = 0, bad_index: int = 2) -> None:
        super().__init__(env_index=env_index, length=100)
        self.bad = env_index == bad_index

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        return (np.zeros(5) if self.bad else obs), reward, terminated, truncated, info


def test_a_wrong_shaped_observation_names_its_env(make_sampler):
    s = make_sampler(fns(WrongShapeEnv, 4), num_workers=1)
    s.reset()
    with pytest.raises(errors.WorkerError) as info:
        s.step(np.ones(4, dtype=np.int64))
    assert info.value.env == 2 and info.value.command == "STEP"


class FlatObsEnv(CountingEnv):
    """Declares Box(2, 2) but returns (2,) observations from step."""

    def __init__(self, env_index: int = 0) -> None:
        super().__init__(env_index)
        self.observation_space = gym_spaces.Box(-np.inf, np.inf, (2, 2), np.float64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros((2, 2)), {}

    def step(self, action):
        super().step(action)
        return np.array([1.0, 2.0]), 0.0, False, False, {}


@pytest.mark.parametrize("mode", ["SameStep", "NextStep"])
def test_an_observation_of_the_wrong_shape_is_never_broadcast(make_sampler, mode):
    """Scenario 11 of the outside fault-injection run."""
    s = make_sampler([functools.partial(FlatObsEnv, i) for i in range(2)], num_workers=1,
                     autoreset_mode=mode)
    s.reset()
    with pytest.raises(errors.WorkerError, match=r"env 0 .*shape \(2,\), expected \(2, 2\)"):
        s.step(ones(2))


class StringObsEnv(CountingEnv):
    """Declares Box(shape, float64); env 1 returns a string observation from ``where``."""

    def __init__(self, env_index: int = 0, where: str = "step", shape: tuple = ()) -> None:
        super().__init__(env_index)
        self.observation_space = gym_spaces.Box(-np.inf, np.inf, shape, np.float64)
        self.where = where

    def _obs_at(self, where: str) -> Any:
        if self.env_index == 1 and self.where == where:
            return "tall"
        return np.zeros(self.observation_space.shape)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs_at("reset"), {}

    def step(self, action):
        super().step(action)
        return self._obs_at("step"), 0.0, False, False, {}


STRING_OBS = r"env 1 in worker 0 raised EnvOutputError during {}: observation .* is a str .*float64"


@pytest.mark.parametrize("shape", [(), (4,)])
def test_a_string_observation_from_reset_names_its_env_and_both_types(make_sampler, shape):
    """Scenario 11 of the outside fault-injection run."""
    s = make_sampler([functools.partial(StringObsEnv, i, "reset", shape) for i in range(2)])
    with pytest.raises(errors.WorkerError, match=STRING_OBS.format("RESET")) as info:
        s.reset()
    assert info.value.env == 1


@pytest.mark.parametrize("shape", [(), (4,)])
@pytest.mark.parametrize("mode", ["SameStep", "NextStep", "Disabled"])
def test_a_string_observation_from_step_names_its_env_and_both_types(make_sampler, mode, shape):
    """Scenario 11 of the outside fault-injection run."""
    s = make_sampler([functools.partial(StringObsEnv, i, "step", shape) for i in range(2)],
                     autoreset_mode=mode)
    s.reset()
    with pytest.raises(errors.WorkerError, match=STRING_OBS.format("STEP")) as info:
        s.step(ones(2))
    assert info.value.env == 1


# --- rewards of the wrong shape -------------------------------------------------------------------


class VectorRewardEnv(CountingEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, np.array([reward]), terminated, truncated, info


@pytest.mark.parametrize("mode", ["SameStep", "NextStep", "Disabled"])
def test_a_reward_of_shape_1_is_one_typed_error_in_every_mode(make_sampler, mode):
    """Scenario 17 of the outside fault-injection run."""
    env_fns = [CountingEnv, functools.partial(VectorRewardEnv, 1)]
    s = make_sampler(env_fns, num_workers=1, autoreset_mode=mode)
    s.reset()
    with pytest.raises(errors.WorkerError, match=r"env 1 .*reward has shape \(1,\)"):
        s.step(ones(2))


# --- infos that are not dicts ---------------------------------------------------------------------


class ListInfoEnv(CountingEnv):
    """Returns its info as a list: from ``step()`` (``where="step"``), or from the resets after
    the first (``where="reset"``: those the autoreset calls; every episode is one step)."""

    def __init__(self, env_index: int = 0, where: str = "step") -> None:
        super().__init__(env_index, length=1 if where == "reset" else 10)
        self.where = where

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        obs, info = super().reset(seed=seed, options=options)
        return obs, ["a", "list"] if self.where == "reset" and self.episode > 0 else info

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, ["a", "list"] if self.where == "step" else info


@pytest.mark.parametrize(("mode", "where", "field"), [
    ("SameStep", "step", r"info \(the fifth value of step\(\)\)"),
    ("NextStep", "step", r"info \(the fifth value of step\(\)\)"),
    ("Disabled", "step", r"info \(the fifth value of step\(\)\)"),
    ("SameStep", "reset", r"reset info \(of reset\(\), called by the autoreset\)"),
    ("NextStep", "reset", r"reset info \(of reset\(\), called by the autoreset\)"),
])
def test_an_info_that_is_not_a_dict_names_its_env_and_the_field(make_sampler, mode, where,
                                                                 field):
    """Issue 33, item 6: it was WorkerError(env=None) with an AttributeError ('list' object
    has no attribute 'items'), where every other bad output names its env and field."""
    s = make_sampler([CountingEnv, functools.partial(ListInfoEnv, 1, where)], num_workers=1,
                     autoreset_mode=mode)
    s.reset()
    with pytest.raises(errors.WorkerError, match=f"^env 1 in worker 0 raised EnvOutputError "
                       f"during STEP: {field} is a list \\(\\['a', 'list'\\]\\), expected a "
                       f"dict") as info:
        for _ in range(2):  # NextStep resets the ended env at its next step
            s.step(ones(2))
    assert (info.value.env, info.value.exc_type) == (1, "EnvOutputError")
