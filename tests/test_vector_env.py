"""vecsample.VectorEnv returns exactly what gymnasium's SyncVectorEnv returns, step for step."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from helpers import assert_same

from vecsample import errors, make_vec
from vecsample.testing import CountingEnv, SpaceEnv

NESTED_OBS = spaces.Dict({
    "pos": spaces.Box(-1.0, 1.0, (2,), np.float32),
    "inner": spaces.Tuple((spaces.Discrete(5), spaces.MultiBinary(3))),
})
NESTED_ACT = spaces.Tuple((spaces.Discrete(3), spaces.Box(-1.0, 1.0, (2,), np.float64)))

ENVS = {
    "CartPole": lambda i: gym.make("CartPole-v1"),
    "Pendulum": lambda i: gym.make("Pendulum-v1", max_episode_steps=15),
    "Counting+infos": lambda i: CountingEnv(i, length=3 + i, truncate=i % 2 == 0, info=True),
    "Nested spaces": lambda i: SpaceEnv(NESTED_OBS, NESTED_ACT, i, length=4 + i),
}


def build(name: str, i: int) -> gym.Env:
    return ENVS[name](i)


def factories(name: str, n: int = 4) -> list:
    return [functools.partial(build, name, i) for i in range(n)]


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
@pytest.mark.parametrize("name", list(ENVS))
def test_matches_sync_vector_env(make_vector_env, name, mode):
    ref = gym.vector.SyncVectorEnv(factories(name), autoreset_mode=mode)
    ours = make_vector_env(factories(name), num_workers=2, autoreset_mode=mode)
    try:
        assert ours.single_observation_space == ref.single_observation_space
        assert ours.action_space == ref.action_space
        assert_same(ref.reset(seed=11), ours.reset(seed=11), "reset")
        ref.action_space.seed(5)
        for t in range(40):
            actions = ref.action_space.sample()
            expected = ref.step(actions)
            assert_same(expected, ours.step(actions), f"step {t}")
            done = expected[2] | expected[3]
            if mode == "Disabled" and done.any():
                options = {"reset_mask": done}
                assert_same(ref.reset(options=dict(options)), ours.reset(options=options))
    finally:
        ref.close()


def test_disabled_mode_refuses_to_step_ended_envs(make_vector_env):
    env = make_vector_env(factories("Counting+infos", 2), num_workers=1, autoreset_mode="Disabled")
    env.reset(seed=0)
    for _ in range(3):
        env.step(np.ones(2, dtype=np.int64))
    with pytest.raises(errors.PendingCallError, match="reset_mask"):
        env.step(np.ones(2, dtype=np.int64))
    env.reset(options={"reset_mask": np.array([True, False])})
    env.step(np.ones(2, dtype=np.int64))


def test_make_vec_and_attribute_calls():
    env = make_vec("CartPole-v1", 4, num_workers=2)
    try:
        obs, _ = env.reset(seed=[1, 2, 3, 4])
        assert obs.shape == (4, 4) and env.num_envs == 4
        assert env.get_attr("spec")[0].id == "CartPole-v1"
        assert len(env.call("render")) == 4
        assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
        assert env.sampler.num_workers == 2
    finally:
        env.close()
    assert env.sampler.closed


def test_copy_false_returns_views(make_vector_env):
    env = make_vector_env(factories("Counting+infos", 2), num_workers=1, copy=False)
    obs, _ = env.reset()
    env.step(np.ones(2, dtype=np.int64))
    assert obs[0, 1] == 1  # the reset obs array now shows step 1: it is the shared buffer


def test_step_wait_without_step_async(make_vector_env):
    env = make_vector_env(factories("CartPole", 2), num_workers=1)
    env.reset()
    with pytest.raises(errors.NoPendingError):
        env.step_wait()
    with pytest.raises(errors.ConfigError):
        env.reset(seed="seven")
