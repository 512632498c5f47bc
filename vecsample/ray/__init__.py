"""The Ray backend: one local ``VecSampler`` per actor, rollout chunks with versioned weights.

Imported only when used: this package is the only one that imports ``ray``. See
docs/distributed.md.
"""

from vecsample.extras import require

require("ray", feature="vecsample.ray")

# The imports below come after the check, so a missing ray is one error that names the extra.
# ruff: noqa: E402
from vecsample.ray.actor import Chunk, ChunkCollector, Policy, TorchPolicy, numpy_weights
from vecsample.ray.errors import (
    ActorsLostError,
    ChunkError,
    PolicyError,
    RayShutdownError,
    WeightsError,
)
from vecsample.ray.sampler import RaySampler

__all__ = [
    "ActorsLostError",
    "ChunkError",
    "Chunk",
    "ChunkCollector",
    "Policy",
    "PolicyError",
    "RaySampler",
    "RayShutdownError",
    "TorchPolicy",
    "WeightsError",
    "numpy_weights",
]
