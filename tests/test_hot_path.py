"""How a worker writes a step to shared memory, for odd envs: pinned for hot-path work.

A batched write (one slice copy per field instead of one write per env; tried for issue 4, see
docs/benchmarks.md) could differ from per-env writes where numpy would broadcast a scalar across
rows, for plain lists, for an observation of the wrong shape (its env must be named), and for
an env that raises halfway through a worker's batch (the envs before it are still written).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from vecsample import errors
from vecsample.testing import CountingEnv, fns


class ScalarObsEnv(CountingEnv):
    """Returns its env index as a bare float: a per-env write fills the whole row with it."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return float(self.env_index), {}

    def step(self, action: Any) -> Any:
        _, reward, terminated, truncated, info = super().step(action)
        return float(self.env_index) + 0.5, reward, terminated, truncated, info


class ListObsEnv(CountingEnv):
    """Observations as plain Python lists, rewards as numpy float32, flags as numpy bools."""

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs.tolist(), np.float32(reward), np.bool_(terminated), np.bool_(truncated), info


class WrongShapeEnv(CountingEnv):
    """Env ``bad_index`` returns a 5-vector for a 4-vector space at its first step."""

    def __init__(self, env_index: int = 0, bad_index: int = 2) -> None:
        super().__init__(env_index=env_index, length=100)
        self.bad = env_index == bad_index

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        return (np.zeros(5) if self.bad else obs), reward, terminated, truncated, info


class LateRaisingEnv(CountingEnv):
    """Env ``bad_index`` raises at its second step; the others keep counting."""

    def __init__(self, env_index: int = 0, bad_index: int = 2) -> None:
        super().__init__(env_index=env_index, length=100)
        self.bad = env_index == bad_index

    def step(self, action: Any) -> Any:
        if self.bad and self.t == 1:
            raise RuntimeError(f"env {self.env_index} fails at step 2")
        return super().step(action)


def test_scalar_observations_for_a_vector_space_are_refused_not_broadcast(make_sampler):
    # 4 envs of a (4,)-space returning bare floats: numpy would broadcast each across its row;
    # a shape mismatch is a typed error naming the env and both shapes (reliability item 11).
    s = make_sampler(fns(ScalarObsEnv, 4), num_workers=1)
    with pytest.raises(errors.WorkerError, match=r"env 0 .*shape \(\), expected \(4,\)"):
        s.reset()


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


def test_a_wrong_shaped_observation_names_its_env(make_sampler):
    s = make_sampler(fns(WrongShapeEnv, 4), num_workers=1)
    s.reset()
    with pytest.raises(errors.WorkerError) as info:
        s.step(np.ones(4, dtype=np.int64))
    assert info.value.env == 2 and info.value.command == "STEP"


def test_envs_before_a_raising_env_are_written(make_sampler):
    s = make_sampler(fns(LateRaisingEnv, 4), num_workers=1)
    s.reset()
    s.step(np.ones(4, dtype=np.int64))
    with pytest.raises(errors.WorkerError, match="fails at step 2") as info:
        s.step(np.ones(4, dtype=np.int64))
    assert info.value.env == 2
    obs = s.batch().obs
    np.testing.assert_array_equal(obs[:, 1], [2, 2, 1, 1])  # envs 0, 1 stepped twice; 2, 3 once
