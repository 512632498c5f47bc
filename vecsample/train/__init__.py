"""Training on top of the core: rollouts into torch tensors, device placement, phase timings.

``Rollout`` (rollout.py) fills ``(T, N, ...)`` tensors from a sampler; ``device.py`` measures
where to sample and where to train; ``profile.py`` splits a loop's wall time into phases.
This package imports torch; the core (``import vecsample``) never does.
"""

from vecsample.train.rollout import Rollout, RolloutBatch

__all__ = ["Rollout", "RolloutBatch"]
