"""vecsample.sb3.VecEnv behaves as SB3's SubprocVecEnv, step for step, and PPO learns with it.

SB3's own vec-env tests run against it in test_sb3_suite.py; these check the rest: equality with
a real SubprocVecEnv (observations, rewards, dones, infos, reset_infos), seeding, per-env requests
with ``indices``, wrappers, options, rendering, the errors, closing, and a short PPO run.
"""

from __future__ import annotations

import doctest
import functools
import os
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import psutil
import pytest
from gymnasium import spaces
from helpers import assert_same, record_calls
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.vec_env import SubprocVecEnv, VecNormalize

import vecsample.sb3
from vecsample import Options, errors
from vecsample.sb3 import EnvAttributeError, EnvIndexError, VecEnv
from vecsample.testing import CountingEnv, RaisingEnv, SpaceEnv, fns

FLAT_DICT = spaces.Dict({
    "pos": spaces.Box(-1.0, 1.0, (2,), np.float32),
    "cell": spaces.Discrete(5),
    "bits": spaces.MultiBinary(3),
})
TUPLE = spaces.Tuple((spaces.Discrete(3), spaces.Box(-1.0, 1.0, (2,), np.float64)))


@pytest.fixture
def make_venv() -> Iterator[Callable[..., Any]]:
    """``make_venv(cls, env_fns, **kwargs)``: a VecEnv (or SubprocVecEnv) closed at teardown."""
    made: list[Any] = []

    def make(cls: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        venv = cls(*args, **kwargs)
        made.append(venv)
        return venv

    yield make
    for venv in made:
        venv.close()


class AttrEnv(CountingEnv):
    """A CountingEnv with an attribute, a method with arguments, and one that raises."""

    label = "base"

    def scaled(self, factor: float, *, offset: float = 0.0) -> float:
        return self.env_index * factor + offset

    def broken(self) -> None:
        raise ValueError(f"broken in env {self.env_index}")


class PixelEnv(CountingEnv):
    """Renders a 2x2 image whose pixels hold the env index."""

    def __init__(self, env_index: int = 0, render_mode: str | None = "rgb_array") -> None:
        super().__init__(env_index=env_index)
        self.render_mode = render_mode

    def render(self) -> np.ndarray:
        return np.full((2, 2, 3), self.env_index, dtype=np.uint8)


def space_envs(obs: spaces.Space, act: spaces.Space, n: int = 4) -> list[Callable[[], Any]]:
    return [functools.partial(SpaceEnv, obs, act, env_index=i, length=3 + i) for i in range(n)]


CASES = {
    "counting, truncated, infos": lambda: fns(CountingEnv, 4, length=3, truncate=True, info=True),
    "counting, terminated": lambda: [functools.partial(CountingEnv, env_index=i, length=2 + i)
                                     for i in range(4)],
    "CartPole": lambda: [functools.partial(gym.make, "CartPole-v1", max_episode_steps=12)] * 4,
    "Dict obs and actions": lambda: space_envs(FLAT_DICT, FLAT_DICT),
    "Tuple obs and actions": lambda: space_envs(TUPLE, TUPLE),
}


@pytest.mark.parametrize("case", list(CASES))
def test_steps_match_subproc_vec_env(make_venv, case):
    # fork: the reference starts fastest, and these factories need no re-import.
    ref = make_venv(SubprocVecEnv, CASES[case](), start_method="fork")
    ours = make_venv(VecEnv, CASES[case](), num_workers=2)
    assert ours.observation_space == ref.observation_space
    assert ours.action_space == ref.action_space
    ref.seed(7), ours.seed(7)
    assert_same(ours.reset(), ref.reset(), "reset")
    assert_same(tuple(ours.reset_infos), tuple(ref.reset_infos), "reset_infos")
    ref.action_space.seed(3)
    for t in range(15):
        actions = [ref.action_space.sample() for _ in range(4)]
        if not isinstance(ref.action_space, spaces.Dict | spaces.Tuple):
            actions = np.array(actions)
        obs, rewards, dones, infos = ours.step(actions)
        ref_obs, ref_rewards, ref_dones, ref_infos = ref.step(actions)
        assert_same(obs, ref_obs, f"obs {t}")
        assert_same((rewards, dones), (ref_rewards, ref_dones), f"rewards, dones {t}")
        assert isinstance(infos, list)
        assert_same(tuple(infos), tuple(ref_infos), f"infos {t}")
        assert_same(tuple(ours.reset_infos), tuple(ref.reset_infos), f"reset_infos {t}")
        if isinstance(ours.observation_space, spaces.Dict):
            assert isinstance(obs, OrderedDict) and list(obs) == list(ours.observation_space)


def test_terminal_observation_is_the_last_observation(make_venv):
    venv = make_venv(VecEnv, fns(CountingEnv, 2, length=3), num_workers=2)
    venv.reset()
    for step in range(1, 7):
        obs, _, dones, infos = venv.step(np.array([1, 2]))
        ended = step % 3 == 0
        assert dones.tolist() == [ended, ended]
        for i in range(2):
            assert infos[i]["TimeLimit.truncated"] is False  # CountingEnv terminates
            if ended:  # the step's own observation, then the reset one: [i, t, episode, action]
                episode = step // 3 - 1
                assert infos[i]["terminal_observation"].tolist() == [i, 3, episode, i + 1]
                assert obs[i].tolist() == [i, 0, episode + 1, -1]
            else:
                assert "terminal_observation" not in infos[i]


def test_truncation_sets_timelimit_truncated(make_venv):
    venv = make_venv(VecEnv, fns(CountingEnv, 2, length=2, truncate=True), num_workers=1)
    venv.reset()
    flags = [venv.step(np.array([0, 0]))[3][0]["TimeLimit.truncated"] for _ in range(4)]
    assert flags == [False, True, False, True]


def rollout(venv: VecEnv, seed: int | None, steps: int = 30) -> np.ndarray:
    if seed is not None:
        venv.seed(seed)
    trace = [venv.reset()]
    rng = np.random.default_rng(0)
    for _ in range(steps):
        trace.append(venv.step(rng.integers(0, 2, venv.num_envs))[0])
    return np.stack(trace)


def test_seeds_are_reproducible_and_used_once(make_venv):
    make = [functools.partial(gym.make, "CartPole-v1")] * 4
    first = make_venv(VecEnv, make, num_workers=2)
    second = make_venv(VecEnv, make, num_workers=1)
    assert first.seed(5) == [5, 6, 7, 8]
    a = rollout(first, 5)
    np.testing.assert_array_equal(a, rollout(second, 5))  # any worker split
    np.testing.assert_array_equal(a, rollout(first, 5))
    assert not np.array_equal(a, rollout(first, 6))
    assert not np.array_equal(a, rollout(first, None))  # seeds are used by one reset only
    # seed() applies at the next reset, not before it.
    first.seed(5)
    first.step(np.zeros(4, dtype=np.int64))
    np.testing.assert_array_equal(first.reset(), a[0])


def test_get_attr_set_attr_env_method_with_indices(make_venv):
    venv = make_venv(VecEnv, fns(AttrEnv, 4), num_workers=2)
    assert venv.get_attr("env_index") == [0, 1, 2, 3]
    assert venv.get_attr("env_index", indices=[3, -4, 1, 1]) == [3, 0, 1, 1]
    assert venv.get_attr("env_index", indices=2) == [2]
    assert venv.set_attr("label", "x", indices=[0, -1]) is None
    assert venv.get_attr("label") == ["x", "base", "base", "x"]
    venv.set_attr("label", "y")
    assert venv.get_attr("label") == ["y"] * 4
    assert venv.env_method("scaled", 10.0, offset=1.0) == [1.0, 11.0, 21.0, 31.0]
    assert venv.env_method("scaled", 2.0, indices=[2, 0]) == [4.0, 0.0]
    assert venv.has_attr("label") and not venv.has_attr("nothing")
    # env_method changes only the envs in indices.
    venv.env_method("set_wrapper_attr", "length", 99, indices=np.array([1]))
    assert venv.get_attr("length") == [10, 99, 10, 10]


def test_set_attr_sets_the_outermost_wrapper_as_subproc_vec_env_does(make_venv):
    factories = [lambda: Monitor(AttrEnv(0)), lambda: Monitor(AttrEnv(1))]
    ours = make_venv(VecEnv, factories, num_workers=1)
    ref = make_venv(SubprocVecEnv, factories, start_method="fork")
    for venv in (ours, ref):
        venv.set_attr("label", "outer")
        assert venv.get_attr("label") == ["outer", "outer"]  # found on the Monitor first
        assert venv.env_method("get_wrapper_attr", "label") == ["outer", "outer"]
        assert [e.label for e in venv.get_attr("unwrapped")] == ["base", "base"]


def test_env_errors_are_typed_and_leave_the_workers_usable(make_venv):
    venv = make_venv(VecEnv, fns(AttrEnv, 4), num_workers=2)
    venv.reset()
    with pytest.raises(EnvAttributeError, match="env 0 in worker 0 raised AttributeError") as info:
        venv.get_attr("nothing")
    assert isinstance(info.value, AttributeError) and info.value.env == 0
    with pytest.raises(EnvAttributeError):
        venv.env_method("nothing", indices=[3])
    with pytest.raises(errors.WorkerError, match="env 3 in worker 1 raised ValueError") as info:
        venv.env_method("broken", indices=[3])
    assert "broken in env 3" in info.value.remote_traceback
    for bad in (4, -5, [0, 7], 1.5, True):
        with pytest.raises(EnvIndexError, match="indices must be env indices in range"):
            venv.get_attr("env_index", indices=bad)
    assert issubclass(EnvIndexError, IndexError)
    assert venv.step(np.array([1, 1, 1, 1]))[1].tolist() == [1.0] * 4  # still usable


def test_env_raising_in_step_is_a_worker_error(make_venv):
    venv = make_venv(VecEnv, fns(RaisingEnv, 2, at_step=2, bad_index=1), num_workers=2)
    venv.reset()
    venv.step(np.array([0, 0]))
    with pytest.raises(errors.WorkerError, match="env 1 in worker 1 raised RuntimeError"):
        venv.step(np.array([0, 0]))


def test_env_is_wrapped(make_venv):
    factories = [lambda: Monitor(CountingEnv(0)), lambda: CountingEnv(1),
                 lambda: gym.wrappers.TimeLimit(Monitor(CountingEnv(2)), 5),
                 lambda: CountingEnv(3)]
    venv = make_venv(VecEnv, factories, num_workers=2)
    assert venv.env_is_wrapped(Monitor) == [True, False, True, False]
    assert venv.env_is_wrapped(Monitor, indices=[2, 1]) == [True, False]
    assert venv.env_is_wrapped(gym.wrappers.TimeLimit) == [False, False, True, False]
    assert VecNormalize(venv).env_is_wrapped(Monitor) == [True, False, True, False]


class OptionsEnv(CountingEnv):
    """Keeps the options of its last reset."""

    options: dict | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        self.options = options
        return super().reset(seed=seed, options=options)


def test_options_per_env_apply_at_one_reset(make_venv):
    venv = make_venv(VecEnv, fns(OptionsEnv, 4), num_workers=2)
    venv.set_options({"a": 1})
    assert venv.get_attr("options") == [None] * 4  # not yet
    venv.reset()
    assert venv.get_attr("options") == [{"a": 1}] * 4
    venv.set_options([{"a": 1}, {"b": np.zeros(2)}, {}, {"a": 1}])
    obs = venv.reset()
    got = venv.get_attr("options")
    assert got[0] == got[3] == {"a": 1} and got[2] is None
    assert list(got[1]) == ["b"]
    assert obs[:, 2].tolist() == [1, 1, 1, 1]  # episode 1 everywhere: each env reset once
    venv.reset()
    assert venv.get_attr("options") == [None] * 4


def test_rendering_as_subproc_vec_env_does(make_venv):
    venv = make_venv(VecEnv, fns(PixelEnv, 4), num_workers=2)
    assert venv.render_mode == "rgb_array"
    images = venv.get_images()
    assert [int(image[0, 0, 0]) for image in images] == [0, 1, 2, 3]
    assert venv.render().shape == (4, 4, 3)  # tiled 2x2
    silent = make_venv(VecEnv, fns(PixelEnv, 2, render_mode=None), num_workers=1)
    with pytest.warns(UserWarning, match="render mode is None"):
        assert silent.get_images() == [None, None]


def test_check_actions_is_off_because_sb3_unscales_past_the_bound(make_venv):
    # TD3/DDPG add float64 noise, clip to [-1, 1] and unscale: at +1 this lands one float32
    # ulp above high for these bounds (and about a quarter of random ones). SubprocVecEnv
    # passes it on; vecsample with check_actions=True would reject the whole batch.
    box = spaces.Box(np.float32(-1.0891149), np.float32(0.81666225), (1,), np.float32)
    policy = type("P", (), {"action_space": box})
    actions = BasePolicy.unscale_action(policy, np.ones((2, 1)))
    assert not box.contains(actions[0].astype(np.float32))
    factory = functools.partial(SpaceEnv, box, box)
    make_venv(VecEnv, [factory] * 2).step(actions)  # the default lets it through
    checked = make_venv(VecEnv, [factory] * 2, check_actions=True)
    with pytest.raises(errors.ActionSpaceError, match="env rows \\[0, 1\\]"):
        checked.step(actions)
    with pytest.raises(errors.ActionShapeError):  # shapes are checked either way
        make_venv(VecEnv, [factory] * 2).step(np.zeros(3))


def test_construction_errors_are_typed(make_venv):
    make = fns(CountingEnv, 2)
    with pytest.raises(errors.ConfigError, match="cannot find context for 'illegal_method'"):
        VecEnv(make, start_method="illegal_method")
    with pytest.raises(errors.ConfigError, match="pass only one of them"):
        VecEnv(make, start_method="fork", context="spawn")
    with pytest.raises(errors.ConfigError, match="SameStep"):
        VecEnv(make, autoreset_mode="NextStep")
    with pytest.raises(errors.ConfigError, match="infos"):
        VecEnv(make, infos=False)
    with pytest.raises(errors.ConfigError, match="make_vec_env"):
        VecEnv("CartPole-v1")
    with pytest.raises(errors.ConfigError, match=r"env_fns\[1\]"):
        VecEnv([make[0], gym.make("CartPole-v1")])
    with pytest.raises(errors.ConfigError, match="not divisible"):
        VecEnv(make * 2, num_workers=3)
    venv = make_venv(VecEnv, make, start_method="spawn", num_workers=2)
    assert venv.sampler.context == "spawn" and venv.sampler.num_workers == 2
    with pytest.raises(errors.NoPendingError, match="step_async"):
        venv.step_wait()


def test_reset_drops_a_step_in_flight(make_venv):
    venv = make_venv(VecEnv, fns(CountingEnv, 2), num_workers=2)
    venv.reset()
    venv.step_async(np.array([1, 1]))
    obs = venv.reset()
    assert obs[:, 1].tolist() == [0, 0]
    assert venv.step(np.array([1, 1]))[0][:, 1].tolist() == [1, 1]


def test_close_stops_every_worker_and_is_idempotent():
    venv = VecEnv(fns(CountingEnv, 4), num_workers=2)
    pids = venv.sampler.worker_pids()
    assert all(psutil.pid_exists(pid) for pid in pids)
    venv.step_async(np.zeros(4, dtype=np.int64))  # a step in flight is dropped
    venv.close()
    venv.close()
    end = time.monotonic() + 5
    alive = list(pids)
    while alive and time.monotonic() < end:
        alive = [p for p in pids if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.05)
    assert alive == [] and venv.closed
    with pytest.raises(errors.ClosedError):
        venv.reset()


def test_docstring_example_runs():
    finder = doctest.DocTestFinder(recurse=False)
    (test,) = [t for t in finder.find(VecEnv, "VecEnv", module=vecsample.sb3) if t.examples]
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    result = runner.run(test)
    assert result.attempted > 5 and result.failed == 0


def test_import_vecsample_does_not_import_stable_baselines3():
    import subprocess
    import sys

    code = "import sys, vecsample; print('stable_baselines3' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "False"


# --- PPO ------------------------------------------------------------------------------------------

#: PPO on CartPole-v1 with SB3 zoo's hyperparameters (a fixed learning rate) over 8 envs in 2
#: workers. Measured over seeds 0-19 (docs/sb3.md): 30k steps take 6-8 s on 2 shared cores and
#: reach a mean return of 208-500 (stochastic policy, 20 episodes; seed 0: 208, the lowest);
#: the untrained policy gets 18-28, a random one about 22.
PPO_STEPS = 30_000
PPO_THRESHOLD = 100.0


def ppo_returns(seed: int, steps: int = PPO_STEPS) -> tuple[float, float]:
    """(mean return before, after ``steps`` of PPO) of the stochastic policy, 20 episodes."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy

    # One torch thread: the two cores are shared with the env workers and other jobs.
    torch.set_num_threads(1)
    venv = VecEnv([functools.partial(gym.make, "CartPole-v1")] * 8, num_workers=2)
    try:
        model = PPO("MlpPolicy", venv, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
                    n_epochs=20, ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, seed=seed,
                    device="cpu")
        evaluation = Monitor(gym.make("CartPole-v1"))
        evaluation.reset(seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            before, _ = evaluate_policy(model, evaluation, n_eval_episodes=20, deterministic=False)
            model.learn(steps)
            after, _ = evaluate_policy(model, evaluation, n_eval_episodes=20, deterministic=False)
    finally:
        venv.close()
    return float(before), float(after)


@pytest.mark.slow
def test_ppo_learns_cartpole():
    start = time.perf_counter()
    before, after = ppo_returns(seed=0)
    print(f"PPO CartPole-v1 seed 0: {before:.1f} -> {after:.1f} in "
          f"{time.perf_counter() - start:.1f} s")
    assert before < 50, before  # the untrained policy is about random (22)
    assert after >= PPO_THRESHOLD, f"mean return {after:.1f} after {PPO_STEPS} steps"


def test_step_hands_the_core_over_between_posting_and_waiting(make_venv, monkeypatch):
    venv = make_venv(VecEnv, fns(CountingEnv, 4, length=100), num_workers=2)
    venv.reset()
    # A spy on the sampler's calls; nothing of VecEnv's own state is touched.
    calls = record_calls(venv._sampler, ("send_all", "recv_batch"), monkeypatch)
    monkeypatch.setattr(os, "sched_yield", lambda: calls.append("hand_over"))  # send_all's yield
    venv.step(np.ones(4, dtype=np.int64))
    # send_all yields the core itself now (issue 31), and the wait is recv_batch, the full
    # batch in one call (issue 32); the wait's own spin may yield after it.
    assert calls[:3] == ["send_all", "hand_over", "recv_batch"]


def test_check_actions_keyword_counts_as_given_when_passed(make_venv):
    """SubprocVecEnv's default (no check) fills only what ``options`` leaves unset, and an
    explicit ``check_actions=False`` wins over ``options`` (it was taken for unset)."""
    checked = Options(check_actions=True)
    assert make_venv(VecEnv, fns(CountingEnv, 2), options=checked).sampler.options.check_actions
    off = make_venv(VecEnv, fns(CountingEnv, 2), options=checked, check_actions=False)
    assert off.sampler.options.check_actions is False
    assert not make_venv(VecEnv, fns(CountingEnv, 2)).sampler.options.check_actions
