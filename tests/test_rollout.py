"""Tests for vecsample.train.Rollout: hand-checked storage with full and partial batches, one
weight sync per rollout, phases that add up to the wall time, and the errors of a
misconfigured rollout.

The envs are CountingEnvs (observation ``[env, t, episode, last_action]``, reward = action), and
the policy's action is ``t``, so every row of the rollout is known in advance.
"""

from __future__ import annotations

import functools
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

from vecsample import AutoresetMode, StepResult, VecSampler, VectorEnv, errors
from vecsample.testing import CountingEnv, SlowEnv, SpaceEnv, fns
from vecsample.train.rollout import Rollout, _Store

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="skipped: no CUDA")

T, N, LENGTH = 5, 4, 3  # 5 steps of 4 envs whose episodes last 3 steps


class CountingPolicy(nn.Module):
    """Action = the env's step counter (mod 4); ``value`` = 10 * env + t + bias (its one weight)."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(()))

    def forward(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"actions": obs[:, 1].long() % 4, "value": 10 * obs[:, 0] + obs[:, 1] + self.bias}


def _expected() -> dict[str, np.ndarray]:
    """The rollout worked out by hand for T=5, N=4, episodes of 3 steps, action = t."""
    t_col = np.array([0, 1, 2, 0, 1], dtype=np.float32)  # step counter seen at each row
    episode = np.array([0, 0, 0, 1, 1], dtype=np.float32)
    last_action = np.array([-1, 0, 1, -1, 0], dtype=np.float32)  # -1 right after a reset
    env = np.arange(N, dtype=np.float32)
    obs = np.stack(
        np.broadcast_arrays(env[None, :], t_col[:, None], episode[:, None], last_action[:, None]),
        -1,
    )
    terminated = np.zeros((T, N), dtype=bool)
    terminated[2] = True  # the third step ends the first episode of every env
    final_obs = np.zeros((T, N, 4), dtype=np.float32)
    final_obs[2] = np.stack([env, np.full(N, 3), np.zeros(N), np.full(N, 2)], -1)
    next_obs = np.stack([env, np.full(N, 2), np.ones(N), np.full(N, 1)], -1)
    return {
        "obs": obs,
        "actions": np.broadcast_to(t_col[:, None], (T, N)).astype(np.int64),
        "rewards": np.broadcast_to(t_col[:, None], (T, N)),
        "terminated": terminated,
        "final_obs": final_obs,
        "has_final_obs": terminated,
        "next_obs": next_obs,
        "value": 10 * env[None, :] + t_col[:, None],
    }


def _assert_hand_checked(rollout: Rollout) -> None:
    b, want = rollout.batch, _expected()
    np.testing.assert_array_equal(b.obs.numpy(), want["obs"])
    np.testing.assert_array_equal(b.actions.numpy(), want["actions"])
    np.testing.assert_array_equal(b.rewards.numpy(), want["rewards"])
    np.testing.assert_array_equal(b.terminated.numpy(), want["terminated"])
    assert not b.truncated.any()
    np.testing.assert_array_equal(b.has_final_obs.numpy(), want["has_final_obs"])
    np.testing.assert_array_equal(b.final_obs.numpy()[2], want["final_obs"][2])
    np.testing.assert_array_equal(b.next_obs.numpy(), want["next_obs"])
    np.testing.assert_array_equal(b.extras["value"].numpy(), want["value"])
    assert sorted((e.env, e.ret, e.length) for e in rollout.episodes) == [
        (i, 3.0, 3) for i in range(N)
    ]


@pytest.fixture
def counting() -> Iterator[VecSampler]:
    with VecSampler(fns(CountingEnv, N, length=LENGTH), num_workers=2, seed=0) as sampler:
        yield sampler


@pytest.fixture
def uneven() -> Iterator[VecSampler]:
    """Worker 0's envs are slow, worker 1's are fast: partial batches are bound to happen."""
    env_fns = [
        functools.partial(SlowEnv, env_index=i, step_time=0.02 if i < 2 else 0.0, length=LENGTH)
        for i in range(N)
    ]
    with VecSampler(env_fns, num_workers=2, seed=0) as sampler:
        yield sampler


def test_full_batches_fill_the_hand_checked_rows(counting: VecSampler) -> None:
    rollout = Rollout(counting, CountingPolicy(), T, device="cpu", timeout=None)
    batch = rollout.collect()
    assert batch.obs.shape == (T, N, 4) and batch.obs.dtype == torch.float32
    _assert_hand_checked(rollout)
    assert rollout.global_step == T * N
    stats = counting.stats()
    assert stats["workers_received"] == stats["recvs"] * 2  # every recv was a full batch


def test_full_batches_arriving_out_of_worker_order_fill_the_right_rows(uneven: VecSampler) -> None:
    """Worker 1 (fast) is received before worker 0 (slow): outputs must still go to their envs."""
    rollout = Rollout(uneven, CountingPolicy(), T, device="cpu")
    rollout.collect()
    _assert_hand_checked(rollout)


def test_partial_batches_fill_the_same_rows(uneven: VecSampler) -> None:
    rollout = Rollout(uneven, CountingPolicy(), T, device="cpu", timeout=0.0)
    rollout.collect()
    stats = uneven.stats()
    assert stats["workers_received"] < stats["recvs"] * 2, "expected at least one partial batch"
    _assert_hand_checked(rollout)


@pytest.mark.parametrize("timeout", [None, 0.0])
def test_rows_written_through_tensors_fill_the_same_rows(uneven: VecSampler,
                                                         timeout: float | None) -> None:
    """A batch off the host (a GPU's) takes each row as a tensor; the host's through numpy
    views. Forced onto the tensors here, full and partial batches still fill the rows."""
    rollout = Rollout(uneven, CountingPolicy(), T, device="cpu", timeout=timeout)
    rollout._store = _Store(rollout.batch, host=False)
    rollout.collect()
    _assert_hand_checked(rollout)


def test_the_default_partial_batches_hold_the_same_data_as_full_batches() -> None:
    """The default (partial batches: no barrier) against timeout=None (a barrier every step),
    from two samplers of the same uneven envs: every tensor of several rollouts is equal."""
    env_fns = [
        functools.partial(SlowEnv, env_index=i, step_time=0.01 if i < 2 else 0.0, length=LENGTH)
        for i in range(N)
    ]
    batches = {}
    for timeout in ("default", None):
        with VecSampler(env_fns, num_workers=2, seed=0) as sampler:
            kwargs = {} if timeout == "default" else {"timeout": None}
            rollout = Rollout(sampler, CountingPolicy(), T, device="cpu", **kwargs)
            batches[timeout] = [rollout.collect() for _ in range(2)][-1]
            stats = sampler.stats()
        if timeout == "default":
            assert stats["workers_received"] < 2 * stats["recvs"], "no partial batch happened"
    for name in ("obs", "actions", "rewards", "terminated", "truncated", "final_obs",
                 "has_final_obs", "next_obs"):
        assert torch.equal(getattr(batches["default"], name), getattr(batches[None], name)), name
    assert torch.equal(batches["default"].extras["value"], batches[None].extras["value"])


def test_the_next_rollout_continues_where_the_last_one_stopped(counting: VecSampler) -> None:
    rollout = Rollout(counting, CountingPolicy(), T, device="cpu")
    first_next = rollout.collect().next_obs.clone()
    second = rollout.collect()
    np.testing.assert_array_equal(second.obs[0].numpy(), first_next.numpy())
    # Envs stood at t=2 of episode 1: one more step ends it (row 0), episode 2 ends at row 3.
    assert second.terminated.all(dim=1).tolist() == [True, False, False, True, False]
    np.testing.assert_array_equal(second.obs[1, :, 2].numpy(), np.full(N, 2.0))


def test_one_weight_sync_per_rollout_and_the_sampling_copy_sees_it(counting: VecSampler) -> None:
    policy = CountingPolicy()
    rollout = Rollout(counting, policy, T, device="cpu")
    assert rollout.sampling_policy is not policy
    rollout.collect()
    assert rollout.sync_count == 1  # T=5 steps, one sync
    with torch.no_grad():
        policy.bias.fill_(100.0)  # a "training update" between rollouts
    batch = rollout.collect()
    assert rollout.sync_count == 2
    np.testing.assert_array_equal(batch.extras["value"][0].numpy(), 10 * np.arange(N) + 2 + 100)
    assert "sync_s" in counting.stats() and counting.stats()["sync_s"] > 0


def test_phases_add_up_to_the_wall_time_within_10_percent() -> None:
    env_fns = [functools.partial(SlowEnv, env_index=i, step_time=0.002) for i in range(N)]
    with VecSampler(env_fns, num_workers=2, seed=0) as sampler:
        rollout = Rollout(sampler, CountingPolicy(), 16, device="cpu")
        rollout.collect()  # the first reset happens here: keep it out of the measured part
        before, start = sampler.stats(), time.perf_counter()
        for _ in range(3):
            rollout.collect()
        wall = time.perf_counter() - start
        after = sampler.stats()
    phases = ("send_s", "wait_s", "inference_s", "copy_s", "sync_s")
    measured = sum(after[p] - before[p] for p in phases)
    assert abs(measured - wall) <= 0.1 * wall, {p: after[p] - before[p] for p in phases}
    assert after["env_step_s"] - before["env_step_s"] > 0.5 * 3 * 16 * N * 0.002 / 2
    total_pct = sum(after[p.replace("_s", "_pct")] for p in phases) + after["other_pct"]
    assert total_pct == pytest.approx(100.0)


def test_box_actions_are_clipped_for_the_env_but_stored_as_returned() -> None:
    box = spaces.Box(-1.0, 1.0, (2,), np.float32)
    env_fns = [functools.partial(SpaceEnv, box, box, env_index=i) for i in range(2)]

    def act(policy: nn.Module, obs: torch.Tensor) -> torch.Tensor:
        return torch.full((obs.shape[0], 2), 5.0)

    with VecSampler(env_fns, num_workers=1, seed=0) as sampler:
        rollout = Rollout(sampler, nn.Linear(2, 2), 3, act=act, device="cpu")
        batch = rollout.collect()  # unclipped, check_actions would raise ActionSpaceError
    assert (batch.actions == 5.0).all()
    np.testing.assert_allclose(batch.rewards.numpy(), 3.0)  # SpaceEnv: 1*a0 + 2*a1 with a = 1


@pytest.fixture
def vector_env(request: pytest.FixtureRequest) -> Iterator[VectorEnv]:
    envs = VectorEnv(fns(CountingEnv, 2, length=LENGTH), 1, autoreset_mode=request.param)
    try:
        yield envs
    finally:
        envs.close()


@pytest.mark.parametrize("vector_env", [AutoresetMode.NEXT_STEP], indirect=True)
def test_a_next_step_vector_env_is_refused_with_the_fix(vector_env: VectorEnv) -> None:
    with pytest.raises(
        errors.ConfigError, match=r"autoreset_mode=vecsample\.AutoresetMode\.SAME_STEP"
    ):
        Rollout(vector_env, CountingPolicy(), T, device="cpu")


@pytest.mark.parametrize("vector_env", [AutoresetMode.SAME_STEP], indirect=True)
def test_a_same_step_vector_env_works_and_bad_act_outputs_are_refused(
    vector_env: VectorEnv,
) -> None:
    rollout = Rollout(vector_env, CountingPolicy(), 2, device="cpu")
    assert rollout.collect().actions.tolist() == [[0, 0], [1, 1]]
    with pytest.raises(errors.ConfigError, match="'actions'"):
        Rollout(vector_env, CountingPolicy(), 2, device="cpu", act=lambda m, o: {"a": o})
    with pytest.raises(errors.ConfigError, match="one row per observation"):
        Rollout(vector_env, CountingPolicy(), 2, device="cpu", act=lambda m, o: o[:1, 1].long())


def test_auto_device_on_this_machine(counting: VecSampler) -> None:
    rollout = Rollout(counting, CountingPolicy(), T, device="auto")
    assert rollout.placement.rollout_device in ("cpu", "cuda")
    rollout.collect()
    if not torch.cuda.is_available():
        assert (rollout.rollout_device.type, rollout.train_device.type) == ("cpu", "cpu")
        _assert_hand_checked(rollout)


@needs_cuda
def test_cuda_sampling_copy_fills_the_same_rows(counting: VecSampler) -> None:
    rollout = Rollout(counting, CountingPolicy(), T, device="cuda")
    batch = rollout.collect()
    assert batch.obs.is_pinned()
    _assert_hand_checked(rollout)
    on_gpu = batch.to("cuda")
    assert on_gpu.obs.device.type == "cuda"
    assert torch.equal(on_gpu.extras["value"].cpu(), batch.extras["value"])


class ArrivalRecorder(VecSampler):
    """A VecSampler that records the workers of every batch recv_batch returns."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arrivals: list[list[int]] = []

    def recv_batch(self, *args: Any, **kwargs: Any) -> StepResult:
        result = super().recv_batch(*args, **kwargs)
        self.arrivals.append([] if result.workers is None else result.workers.tolist())
        return result


@pytest.mark.parametrize("timeout", [0.0, 0.03])
def test_partial_batches_of_one_worker_or_both_fill_the_right_rows(timeout: float) -> None:
    """Worker 0's envs take 20 ms a step and worker 1's none: with no window, worker 1's
    steps come alone, ahead of worker 0's; with a window longer than the lag, both come in
    one batch. Either way every output lands in its env's row (each env its own position)."""
    env_fns = [
        functools.partial(SlowEnv, env_index=i, step_time=0.02 if i < 2 else 0.0, length=LENGTH)
        for i in range(N)
    ]
    with ArrivalRecorder(env_fns, num_workers=2, seed=0) as sampler:
        rollout = Rollout(sampler, CountingPolicy(), T, device="cpu", timeout=timeout)
        rollout.collect()
    batches = [tuple(a) for a in sampler.arrivals]
    assert ((1,) in batches) if timeout == 0.0 else ((0, 1) in batches), batches
    _assert_hand_checked(rollout)


def _assert_rows_chain(batch: Any) -> None:
    """Every row follows the one before it, env by env: the step counter goes up by one (or an
    episode ended, and the next row starts at 0), and the last action is the one stored."""
    obs, after = batch.obs.numpy(), np.concatenate([batch.obs.numpy()[1:],
                                                    batch.next_obs.numpy()[None]])
    done = (batch.terminated | batch.truncated).numpy()
    np.testing.assert_array_equal(after[:, :, 1][~done], obs[:, :, 1][~done] + 1)
    np.testing.assert_array_equal(after[:, :, 3][~done], batch.actions.numpy()[~done])
    np.testing.assert_array_equal(after[:, :, 1][done], 0)


@pytest.mark.parametrize("timeout", [None, 0.0])
def test_a_collect_cut_by_ctrl_c_leaves_a_rollout_that_collects_again(
    timeout: float | None,
) -> None:
    """A real SIGINT while collect() waits for steps in flight (issue 35): the next collect
    takes them back and starts from where every env really is, as a VecSampler recovers."""
    calls = 0

    def act(policy: nn.Module, obs: torch.Tensor) -> Any:
        nonlocal calls
        calls += 1  # the first call sizes the storage at construction
        if calls == 3:  # the second step's actions: Ctrl-C once they are sent, mid-wait
            threading.Timer(0.1, signal.raise_signal, (signal.SIGINT,)).start()
        return policy(obs)

    env_fns = fns(SlowEnv, N, step_time=0.3, length=LENGTH)
    with VecSampler(env_fns, num_workers=2, seed=0) as sampler:
        rollout = Rollout(sampler, CountingPolicy(), T, device="cpu", act=act, timeout=timeout)
        with pytest.raises(KeyboardInterrupt):
            rollout.collect()
        second = rollout.collect()  # was: WorkerBusyError, for good
        _assert_rows_chain(second)
        now = np.asarray(sampler.batch().obs)  # where every env really is
        np.testing.assert_array_equal(second.next_obs.numpy(), now)
        assert sampler.get_attr("t") == now[:, 1].tolist()
        next_start = second.next_obs.clone()
        third = rollout.collect()
        np.testing.assert_array_equal(third.obs[0].numpy(), next_start.numpy())
        _assert_rows_chain(third)
        # Every step the envs took is counted, those taken back after the interrupt too.
        taken = [episode * LENGTH + t for episode, t in
                 zip(sampler.get_attr("episode"), sampler.get_attr("t"), strict=True)]
    assert rollout.global_step == sum(taken) > 2 * T * N
