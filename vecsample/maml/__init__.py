"""Meta-RL on vecsample: pytorch-maml-rl's sampler API, episodes, baseline, policies, configs."""

from __future__ import annotations

from vecsample.extras import require

require("torch", feature="vecsample.maml", extra="maml")

# The imports below come after the check, so a missing torch is one error that names the extra.
# ruff: noqa: E402
from vecsample.maml.baseline import LinearFeatureBaseline
from vecsample.maml.configs import CONFIGS, MetaConfig, load_config
from vecsample.maml.episodes import BatchEpisodes
from vecsample.maml.losses import reinforce_loss, weighted_mean, weighted_normalize
from vecsample.maml.policies import (
    CategoricalMLPPolicy,
    NormalMLPPolicy,
    Policy,
    get_input_size,
    get_policy_for_env,
)
from vecsample.maml.sampler import MultiTaskSampler

__all__ = [
    "CONFIGS",
    "BatchEpisodes",
    "CategoricalMLPPolicy",
    "LinearFeatureBaseline",
    "MetaConfig",
    "MultiTaskSampler",
    "NormalMLPPolicy",
    "Policy",
    "get_input_size",
    "get_policy_for_env",
    "load_config",
    "reinforce_loss",
    "weighted_mean",
    "weighted_normalize",
]
