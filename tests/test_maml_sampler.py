"""MultiTaskSampler: pytorch-maml-rl's API and layout, inner-loop semantics, futures, lifetime.

Every sampler lives in a ``with`` block or a yield fixture, so a failing test leaks no worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import gymnasium as gym
import psutil
import pytest
import torch
from torch.distributions import Distribution

import vecsample.envs  # noqa: F401  (registers the task envs)
from vecsample import Options, errors
from vecsample.maml import (
    BatchEpisodes,
    LinearFeatureBaseline,
    MultiTaskSampler,
    NormalMLPPolicy,
    get_input_size,
    get_policy_for_env,
    reinforce_loss,
    weighted_mean,
)
from vecsample.maml.errors import TaskEnvError

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="uses POSIX signals")


def meta_sampler(env_name: str, batch_size: int, num_workers: int, **kwargs: Any) -> Any:
    env = gym.make(env_name)
    policy = kwargs.pop("policy", None) or get_policy_for_env(env, hidden_sizes=(16,))
    baseline = LinearFeatureBaseline(get_input_size(env))
    return MultiTaskSampler(
        env_name, {}, batch_size, policy, baseline, num_workers=num_workers, **kwargs
    )


@pytest.fixture(
    params=[
        ("TabularMDP-v0", 1),
        ("TabularMDP-v0", 3),
        ("2DNavigation-v0", 1),
        ("2DNavigation-v0", 3),
    ]
)
def sampler(request: pytest.FixtureRequest) -> Iterator[MultiTaskSampler]:
    env_name, num_workers = request.param
    with meta_sampler(env_name, batch_size=7, num_workers=num_workers, seed=0) as s:
        yield s


def check_batch(episodes: BatchEpisodes, batch_size: int, env_name: str) -> None:
    assert isinstance(episodes, BatchEpisodes)
    assert episodes.batch_size == batch_size
    steps = 10 if env_name == "TabularMDP-v0" else 100
    if env_name == "TabularMDP-v0":
        assert episodes.lengths == [steps] * batch_size  # never terminates: the time limit ends it
    assert min(episodes.lengths) >= 1 and max(episodes.lengths) <= steps
    obs_dim = 10 if env_name == "TabularMDP-v0" else 2
    assert episodes.observations.shape == (len(episodes), batch_size, obs_dim)
    assert episodes.observations.dtype == torch.float32
    assert episodes.rewards.shape == episodes.advantages.shape == (len(episodes), batch_size)
    # Normalised advantages: mean of per-episode means 0, spread 1 (weighted_normalize).
    lengths = episodes.lengths
    assert abs(weighted_mean(episodes.advantages, lengths).mean().item()) < 1e-4
    spread = weighted_mean(episodes.advantages**2, lengths).mean().sqrt().item()
    assert spread == pytest.approx(1.0, abs=1e-3) or spread == 0.0


def test_layout_and_types_as_their_tests(sampler: MultiTaskSampler) -> None:
    env_name = sampler.env_name
    for num_tasks, num_steps in [(1, 1), (1, 3), (5, 1), (5, 3)]:
        tasks = sampler.sample_tasks(num_tasks=num_tasks)
        assert len(tasks) == num_tasks
        train, valid = sampler.sample(tasks, num_steps=num_steps)
        assert len(train) == num_steps and all(len(step) == num_tasks for step in train)
        assert len(valid) == num_tasks
        for episodes in [*(e for step in train for e in step), *valid]:
            check_batch(episodes, 7, env_name)


def test_batch_size_one_and_more_workers_than_envs() -> None:
    with meta_sampler("2DNavigation-v0", batch_size=1, num_workers=3) as s:
        train, valid = s.sample(s.sample_tasks(1))
        check_batch(train[0][0], 1, "2DNavigation-v0")
        check_batch(valid[0], 1, "2DNavigation-v0")


def test_futures_are_asyncio_futures_awaited_many_times() -> None:
    with meta_sampler("TabularMDP-v0", batch_size=3, num_workers=2) as s:
        train_futures, valid_futures = s.sample_async(s.sample_tasks(2), num_steps=2)
        assert all(isinstance(f, asyncio.Future) for f in [*train_futures[1], *valid_futures])
        loop = asyncio.get_event_loop()

        async def await_all_three_times() -> list[Any]:
            seen = []
            for _ in range(3):  # as MAMLTRPO's line search does
                seen.append([await f for f in [*train_futures[0], *train_futures[1]]])
                seen.append([await f for f in valid_futures])
            return seen

        seen = loop.run_until_complete(await_all_three_times())
        assert all(a is b for a, b in zip(seen[0], seen[2], strict=True))
        train, valid = s.sample_wait((train_futures, valid_futures))
        assert train[1][0] is train_futures[1][0].result() and valid[1] is valid_futures[1].result()
        assert loop.run_until_complete(asyncio.gather(*valid_futures))[0] is valid[0]


# --- inner-loop semantics --------------------------------------------------------------------


class SpyPolicy(NormalMLPPolicy):
    """Records the parameters of every forward under no_grad (the sampler's inference)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[dict[str, torch.Tensor]] = []

    def forward(
        self, input: torch.Tensor, params: Mapping[str, torch.Tensor] | None = None
    ) -> Distribution:
        if not torch.is_grad_enabled() and params is not None:
            self.seen.append({k: v.detach().clone() for k, v in params.items()})
        return super().forward(input, params=params)


class PerGroupPolicy(NormalMLPPolicy):
    """A NormalMLPPolicy whose forward is not NormalMLPPolicy's own: the sampler calls it per
    group of envs sharing parameters instead of one stacked forward for the block."""

    def forward(
        self, input: torch.Tensor, params: Mapping[str, torch.Tensor] | None = None
    ) -> Distribution:
        return super().forward(input, params=params)


class StackCounter(NormalMLPPolicy):
    """A NormalMLPPolicy that counts its stacked forwards (its forward is its base's)."""

    stacks = 0

    def stacked(
        self, inputs: torch.Tensor, params: Sequence[Mapping[str, torch.Tensor]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        type(self).stacks += 1
        return super().stacked(inputs, params)


def test_a_stacked_forward_samples_what_a_forward_per_task_samples() -> None:
    """After the inner update every task has its parameters; one worker holds three tasks, so
    the valid round's actions come from NormalMLPPolicy.stacked. They equal, to float rounding,
    those of a forward per task (2DNavigation's steps keep the rounding small)."""

    def run(cls: type[NormalMLPPolicy]) -> list[BatchEpisodes]:
        torch.manual_seed(0)
        policy = cls(2, 2, hidden_sizes=(16,))
        with meta_sampler("2DNavigation-v0", batch_size=4, num_workers=1, seed=2,
                          policy=policy) as s:
            return s.sample(s.sample_tasks(3), num_steps=1, fast_lr=0.5)[1]

    stacked, per_task = run(StackCounter), run(PerGroupPolicy)
    assert StackCounter.stacks > 0
    for a, b in zip(stacked, per_task, strict=True):
        torch.testing.assert_close(a.actions, b.actions, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(a.observations, b.observations, rtol=1e-5, atol=1e-5)


def same(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    return all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_valid_episodes_use_the_first_order_adapted_params() -> None:
    """One task, one worker: the forwards are train round first, valid round after."""
    torch.manual_seed(0)
    policy = SpyPolicy(2, 2, hidden_sizes=(8,))
    with meta_sampler("2DNavigation-v0", batch_size=4, num_workers=1, policy=policy) as s:
        before = OrderedDict((k, v.detach().clone()) for k, v in policy.named_parameters())
        train, valid = s.sample(s.sample_tasks(1), num_steps=1, fast_lr=0.7, gamma=0.9)
    assert same(policy.seen[0], before)
    params = OrderedDict((k, v.clone().requires_grad_()) for k, v in before.items())
    loss = reinforce_loss(policy, train[0][0], params=params)
    adapted = policy.update_params(loss, params=params, step_size=0.7, first_order=True)
    assert same(policy.seen[-1], adapted) and not same(adapted, before)
    assert train[0][0].gamma == valid[0].gamma == 0.9


def test_current_weights_at_each_call_and_snapshot_while_sampling() -> None:
    torch.manual_seed(0)
    policy = SpyPolicy(2, 2, hidden_sizes=(8,))
    with meta_sampler("2DNavigation-v0", batch_size=2, num_workers=1, policy=policy) as s:
        tasks = s.sample_tasks(1)
        futures = s.sample_async(tasks)
        first = OrderedDict((k, v.detach().clone()) for k, v in policy.named_parameters())
        with torch.no_grad():
            policy.mu.bias.add_(5.0)  # what a line search does while sampling runs
        s.sample_wait(futures)
        assert same(policy.seen[0], first)
        policy.seen.clear()
        s.sample(tasks)
        assert policy.seen[0]["mu.bias"][0] == pytest.approx(first["mu.bias"][0].item() + 5.0)


def test_baseline_fitted_per_batch_and_users_baseline_untouched() -> None:
    env = gym.make("2DNavigation-v0")
    baseline = LinearFeatureBaseline(2)
    policy = get_policy_for_env(env, hidden_sizes=(8,))
    with MultiTaskSampler("2DNavigation-v0", {}, 5, policy, baseline, num_workers=2) as s:
        train, _ = s.sample(s.sample_tasks(3), gae_lambda=0.8, gamma=0.97)
    assert (baseline.weight == 0).all()
    for episodes in train[0]:
        got = episodes.advantages.clone()
        refit = LinearFeatureBaseline(2)
        refit.fit(episodes)
        torch.testing.assert_close(
            episodes.compute_advantages(refit, gae_lambda=0.8), got, atol=1e-4, rtol=1e-4
        )


def test_seeded_runs_repeat() -> None:
    def run(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(0)  # same initial policy
        with meta_sampler("2DNavigation-v0", batch_size=3, num_workers=2, seed=seed) as s:
            train, valid = s.sample(s.sample_tasks(2))
        return train[0][1].actions, valid[1].observations

    a, b, c = run(5), run(5), run(6)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_a_pipelined_meta_batch_repeats_and_fills_every_episode() -> None:
    """pipeline=True (was refused): each process serves two halves, each sent again as soon
    as its step is in; seeded runs repeat, and every episode is whole."""
    def run(seed: int) -> tuple[list[list[BatchEpisodes]], list[BatchEpisodes]]:
        torch.manual_seed(0)
        with meta_sampler("2DNavigation-v0", batch_size=4, num_workers=2, seed=seed,
                          options=Options(pipeline=True)) as s:
            got = s.sample(s.sample_tasks(2))
            assert s._vec is not None and s._vec.num_slots == 4  # two halves a process
            return got

    (train_a, valid_a), (train_b, valid_b) = run(3), run(3)
    for x, y in zip([*train_a[0], *valid_a], [*train_b[0], *valid_b], strict=True):
        check_batch(x, 4, "2DNavigation-v0")
        assert torch.equal(x.actions, y.actions) and torch.equal(x.observations, y.observations)


# --- lifetime and failures -------------------------------------------------------------------


def test_the_workers_do_not_spin_unless_the_options_ask() -> None:
    """The VecSampler underneath gets the sampler's options: spin_us=0 (its workers step for
    milliseconds while this process infers), unless the options set a spin, which is kept."""
    with meta_sampler("TabularMDP-v0", batch_size=2, num_workers=2) as s:
        assert s.options.spin_us == 0.0
    with meta_sampler("TabularMDP-v0", batch_size=2, num_workers=2,
                      options=Options(spin_us=50)) as s:
        assert s.options.spin_us == 50.0


def test_misuse_raises_typed_errors() -> None:
    env = gym.make("CartPole-v1")
    with pytest.raises(TaskEnvError, match="reset_task"):
        MultiTaskSampler("CartPole-v1", {}, 2, get_policy_for_env(env), LinearFeatureBaseline(4))
    with meta_sampler("TabularMDP-v0", batch_size=2, num_workers=1) as s:
        with pytest.raises(errors.PendingCallError, match="sample_async"):
            s.sample_wait(([], []))
        futures = s.sample_async(s.sample_tasks(1))
        with pytest.raises(errors.PendingCallError, match="sample_wait"):
            s.sample_async(s.sample_tasks(1))
        s.sample_wait(futures)
    with pytest.raises(errors.ClosedError):
        s.sample(s.sample_tasks(1))


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until_dead(pid: int, timeout: float) -> None:
    """Waits for ``pid`` to exit, without reaping it: its parent (the sampler) does that."""
    end = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < end:
        time.sleep(0.02)


def test_close_ends_the_workers_and_a_second_sampler_works() -> None:
    with meta_sampler("TabularMDP-v0", batch_size=2, num_workers=2) as first:
        assert first.worker_pids() == []  # the workers start with the first sample
        first.sample(first.sample_tasks(2))
        pids = first.worker_pids()
        assert len(pids) == 2 and all(alive(pid) for pid in pids)
    assert first.closed and not any(alive(pid) for pid in pids)
    assert first.worker_pids() == []
    first.close()  # idempotent
    with meta_sampler("TabularMDP-v0", batch_size=2, num_workers=2) as second:
        _, valid = second.sample(second.sample_tasks(2))
        assert len(valid) == 2


def test_spawn_context() -> None:
    with meta_sampler("2DNavigation-v0", batch_size=2, num_workers=2, context="spawn") as s:
        _, valid = s.sample(s.sample_tasks(2))
        check_batch(valid[1], 2, "2DNavigation-v0")


@posix_only
def test_dead_worker_raises_and_the_sampler_recovers() -> None:
    with meta_sampler("TabularMDP-v0", batch_size=2, num_workers=2) as s:
        tasks = s.sample_tasks(2)
        s.sample(tasks)
        victim = s.worker_pids()[1]
        os.kill(victim, signal.SIGKILL)
        wait_until_dead(victim, 5.0)
        start = time.monotonic()
        with pytest.raises(errors.WorkerError):
            s.sample(tasks)
        assert time.monotonic() - start < 10
        _, valid = s.sample(tasks)  # the workers are rebuilt
        assert len(valid) == 2
        assert victim not in s.worker_pids()


class StoppingPolicy(NormalMLPPolicy):
    """Stops a worker process (SIGSTOP) from inside the sampler's 30th forward: mid-round."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls, self.victim = 0, 0

    def forward(
        self, input: torch.Tensor, params: Mapping[str, torch.Tensor] | None = None
    ) -> Distribution:
        self.calls += 1
        if self.calls == 30 and self.victim:
            os.kill(self.victim, signal.SIGSTOP)
        return super().forward(input, params=params)


@posix_only
def test_hung_worker_raises_after_the_deadline() -> None:
    policy = StoppingPolicy(2, 2, hidden_sizes=(4,))
    with meta_sampler(
        "2DNavigation-v0", batch_size=2, num_workers=2, deadline=1.0, policy=policy
    ) as s:
        tasks = s.sample_tasks(2)
        s.sample(tasks)
        policy.calls, policy.victim = 0, s.worker_pids()[0]
        try:
            start = time.monotonic()
            with pytest.raises(errors.DeadlineExceededError, match=r"deadline=1.0 s"):
                s.sample(tasks)
            assert time.monotonic() - start < 10
            assert policy.calls >= 30
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(policy.victim, signal.SIGCONT)
