"""SamplerContract (vecsample/testing/contract.py) over every block kind, and proof that it can
fail.

The three kinds a worker steps: an env block (CartPole, one env per row), a hosted
``SyncVectorEnv`` of CartPoles and a batch-native MuJoCo env; each contract test runs its
subtests over plain and pipelined layouts and the three autoreset modes. Time limits make every
episode end within the contract's steps, so every autoreset path is taken.

Then envs broken on purpose, each run through the contract method that must catch it, and the
contract's own misconfiguration errors. Under pytest a unittest subtest without a result object
raises at its first failure, so calling a contract method directly gives that failure.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import unittest
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from vecsample import AutoresetMode, EnvMaker, HostedVector, Options, errors
from vecsample.testing import CountingEnv, SamplerContract

ROOT = Path(__file__).resolve().parents[1]
HAS_MUJOCO = importlib.util.find_spec("mujoco") is not None


# --- the contract over every block kind ----------------------------------------------------------


class TestEnvBlock(SamplerContract, unittest.TestCase):
    """One CartPole per row: seeded, ends by termination or its 5-step time limit."""

    steps = 8

    def make_env(self, autoreset_mode: AutoresetMode) -> Any:
        return EnvMaker("CartPole-v1", {"max_episode_steps": 5})


class TestHostedSyncVectorEnv(SamplerContract, unittest.TestCase):
    """A hosted ``SyncVectorEnv`` of CartPoles, which HostedVector builds in the sampler's mode;
    under Disabled it does not freeze its ended rows, so their block's step is refused."""

    steps = 8

    def make_env(self, autoreset_mode: AutoresetMode) -> Any:
        return HostedVector("CartPole-v1", "sync", env_kwargs={"max_episode_steps": 5})


@unittest.skipUnless(HAS_MUJOCO, "the batch MuJoCo env needs mujoco (the test extra has it)")
class TestHostedBatchEnv(SamplerContract, unittest.TestCase):
    """A batch-native MuJoCo env, built in each mode it is given; it freezes its ended rows."""

    steps = 8

    def make_env(self, autoreset_mode: AutoresetMode) -> Any:
        return HostedVector("HalfCheetahBatch-v5", env_kwargs={
            "max_episode_steps": 4, "autoreset_mode": autoreset_mode.value})


# --- the same promises with blocks stepped in this process (Options.env_placement) ---------------


class TestEnvBlockShared(TestEnvBlock):
    """The env block with the last process's block (both halves, pipelined) stepped in this
    process: its restart check kills the worker process that is left."""

    options = Options(env_placement="share")


class TestEnvBlockInParent(TestEnvBlock):
    """Every block stepped in this process: no worker process (the restart check skips)."""

    options = Options(env_placement="parent")


class TestHostedSyncVectorEnvShared(TestHostedSyncVectorEnv):
    """A hosted vector env, the last process's one stepped in this process."""

    options = Options(env_placement="share")


# --- envs broken on purpose ----------------------------------------------------------------------


class SeedIgnoringEnv(CountingEnv):
    """Its step adds noise from a generator seeded by the OS, not by its own seed."""

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        obs[3] = np.random.default_rng().random()
        return obs, reward, terminated, truncated, info


def no_reset_step(num_envs: int) -> gym.vector.VectorEnv:
    """Says it autoresets NextStep but resets within the ending step (SameStep): the step after
    an end is an ordinary step, with its own observation and reward, not the reset's."""
    env = gym.vector.SyncVectorEnv([functools.partial(CountingEnv, length=3)] * num_envs,
                                   autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    env.metadata = {**env.metadata, "autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}
    return env


def contract(make_env: Any, **settings: Any) -> SamplerContract:
    """A contract for ``make_env`` (one test case, not collected: made inside a test)."""

    class Case(SamplerContract, unittest.TestCase):
        def make_env(self, autoreset_mode: AutoresetMode) -> Any:
            return make_env(autoreset_mode)

    for name, value in settings.items():
        setattr(Case, name, value)
    return Case("test_close_leaves_no_process")


def counting(mode: AutoresetMode, **kwargs: Any) -> Any:
    return functools.partial(CountingEnv, **kwargs)


def test_an_env_that_ignores_its_seed_fails_the_reference_and_the_repeat():
    case = contract(lambda mode: SeedIgnoringEnv)
    with pytest.raises(AssertionError, match=r"step 1 of worker 0: obs of row 0"):
        case.test_full_batch_equals_the_serial_reference()
    with pytest.raises(AssertionError, match=r"item \d+ of two runs with seed 0"):
        case.test_the_same_seed_repeats_the_run()


def test_the_same_counting_env_without_the_break_passes_both():
    case = contract(counting, steps=4, autoreset_modes=(AutoresetMode.NEXT_STEP,))
    case.test_full_batch_equals_the_serial_reference()
    case.test_the_same_seed_repeats_the_run()


def test_a_next_step_env_that_does_not_reset_on_the_step_after_the_end_fails():
    case = contract(lambda mode: HostedVector(no_reset_step),
                    autoreset_modes=(AutoresetMode.NEXT_STEP,))
    case.test_full_batch_equals_the_serial_reference()  # its reference is as broken as it is
    with pytest.raises(AssertionError, match="NextStep: the step after an end resets the env"):
        case.test_next_step_resets_on_the_step_after_the_end()


def test_an_env_whose_episodes_do_not_end_in_time_is_a_config_error_naming_steps():
    case = contract(functools.partial(counting, length=1000), steps=3)
    with pytest.raises(errors.ConfigError, match=r"Case.steps must be enough steps for an "
                       r"episode to end \(none did under SameStep\), got 3; raise steps"):
        case.test_same_step_returns_the_final_observation()


# --- misconfiguration: typed errors that say expected, got and the fix ---------------------------


def test_a_hosted_env_of_another_mode_is_a_config_error_naming_make_env():
    case = contract(lambda mode: HostedVector("CartPole-v1"))  # NextStep only
    with pytest.raises(errors.ConfigError, match=r"make_env\('SameStep'\) must be an env that "
                       r"autoresets in 'SameStep', got 'NextStep'; .* list only 'NextStep'"):
        case.test_same_step_returns_the_final_observation()


@pytest.mark.parametrize(("settings", "match"), [
    ({"num_envs": 6}, r"Case.num_envs must be a multiple of 2 \* num_workers = 4, got 6"),
    ({"steps": 1}, r"steps >= 2"),
])
def test_settings_the_layouts_cannot_run_are_config_errors(settings, match):
    with pytest.raises(errors.ConfigError, match=match):
        contract(counting, **settings).test_close_leaves_no_process()


def test_make_env_must_be_defined_and_return_an_env():
    class Undefined(SamplerContract, unittest.TestCase):
        pass

    with pytest.raises(errors.ConfigError, match=r"Undefined.make_env must be defined by the "
                       r"subclass.*; define make_env\(self, autoreset_mode\)"):
        Undefined("test_close_leaves_no_process").test_close_leaves_no_process()
    with pytest.raises(errors.ConfigError, match=r"must be an env factory, an env id or a "
                       r"HostedVector, got 42"):
        contract(lambda mode: 42).test_close_leaves_no_process()


def test_a_mode_left_out_of_autoreset_modes_skips_its_check():
    case = contract(counting, autoreset_modes=(AutoresetMode.NEXT_STEP,))
    with pytest.raises(unittest.SkipTest, match="leaves out SameStep"):
        case.test_same_step_returns_the_final_observation()


# --- the runners and the core --------------------------------------------------------------------


def test_python_m_unittest_runs_the_contract_and_reports_a_failing_subtest(tmp_path):
    (tmp_path / "test_user.py").write_text(textwrap.dedent("""
        import functools, unittest
        import numpy as np
        from vecsample.testing import CountingEnv, SamplerContract

        class Noisy(CountingEnv):
            def step(self, action):
                obs, *rest = super().step(action)
                obs[3] = np.random.default_rng().random()
                return (obs, *rest)

        class TestGood(SamplerContract, unittest.TestCase):
            def make_env(self, autoreset_mode):
                return functools.partial(CountingEnv, length=3)

        class TestNoisy(TestGood):
            def make_env(self, autoreset_mode):
                return Noisy
    """))
    names = ["test_user.TestGood.test_close_leaves_no_process",
             "test_user.TestNoisy.test_the_same_seed_repeats_the_run"]
    proc = subprocess.run([sys.executable, "-m", "unittest", *names], capture_output=True,
                          text=True, cwd=tmp_path, timeout=240,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1, proc.stderr
    assert "Ran 2 tests" in proc.stderr and "FAILED (failures=2)" in proc.stderr, proc.stderr
    failed = [line for line in proc.stderr.splitlines() if line.startswith("FAIL:")]
    assert failed == [  # one per layout of the noisy env; the good env passed
        "FAIL: test_the_same_seed_repeats_the_run (test_user.TestNoisy."
        f"test_the_same_seed_repeats_the_run) (layout='{layout}', autoreset_mode='NextStep')"
        for layout in ("plain", "pipelined")], proc.stderr


def test_importing_the_contract_loads_no_test_package():
    """pytest is a test extra, not a dependency: blocked, the import still works."""
    code = ("import json, sys\nsys.modules['pytest'] = None  # importing it now raises\n"
            "import vecsample.testing\n"
            "print(json.dumps(sorted(m for m, mod in sys.modules.items() if mod is not None "
            "and m.split('.')[0] in ('pytest', '_pytest', 'hypothesis', 'psutil'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == []
