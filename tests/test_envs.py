"""The meta-RL task envs: registration, task distributions, rewards, time limits, wrappers."""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import vecsample.envs
from vecsample.envs import TASK_ENV_IDS, NormalizedActionWrapper, TaskEnv

MUJOCO_IDS = tuple(vecsample.envs.MUJOCO_TASK_ENVS)
SCALED = {"normalization_scale": 10.0, "max_episode_steps": 100}


def make(env_id: str, **kwargs: Any) -> gym.Env[Any, Any]:
    env = gym.make(env_id, **kwargs)
    env.reset(seed=0)
    return env


@pytest.mark.parametrize("env_id", TASK_ENV_IDS)
def test_every_env_runs_and_reports_its_task(env_id: str) -> None:
    env = make(env_id)
    try:
        assert isinstance(env.unwrapped, TaskEnv)
        task = env.unwrapped.sample_tasks(3)[1]
        env.unwrapped.reset_task(task)
        obs, info = env.reset(seed=1)
        assert_same_task(info["task"], task)
        assert env.observation_space.contains(obs)
        obs, reward, _, _, step_info = env.step(env.action_space.sample())
        assert_same_task(step_info["task"], task)
        assert step_info["task"] is not info["task"]  # a fresh copy per call: users keep infos
        assert obs.dtype == np.float32 and obs.shape == env.observation_space.shape
        assert isinstance(reward, float)
    finally:
        env.close()


def assert_same_task(got: dict[str, Any], task: dict[str, Any]) -> None:
    assert got.keys() == task.keys()
    for key, value in task.items():
        np.testing.assert_array_equal(got[key], value)


@pytest.mark.parametrize("env_id", TASK_ENV_IDS)
def test_gymnasium_check_env_passes(env_id: str) -> None:
    env = gym.make(env_id, disable_env_checker=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # Infinite bounds (MuJoCo) and Bandit's constant observation are as in pytorch-maml-rl.
        warnings.filterwarnings("ignore", message=".*(infinity|values are equal)")
        check_env(env.unwrapped, skip_render_check=True)


def test_specs_pickle_and_build_envs() -> None:
    """Workers get the EnvSpec: its entry point must be an importable string."""
    for env_id in TASK_ENV_IDS:
        spec = pickle.loads(pickle.dumps(gym.spec(env_id)))
        assert isinstance(spec.entry_point, str)
    spec = pickle.loads(pickle.dumps(gym.spec("2DNavigation-v0")))
    assert gym.make(spec, low=0.1, high=0.2).unwrapped.low == 0.1


@pytest.mark.parametrize(
    ("env_id", "max_steps"),
    [("2DNavigation-v0", 100), ("TabularMDP-v0", 10), ("Bandit-K5-v0", None)]
    + [(env_id, 200) for env_id in MUJOCO_IDS],
)
def test_time_limits_match_pytorch_maml_rl(env_id: str, max_steps: int | None) -> None:
    assert gym.spec(env_id).max_episode_steps == max_steps


def run_until_done(env: gym.Env[Any, Any], action: Any) -> tuple[int, bool, bool]:
    env.reset(seed=0)
    for t in range(1, 1000):
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            return t, terminated, truncated
    raise AssertionError("episode did not end in 1000 steps")


def test_config_kwargs_set_time_limit_and_action_scale() -> None:
    env = make("HalfCheetahDir-v5", **SCALED)
    assert env.action_space.low.min() == -10.0 and env.action_space.high.max() == 10.0
    assert run_until_done(env, np.zeros(6, np.float32)) == (100, False, True)
    assert run_until_done(make("TabularMDP-v0"), 0) == (10, False, True)
    assert run_until_done(make("Bandit-K10-v0"), 3) == (1, True, False)


# --- task distributions ----------------------------------------------------------------------


def sample(env_id: str, n: int = 4000, **kwargs: Any) -> list[dict[str, Any]]:
    env = gym.make(env_id, **kwargs)
    env.reset(seed=123)
    tasks: list[dict[str, Any]] = env.unwrapped.sample_tasks(n)
    env.close()
    return tasks


def assert_uniform(values: np.ndarray, low: float, high: float) -> None:
    assert values.min() >= low and values.max() <= high
    assert abs(values.mean() - (low + high) / 2) < 0.05 * (high - low)
    assert abs(values.std() - (high - low) / np.sqrt(12)) < 0.05 * (high - low)


def test_navigation_goals_uniform_on_square() -> None:
    goals = np.stack([t["goal"] for t in sample("2DNavigation-v0")])
    assert goals.shape == (4000, 2)
    assert_uniform(goals, -0.5, 0.5)
    narrow = np.stack([t["goal"] for t in sample("2DNavigation-v0", low=0.2, high=0.3)])
    assert_uniform(narrow, 0.2, 0.3)


@pytest.mark.parametrize(("env_id", "high"), [("HalfCheetahVel-v5", 2.0), ("AntVel-v5", 3.0)])
def test_velocities_uniform(env_id: str, high: float) -> None:
    assert_uniform(np.array([t["velocity"] for t in sample(env_id)]), 0.0, high)


@pytest.mark.parametrize("env_id", ["HalfCheetahDir-v5", "AntDir-v5"])
def test_directions_fair_coin(env_id: str) -> None:
    directions = np.array([t["direction"] for t in sample(env_id)])
    assert set(directions.tolist()) == {-1, 1}
    assert abs(directions.mean()) < 0.06


def test_ant_positions_uniform_on_square() -> None:
    positions = np.stack([t["position"] for t in sample("AntPos-v5")])
    assert positions.shape == (4000, 2)
    assert_uniform(positions, -3.0, 3.0)


@pytest.mark.parametrize("k", [5, 10, 50])
def test_bandit_means_uniform(k: int) -> None:
    means = np.stack([t["mean"] for t in sample(f"Bandit-K{k}-v0", n=1000)])
    assert means.shape == (1000, k)
    assert_uniform(means, 0.0, 1.0)


def test_tabular_mdp_tasks() -> None:
    tasks = sample("TabularMDP-v0", n=500)
    transitions = np.stack([t["transitions"] for t in tasks])
    rewards = np.stack([t["rewards_mean"] for t in tasks])
    assert transitions.shape == (500, 10, 5, 10) and rewards.shape == (500, 10, 5)
    np.testing.assert_allclose(transitions.sum(axis=-1), 1.0, rtol=1e-6)
    assert abs(transitions.mean() - 0.1) < 1e-6  # a flat Dirichlet's mean is 1 / num_states
    assert abs(rewards.mean() - 1.0) < 0.02 and abs(rewards.std() - 1.0) < 0.02


def test_task_sequence_follows_the_seed() -> None:
    first, again = sample("HalfCheetahVel-v5", n=5), sample("HalfCheetahVel-v5", n=5)
    assert [t["velocity"] for t in first] == [t["velocity"] for t in again]


# --- rewards -----------------------------------------------------------------------------------


def test_navigation_reward_is_minus_distance_and_terminates_at_goal() -> None:
    env = make("2DNavigation-v0")
    env.unwrapped.reset_task({"goal": np.array([0.3, -0.4])})
    env.reset()
    obs, reward, terminated, _, _ = env.step(np.array([0.5, -0.05], np.float32))  # x clipped
    np.testing.assert_allclose(obs, [0.1, -0.05], rtol=1e-6)
    assert reward == pytest.approx(-np.hypot(0.2, 0.35), rel=1e-6)
    assert not terminated
    env.step(np.array([0.1, -0.1], np.float32))
    _, reward, terminated, _, _ = env.step(np.array([0.1, -0.1], np.float32))
    assert reward == pytest.approx(-0.15, rel=1e-5) and not terminated
    _, _, terminated, _, _ = env.step(np.array([0.0, -0.1], np.float32))
    assert not terminated
    _, reward, terminated, _, _ = env.step(np.array([0.0, -0.05], np.float32))
    assert terminated and reward == pytest.approx(0.0, abs=1e-6)


def test_bandit_pays_the_pulled_arm() -> None:
    env = make("Bandit-K5-v0")
    env.unwrapped.reset_task({"mean": np.array([0.0, 1.0, 0.0, 0.0, 0.0])})
    rewards = []
    for arm in [1, 0, 1, 4]:
        env.reset()
        _, reward, terminated, _, _ = env.step(arm)
        rewards.append(reward)
        assert terminated
    assert rewards == [1.0, 0.0, 1.0, 0.0]


def test_tabular_mdp_follows_transitions_and_reward_means() -> None:
    env = gym.make("TabularMDP-v0").unwrapped
    transitions = np.zeros((10, 5, 10))
    transitions[:, :, :] = np.eye(10)[(np.arange(10) + 1) % 10][:, None, :]  # s -> s + 1
    rewards_mean = np.arange(50, dtype=np.float64).reshape(10, 5)
    env.reset_task({"transitions": transitions, "rewards_mean": rewards_mean})
    obs, _ = env.reset(seed=0)
    assert obs.argmax() == 0 and obs.sum() == 1.0
    totals = np.zeros(3)
    for _ in range(600):
        env.reset()
        for step in range(3):
            obs, reward, *_ = env.step(2)
            totals[step] += reward
            assert obs.argmax() == step + 1
    np.testing.assert_allclose(totals / 600, rewards_mean[:3, 2], atol=0.15)


def unwrapped_step(env: gym.Env[Any, Any], action: np.ndarray) -> tuple[float, dict[str, Any]]:
    """Steps the unwrapped MuJoCo env and returns (reward, info) with the x velocity added."""
    raw = env.unwrapped
    x_before = float(raw.data.body("torso").xpos[0])
    q_before = float(raw.data.qpos[0])
    _, reward, _, _, info = raw.step(action)
    info["body_vx"] = (float(raw.data.body("torso").xpos[0]) - x_before) / raw.dt
    info["qpos_vx"] = (float(raw.data.qpos[0]) - q_before) / raw.dt
    return reward, info


def test_half_cheetah_rewards() -> None:
    action = np.linspace(-1, 1, 6).astype(np.float32)
    ctrl = 0.05 * float(np.sum(action**2))
    vel = make("HalfCheetahVel-v5")
    vel.unwrapped.reset_task({"velocity": 1.5})
    for _ in range(5):
        reward, info = unwrapped_step(vel, action)
        assert info["reward_forward"] == pytest.approx(-abs(info["qpos_vx"] - 1.5))
        assert reward == pytest.approx(info["reward_forward"] - ctrl)
    forward, backward = make("HalfCheetahDir-v5"), make("HalfCheetahDir-v5")
    backward.unwrapped.reset_task({"direction": -1})
    for _ in range(5):
        _, info_f = unwrapped_step(forward, action)
        reward_b, info_b = unwrapped_step(backward, action)
        assert info_f["reward_forward"] == pytest.approx(info_f["qpos_vx"])
        assert info_b["reward_forward"] == pytest.approx(-info_f["reward_forward"])
        assert reward_b == pytest.approx(-info_f["reward_forward"] - ctrl)


def ant_costs(env: gym.Env[Any, Any], action: np.ndarray) -> float:
    contact = np.clip(env.unwrapped.data.cfrc_ext, -1, 1)
    return 0.005 * float(np.sum(action**2)) + 0.0005 * float(np.sum(contact**2))


@pytest.mark.parametrize("env_id", ["AntVel-v5", "AntDir-v5", "AntPos-v5"])
def test_ant_rewards(env_id: str) -> None:
    env = make(env_id)
    task = {"AntVel-v5": {"velocity": 0.7}, "AntDir-v5": {"direction": -1}}.get(
        env_id, {"position": np.array([1.0, -2.0])}
    )
    env.unwrapped.reset_task(task)
    action = np.full(8, 0.3, np.float32)
    for _ in range(10):
        reward, info = unwrapped_step(env, action)
        if env_id == "AntVel-v5":
            assert info["reward_forward"] == pytest.approx(1.0 - abs(info["body_vx"] - 0.7))
        elif env_id == "AntDir-v5":
            assert info["reward_forward"] == pytest.approx(-info["body_vx"])
        else:
            xy = env.unwrapped.data.body("torso").xpos[:2]
            assert info["reward_goal"] == pytest.approx(4.0 - np.abs(xy - [1.0, -2.0]).sum())
        task_term = info.get("reward_forward", info.get("reward_goal"))
        assert reward == pytest.approx(task_term - ant_costs(env, action) + 0.05)


def test_ant_terminates_when_torso_leaves_height_range() -> None:
    env = make("AntDir-v5")
    raw = env.unwrapped
    qpos = raw.init_qpos.copy()
    qpos[2] = 1.5  # torso height above 1.0 (it falls ~1 cm in one step)
    raw.set_state(qpos, raw.init_qvel)
    *_, terminated, _, _ = raw.step(np.zeros(8, np.float32))
    assert terminated
    raw.reset(seed=0)
    *_, terminated, _, _ = raw.step(np.zeros(8, np.float32))
    assert not terminated


def test_ant_observation_layout() -> None:
    env = make("AntPos-v5")
    obs, _ = env.reset(seed=3)
    data = env.unwrapped.data
    np.testing.assert_allclose(obs[:15], data.qpos, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(obs[-3:], data.body("torso").xpos, rtol=1e-6, atol=1e-6)
    assert obs.shape == (15 + 14 + 14 * 6 + 9 + 3,)


# --- the normalized action wrapper -------------------------------------------------------------


class RecordingEnv(gym.Env[np.ndarray, np.ndarray]):
    """Records the action it receives; bounds [0, 2] x [-1, 3]."""

    def __init__(self) -> None:
        self.action_space = gym.spaces.Box(np.array([0.0, -1.0]), np.array([2.0, 3.0]))
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(1,))
        self.received: np.ndarray | None = None

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.received = action
        return np.zeros(1, np.float32), 0.0, False, False, {}


@pytest.mark.parametrize(
    ("action", "expected"),
    [([0.0, 0.0], [1.0, 1.0]), ([10.0, -10.0], [2.0, -1.0]), ([25.0, -5.0], [2.0, 0.0])],
)
def test_normalized_action_wrapper_maps_and_clips(
    action: list[float], expected: list[float]
) -> None:
    inner = RecordingEnv()
    env = NormalizedActionWrapper(inner, scale=10.0)
    assert env.action_space.low.tolist() == [-10.0, -10.0]
    env.step(np.array(action, np.float32))
    assert inner.received is not None
    np.testing.assert_allclose(inner.received, expected, rtol=1e-6)


def test_normalized_action_wrapper_rejects_discrete() -> None:
    with pytest.raises(TypeError, match="Box"):
        NormalizedActionWrapper(gym.make("Bandit-K5-v0"))
