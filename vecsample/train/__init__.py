"""Training on top of the core: rollouts into torch tensors, device placement, phase timings.

``Rollout`` (rollout.py) fills ``(T, N, ...)`` tensors from a sampler; ``device.py`` measures
where to sample and where to train; ``profile.py`` splits a loop's wall time into phases.
This package imports torch; the core (``import vecsample``) never does.
"""

from vecsample.extras import require

require("torch", feature="vecsample.train")

from vecsample.train.rollout import Rollout, RolloutBatch  # noqa: E402 (after the check)

__all__ = ["Rollout", "RolloutBatch"]
