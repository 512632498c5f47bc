"""Autoreset: what a step returns for an env whose episode ended, in each mode."""

from __future__ import annotations

import functools

import numpy as np
from helpers import ones

from vecsample import AutoresetMode
from vecsample.testing import CountingEnv, fns


def test_same_step_autoreset_keeps_the_final_observation(make_sampler):
    s = make_sampler(fns(CountingEnv, 2, length=3, truncate=True, info=True), num_workers=2,
                     autoreset_mode=AutoresetMode.SAME_STEP)
    s.reset()
    for _ in range(2):
        r = s.step(ones(2))
        assert not r.has_final_obs.any()
    r = s.step(np.array([2, 3]))
    assert r.truncated.all() and not r.terminated.any() and r.has_final_obs.all()
    np.testing.assert_array_equal(r.final_obs[:, 1], [3, 3])  # the last obs of the episode
    np.testing.assert_array_equal(r.final_obs[:, 3], [2, 3])
    np.testing.assert_array_equal(r.obs[:, 1:3], [[0, 1], [0, 1]])  # already reset: episode 1
    assert r.infos[1]["t"] == 3 and r.reset_infos[1] == {"episode_index": 1}


def test_next_step_autoreset_resets_on_the_following_step(make_sampler):
    s = make_sampler(fns(CountingEnv, 2, length=2), num_workers=1, autoreset_mode="NextStep")
    s.reset()
    s.step(ones(2))
    r = s.step(ones(2), copy=True)
    assert r.terminated.all() and r.obs[0, 1] == 2
    r = s.step(ones(2))
    assert not r.terminated.any() and r.rewards.sum() == 0 and r.obs[0, 1] == 0


def test_disabled_autoreset_freezes_ended_envs_until_reset(make_sampler):
    s = make_sampler([functools.partial(CountingEnv, 0, length=1),
                      functools.partial(CountingEnv, 1, length=5)],
                     num_workers=1, autoreset_mode=AutoresetMode.DISABLED)
    s.reset()
    s.step(ones(2))
    r = s.step(ones(2))
    assert r.terminated[0] and r.obs[0, 1] == 1 and r.rewards[0] == 0  # frozen
    assert r.obs[1, 1] == 2
    obs, _ = s.reset(mask=np.array([True, False]))
    assert obs[0, 1] == 0 and obs[1, 1] == 2
    r = s.step(ones(2))
    assert r.obs[0, 1] == 1 and r.obs[0, 2] == 1 and r.rewards[0] == 1  # stepped in episode 1
