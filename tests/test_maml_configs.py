"""The shipped MAML configs: pytorch-maml-rl's numbers, their key spelling, loading files."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

import vecsample.envs  # noqa: F401  (registers the task envs)
from vecsample.errors import ConfigError
from vecsample.maml import CONFIGS, MetaConfig, load_config

# configs/maml/halfcheetah-dir.yaml of pytorch-maml-rl, as their YAML loader reads it.
HALFCHEETAH_DIR_YAML = {
    "env-name": "HalfCheetahDir-v2",
    "env-kwargs": {"normalization_scale": 10.0, "max_episode_steps": 100},
    "gamma": 0.99,
    "gae-lambda": 1.0,
    "first-order": False,
    "hidden-sizes": [64, 64],
    "nonlinearity": "tanh",
    "fast-batch-size": 20,
    "num-steps": 1,
    "fast-lr": 0.1,
    "num-batches": 500,
    "meta-batch-size": 40,
    "max-kl": 1.0e-2,
    "cg-iters": 10,
    "cg-damping": 1.0e-5,
    "ls-max-steps": 15,
    "ls-backtrack-ratio": 0.8,
}


def test_every_config_of_the_issue_is_shipped() -> None:
    expected = {"2d-navigation", "halfcheetah-vel", "halfcheetah-dir", "ant-vel", "ant-dir"}
    expected |= {"ant-goal"} | {f"bandit-k{k}-n{n}" for k in (5, 10, 50) for n in (10, 100, 500)}
    expected |= {f"metaworld-ml1-{n}" for n in ("reach", "push", "pick-place")}
    expected |= {"metaworld-ml10", "metaworld-ml45"}
    assert set(CONFIGS) == expected


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_config_env_is_registered(name: str) -> None:
    assert CONFIGS[name].env_name in gym.registry


def test_halfcheetah_dir_has_their_numbers() -> None:
    theirs = MetaConfig.from_dict({**HALFCHEETAH_DIR_YAML, "env-name": "HalfCheetahDir-v5"})
    assert CONFIGS["halfcheetah-dir"] == theirs


def test_other_numbers() -> None:
    nav = CONFIGS["2d-navigation"]
    assert (nav.fast_batch_size, nav.meta_batch_size, nav.fast_lr, nav.gamma) == (20, 20, 0.1, 0.99)
    assert nav.env_kwargs == {"low": -0.5, "high": 0.5} and nav.hidden_sizes == (64, 64)
    assert CONFIGS["ant-goal"].env_name == "AntPos-v5"
    assert CONFIGS["ant-goal"].env_kwargs["low"] == -3.0
    assert CONFIGS["halfcheetah-vel"].env_kwargs["high"] == 2.0
    assert CONFIGS["ant-vel"].env_kwargs["high"] == 3.0
    bandit = CONFIGS["bandit-k50-n500"]
    assert (bandit.env_name, bandit.fast_batch_size, bandit.fast_lr) == ("Bandit-K50-v0", 500, 0.5)
    assert (bandit.max_kl, bandit.hidden_sizes, bandit.gamma) == (0.01, (32, 32), 0.95)


def test_round_trip_through_their_spelling(tmp_path: Path) -> None:
    config = CONFIGS["ant-vel"]
    data = config.to_dict()
    assert data["fast-batch-size"] == 20 and data["hidden-sizes"] == [64, 64]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    assert load_config(path) == config


def test_load_by_name_returns_a_private_copy() -> None:
    config = load_config("halfcheetah-dir")
    config.env_kwargs["max_episode_steps"] = 5
    assert CONFIGS["halfcheetah-dir"].env_kwargs["max_episode_steps"] == 100


def test_bad_configs_raise_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No config named"):
        load_config("no-such-config")
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"env-name": "2DNavigation-v0", "fast-batchsize": 3}))
    with pytest.raises(ConfigError, match="fast_batchsize"):
        load_config(path)
