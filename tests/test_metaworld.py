"""Meta-World+ through vecsample: task setting in the workers, splits, seeding, one meta-batch.

The ``test`` extra installs Meta-World (and so mujoco 3.3.0, which it pins), so these run in the
README's test venv, never skipped: a venv without it fails here at import, naming the fix. Every
sampler lives in a ``with`` block or a fixture.
"""

from __future__ import annotations

import csv
import functools
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import metaworld
import numpy as np
import pytest

import vecsample.envs  # noqa: F401  (registers MetaWorld-v3)
from vecsample import VecSampler
from vecsample.envs.metaworld import MetaWorldTaskError, benchmark_tasks
from vecsample.maml import LinearFeatureBaseline, MultiTaskSampler, get_policy_for_env
from vecsample.types import AutoresetMode

ROOT = Path(__file__).resolve().parents[1]
ML1 = {"benchmark": "ML1", "env_name": "reach-v3"}


def factory(**kwargs: Any) -> Callable[[], gym.Env[Any, Any]]:
    return functools.partial(gym.make, "MetaWorld-v3", **kwargs)


def sample(num_tasks: int, seed: int = 0, **kwargs: Any) -> list[Any]:
    env = gym.make("MetaWorld-v3", **kwargs)
    env.reset(seed=seed)
    tasks: list[Any] = env.unwrapped.sample_tasks(num_tasks)  # type: ignore[attr-defined]
    env.close()
    return tasks


def play(env: gym.Env[Any, Any], actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(observations, rewards) of ``actions`` from a reset, in one local env."""
    obs, _ = env.reset()
    trace, rewards = [obs], []
    for a in actions:
        obs, reward, *_ = env.step(a)
        trace.append(obs)
        rewards.append(reward)
    return np.array(trace), np.array(rewards)


def play_vec(vec: VecSampler, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every env's (observations, rewards) of ``actions[t, env]`` from a reset."""
    obs, _ = vec.reset()
    trace, rewards = [np.array(obs)], []
    for a in actions:
        result = vec.step(a)
        trace.append(np.array(result.obs))
        rewards.append(np.array(result.rewards))
    return np.array(trace), np.array(rewards)


# --- task setting --------------------------------------------------------------------------------


def test_reset_task_reaches_the_right_env(make_sampler: Callable[..., VecSampler]) -> None:
    """Four ML10 tasks of four classes, two per worker: each env plays exactly its task."""
    kwargs = {"benchmark": "ML10", "max_path_length": 8}
    tasks = sample(10, **kwargs)[::3][:4]  # task i is of class i % 10: four classes
    assert len({t.env_name for t in tasks}) == 4
    vec = make_sampler([factory(**kwargs)] * 4, num_workers=2, check_actions=False,
                       autoreset_mode=AutoresetMode.DISABLED)  # fmt: skip
    vec.reset_task(tasks)
    assert vec.get_attr("task") == tasks
    actions = np.random.default_rng(0).uniform(-1, 1, (8, 4, 4)).astype(np.float32)
    obs, rewards = play_vec(vec, actions)
    for j, task in enumerate(tasks):
        local = gym.make("MetaWorld-v3", **kwargs)
        local.unwrapped.reset_task(task)  # type: ignore[attr-defined]
        want_obs, want_rewards = play(local, actions[:, j])
        local.close()
        np.testing.assert_array_equal(obs[:, j], want_obs)
        np.testing.assert_array_equal(rewards[:, j], want_rewards)
    # The same class with another goal reuses the env; the goal changes what is rewarded.
    other = sample(10, seed=1, **kwargs)[::3][:4]
    vec.reset_task(other)
    _, rewards_other = play_vec(vec, actions)
    assert not np.array_equal(rewards_other, rewards)


def test_episode_success_is_any_step_success() -> None:
    """The last info's ``episode_success`` is 1 iff ``success`` was reached at some step: a
    scripted reacher that gets to the goal and leaves it again succeeded (though its last step
    did not); standing still did not."""
    env = gym.make("MetaWorld-v3", **ML1, max_path_length=80, step_infos=True)
    env.unwrapped.reset_task(sample(1, **ML1)[0])  # type: ignore[attr-defined]
    outcomes = []
    for gain in (30.0, 0.0):
        env.reset()
        sawyer = env.unwrapped._env  # type: ignore[attr-defined]
        successes, info, truncated = [], {}, False
        while not truncated:
            toward = sawyer._target_pos - sawyer.tcp_center
            push = gain * toward if len(successes) < 50 else -gain * toward  # there, then away
            action = np.append(np.clip(push, -1, 1), 0.0).astype(np.float32)
            _, _, _, truncated, info = env.step(action)
            successes.append(info["success"])
        assert successes[-1] == 0.0
        assert info["episode_success"] == float(any(successes))
        outcomes.append(info["episode_success"])
    env.close()
    assert outcomes == [1.0, 0.0]


def test_short_infos_only_at_the_episode_end() -> None:
    env = gym.make("MetaWorld-v3", **ML1, max_path_length=3)
    env.reset(seed=0)
    infos = [env.step(np.zeros(4, np.float32))[4] for _ in range(3)]
    env.close()
    assert infos[:2] == [{}, {}]
    assert set(infos[2]) == {"episode_success"}


# --- splits --------------------------------------------------------------------------------------


def test_ml1_train_and_test_goals_do_not_mix() -> None:
    train = sample(30, **ML1, split="train")
    test = sample(30, **ML1, split="test")
    train_all = {t.data for t in benchmark_tasks("ML1", "train", "reach-v3", 0)}
    test_all = {t.data for t in benchmark_tasks("ML1", "test", "reach-v3", 0)}
    assert not train_all & test_all
    assert {t.data for t in train} <= train_all
    assert {t.data for t in test} <= test_all


def test_ml10_splits_keep_their_classes() -> None:
    train = sample(20, benchmark="ML10", split="train")
    test = sample(20, benchmark="ML10", split="test")
    bench_train = [t.env_name for t in benchmark_tasks("ML10", "train", None, 0)]
    # Balanced over the classes (as Meta-World's baselines lay out a meta-batch), interleaved.
    assert [t.env_name for t in train] == [n for _ in (0, 1) for n in dict.fromkeys(bench_train)]
    assert len({t.data for t in train}) == 20
    assert {t.env_name for t in test} == set(metaworld.env_dict.ML10_V3["test"])
    assert not {t.env_name for t in train} & {t.env_name for t in test}
    env = gym.make("MetaWorld-v3", benchmark="ML10", split="train")
    with pytest.raises(MetaWorldTaskError, match="train classes"):
        env.unwrapped.reset_task(test[0])  # type: ignore[attr-defined]
    env.close()


def test_bad_names_are_refused() -> None:
    with pytest.raises(MetaWorldTaskError, match="reach-v3"):
        gym.make("MetaWorld-v3", benchmark="ML1", env_name="reach")
    with pytest.raises(MetaWorldTaskError, match="benchmark"):
        gym.make("MetaWorld-v3", benchmark="ML7")
    with pytest.raises(MetaWorldTaskError, match="split"):
        gym.make("MetaWorld-v3", benchmark="ML10", split="valid")


# --- seeding -------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_workers", [1, 3])
def test_same_seed_same_tasks_and_first_episode(
    num_workers: int, make_sampler: Callable[..., VecSampler]
) -> None:
    """Tasks come from the seed alone; given the tasks and the actions, the episode does not
    depend on how the envs are spread over the workers."""
    kwargs = {**ML1, "max_path_length": 10}
    tasks = sample(6, seed=7, **kwargs)
    assert [t.data for t in tasks] == [t.data for t in sample(6, seed=7, **kwargs)]
    assert [t.data for t in tasks] != [t.data for t in sample(6, seed=8, **kwargs)]
    actions = np.random.default_rng(1).uniform(-1, 1, (10, 6, 4)).astype(np.float32)
    runs = []
    for workers in (num_workers, 2):
        vec = make_sampler([factory(**kwargs)] * 6, num_workers=workers, seed=5,
                           check_actions=False, autoreset_mode=AutoresetMode.DISABLED)  # fmt: skip
        vec.reset_task(tasks)
        runs.append(play_vec(vec, actions))
        vec.close()
    for a, b in zip(runs[0], runs[1], strict=True):
        np.testing.assert_array_equal(a, b)


def test_multitask_sampler_tasks_do_not_depend_on_workers() -> None:
    tasks = []
    for workers in (1, 2):
        env = gym.make("MetaWorld-v3", **ML1)
        policy = get_policy_for_env(env, hidden_sizes=(8,))
        with MultiTaskSampler("MetaWorld-v3", ML1, 2, policy, LinearFeatureBaseline(39),
                              env=env, seed=3, num_workers=workers) as sampler:  # fmt: skip
            tasks.append([t.data for t in sampler.sample_tasks(5)])
    assert tasks[0] == tasks[1]


# --- end to end ----------------------------------------------------------------------------------


def test_one_ml1_meta_batch_end_to_end() -> None:
    kwargs = {**ML1, "max_path_length": 30}
    env = gym.make("MetaWorld-v3", **kwargs)
    policy = get_policy_for_env(env, hidden_sizes=(16,))
    with MultiTaskSampler("MetaWorld-v3", kwargs, 3, policy, LinearFeatureBaseline(39),
                          env=env, seed=0, num_workers=2) as sampler:  # fmt: skip
        tasks = sampler.sample_tasks(2)
        train, valid = sampler.sample(tasks, num_steps=1, fast_lr=0.1, gamma=0.99)
    for episodes in [*train[0], *valid]:
        assert tuple(episodes.observations.shape) == (30, 3, 39)
        assert episodes.lengths == [30, 30, 30]
        success = episodes.logs["episode_success"]
        assert success.shape == (3,) and set(success.tolist()) <= {0.0, 1.0}


@pytest.mark.slow
def test_experiment_runs_on_a_tiny_budget(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "examples/maml_trpo_metaworld.py", "--num-batches", "2",
         "--meta-batch-size", "2", "--fast-batch-size", "2", "--max-path-length", "20",
         "--num-workers", "1", "--output-dir", str(out)],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout's code, not an install
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["split"], r["batch"]) for r in rows] == [("train", "0"), ("train", "1"),
                                                        ("test", "0")]  # fmt: skip
    for r in rows:
        assert 0.0 <= float(r["pre_success"]) <= 1.0 and 0.0 <= float(r["post_success"]) <= 1.0
    assert (out / "metrics.png").stat().st_size > 0
