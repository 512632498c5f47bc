"""MultiTaskSampler over the batch-native MuJoCo task envs (vecsample/envs/mujoco_batch).

With the same seed, a sample through the batch envs (one ``HostedVector`` per worker, ended
envs frozen under Disabled) must give the same episodes as a sample through single gymnasium
envs: the same observations, actions, rewards, masks and lengths, bit for bit, in every round.
Every sampler lives in a ``with`` block, so a failing test leaks no worker.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
import torch

import vecsample.envs  # registers the task envs and their batch forms
from vecsample.maml import BatchEpisodes, LinearFeatureBaseline, MultiTaskSampler, get_input_size
from vecsample.maml.policies import NormalMLPPolicy

pytest.importorskip("mujoco")


class ZeroBaseline:
    """A baseline of zeros. ``LinearFeatureBaseline``'s fit on MuJoCo observations is not
    repeatable to the bit (its normal equations are near singular: a zero observation column;
    the float32 weights differ by ~1e-6 from one fit of the same batch to the next), so the
    adapted parameters, and the valid round with them, would differ for reasons that have
    nothing to do with the envs."""

    def fit(self, episodes: BatchEpisodes) -> None:
        pass

    def __call__(self, episodes: BatchEpisodes) -> torch.Tensor:
        return torch.zeros(episodes.rewards.shape)


def sample(env_name: str, batch_envs: bool, env_kwargs: dict[str, Any],
           num_workers: int = 2) -> tuple[str | None, list[Any]]:
    """One seeded sample (2 tasks x 3 episodes, one inner step): the batch id used and every
    episode batch of every round."""
    env = gym.make(env_name, **env_kwargs)
    torch.manual_seed(0)
    size = get_input_size(env)
    policy = NormalMLPPolicy(size, env.action_space.shape[0], hidden_sizes=(16,))
    with MultiTaskSampler(env_name, env_kwargs, 3, policy, ZeroBaseline(), seed=1,
                          num_workers=num_workers, batch_envs=batch_envs) as sampler:
        tasks = sampler.sample_tasks(num_tasks=2)
        train, valid = sampler.sample(tasks, num_steps=1, fast_lr=0.1)
        return sampler.batch_id, [*train[0], *valid]


def assert_same_episodes(got: list[Any], expected: list[Any]) -> None:
    for k, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a.lengths == b.lengths, f"batch {k}"
        for name in ("observations", "actions", "rewards", "mask"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and torch.equal(x, y), f"batch {k}: {name}"


@pytest.mark.parametrize(("env_name", "limit", "falls"),
                         [("HalfCheetahDir-v5", 40, False), ("AntVel-v5", 60, True)])
def test_the_batch_envs_sample_the_same_episodes_as_single_envs(env_name, limit, falls):
    """HalfCheetah never terminates; the Ant falls, so its episodes end at different steps and
    ended rows stay frozen in their blocks while the others step on."""
    kwargs = {"max_episode_steps": limit}
    batch_id, got = sample(env_name, True, kwargs)
    single_id, expected = sample(env_name, False, kwargs)
    assert batch_id == vecsample.envs.BATCH_IDS[env_name] and single_id is None
    assert_same_episodes(got, expected)
    lengths = [n for e in expected for n in e.lengths]
    assert len(got) == 4 and max(lengths) == limit
    assert (min(lengths) < limit) is falls


def test_keywords_only_the_single_envs_take_keep_the_single_envs():
    env = gym.make("HalfCheetahVel-v5")
    with MultiTaskSampler("HalfCheetahVel-v5", {"ctrl_cost_weight": 0.5}, 2,
                          NormalMLPPolicy(get_input_size(env), 6, hidden_sizes=(4,)),
                          LinearFeatureBaseline(get_input_size(env))) as sampler:
        assert sampler.batch_id is None
    with MultiTaskSampler("HalfCheetahVel-v5", {"normalization_scale": 2.0}, 2,
                          NormalMLPPolicy(get_input_size(env), 6, hidden_sizes=(4,)),
                          LinearFeatureBaseline(get_input_size(env))) as sampler:
        assert sampler.batch_id == "HalfCheetahVelBatch-v5"
