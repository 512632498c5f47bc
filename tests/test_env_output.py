"""What envs return, as a worker writes it to shared memory: odd but valid values are written
like arrays; a value of the wrong shape or type is a typed error naming the env, never broadcast.

These cases pin the hot path: a batched write (one slice copy per field instead of one write per
env; tried for issue 4, docs/lab/benchmarks.md) could differ from per-env writes where numpy would
broadcast a scalar across rows, for plain lists, for an observation of the wrong shape (its env
must be named), and for an env that raises halfway through a worker's batch (the envs before it
are still written). Infos: tests/test_info_columns.py; spaces: tests/test_spaces.py.

A scenario number in a docstring is that of the outside fault-injection run
(docs/reliability.md#19-outside-fault-scenarios).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces as gym_spaces
from helpers import ones

from vecsample import HostedVector, errors
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


# --- observations of another dtype: numpy's same_kind rule, never a silent cast -------------------


SPACES = {
    "uint8": gym_spaces.Box(0, 255, (3,), np.uint8),
    "int64": gym_spaces.Box(-1000, 1000, (3,), np.int64),
    "float32": gym_spaces.Box(-np.inf, np.inf, (3,), np.float32),
    "Discrete": gym_spaces.Discrete(5),
    "Dict": gym_spaces.Dict({"pos": gym_spaces.Box(-1, 1, (3,), np.float32),
                             "img": gym_spaces.Box(0, 255, (3,), np.uint8)}),
}


def _zeros(space: gym_spaces.Space) -> Any:
    if isinstance(space, gym_spaces.Dict):
        return {key: _zeros(sub) for key, sub in space.spaces.items()}
    return np.zeros(space.shape, space.dtype)


class CastObsEnv(CountingEnv):
    """Declares ``SPACES[space]``; env 1 returns ``value`` from ``where`` ("reset" or "step"),
    as its observation or, for the Dict, as its "img"; every other observation is a zero of the
    space's dtype. Each episode lasts ``length`` steps."""

    def __init__(self, env_index: int = 0, space: str = "uint8", value: Any = None,
                 where: str = "step", length: int = 100) -> None:
        super().__init__(env_index, length=length)
        self.observation_space = SPACES[space]
        self.value, self.where = value, where

    def _obs_at(self, where: str) -> Any:
        obs = _zeros(self.observation_space)
        if self.env_index != 1 or where != self.where:
            return obs
        if isinstance(obs, dict):
            return {**obs, "img": self.value}
        return self.value

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return self._obs_at("reset"), {}

    def step(self, action: Any) -> Any:
        _, reward, terminated, truncated, info = super().step(action)
        return self._obs_at("step"), reward, terminated, truncated, info


#: Casts that numpy's same_kind rule refuses (gymnasium's SyncVectorEnv raises on each): the
#: space, env 1's value, and the dtypes the error names (what came, what the leaf is).
REFUSED = {
    "float64 for uint8": ("uint8", np.array([0.7, 300.2, -1.5]), "float64", "uint8"),
    "float64 for int64": ("int64", np.array([0.7, 2.5, -1.5]), "float64", "int64"),
    "int64 for uint8": ("uint8", np.array([0, 300, -1]), "int64", "uint8"),
    "Python floats for uint8": ("uint8", [0.7, 3.0, 1.0], "float64", "uint8"),
    "Python ints outside uint8": ("uint8", [0, 300, -1], r"Python ints \(int64\)", "uint8"),
    "a Python float for Discrete": ("Discrete", 2.0, "float64", "int64"),
    "float64 for a Dict's uint8": ("Dict", np.array([0.7, 300.2, -1.5]), "float64", "uint8"),
}
#: Casts it allows, and what env 1's row holds then.
DELIVERED = {
    "float64 for float32": ("float32", np.array([0.5, 1.5, -2.0]), [0.5, 1.5, -2.0]),
    "int64 for float32": ("float32", np.array([1, 2, 3]), [1, 2, 3]),
    "int32 for int64": ("int64", np.array([1, -2, 3], np.int32), [1, -2, 3]),
    "bool for uint8": ("uint8", np.array([True, False, True]), [1, 0, 1]),
    "Python ints for uint8": ("uint8", [0, 255, 7], [0, 255, 7]),
    "Python floats for float32": ("float32", [0.5, 1.5, 2.5], [0.5, 1.5, 2.5]),
    "a Python int for Discrete": ("Discrete", 3, 3),
    "Python ints for a Dict's uint8": ("Dict", [1, 2, 3], [1, 2, 3]),
}


def _cast_sampler(make_sampler: Callable[..., Any], placement: str, space: str, value: Any,
                  where: str, **kwargs: Any) -> Any:
    """Envs 0 and 1, one per worker; with "share" env 1's block steps in this process."""
    return make_sampler([functools.partial(CastObsEnv, i, space, value, where, **kwargs)
                         for i in range(2)], num_workers=2, env_placement=placement)


@pytest.mark.parametrize("where", ["reset", "step"])
@pytest.mark.parametrize("placement", ["workers", "share"])
@pytest.mark.parametrize("case", list(REFUSED))
def test_an_observation_of_a_dtype_the_space_does_not_take_is_refused(make_sampler, case,
                                                                      placement, where):
    """Issue 42, item 7: float64 [0.7, 300.2, -1.5] for a uint8 Box came back as [0, 44, 255],
    float64 for int64 truncated, int64 [0, 300, -1] for uint8 wrapped, in worker processes and
    in the share alike. A cast that numpy's same_kind rule refuses is an EnvOutputError naming
    the env, the field (the leaf's path in a Dict) and both dtypes."""
    space, value, got, want = REFUSED[case]
    s = _cast_sampler(make_sampler, placement, space, value, where)
    leaf = "img" if space == "Dict" else "<root>"
    with pytest.raises(errors.WorkerError, match=rf"^env 1 in worker 1 raised EnvOutputError "
                       rf"during {where.upper()}: observation '{leaf}' is {got} \(.*\), expected "
                       rf"{want} for .*same_kind.*declare the space with the dtype") as info:
        s.reset()
        s.step(ones(2))
    assert (info.value.env, info.value.exc_type) == (1, "EnvOutputError")


@pytest.mark.parametrize("placement", ["workers", "share"])
@pytest.mark.parametrize("case", list(DELIVERED))
def test_an_observation_of_a_dtype_the_space_takes_is_delivered_exactly(make_sampler, case,
                                                                        placement):
    """The casts same_kind allows (float64 to float32, int64 to float32, ...) and Python
    numbers of the space's kind stay as they were: from reset (a row at a time) and from step
    (the block's rows in one copy)."""
    space, value, expected = DELIVERED[case]
    for where in ("reset", "step"):
        s = _cast_sampler(make_sampler, placement, space, value, where)
        obs, _ = s.reset()
        if where == "step":
            obs = s.step(ones(2)).obs
        row = (obs["img"] if space == "Dict" else obs)[1]
        np.testing.assert_array_equal(row, expected)
        s.close()


@pytest.mark.parametrize("placement", ["workers", "share"])
def test_a_final_observation_of_a_dtype_the_space_does_not_take_names_final_obs(make_sampler,
                                                                              placement):
    """SameStep: the last observation of an episode goes to final_obs, checked as any other."""
    s = _cast_sampler(make_sampler, placement, "uint8", np.array([0.7, 300.2, -1.5]), "step",
                      length=1)
    s.reset()
    with pytest.raises(errors.WorkerError, match=r"^env 1 in worker 1 raised EnvOutputError "
                       r"during STEP: final observation \(final_obs\) '<root>' is float64"):
        s.step(ones(2))


class ObsAs(gym.vector.VectorWrapper):
    """Returns the observations of its vector env as ``convert`` makes them."""

    def __init__(self, env: gym.vector.VectorEnv, convert: Callable[[np.ndarray], Any]) -> None:
        super().__init__(env)
        self.convert = convert

    def reset(self, **kwargs: Any) -> Any:
        obs, infos = self.env.reset(**kwargs)
        return self.convert(obs), infos

    def step(self, actions: Any) -> Any:
        obs, *rest = self.env.step(actions)
        return self.convert(obs), *rest


def _uint8_sync(convert: Callable[[np.ndarray], Any], num_envs: int) -> gym.vector.VectorEnv:
    sync = gym.vector.SyncVectorEnv([functools.partial(CastObsEnv, 0, "uint8")] * num_envs)
    return ObsAs(sync, convert)


def _plus_0_7(obs: np.ndarray) -> np.ndarray:
    return obs + 0.7


def _as_int64_lists(obs: np.ndarray) -> list[list[int]]:
    return (obs.astype(np.int64) + 300).tolist()


@pytest.mark.parametrize("placement", ["workers", "share"])
@pytest.mark.parametrize(("convert", "got"), [(_plus_0_7, "float64"),
                                              (_as_int64_lists, r"Python ints \(int64\)")])
def test_a_hosted_vector_envs_observations_of_another_dtype_are_refused(make_sampler, placement,
                                                                       convert, got):
    """The same rule for a hosted vector env's batch: float64 for uint8 was copied with an
    unsafe cast (wrapped), as were Python ints out of its range."""
    s = make_sampler(HostedVector(functools.partial(_uint8_sync, convert)), num_envs=4,
                     num_workers=2, env_placement=placement, autoreset_mode="NextStep")
    with pytest.raises(errors.WorkerError, match=rf"raised EnvOutputError during RESET: the "
                       rf"hosted vector env's observation '<root>' is {got} \(.*expected uint8"):
        s.reset()


def test_a_hosted_vector_envs_observations_of_a_dtype_the_space_takes_are_delivered(
        make_sampler):
    s = make_sampler(HostedVector(functools.partial(_uint8_sync, np.ndarray.tolist)),
                     num_envs=4, num_workers=2, autoreset_mode="NextStep")
    obs, _ = s.reset()
    assert obs.dtype == np.uint8 and not obs.any()
