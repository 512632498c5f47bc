"""VecSampler behaviour: batches, partial recv bookkeeping, autoreset, seeding, views, calls."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

from vecsample import AutoresetMode, EnvMaker
from vecsample.seeding import env_seeds
from vecsample.testing import CountingEnv, SlowEnv, fns


def ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.int64)


def test_full_step_shapes_and_dtypes(make_sampler):
    s = make_sampler("CartPole-v1", num_envs=6, num_workers=3, seed=1)
    obs, infos = s.reset()
    assert obs.shape == (6, 4) and obs.dtype == np.float32
    assert infos == [{}] * 6
    r = s.step(np.zeros(6, dtype=np.int64))
    assert r.worker is None and r.env_ids == range(6)
    assert r.rewards.dtype == np.float64 and r.terminated.dtype == np.bool_
    assert r.obs.shape == (6, 4) and np.all(r.rewards == 1.0)


def test_each_result_names_its_worker_and_env_ids(make_sampler):
    s = make_sampler(fns(CountingEnv, 6, length=100), num_workers=3)
    s.reset()
    for w in range(3):
        s.step_send(w, ones(2))
    results = s.step_recv(None)
    assert sorted(r.worker for r in results) == [0, 1, 2]
    for r in results:
        assert r.env_ids == s.worker_env_ids(r.worker)
        np.testing.assert_array_equal(r.obs[:, 0], list(r.env_ids))  # obs[0] is the env index


def test_mixed_timeouts_lose_and_duplicate_nothing(make_sampler):
    """Thousands of rounds of partial and full recvs: every step sent comes back exactly once."""
    workers, per = 4, 2
    s = make_sampler(fns(SlowEnv, workers * per, step_time=2e-5, tail="uniform", spread=1.0),
                     num_workers=workers, infos=False)
    s.reset()
    rng = np.random.default_rng(0)
    sent = np.zeros(workers, dtype=int)
    got = np.zeros(workers, dtype=int)
    for w in range(workers):
        s.step_send(w, ones(per))
        sent[w] += 1
    partial_rounds = 0
    for _ in range(3000):
        timeout = [None, 0.0, 1e-5, 1e-4][rng.integers(4)]
        results = s.step_recv(timeout)
        assert len({r.worker for r in results}) == len(results)  # no worker twice in one recv
        partial_rounds += len(results) < workers
        for r in results:
            got[r.worker] += 1
            # the counter in the obs says how many steps this env has done: exactly what we sent
            np.testing.assert_array_equal(r.obs[:, 1], sent[r.worker])
            s.step_send(r.worker, ones(per))
            sent[r.worker] += 1
    while (got < sent).any():
        for r in s.step_recv(None):
            got[r.worker] += 1
    np.testing.assert_array_equal(got, sent)
    assert s.stats()["env_steps"] == sent.sum() * per
    assert partial_rounds > 100, "the test did not exercise partial batches"


def test_partial_recv_returns_early_and_the_rest_later(make_sampler):
    s = make_sampler([functools.partial(SlowEnv, env_index=i, step_time=0.3 * i)
                      for i in range(2)], num_workers=2)
    s.reset()
    s.step_send(0, ones(1))
    s.step_send(1, ones(1))
    first = s.step_recv(timeout=0.01)
    assert [r.worker for r in first] == [0]
    second = s.step_recv(timeout=0.01)
    assert [r.worker for r in second] == [1]


def test_views_alias_shared_memory_and_copy_does_not(make_sampler):
    s = make_sampler(fns(CountingEnv, 2, length=100), num_workers=1)
    s.reset()
    s.step_send(0, ones(2))
    view = s.step_recv(None)[0]
    s.step_send(0, ones(2))
    copied = s.step_recv(None, copy=True)[0]
    assert view.obs[0, 1] == 2  # the view now shows the second step: it aliases shm
    s.step_send(0, ones(2))
    s.step_recv(None)
    assert copied.obs[0, 1] == 2 and view.obs[0, 1] == 3


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


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_every_start_method_works(make_sampler, context):
    s = make_sampler(fns(CountingEnv, 4, length=100), num_workers=2, context=context)
    s.reset()
    r = s.step(ones(4))
    np.testing.assert_array_equal(r.obs[:, 1], 1)


def test_workers_cap_threads_and_can_be_pinned(make_sampler):
    s = make_sampler(fns(CountingEnv, 2), num_workers=2, cpu_affinity=True)
    info = s.call("process_info")
    assert {i["omp"] for i in info} == {"1"}
    assert len({i["pid"] for i in info}) == 2
    assert all(len(i["affinity"]) == 1 for i in info)
    s2 = make_sampler(fns(CountingEnv, 1), threads_per_worker=3)
    assert s2.call("process_info")[0]["omp"] == "3"


def test_call_get_attr_set_attr(make_sampler):
    s = make_sampler(fns(CountingEnv, 4, length=10), num_workers=2)
    assert s.get_attr("env_index") == [0, 1, 2, 3]
    s.set_attr("length", [1, 2, 3, 4])
    assert s.get_attr("length") == [1, 2, 3, 4]
    s.set_attr("length", 9)
    assert s.call("process_info")[0]["omp"] == "1" and s.get_attr("length") == [9] * 4


class TaskEnv(CountingEnv):
    def reset_task(self, task: float) -> None:
        self.task = task


def test_reset_task_gives_each_env_its_task(make_sampler):
    s = make_sampler([functools.partial(TaskEnv, i) for i in range(4)], num_workers=2)
    s.reset_task([0.5, 1.5, 2.5, 3.5])
    assert s.get_attr("task") == [0.5, 1.5, 2.5, 3.5]


def test_env_id_with_kwargs_and_env_maker(make_sampler):
    s = make_sampler("CartPole-v1", num_envs=2, env_kwargs={"max_episode_steps": 3})
    s.reset()
    s.step(ones(2))
    s.step(ones(2))
    assert s.step(ones(2)).truncated.all()
    assert EnvMaker("CartPole-v1")().spec.id == "CartPole-v1"


def test_stats_count_steps_and_time(make_sampler):
    s = make_sampler(fns(CountingEnv, 4, length=100), num_workers=2)
    s.reset()
    for _ in range(5):
        s.step(ones(4))
    stats = s.stats()
    assert stats["env_steps"] == 20 and stats["recvs"] == 5 and stats["workers_received"] == 10
    assert stats["env_step_s"] > 0 and stats["wait_s"] > 0


def test_box_actions_reach_the_env(make_sampler):
    s = make_sampler([functools.partial(gym.make, "Pendulum-v1")] * 2, num_workers=2, seed=3)
    s.reset()
    r = s.step(np.full((2, 1), 2.0))  # float64 input is cast to the space's float32
    assert r.obs.shape == (2, 3) and np.all(np.isfinite(r.rewards))


def test_spin_before_block_is_automatic_and_configurable(make_sampler):
    import os

    cores = len(os.sched_getaffinity(0))
    auto = make_sampler(fns(CountingEnv, 2), num_workers=1)
    assert auto.config.spin_s == pytest.approx(200e-6)  # one worker always fits the cores
    crowded = make_sampler(fns(CountingEnv, cores + 1), num_workers=cores + 1)
    assert crowded.config.spin_s == 0.0  # more workers than cores: spinning would steal their CPU
    off = make_sampler(fns(CountingEnv, 2), num_workers=2, spin_us=0)
    for s in (auto, crowded, off):
        s.reset()
        assert s.step(ones(s.num_envs)).obs[0, 1] == 1
