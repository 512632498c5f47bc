"""Tests for examples/ppo.py: GAE with truncation bootstrapping on a hand-computed case, and
smoke runs on a tiny budget (discrete CartPole, continuous Pendulum with the MuJoCo preset)."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "ppo.py"


@pytest.fixture(scope="module")
def ppo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ppo_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


class FirstFeatureValue:
    """A stub critic: the value of an observation is its first feature."""

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return obs[..., 0]


def _batch(ppo: ModuleType, *, terminated: bool) -> object:
    ends = torch.tensor([[False], [True], [False]])
    return ppo.RolloutBatch(
        obs=torch.zeros(3, 1, 1),
        actions=torch.zeros(3, 1),
        rewards=torch.ones(3, 1),
        terminated=ends if terminated else torch.zeros(3, 1, dtype=torch.bool),
        truncated=torch.zeros(3, 1, dtype=torch.bool) if terminated else ends,
        final_obs=torch.tensor([[[0.0]], [[10.0]], [[0.0]]]),
        has_final_obs=ends,
        next_obs=torch.tensor([[4.0]]),
        extras={"value": torch.tensor([[1.0], [2.0], [3.0]])},
    )


def test_gae_bootstraps_a_truncated_episode_from_its_final_observation(ppo: ModuleType) -> None:
    # gamma 0.5, lambda 1. t=2: 1 + .5*4 - 3 = 0. t=1 (truncated, V(final)=10): 1 + .5*10 - 2 = 4.
    # t=0: delta 1 + .5*2 - 1 = 1, plus .5 * 4 = 3.
    adv, returns = ppo.advantages(FirstFeatureValue(), _batch(ppo, terminated=False), 0.5, 1.0)
    assert adv.flatten().tolist() == [3.0, 4.0, 0.0]
    assert returns.flatten().tolist() == [4.0, 6.0, 3.0]


def test_gae_does_not_bootstrap_a_terminated_episode(ppo: ModuleType) -> None:
    # t=1 terminated: 1 + 0 - 2 = -1; t=0: 1 + .5*2 - 1 + .5 * -1 = 0.5.
    adv, _ = ppo.advantages(FirstFeatureValue(), _batch(ppo, terminated=True), 0.5, 1.0)
    assert adv.flatten().tolist() == [0.5, -1.0, 0.0]


def test_parse_args_presets_and_overrides(ppo: ModuleType) -> None:
    args = ppo.parse_args(["--preset", "mujoco", "--num-envs", "2", "--timeout", "0.01"])
    assert (args.env_id, args.num_envs, args.update_epochs, args.normalize) == (
        "HalfCheetah-v5",
        2,
        10,
        True,
    )
    assert args.timeout == 0.01 and args.solved_return is None
    classic = ppo.parse_args(["--no-anneal-lr", "--solved-return", "None"])
    assert (
        classic.env_id == "CartPole-v1" and not classic.anneal_lr and classic.solved_return is None
    )


def _run(tmp_path: Path, *flags: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the checkout under test, not an install
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--out-dir",
        str(tmp_path),
        "--run-name",
        "smoke",
        "--no-progress",
    ]
    done = subprocess.run(
        [*cmd, *flags], capture_output=True, text=True, timeout=240, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "profile: wall" in done.stdout
    return json.loads((tmp_path / "smoke" / "summary.json").read_text())


def test_ppo_smoke_cartpole(tmp_path: Path) -> None:
    flags = [
        "--total-timesteps",
        "512",
        "--num-envs",
        "2",
        "--num-workers",
        "1",
        "--num-steps",
        "64",
    ]
    summary = _run(tmp_path, *flags, "--profile")
    assert summary["env_steps"] == 512 and summary["weight_syncs"] == 4  # one sync per rollout
    with open(tmp_path / "smoke" / "episodes.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == summary["episodes"] > 0
    assert all(1 <= int(r["length"]) <= 500 for r in rows)
    assert (tmp_path / "smoke" / "curve.png").stat().st_size > 1000


def test_ppo_smoke_continuous_with_partial_batches(tmp_path: Path) -> None:
    flags = [
        "--preset",
        "mujoco",
        "--env-id",
        "Pendulum-v1",
        "--total-timesteps",
        "256",
        "--num-envs",
        "2",
    ]
    flags += [
        "--num-workers",
        "2",
        "--num-steps",
        "64",
        "--num-minibatches",
        "4",
        "--update-epochs",
        "2",
    ]
    summary = _run(tmp_path, *flags, "--timeout", "0.0", "--profile")
    assert summary["env_steps"] == 256 and summary["weight_syncs"] == 2
    assert summary["episodes"] == 0  # Pendulum episodes last 200 steps: none ends in 128 per env
    assert summary["last_update"]["approx_kl"] >= 0.0
