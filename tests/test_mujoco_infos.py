"""The infos of the batch-native MuJoCo envs, hosted: columns end to end, built when read.

A hosted batch env writes its info columns straight into the shared columns, and the parent
builds gymnasium's vector infos from the columns only when they are read (issue 41, item 1).
These tests hold the result to what gymnasium returns for the same envs, key for key and mask
for mask, ``final_obs`` and ``final_info`` included, in every autoreset mode and for every one
of the 11 gymnasium envs; and to what VecSampler returns per env over gymnasium's single envs.
"""

from __future__ import annotations

import copy
import functools
import pickle
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import helpers
import numpy as np
import pytest

import vecsample.envs  # noqa: F401  # registers the batch ids
from vecsample import HostedVector, VecSampler
from vecsample.adapters import vector_infos
from vecsample.adapters.vector_infos import LazyInfos
from vecsample.envs.mujoco_batch import ENVS

pytest.importorskip("mujoco")

Mode = gym.vector.AutoresetMode
#: The 11 gymnasium MuJoCo envs (the table's first rows; the task envs follow them).
GYM = [spec for spec in ENVS if not spec.gym_id.startswith(("HalfCheetahV", "HalfCheetahD",
                                                               "AntV", "AntD", "AntP"))]
N, W, LIMIT, STEPS = 4, 2, 7, 24
#: A reset of env 0 alone: its episodes end apart from the others' (rows present in some envs
#: only, and partial resets, are compared too).
DESYNC = np.array([True, False, False, False])


def test_the_eleven_gymnasium_envs_are_all_here():
    assert len(GYM) == 11 and len({s.gym_id for s in GYM}) == 11


def _gymnasium(gym_id: str, mode: Mode) -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv([functools.partial(
        gym.make, gym_id, max_episode_steps=LIMIT)] * N, autoreset_mode=mode)


def _run(env: gym.vector.VectorEnv, mode: Mode, seed: int = 3) -> list[Any]:
    """Everything ``env`` returns over ``STEPS`` steps of fixed random actions (under
    Disabled, ended envs are reset by mask after each step, as its users do)."""
    out: list[Any] = [env.reset(seed=seed)]
    space = env.single_action_space
    rng = np.random.default_rng(seed)
    for t in range(STEPS):
        actions = rng.uniform(space.low, space.high, (N, *space.shape)).astype(space.dtype)
        step = env.step(actions)
        out.append(step)
        ended = step[2] | step[3]
        if mode is Mode.DISABLED and ended.any():
            out.append(env.reset(options={"reset_mask": ended}))
        if t == 2:  # env 0's episodes end apart from the others' from now on
            out.append(env.reset(options={"reset_mask": DESYNC.copy()}))
    return out


def _assert_same_runs(got: list[Any], expected: list[Any]) -> None:
    assert len(got) == len(expected)
    for t, (a, b) in enumerate(zip(got, expected, strict=True)):
        helpers.assert_same(a, b, f"call {t}", strict=True)
    ends = sum(int(np.sum(x[2] | x[3])) for x in expected if len(x) == 5)
    assert ends >= N  # episodes ended, with their final infos (SameStep) or resets, compared


@pytest.mark.parametrize("spec", GYM, ids=[s.gym_id for s in GYM])
@pytest.mark.parametrize("mode", list(Mode), ids=lambda m: m.value)
def test_vector_env_infos_of_a_hosted_batch_env_equal_gymnasiums(make_vector_env, spec, mode):
    """VectorEnv over HostedVector(batch id), its blocks stepped by the worker's own code in
    this process (two blocks: the columns of two workers are joined), against gymnasium's
    SyncVectorEnv of the same envs: the same keys, masks, dtypes and values, to the bit."""
    hosted = make_vector_env(HostedVector(spec.batch_id, env_kwargs={"max_episode_steps": LIMIT}),
                             num_envs=N, num_workers=W, autoreset_mode=mode.value,
                             env_placement="parent")
    theirs = _gymnasium(spec.gym_id, mode)
    try:
        _assert_same_runs(_run(hosted, mode), _run(theirs, mode))
    finally:
        theirs.close()


@pytest.mark.parametrize("mode", list(Mode), ids=lambda m: m.value)
def test_vector_env_infos_equal_gymnasiums_across_worker_processes(make_vector_env, mode):
    """The same through two worker processes: the columns cross shared memory."""
    batch = HostedVector("HopperBatch-v5", env_kwargs={"max_episode_steps": LIMIT})
    hosted = make_vector_env(batch, num_envs=N, num_workers=W, autoreset_mode=mode.value)
    theirs = _gymnasium("Hopper-v5", mode)
    try:
        _assert_same_runs(_run(hosted, mode), _run(theirs, mode))
    finally:
        theirs.close()


def _sampled(sampler: VecSampler, mode: Mode, seed: int = 5) -> list[Any]:
    """Every env's infos and reset infos (by env id, per-env dicts) over ``STEPS`` steps."""
    _, infos = sampler.reset(seed=seed)
    out: list[Any] = [infos]
    space = sampler.single_action_space
    rng = np.random.default_rng(seed)
    for t in range(STEPS):
        actions = rng.uniform(space.low, space.high, (N, *space.shape)).astype(space.dtype)
        r = sampler.step(actions, copy=True)
        final = np.where(r.has_final_obs[:, None], r.final_obs, 0.0)
        out.append((dict(r.infos), dict(r.reset_infos), final, r.terminated, r.truncated))
        ended = r.terminated | r.truncated
        if mode is Mode.DISABLED and ended.any() and t % 3 == 2:  # frozen until then
            out.append(sampler.reset(mask=ended)[1])
        if t == 2:
            out.append(sampler.reset(mask=DESYNC)[1])
    return out


def _assert_same_per_env(got: Any, expected: Any, where: str) -> None:
    """Per-env infos: the same envs and keys, equal values (a single env's Python float is a
    batch env's numpy float64, as VecSampler returned them before)."""
    if isinstance(expected, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(expected), (
            f"{where}: {sorted(got)} != {sorted(expected)}")
        for key in expected:
            _assert_same_per_env(got[key], expected[key], f"{where}/{key}")
    elif isinstance(expected, list | tuple):
        assert len(got) == len(expected), where
        for i, (x, y) in enumerate(zip(got, expected, strict=True)):
            _assert_same_per_env(x, y, f"{where}/{i}")
    else:
        np.testing.assert_array_equal(got, expected, err_msg=where)


@pytest.mark.parametrize("spec", GYM, ids=[s.gym_id for s in GYM])
@pytest.mark.parametrize("mode", list(Mode), ids=lambda m: m.value)
def test_sampler_infos_of_a_hosted_batch_env_equal_those_of_gymnasiums_envs(make_sampler, spec,
                                                                             mode):
    """VecSampler(HostedVector(batch id)) returns per env what VecSampler(gym id) returns:
    each env's step infos, the infos of its autoresets and its final observation."""
    limit = {"max_episode_steps": LIMIT}
    bare = make_sampler(spec.gym_id, num_envs=N, num_workers=W, env_kwargs=limit,
                        autoreset_mode=mode.value, env_placement="parent")
    hosted = make_sampler(HostedVector(spec.batch_id, env_kwargs=limit), num_envs=N,
                          num_workers=W, autoreset_mode=mode.value, env_placement="parent")
    expected = _sampled(bare, mode)
    _assert_same_per_env(_sampled(hosted, mode), expected, spec.gym_id)
    ends = sum(int(np.sum(step[3] | step[4])) for step in expected if isinstance(step, tuple))
    assert ends >= N  # episodes ended: final observations and reset infos were compared


# --- built when read -----------------------------------------------------------------------------


def test_vector_env_builds_a_steps_infos_once_as_the_plain_dict_gymnasium_returns(
        make_vector_env, monkeypatch):
    """VectorEnv's infos are a plain dict, as gymnasium's (its vector tests compare types: a
    dict filled when first read failed 9 of them), built once a step from the columns."""
    built: list[int] = []
    build = vector_infos.build

    def counting(*args: Any) -> Any:
        built.append(1)
        return build(*args)

    monkeypatch.setattr(vector_infos, "build", counting)
    env = make_vector_env(HostedVector("HopperBatch-v5", env_kwargs={"max_episode_steps": 3}),
                          num_envs=N, num_workers=W, autoreset_mode="SameStep",
                          env_placement="parent")
    env.reset(seed=0)
    steps = [env.step(env.action_space.sample()) for _ in range(7)]
    assert built == [1] * 7  # one build a step
    infos = steps[2][4]  # the step at the time limit: every env ended, with final infos
    assert type(infos) is dict and infos["_final_info"].all() and built == [1] * 7
    assert "x_position" in infos["final_info"] and len(infos) > 2


def test_a_hosted_batch_env_hands_its_columns_over_without_building_its_infos(
        make_sampler, monkeypatch):
    """The worker writes the batch env's info columns as they are: the env's vector infos are
    never built on the worker's side (no per-env dict), yet every env's infos arrive."""
    built: list[int] = []
    fill = LazyInfos.built

    def counting(self: LazyInfos) -> LazyInfos:
        built.append(1)
        return fill(self)

    monkeypatch.setattr(LazyInfos, "built", counting)
    for mode in Mode:
        sampler = make_sampler(HostedVector("HopperBatch-v5", env_kwargs={"max_episode_steps": 4}),
                               num_envs=N, num_workers=W, autoreset_mode=mode.value,
                               env_placement="parent")
        sampler.reset(seed=1)
        built.clear()
        for _ in range(3 if mode is Mode.DISABLED else 9):
            r = sampler.step(np.zeros((N, 3), dtype=np.float32))
            assert sorted(r.infos) == [e for e in range(N) if not (
                mode is Mode.NEXT_STEP and e in r.reset_infos)], mode
        assert built == [], mode
        blocks, left = r.infos.columnar()
        assert blocks and not left, mode  # every key in a shared column, none pickled


def test_a_batch_envs_own_infos_are_built_when_read():
    env = gym.make_vec("HopperBatch-v5", N, vectorization_mode="vector_entry_point",
                       autoreset_mode="SameStep", max_episode_steps=2, num_threads=1)
    try:
        env.reset(seed=0)
        env.step(env.action_space.sample())
        infos = env.step(env.action_space.sample())[4]
        assert type(infos) is LazyInfos and infos.columns is not None
        assert infos["_final_obs"].all() and infos.columns is None  # read: built, once
    finally:
        env.close()


def test_lazy_infos_behave_as_the_dict_they_build():
    made: list[int] = []
    # The same arrays in every build: == compares them by identity (as dicts do) first.
    expected = {"a": np.arange(3.0), "_a": np.ones(3, dtype=bool), "n": {"b": np.zeros(3)}}

    def build() -> dict[str, Any]:
        made.append(1)
        return dict(expected)

    lazy = [LazyInfos(build) for _ in range(13)]
    readers: list[Callable[[LazyInfos], Any]] = [
        dict, lambda x: {**x}, lambda x: pickle.loads(pickle.dumps(x)), copy.deepcopy,
        copy.copy, lambda x: sorted(x), lambda x: list(x.items()), lambda x: len(x),
        lambda x: "a" in x, lambda x: x.get("a"), lambda x: (lambda **kw: kw)(**x), repr,
        lambda x: x == expected]
    for infos, read in zip(lazy, readers, strict=True):
        assert isinstance(infos, dict)
        read(infos)
    assert len(made) == 13  # each read the built dict, once
    for infos in lazy:
        helpers.assert_same(dict(infos), expected)
        assert infos == expected and expected == infos and len(made) == 13
    helpers.assert_same(copy.deepcopy(lazy[0]), expected)
    helpers.assert_same(pickle.loads(pickle.dumps(lazy[1])), expected)
    lazy[2]["c"] = 1  # a change is made to the built dict, never lost to a later build
    assert sorted(lazy[2]) == ["_a", "a", "c", "n"] and len(made) == 13
