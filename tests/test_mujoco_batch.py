"""The batch-native MuJoCo envs (vecsample/envs/mujoco_batch) against gymnasium's own envs.

The equality tests step a batch env and gymnasium's ``SyncVectorEnv`` of ``gymnasium.make(id)``
envs side by side, with the same seeds and actions, and require the same observations, rewards,
terminations, truncations and infos (keys, masks, dtypes and values) bit for bit at every step,
over several episodes: short time limits make every env truncate and autoreset a few times, and
the envs that can fall (Hopper, Walker2d, Ant, Humanoid) terminate too.
"""

from __future__ import annotations

import copy
import functools
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import helpers
import numpy as np
import pytest

import vecsample.envs  # registers the batch ids
from vecsample import HostedVector, VecSampler
from vecsample.envs.mujoco_batch import ENVS, batch_id_for
from vecsample.envs.mujoco_batch.arrays import scalar_square
from vecsample.envs.mujoco_batch.errors import (
    BatchActionError,
    RefusedKeywordError,
    SeedCountError,
    TaskCountError,
    UnknownKeywordError,
)

pytest.importorskip("mujoco")

Mode = gym.vector.AutoresetMode
N = 3


@pytest.fixture
def make_pair() -> Iterator[Callable[..., tuple[gym.vector.VectorEnv, gym.vector.VectorEnv]]]:
    """``make_pair(batch_id, gym_id, mode, **kwargs)``: our batch env (its physics on one
    thread unless ``num_threads`` says otherwise) and gymnasium's ``SyncVectorEnv`` of the same
    envs, both closed at teardown."""
    made: list[gym.vector.VectorEnv] = []

    def make(batch_id: str, gym_id: str, mode: Mode = Mode.SAME_STEP, num_envs: int = N,
             num_threads: int = 1, **kwargs: Any) -> tuple[gym.vector.VectorEnv,
                                                            gym.vector.VectorEnv]:
        ours = gym.make_vec(batch_id, num_envs, vectorization_mode="vector_entry_point",
                            autoreset_mode=mode, num_threads=num_threads, **kwargs)
        made.append(ours)
        theirs = gym.vector.SyncVectorEnv([functools.partial(gym.make, gym_id, **kwargs)]
                                          * num_envs, autoreset_mode=mode)
        made.append(theirs)
        return ours, theirs

    yield make
    for env in made:
        env.close()


# --- the comparison ------------------------------------------------------------------------------


def assert_same(got: Any, expected: Any, where: str) -> None:
    """Equal to the bit, dtypes included; infos recursively (keys, masks, object arrays)."""
    helpers.assert_same(got, expected, where, strict=True)


def step_side_by_side(ours: gym.vector.VectorEnv, theirs: gym.vector.VectorEnv, steps: int,
                      seed: int) -> int:
    """Resets both with ``seed`` and steps both ``steps`` times with the same random actions
    (re-seeding every env mid-way with a list of seeds); the number of episode ends seen."""
    assert_same(ours.reset(seed=seed), theirs.reset(seed=seed), "reset")
    space = theirs.action_space
    space.seed(seed)
    ends = 0
    kept: Any = None  # a step's result, and a copy: later steps must not change what it holds
    for t in range(steps):
        if t == steps // 2:
            seeds = [seed * 100 + i for i in range(ours.num_envs)]
            assert_same(ours.reset(seed=seeds), theirs.reset(seed=seeds), f"reset at {t}")
        action = space.sample()
        got, expected = ours.step(action), theirs.step(action)
        assert_same(got, expected, f"step {t}")
        if kept is not None:
            assert_same(kept[0], kept[1], f"step {t - 1}, kept")
        kept = (got, copy.deepcopy(got))
        ends += int(np.sum(expected[2] | expected[3]))
    return ends


# --- every env, default and non-default keywords -------------------------------------------------

CASES = [
    ("HalfCheetahBatch-v5", "HalfCheetah-v5", {}),
    ("HalfCheetahBatch-v5", "HalfCheetah-v5", {
        "forward_reward_weight": 0.7, "ctrl_cost_weight": 0.3, "reset_noise_scale": 0.3,
        "exclude_current_positions_from_observation": False, "frame_skip": 3}),
    ("HopperBatch-v5", "Hopper-v5", {}),
    ("HopperBatch-v5", "Hopper-v5", {
        "healthy_reward": 2, "healthy_z_range": (0.9, 1.5), "healthy_angle_range": (-0.1, 0.1),
        "healthy_state_range": (-5.0, 5.0), "ctrl_cost_weight": 0.01, "reset_noise_scale": 0.05,
        "exclude_current_positions_from_observation": False}),
    ("Walker2dBatch-v5", "Walker2d-v5", {}),
    ("Walker2dBatch-v5", "Walker2d-v5", {
        "terminate_when_unhealthy": False, "healthy_z_range": (1.0, 1.5),
        "forward_reward_weight": 2.0, "reset_noise_scale": 0.02}),
    ("AntBatch-v5", "Ant-v5", {}),
    ("AntBatch-v5", "Ant-v5", {
        "include_cfrc_ext_in_observation": False, "main_body": "torso",
        "contact_force_range": (-0.5, 0.5), "contact_cost_weight": 1e-2,
        "healthy_z_range": (0.4, 0.9), "ctrl_cost_weight": 0.1, "healthy_reward": 0.5,
        "exclude_current_positions_from_observation": False}),
    ("HumanoidBatch-v5", "Humanoid-v5", {}),
    ("HumanoidBatch-v5", "Humanoid-v5", {
        "include_cinert_in_observation": False, "include_cvel_in_observation": False,
        "include_qfrc_actuator_in_observation": False, "contact_cost_range": (-np.inf, 1e-3),
        "contact_cost_weight": 1e-5, "healthy_z_range": (1.1, 1.9), "reset_noise_scale": 0.1,
        "exclude_current_positions_from_observation": False}),
    ("HumanoidStandupBatch-v5", "HumanoidStandup-v5", {}),
    ("HumanoidStandupBatch-v5", "HumanoidStandup-v5", {
        "include_cinert_in_observation": False, "include_cfrc_ext_in_observation": False,
        "impact_cost_range": (-np.inf, 1e-3), "impact_cost_weight": 1e-5,
        "ctrl_cost_weight": 0.2, "uph_cost_weight": 3, "reset_noise_scale": 0.1,
        "exclude_current_positions_from_observation": False}),
    ("SwimmerBatch-v5", "Swimmer-v5", {}),
    ("SwimmerBatch-v5", "Swimmer-v5", {
        "forward_reward_weight": 2.0, "ctrl_cost_weight": 0.1, "reset_noise_scale": 0.3,
        "exclude_current_positions_from_observation": False, "frame_skip": 3}),
    ("InvertedPendulumBatch-v5", "InvertedPendulum-v5", {}),
    ("InvertedPendulumBatch-v5", "InvertedPendulum-v5", {
        "reset_noise_scale": 0.1, "frame_skip": 3}),
    ("InvertedDoublePendulumBatch-v5", "InvertedDoublePendulum-v5", {}),
    ("InvertedDoublePendulumBatch-v5", "InvertedDoublePendulum-v5", {
        "healthy_reward": 3, "reset_noise_scale": 0.3, "frame_skip": 2}),
    ("ReacherBatch-v5", "Reacher-v5", {}),
    ("ReacherBatch-v5", "Reacher-v5", {
        "reward_dist_weight": 0.5, "reward_control_weight": 0.3, "frame_skip": 3}),
    ("PusherBatch-v5", "Pusher-v5", {}),
    ("PusherBatch-v5", "Pusher-v5", {
        "reward_near_weight": 1.0, "reward_dist_weight": 0.7, "reward_control_weight": 0.05,
        "frame_skip": 3}),
]


@pytest.mark.parametrize(("batch_id", "gym_id", "kwargs"), CASES,
                         ids=[f"{c[1]}-{'custom' if c[2] else 'default'}" for c in CASES])
@pytest.mark.parametrize("mode", [Mode.SAME_STEP, Mode.NEXT_STEP], ids=lambda m: m.value)
def test_the_batch_env_equals_gymnasiums_envs_step_by_step(make_pair, batch_id, gym_id,
                                                           kwargs, mode):
    ours, theirs = make_pair(batch_id, gym_id, mode, max_episode_steps=12, **kwargs)
    ends = step_side_by_side(ours, theirs, steps=40, seed=7)
    assert ends >= 2 * N  # every env ended (and autoreset) at least twice


@pytest.mark.parametrize("gym_id", ["HalfCheetah-v5", "Humanoid-v5"])
def test_other_seeds_a_longer_limit_and_three_threads_stay_equal(make_pair, gym_id):
    ours, theirs = make_pair(vecsample.envs.BATCH_IDS[gym_id], gym_id, num_envs=5,
                             num_threads=3, max_episode_steps=30)
    for seed in (0, 123):
        assert step_side_by_side(ours, theirs, steps=70, seed=seed) >= 5


def test_disabled_autoreset_freezes_ended_envs_until_reset_with_a_mask(make_pair):
    ours, theirs = make_pair("HopperBatch-v5", "Hopper-v5", Mode.DISABLED, max_episode_steps=5)
    assert ours.metadata["freezes_ended_envs"] is True  # read through the wrappers
    assert_same(ours.reset(seed=1), theirs.reset(seed=1), "reset")
    action = np.zeros((N, 3), dtype=np.float32)
    for t in range(5):
        last = ours.step(action)
        assert_same(last, theirs.step(action), f"step {t}")
    assert last[3].all()
    frozen = (last[0], np.zeros(N), last[2], last[3], {})  # obs and flags kept, reward 0
    assert_same(ours.step(action + 0.5), frozen, "every env frozen")
    mask = np.array([True, False, True])
    assert_same(ours.reset(options={"reset_mask": mask}),
                theirs.reset(options={"reset_mask": mask.copy()}), "masked reset")
    obs, rewards, terminated, truncated, infos = ours.step(action + 0.5)
    for i in (0, 2):  # stepped as gymnasium's env i, from its masked reset
        single = theirs.envs[i].step(action[i] + 0.5)
        assert_same((obs[i], rewards[i], terminated[i], truncated[i]), single[:4], f"env {i}")
        assert all(infos[f"_{key}"][i] for key in single[4])
    assert_same((obs[1], rewards[1], terminated[1], truncated[1]),
                (last[0][1], 0.0, last[2][1], True), "env 1 still frozen")
    assert not any(mask_[1] for key, mask_ in infos.items() if key.startswith("_"))


def test_the_comparison_sees_a_one_ulp_difference():
    a = np.array([1.0, 2.0])
    with pytest.raises(AssertionError):
        assert_same(a, np.nextafter(a, 3.0), "obs")
    with pytest.raises(AssertionError, match="dtype"):
        assert_same(a.astype(np.float32), a, "obs")
    with pytest.raises(AssertionError, match="keys"):
        assert_same({"x": a, "_x": a > 0}, {"x": a}, "infos")


# --- the spaces, the keywords, the errors --------------------------------------------------------


def test_the_spaces_are_gymnasiums(make_pair):
    for gym_id, batch_id in vecsample.envs.BATCH_IDS.items():
        ours, theirs = make_pair(batch_id, gym_id)
        assert ours.single_observation_space == theirs.single_observation_space, batch_id
        assert ours.single_action_space == theirs.single_action_space, batch_id
        assert ours.metadata["autoreset_mode"] is Mode.SAME_STEP


def test_an_unknown_keyword_is_a_type_error_naming_the_accepted_ones():
    with pytest.raises(UnknownKeywordError, match=r"'use_contact_forces'.*expected one of") as e:
        gym.make_vec("AntBatch-v5", 2, use_contact_forces=True)
    assert isinstance(e.value, TypeError)


def test_rendering_is_refused_with_the_way_to_render():
    with pytest.raises(RefusedKeywordError, match=r"render_mode='rgb_array'.*gymnasium\.make"):
        gym.make_vec("HalfCheetahBatch-v5", 2, render_mode="rgb_array")
    gym.make_vec("HalfCheetahBatch-v5", 2, render_mode=None).close()


def test_each_batch_id_has_the_time_limit_of_the_registration_it_equals():
    for spec in ENVS:
        expected = gym.spec(spec.gym_id).max_episode_steps
        assert spec.max_episode_steps == expected, spec.batch_id
        assert gym.spec(spec.batch_id).max_episode_steps == expected, spec.batch_id


def test_batch_id_for_names_the_batch_id_only_where_every_keyword_is_taken():
    own = {"max_episode_steps": 5, "num_threads": 1, "autoreset_mode": "NextStep",
           "render_mode": None}
    assert batch_id_for("Hopper-v5", {}) == "HopperBatch-v5"
    assert batch_id_for("Hopper-v5", {"healthy_reward": 2.0, **own}) == "HopperBatch-v5"
    assert batch_id_for("Hopper-v5", {"render_mode": "rgb_array"}) is None
    assert batch_id_for("Ant-v5", {"use_contact_forces": True}) is None
    assert batch_id_for("HalfCheetahVel-v5", {"ctrl_cost_weight": 0.5}) is None
    assert batch_id_for("HalfCheetahVel-v5", {"normalization_scale": 2.0}) == (
        "HalfCheetahVelBatch-v5")
    assert batch_id_for("CartPole-v1", {}) is None


def test_a_wrong_number_of_seeds_is_refused_with_the_counts_and_the_fix():
    env = gym.make_vec("HopperBatch-v5", 3)
    try:
        with pytest.raises(SeedCountError, match=r"one seed per env \(3\), got 2; pass an int, "
                           r"None or a list of 3 seeds"):
            env.reset(seed=[1, 2])
    finally:
        env.close()


def test_actions_of_the_wrong_shape_are_refused():
    env = gym.make_vec("HalfCheetahBatch-v5", 2)
    try:
        env.reset(seed=0)
        with pytest.raises(BatchActionError, match=r"shape \(2, 6\).*got \(6,\)"):
            env.step(np.zeros(6, dtype=np.float32))
    finally:
        env.close()


# --- the task envs: one task per env, equal to vecsample's single task envs ---------------------

TASK_IDS = ["HalfCheetahVel-v5", "HalfCheetahDir-v5", "AntVel-v5", "AntDir-v5", "AntPos-v5"]


def sampled_tasks(gym_id: str, count: int, seed: int) -> list[dict[str, Any]]:
    env = gym.make(gym_id)
    try:
        env.reset(seed=seed)
        return env.unwrapped.sample_tasks(count)  # type: ignore[attr-defined,no-any-return]
    finally:
        env.close()


@pytest.mark.parametrize("gym_id", TASK_IDS)
@pytest.mark.parametrize("mode", [Mode.SAME_STEP, Mode.NEXT_STEP], ids=lambda m: m.value)
def test_a_task_batch_env_equals_the_single_task_envs_with_the_same_tasks(make_pair, gym_id,
                                                                          mode):
    batch_id = vecsample.envs.BATCH_IDS[gym_id]
    ours, theirs = make_pair(batch_id, gym_id, mode, max_episode_steps=12,
                             normalization_scale=10.0, reset_noise_scale=0.2)
    tasks = sampled_tasks(gym_id, N, seed=4)
    ours.unwrapped.reset_task(tasks)  # type: ignore[attr-defined]
    for env, task in zip(theirs.envs, tasks, strict=True):
        env.unwrapped.reset_task(task)  # type: ignore[attr-defined]
    assert step_side_by_side(ours, theirs, steps=30, seed=2) >= N
    assert ours.single_action_space == theirs.single_action_space
    assert ours.single_observation_space == theirs.single_observation_space


def test_a_task_batch_env_samples_tasks_as_its_first_single_env_does():
    ours = gym.make_vec("AntPosBatch-v5", 2, low=-1.0, high=1.0)
    theirs = gym.make("AntPos-v5", low=-1.0, high=1.0)
    try:
        ours.reset(seed=8)
        theirs.reset(seed=8)
        got = ours.unwrapped.sample_tasks(4)  # type: ignore[attr-defined]
        expected = theirs.unwrapped.sample_tasks(4)  # type: ignore[attr-defined]
        np.testing.assert_array_equal([t["position"] for t in got],
                                      [t["position"] for t in expected])
    finally:
        ours.close()
        theirs.close()


def test_reset_task_needs_one_task_per_env():
    env = gym.make_vec("HalfCheetahDirBatch-v5", 3)
    try:
        with pytest.raises(TaskCountError, match=r"one task per env \(3\), got 2"):
            env.unwrapped.reset_task([{"direction": 1}] * 2)  # type: ignore[attr-defined]
    finally:
        env.close()


def test_a_reward_keyword_that_the_task_env_ignores_is_refused():
    with pytest.raises(UnknownKeywordError, match="'ctrl_cost_weight'"):
        gym.make_vec("HalfCheetahVelBatch-v5", 2, ctrl_cost_weight=0.5)


# --- hosted in workers: VecSampler(HostedVector(batch id)) ---------------------------------------

HN, HW = 6, 2  # envs and workers of the hosted tests
HB = HN // HW


def sampler_trajectory(sampler: VecSampler, steps: int, seed: int = 0) -> list[tuple[Any, ...]]:
    """Everything a sampler returns over ``steps`` full steps of fixed random actions."""
    obs, reset_infos = sampler.reset(seed=seed)
    out: list[tuple[Any, ...]] = [(obs.copy(), reset_infos)]
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        actions = rng.uniform(-1, 1, (sampler.num_envs, 6)).astype(np.float32)
        r = sampler.step(actions, copy=True)
        final = np.where(r.has_final_obs[:, None], r.final_obs, 0.0)
        out.append((r.obs, r.rewards, r.terminated, r.truncated, final, r.infos, r.reset_infos))
    return out


def assert_same_trajectory(got: list[tuple[Any, ...]], expected: list[tuple[Any, ...]]) -> None:
    for k, (a, b) in enumerate(zip(got, expected, strict=True)):
        for x, y in zip(a, b, strict=True):
            if isinstance(y, np.ndarray):
                np.testing.assert_array_equal(x, y, err_msg=f"step {k}", strict=True)
            else:
                assert x == y, f"step {k}"


@pytest.mark.parametrize("mode", ["SameStep", "NextStep"])
def test_hosted_in_workers_it_samples_what_vecsample_samples_from_gymnasiums_envs(
        make_sampler, mode):
    limit = {"max_episode_steps": 9}
    bare = make_sampler("HalfCheetah-v5", num_envs=HN, num_workers=HW, env_kwargs=limit,
                        autoreset_mode=mode)
    hosted = make_sampler(HostedVector("HalfCheetahBatch-v5", env_kwargs={**limit,
                                       "autoreset_mode": mode}),
                          num_envs=HN, num_workers=HW, autoreset_mode=mode)
    expected = sampler_trajectory(bare, 25)
    assert_same_trajectory(sampler_trajectory(hosted, 25), expected)
    assert sum(bool(t[3].any()) for t in expected[1:]) >= 2  # autoresets were compared


def test_hosted_under_disabled_ended_envs_stay_frozen_as_vecsamples_single_envs_do(
        make_sampler):
    """Hopper's episodes end at different steps under random actions; the ended rows stay
    frozen (not refused) until a reset by mask, as the env block leaves single envs."""
    bare = make_sampler("Hopper-v5", num_envs=HN, num_workers=HW, autoreset_mode="Disabled")
    hosted = make_sampler(HostedVector("HopperBatch-v5", env_kwargs={"autoreset_mode": "Disabled"}),
                          num_envs=HN, num_workers=HW, autoreset_mode="Disabled")

    def run(sampler: VecSampler) -> list[Any]:
        obs, infos = sampler.reset(seed=5)
        out: list[Any] = [obs.copy(), infos]
        rng = np.random.default_rng(5)
        for t in range(60):
            r = sampler.step(rng.uniform(-1, 1, (HN, 3)).astype(np.float32), copy=True)
            out += [r.obs, r.rewards, r.terminated, r.truncated, r.infos]
            ended = r.terminated | r.truncated
            if t == 40 and ended.any():
                obs, infos = sampler.reset(mask=ended)
                out += [obs.copy(), infos]
        return out

    expected = run(bare)
    for k, (x, y) in enumerate(zip(run(hosted), expected, strict=True)):
        if isinstance(y, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=f"item {k}", strict=True)
        else:
            assert x == y, f"item {k}"
    ended = np.array([expected[4 + 5 * t] | expected[5 + 5 * t] for t in range(40)])
    frozen_beside_live = ended[:-1] & ~ended[:-1].all(axis=1, keepdims=True)
    assert frozen_beside_live.sum() > HN  # rows were frozen while others went on stepping


def test_hosted_task_envs_take_one_task_per_env_through_the_sampler(make_sampler):
    tasks = sampled_tasks("HalfCheetahVel-v5", HN, seed=1)
    kwargs = {"max_episode_steps": 9, "normalization_scale": 10.0}
    bare = make_sampler("HalfCheetahVel-v5", num_envs=HN, num_workers=HW, env_kwargs=kwargs)
    hosted = make_sampler(HostedVector("HalfCheetahVelBatch-v5", env_kwargs=kwargs), num_envs=HN,
                          num_workers=HW)
    for sampler in (bare, hosted):
        sampler.reset_task(tasks)
    expected = sampler_trajectory(bare, 20, seed=3)
    got = sampler_trajectory(hosted, 20, seed=3)
    for k, (a, b) in enumerate(zip(got, expected, strict=True)):
        np.testing.assert_array_equal(a[0], b[0], err_msg=f"obs at {k}", strict=True)
        if k:
            np.testing.assert_array_equal(a[1], b[1], err_msg=f"rewards at {k}", strict=True)
            velocities = [a[5][i]["task"]["velocity"] for i in range(HN)]
            assert velocities == [t["velocity"] for t in tasks]


def test_a_recorded_partial_run_of_hosted_batch_envs_replays_the_same(make_sampler, tmp_path):
    log = tmp_path / "run.vsreplay"

    def run(**kwargs: Any) -> list[bytes]:
        sampler = make_sampler(HostedVector("HalfCheetahBatch-v5"), num_envs=HN,
                               num_workers=HW, seed=2, **kwargs)
        sampler.reset()
        for w in range(HW):
            sampler.step_send(w, np.zeros((HB, 6), dtype=np.float32))
        out = []
        for k in range(30):
            for r in sampler.step_recv(timeout=0.0, copy=True):
                out.append(bytes([r.worker]) + r.obs.tobytes())
                sampler.step_send(r.worker, np.full((HB, 6), np.sin(k), dtype=np.float32))
        sampler.step_recv(None)
        sampler.close()
        return out

    recorded = run(record=log)
    assert run(replay=log) == recorded


def test_the_default_thread_count_is_the_cores_owned_capped_by_omp_num_threads(monkeypatch):
    from vecsample.envs.mujoco_batch.physics import default_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0))
    assert default_threads() == cores
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert default_threads() == 1
    env = gym.make_vec("HalfCheetahBatch-v5", 4, num_threads=2)
    try:
        assert env.unwrapped.physics.threads == 2  # type: ignore[attr-defined]
        env.reset(seed=0)
        assert np.isfinite(env.step(np.zeros((4, 6), dtype=np.float32))[0]).all()
    finally:
        env.close()


# --- experiments/mujoco_floor.py on a tiny budget ------------------------------------------------


def test_the_floor_script_steps_the_same_physics_in_its_three_loops(tmp_path):
    out = tmp_path / "floor.json"
    proc = helpers.run_script("mujoco_floor", "--envs", "Hopper-v5", "--num-envs", "3",
                              "--env-steps", "90", "--rounds", "2", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(out.read_text())["rows"]
    assert row["env"] == "Hopper-v5" and row["same"] is True and row["batch_steps"] == 30
    for loop in ("floor", "rr", "batch", "gym"):
        assert len(row[f"{loop}_us_rounds"]) == 2 and row[f"{loop}_us"] > 0
    ratios = [f / b for f, b in zip(row["floor_us_rounds"], row["batch_us_rounds"], strict=True)]
    assert row["x_floor"] == pytest.approx(sum(ratios) / 2)  # the median of two rounds
    assert "Hopper-v5" in proc.stdout and "× floor" in proc.stdout


def test_make_vec_of_a_batch_id_means_what_make_vec_of_the_gym_id_means():
    """The batch ids default to gymnasium's vector default (NextStep), so swapping
    make_vec("HalfCheetah-v5", n) for the batch id keeps the semantics; a sampler hosting one
    gives it its own mode (tests/test_hosted.py)."""
    ours = gym.make_vec("HalfCheetahBatch-v5", 2, vectorization_mode="vector_entry_point")
    theirs = gym.make_vec("HalfCheetah-v5", 2)
    try:
        assert ours.metadata["autoreset_mode"].value == "NextStep"
        assert ours.metadata["autoreset_mode"].value == theirs.metadata["autoreset_mode"].value
    finally:
        ours.close()
        theirs.close()


def test_squares_round_as_gymnasiums_numpy_scalars_do():
    """InvertedDoublePendulum-v5 squares numpy scalars (libm's pow); ``array ** 2`` (x * x)
    differs from it in about 0.1% of cases, which made its penalties differ by an ulp."""
    values = np.random.default_rng(0).normal(0.0, 3.0, 20_000)
    expected = np.array([np.float64(v) ** 2 for v in values])
    np.testing.assert_array_equal(scalar_square(values), expected, strict=True)
    assert np.count_nonzero(values**2 != expected) > 0  # the naive square would fail here
