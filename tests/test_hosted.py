"""Hosted vector envs (vecsample/hosted.py): one batch-native VectorEnv per worker.

The differential tests step the same vector env in this process, block by block, with the seeds
the sampler derives, and require bit-identical results; a second set requires a hosted
``SyncVectorEnv`` to give exactly what the bare loop gives for the same envs and seed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import vecsample
from vecsample import HostedVector, VecSampler, errors
from vecsample.seeding import env_seeds
from vecsample.testing import CountingEnv, RaisingEnv

N, W = 16, 2
B = N // W


def counting_sync(num_envs: int, mode: str = "NextStep", length: int = 7) -> gym.vector.VectorEnv:
    """A SyncVectorEnv of CountingEnvs with infos (their noise comes from each env's seed)."""
    env_fn = functools.partial(CountingEnv, length=length, info=True)
    return gym.vector.SyncVectorEnv([env_fn] * num_envs,
                                    autoreset_mode=gym.vector.AutoresetMode(mode))


def raising_sync(num_envs: int) -> gym.vector.VectorEnv:
    """Every env raises at its third step."""
    return gym.vector.SyncVectorEnv([functools.partial(RaisingEnv, at_step=3)] * num_envs)


def cartpole(num_envs: int) -> gym.vector.VectorEnv:
    return gym.make_vec("CartPole-v1", num_envs=num_envs,
                        vectorization_mode="vector_entry_point")


def actions_for(space: gym.Space[Any], steps: int, seed: int = 1) -> list[np.ndarray]:
    space.seed(seed)
    return [np.asarray(space.sample()) for _ in range(steps)]


# --- bit-identical to the hosted env stepped here ------------------------------------------------


def test_cartpole_entry_point_matches_the_same_vector_env_stepped_in_process(make_sampler):
    sampler = make_sampler(HostedVector("CartPole-v1"), num_envs=N, num_workers=W, seed=7,
                           autoreset_mode="NextStep", infos=False)
    seeds = env_seeds(7, N)
    # CartPoleVectorEnv has one generator per batch: it is seeded with its block's first seed.
    blocks = [cartpole(B) for _ in range(W)]
    expected_obs = np.concatenate([env.reset(seed=seeds[w * B])[0] for w, env in
                                   enumerate(blocks)])
    obs, _ = sampler.reset()
    np.testing.assert_array_equal(obs, expected_obs)
    ends = 0
    for action in actions_for(gym.spaces.MultiDiscrete([2] * N), 300):
        result = sampler.step(action)
        parts = [env.step(action[w * B:(w + 1) * B]) for w, env in enumerate(blocks)]
        for i, name in enumerate(("obs", "rewards", "terminated", "truncated")):
            np.testing.assert_array_equal(getattr(result, name),
                                          np.concatenate([p[i] for p in parts]), err_msg=name)
        ends += int(result.terminated.sum())
    assert ends > 20  # the autoresets were exercised
    for env in blocks:
        env.close()


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_a_hosted_sync_vector_env_matches_it_in_process_with_per_env_seeds(make_sampler, mode):
    sampler = make_sampler(HostedVector(functools.partial(counting_sync, mode=mode)),
                           num_envs=N, num_workers=W, seed=3, autoreset_mode=mode)
    seeds = env_seeds(3, N)
    blocks = [counting_sync(B, mode) for _ in range(W)]
    for w, env in enumerate(blocks):
        env.reset(seed=seeds[w * B:(w + 1) * B])  # the block's per-env seeds, as a list
    sampler.reset()
    compared = 0
    for action in actions_for(gym.spaces.MultiDiscrete([4] * N), 40):
        result = sampler.step(action)
        for w, env in enumerate(blocks):
            rows = slice(w * B, (w + 1) * B)
            obs, rewards, terminated, truncated, infos = env.step(action[rows])
            np.testing.assert_array_equal(result.obs[rows], obs)
            np.testing.assert_array_equal(result.rewards[rows], rewards)
            np.testing.assert_array_equal(result.terminated[rows], terminated)
            np.testing.assert_array_equal(result.truncated[rows], truncated)
            noises = _noises(infos, B)
            got = [result.infos.get(w * B + j, {}).get("noise") for j in range(B)]
            assert got == noises  # drawn from each env's own seeded generator
            compared += sum(x is not None for x in noises)
            if mode == "SameStep":
                ended = np.flatnonzero(infos.get("_final_obs", np.zeros(B, bool)))
                np.testing.assert_array_equal(np.flatnonzero(result.has_final_obs[rows]), ended)
                for j in ended:
                    np.testing.assert_array_equal(result.final_obs[w * B + j],
                                                  infos["final_obs"][j])
    assert compared > N * 20
    for env in blocks:
        env.close()


def _noises(infos: dict[str, Any], count: int) -> list[float | None]:
    """Each env's info ``noise`` of one vector step (a SameStep end's is in final_info)."""
    out: list[float | None] = [None] * count
    for part in (infos, infos.get("final_info", {})):
        for j in np.flatnonzero(part.get("_noise", np.zeros(count, bool))):
            out[j] = float(part["noise"][j])
    return out


# --- hosting changes nothing: the same envs in the bare loop -------------------------------------


def _trajectory(sampler: VecSampler, steps: int) -> list[tuple[Any, ...]]:
    obs, reset_infos = sampler.reset(seed=11)
    out: list[tuple[Any, ...]] = [(obs.copy(), reset_infos)]
    for action in actions_for(sampler.single_action_space, steps):
        r = sampler.step(np.full(sampler.num_envs, action), copy=True)
        final = np.where(r.has_final_obs[:, None], r.final_obs, 0.0)
        out.append((r.obs, r.rewards, r.terminated, r.truncated, r.has_final_obs, final,
                    r.infos, r.reset_infos))
    return out


def assert_same_trajectories(bare: VecSampler, hosted: VecSampler, steps: int) -> None:
    """``_trajectory`` of both samplers, equal step by step (arrays and info maps)."""
    expected, got = _trajectory(bare, steps), _trajectory(hosted, steps)
    for k, (a, b) in enumerate(zip(expected, got, strict=True)):
        for x, y in zip(a, b, strict=True):
            if isinstance(x, np.ndarray):
                np.testing.assert_array_equal(y, x, err_msg=f"step {k}")
            else:
                assert y == x, f"step {k}"


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_a_hosted_sync_vector_env_steps_exactly_like_the_bare_loop(make_sampler, mode):
    bare = make_sampler([functools.partial(CountingEnv, length=7, info=True)] * N,
                        num_workers=2 * W, autoreset_mode=mode)  # another split: same data
    hosted = make_sampler(HostedVector(functools.partial(counting_sync, mode=mode)),
                          num_envs=N, num_workers=W, autoreset_mode=mode)
    assert_same_trajectories(bare, hosted, 20)


def test_a_partial_reset_of_a_hosted_sync_vector_env_resets_only_the_masked_rows(make_sampler):
    sampler = make_sampler(HostedVector(counting_sync), num_envs=N, num_workers=W,
                           autoreset_mode="NextStep")
    sampler.reset(seed=0)
    sampler.step(np.ones(N, dtype=np.int64))
    mask = np.zeros(N, dtype=bool)
    mask[[1, B + 2]] = True
    obs, infos = sampler.reset(mask=mask)
    assert obs[:, 1].tolist() == [0.0 if m else 1.0 for m in mask]  # t: back to 0 where reset
    assert [bool(info) for info in infos] == mask.tolist()  # episode_index, reset rows only


# --- failures, restarts, refusals ----------------------------------------------------------------


def test_a_hosted_env_that_raises_is_a_worker_error_naming_the_worker(make_sampler):
    sampler = make_sampler(HostedVector(raising_sync), num_envs=N, num_workers=W,
                           autoreset_mode="NextStep")
    sampler.reset(seed=0)
    actions = np.zeros(B, dtype=np.int64)
    for _ in range(2):
        sampler.step_send(1, actions)
        sampler.step_recv(None)
    sampler.step_send(1, actions)
    with pytest.raises(errors.WorkerError) as info:
        sampler.step_recv(None)
    assert (info.value.worker, info.value.env, info.value.exc_type) == (1, None, "RuntimeError")
    assert str(info.value).startswith("worker 1 raised RuntimeError during STEP")
    assert "injected failure in step 3" in info.value.remote_traceback


class ListInfos(gym.vector.VectorWrapper):
    """Its ``where`` ("step" or "reset") returns the vector infos in a list."""

    def __init__(self, env: gym.vector.VectorEnv, where: str) -> None:
        super().__init__(env)
        self.where = where

    def reset(self, **kwargs: Any) -> Any:
        obs, infos = self.env.reset(**kwargs)
        return obs, [infos] if self.where == "reset" else infos

    def step(self, actions: Any) -> Any:
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        return obs, rewards, terminated, truncated, [infos] if self.where == "step" else infos


@pytest.mark.parametrize("where", ["step", "reset"])
def test_hosted_infos_that_are_not_a_dict_are_an_env_output_error(make_sampler, where):
    """Issue 33, item 6, for the hosted block: AttributeError ('list' object has no attribute
    'items') before."""
    sampler = make_sampler(HostedVector(lambda n: ListInfos(counting_sync(n), where)),
                           num_envs=N, num_workers=W, autoreset_mode="NextStep", context="fork")
    with pytest.raises(errors.WorkerError, match=f"raised EnvOutputError during "
                       f"{where.upper()}: the hosted vector env's {where}\\(\\) returned infos "
                       f"as a list .*expected a dict") as info:
        sampler.reset(seed=0)
        sampler.step(np.zeros(N, dtype=np.int64))
    assert info.value.exc_type == "EnvOutputError"


def test_a_hosted_worker_that_raises_restarts_reseeded_and_flagged(make_sampler):
    sampler = make_sampler(HostedVector(raising_sync), num_envs=N, num_workers=W,
                           restart=True, seed=0, autoreset_mode="NextStep")
    sampler.reset()
    actions = np.zeros(N, dtype=np.int64)
    for _ in range(2):
        assert not sampler.step(actions).restarted.any()
    result = sampler.step(actions)  # both hosted envs raise at their third step
    assert result.restarted.all() and result.truncated.all()
    assert result.obs[:, 1].tolist() == [0.0] * N  # rebuilt and reset
    assert len(sampler.restart_log) == W


def test_an_autoreset_mode_the_hosted_env_does_not_have_is_refused_at_construction():
    with pytest.raises(errors.AutoresetMismatchError, match="pass autoreset_mode='NextStep'"):
        VecSampler(HostedVector("CartPole-v1"), num_envs=4, num_workers=1,
                   autoreset_mode="SameStep")


def test_disabled_with_a_hosted_env_of_another_mode_is_an_autoreset_mismatch():
    with pytest.raises(errors.AutoresetMismatchError, match="pass autoreset_mode='NextStep'"):
        VecSampler(HostedVector("CartPole-v1"), num_envs=4, num_workers=1,
                   autoreset_mode="Disabled")


def test_a_partial_reset_is_refused_by_an_env_that_cannot_reset_part_of_its_batch(
        make_sampler):
    sampler = make_sampler(HostedVector("CartPole-v1"), num_envs=4, num_workers=1,
                           autoreset_mode="NextStep")
    sampler.reset(seed=0)
    with pytest.raises(errors.WorkerError, match=r"HostedEnvError.*cannot reset part"):
        sampler.reset(mask=np.array([True, False, True, True]))


def test_hosted_spaces_and_arguments_are_checked():
    with pytest.raises(errors.ConfigError, match="num_envs"):
        VecSampler(HostedVector("CartPole-v1"))
    with pytest.raises(errors.HostedEnvError, match="vectorization_mode='async'"):
        HostedVector("CartPole-v1", "async")
    with pytest.raises(errors.EnvFactoryError, match="make\\(1\\) raised"):
        VecSampler(HostedVector("NoSuchEnv-v0"), num_envs=2)


def test_make_vec_hosts_the_entry_point_under_forkserver_with_a_lambda(make_vector_env):
    env = make_vector_env(HostedVector(lambda n: cartpole(n)), 2, num_envs=8,
                          context="forkserver")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (8, 4) and env.metadata["autoreset_mode"].value == "NextStep"
    assert env.step(np.ones(8, dtype=np.int64))[1].tolist() == [1.0] * 8
    made = vecsample.make_vec("CartPole-v1", 8, 2, vectorization_mode="vector_entry_point")
    try:
        assert made.reset(seed=0)[0].shape == (8, 4)
    finally:
        made.close()


def test_make_vec_hosting_sync_vector_envs_returns_what_one_sync_vector_env_returns(
        make_vector_env):
    ours = make_vector_env(HostedVector("CartPole-v1", "sync", num_envs=N), W)
    theirs = gym.make_vec("CartPole-v1", num_envs=N, vectorization_mode="sync")
    try:
        np.testing.assert_array_equal(ours.reset(seed=5)[0], theirs.reset(seed=5)[0])
        for action in actions_for(ours.action_space, 120):
            a, b = ours.step(action), theirs.step(action)
            for x, y, name in zip(a[:4], b[:4], ("obs", "rewards", "terminated", "truncated"),
                                  strict=True):
                np.testing.assert_array_equal(x, y, err_msg=name)
            assert a[4].keys() == b[4].keys()
    finally:
        theirs.close()


# --- reset_task: one task per env of the block ---------------------------------------------------


class TaskVectorEnv(gym.vector.VectorEnv):  # type: ignore[type-arg]
    """A batch-native task env: observation ``[task, t]``, reward ``task * action``; it takes one
    task per env of its batch through ``reset_task(tasks)`` (the hosted contract)."""

    def __init__(self, num_envs: int) -> None:
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}
        self.num_envs = num_envs
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)
        self.single_action_space = gym.spaces.Discrete(3)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space,
                                                              num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.tasks = np.zeros(num_envs)
        self.t = np.zeros(num_envs)

    def reset_task(self, tasks: list[float]) -> None:
        assert len(tasks) == self.num_envs
        self.tasks = np.asarray(tasks, dtype=np.float64)

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        self.t[:] = 0
        return np.stack([self.tasks, self.t], axis=1), {}

    def step(self, actions: Any) -> tuple[Any, ...]:
        self.t += 1
        no = np.zeros(self.num_envs, dtype=bool)
        return (np.stack([self.tasks, self.t], axis=1), self.tasks * actions, no, no.copy(), {})


def test_each_env_of_a_batch_native_hosted_env_gets_its_own_task(make_sampler):
    sampler = make_sampler(HostedVector(TaskVectorEnv), num_envs=N, num_workers=W,
                           autoreset_mode="NextStep")
    tasks = [0.5 * (i + 1) for i in range(N)]
    sampler.reset_task(tasks)
    obs, _ = sampler.reset(seed=0)
    assert obs[:, 0].tolist() == tasks
    actions = np.arange(N) % 3
    result = sampler.step(actions)
    np.testing.assert_array_equal(result.rewards, np.asarray(tasks) * actions)
    sampler.reset_task(tasks[::-1])  # new tasks, from the next reset on
    assert sampler.reset()[0][:, 0].tolist() == tasks[::-1]


def _navigation_tasks(count: int) -> list[dict[str, np.ndarray]]:
    import vecsample.envs  # noqa: F401  # registers 2DNavigation-v0

    env = gym.make("2DNavigation-v0")
    try:
        env.reset(seed=5)
        tasks: list[dict[str, np.ndarray]] = env.unwrapped.sample_tasks(count)  # type: ignore
        return tasks
    finally:
        env.close()


def test_a_hosted_sync_vector_env_of_task_envs_matches_single_envs_with_the_same_tasks(
        make_sampler):
    tasks = _navigation_tasks(N)
    plain = make_sampler("2DNavigation-v0", num_envs=N, num_workers=W, seed=3)
    hosted = make_sampler(HostedVector("2DNavigation-v0", "sync"), num_envs=N, num_workers=W,
                          seed=3)
    for sampler in (plain, hosted):
        sampler.reset_task(tasks)
    np.testing.assert_array_equal(hosted.reset()[0], plain.reset()[0])
    space = gym.vector.utils.batch_space(plain.single_action_space, N)
    ends = 0
    for k, action in enumerate(actions_for(space, 120)):
        a, b = plain.step(action), hosted.step(action)
        for name in ("obs", "rewards", "terminated", "truncated", "has_final_obs", "final_obs"):
            np.testing.assert_array_equal(getattr(b, name), getattr(a, name),
                                          err_msg=f"{name} at step {k}")
        ends += int(b.has_final_obs.sum())
    assert ends >= N  # the 100-step time limit ended every episode at least once
    infos = hosted.step(action).infos
    got = [infos[i]["task"]["goal"] for i in range(N)]
    np.testing.assert_array_equal(got, [t["goal"] for t in tasks])


@pytest.mark.parametrize(("make", "name"), [(cartpole, "CartPoleVectorEnv"),
                                            (counting_sync, "CountingEnv")])
def test_reset_task_without_the_method_is_refused_before_anything_is_sent(
        make_sampler, make: Callable[[int], gym.vector.VectorEnv], name: str):
    sampler = make_sampler(HostedVector(make), num_envs=4, num_workers=1,
                           autoreset_mode="NextStep")
    with pytest.raises(errors.HostedMethodError, match=rf"{name} has no reset_task") as info:
        sampler.reset_task([None] * 4)
    assert (info.value.feature, info.value.env) == ("reset_task", name)
    sampler.reset(seed=0)  # the worker is still fine
    assert sampler.get_attr("num_envs") == [4] * 4  # the hosted env's own attribute, per row


# --- set_attr: one value per env of the block ----------------------------------------------------


def test_set_attr_of_a_hosted_sync_vector_env_sets_each_env_as_the_bare_loop_does(make_sampler):
    bare = make_sampler([functools.partial(CountingEnv, length=7, info=True)] * N,
                        num_workers=2 * W, autoreset_mode="NextStep")
    hosted = make_sampler(HostedVector(counting_sync), num_envs=N, num_workers=W,
                          autoreset_mode="NextStep")
    lengths = [2 + i % 5 for i in range(N)]
    for sampler in (bare, hosted):
        sampler.set_attr("length", lengths)
    assert hosted.get_attr("num_envs") == [B] * N  # per block, as before
    assert_same_trajectories(bare, hosted, 20)
    hosted.set_attr("length", 3)  # one value for every env
    hosted.reset(seed=0)
    ends = [hosted.step(np.ones(N, dtype=np.int64)).terminated.all() for _ in range(3)]
    assert ends == [False, False, True]


def test_set_attr_without_the_method_is_refused_before_anything_is_sent(make_sampler):
    sampler = make_sampler(HostedVector(cartpole), num_envs=4, num_workers=2,
                           autoreset_mode="NextStep")
    with pytest.raises(errors.HostedMethodError, match="CartPoleVectorEnv has no set_attr"):
        sampler.set_attr("length", [1, 2, 3, 4])
    assert sampler.reset(seed=0)[0].shape == (4, 4)  # the workers are still fine


# --- Disabled: ended envs are reset by mask ------------------------------------------------------


#: Which envs a Disabled run resets by mask after step t (all False: none).
ResetPolicy = Callable[[int, np.ndarray], np.ndarray]


def _run_with_resets(sampler: VecSampler, lengths: list[int], steps: int,
                     resets: ResetPolicy) -> list[Any]:
    """Steps ``steps`` times under Disabled; after step t resets by mask the envs that
    ``resets(t, ended)`` names. Returns everything the sampler gave, in order."""
    sampler.set_attr("length", lengths)
    out: list[Any] = list(sampler.reset(seed=4))
    for t, action in enumerate(actions_for(gym.spaces.MultiDiscrete([4] * N), steps)):
        r = sampler.step(action, copy=True)
        out += [r.obs, r.rewards, r.terminated, r.truncated, r.infos]
        mask = resets(t, r.terminated | r.truncated)
        if mask.any():
            obs, infos = sampler.reset(mask=mask)
            out += [obs.copy(), infos, mask]
    return out


def _disabled_run(sampler: VecSampler, lengths: list[int], steps: int) -> list[Any]:
    """Resets the envs that ended by mask after each step."""
    return _run_with_resets(sampler, lengths, steps, lambda t, ended: ended)


def test_disabled_hosted_sync_vector_env_steps_like_the_bare_loop_with_resets_by_mask(
        make_sampler):
    bare = make_sampler([functools.partial(CountingEnv, info=True)] * N, num_workers=2 * W,
                        autoreset_mode="Disabled")
    hosted = make_sampler(HostedVector(functools.partial(counting_sync, mode="Disabled")),
                          num_envs=N, num_workers=W, autoreset_mode="Disabled")
    lengths = [2 + i % 5 for i in range(N)]  # episodes end at different steps: partial resets
    expected, got = _disabled_run(bare, lengths, 30), _disabled_run(hosted, lengths, 30)
    assert len(got) == len(expected)
    for k, (x, y) in enumerate(zip(expected, got, strict=True)):
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(y, x, err_msg=f"item {k}")
        else:
            assert y == x, f"item {k}"
    assert sum(1 for x in expected if isinstance(x, np.ndarray) and x.dtype == bool
               and 0 < x.sum() < N) > 5  # several partial resets were compared


def test_a_hosted_disabled_block_with_an_ended_env_is_refused_before_it_steps(make_sampler):
    sampler = make_sampler(HostedVector(functools.partial(counting_sync, mode="Disabled")),
                           num_envs=4, num_workers=2, autoreset_mode="Disabled")
    sampler.set_attr("length", [1, 5, 5, 5])
    sampler.reset(seed=0)
    assert sampler.step(np.ones(4, dtype=np.int64)).terminated.tolist() == [
        True, False, False, False]
    with pytest.raises(errors.HostedEnvError, match=r"envs \[0\] ended .* reset\(mask=") as info:
        sampler.step(np.ones(4, dtype=np.int64))
    assert info.value.feature == "autoreset_mode='Disabled'"
    sampler.step_send(1, np.ones(2, dtype=np.int64))  # the other block steps on
    assert sampler.step_recv(None)[0].obs[:, 1].tolist() == [2.0, 2.0]
    with pytest.raises(errors.HostedEnvError, match=r"envs \[0\] ended"):
        sampler.step_send(0, np.ones(2, dtype=np.int64))
    sampler.reset(mask=np.array([True, False, False, False]))
    assert sampler.step(np.ones(4, dtype=np.int64)).obs[:, 1].tolist() == [1.0, 2.0, 3.0, 3.0]


class FreezingCounting(gym.vector.VectorEnv):
    """``num_envs`` CountingEnvs (with infos) under Disabled that declare
    ``freezes_ended_envs`` and ``supports_reset_mask`` in their metadata: a step steps only the
    envs not ended since their reset, and returns junk for the others (NaN observations, reward
    99, terminated False and truncated True, an info), which the hosted block must not write:
    what a frozen row shows is the block's."""

    def __init__(self, num_envs: int) -> None:
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.DISABLED,
                         "freezes_ended_envs": True, "supports_reset_mask": True}
        self.num_envs = num_envs
        self.envs = [CountingEnv(info=True) for _ in range(num_envs)]
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space,
                                                              num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.ended = np.zeros(num_envs, dtype=bool)
        self.obs = np.zeros((num_envs, 4))

    def set_attr(self, name: str, values: list[Any]) -> None:
        for env, value in zip(self.envs, values, strict=True):
            setattr(env, name, value)

    def reset(self, *, seed: list[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        mask = (options or {}).get("reset_mask", np.ones(self.num_envs, dtype=bool))
        seeds = [None] * self.num_envs if seed is None else seed
        infos: dict[str, Any] = {}
        for i in np.flatnonzero(mask).tolist():
            self.obs[i], info = self.envs[i].reset(seed=seeds[i])
            self.ended[i] = False
            infos = self._add_info(infos, info, i)
        return self.obs.copy(), infos

    def step(self, actions: Any) -> tuple[Any, ...]:
        n, infos = self.num_envs, {}
        obs, rewards = np.full((n, 4), np.nan), np.full(n, 99.0)
        terminated, truncated = np.zeros(n, dtype=bool), np.ones(n, dtype=bool)
        for i in range(n):
            if self.ended[i]:
                infos = self._add_info(infos, {"junk": 1}, i)
                continue
            obs[i], rewards[i], terminated[i], truncated[i], info = self.envs[i].step(
                actions[i])
            self.obs[i] = obs[i]  # what a reset of other envs returns for this one
            infos = self._add_info(infos, info, i)
        self.ended |= terminated | truncated
        return obs, rewards, terminated, truncated, infos


def _frozen_run(sampler: VecSampler, lengths: list[int], steps: int) -> list[Any]:
    """Leaves ended envs frozen; at mid-way resets the ended envs of even index by mask."""
    even = np.arange(N) % 2 == 0
    return _run_with_resets(sampler, lengths, steps,
                            lambda t, ended: ended & even & (t == steps // 2))


def test_a_hosted_env_that_freezes_ended_rows_steps_like_the_bare_loop_with_frozen_envs(
        make_sampler):
    bare = make_sampler([functools.partial(CountingEnv, info=True)] * N, num_workers=2 * W,
                        autoreset_mode="Disabled")
    hosted = make_sampler(HostedVector(FreezingCounting), num_envs=N, num_workers=W,
                          autoreset_mode="Disabled")
    lengths = [2 + i % 5 for i in range(N)]  # episodes end at different steps, then freeze
    expected, got = _frozen_run(bare, lengths, 14), _frozen_run(hosted, lengths, 14)
    for k, (x, y) in enumerate(zip(expected, got, strict=True)):
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(y, x, err_msg=f"item {k}")
        else:
            assert y == x, f"item {k}"
    steps = [expected[2 + 5 * t: 7 + 5 * t] for t in range(7)]  # those before the reset
    frozen = sum(int((a[2] | a[3]).sum()) for a in steps[:-1])  # rows frozen at the next step
    assert frozen > N  # many frozen rows were compared


def test_the_keywords_are_gymnasiums_names_only():
    """``env_kwargs=``/``vectorization_mode=`` (the names gymnasium and VecSampler use), with no
    alias: nothing was released under ``kwargs=``/``vectorization=``."""
    hosted = HostedVector("CartPole-v1", vectorization_mode="sync",
                          env_kwargs={"max_episode_steps": 9})
    assert hosted == HostedVector("CartPole-v1", "sync", {"max_episode_steps": 9})
    assert not hasattr(hosted, "kwargs") and not hasattr(hosted, "vectorization")
    with pytest.raises(TypeError, match="kwargs"):
        HostedVector("CartPole-v1", kwargs={"max_episode_steps": 9})
    # make_vec passes an unknown keyword on to VectorEnv, which refuses it before any process
    # starts: it names no Options field.
    with pytest.raises(errors.ConfigError, match="got 'vectorization'"):
        vecsample.make_vec("CartPole-v1", 4, 1, vectorization="sync")


@pytest.mark.parametrize("mode", ["SameStep", "NextStep", "Disabled"])
def test_the_samplers_autoreset_mode_is_given_to_a_hosted_env_once(make_sampler, mode):
    """``VecSampler(HostedVector(batch id), autoreset_mode=m)`` builds the batch env in ``m``:
    the mode is written once (it was needed in env_kwargs too, else AutoresetMismatchError)."""
    pytest.importorskip("mujoco")
    s = make_sampler(HostedVector("HalfCheetahBatch-v5"), num_envs=4, num_workers=2,
                     autoreset_mode=mode)
    assert s.call("metadata")[0]["autoreset_mode"].value == mode
    named = HostedVector("HalfCheetahBatch-v5", env_kwargs={"autoreset_mode": "NextStep"})
    if mode != "NextStep":  # a mode named in env_kwargs is the user's: checked, not replaced
        with pytest.raises(errors.AutoresetMismatchError):
            VecSampler(named, num_envs=4, num_workers=2, autoreset_mode=mode)
    with pytest.raises(errors.AutoresetMismatchError):  # CartPole's entry point takes no mode
        VecSampler(HostedVector("CartPole-v1"), num_envs=4, num_workers=2,
                   autoreset_mode="SameStep")
