"""vecsample: fast, hang-free multiprocess sampling of gymnasium environments.

The public surface, re-exported here: ``VecSampler`` (the core), ``VectorEnv`` and ``make_vec``
(the gymnasium adapter), ``StepResult``, ``AutoresetMode``, ``EnvMaker``, ``HostedVector`` (one
batch-native vector env per worker) and the ``errors`` module. torch is never imported by
``import vecsample``.
"""

from vecsample import errors
from vecsample.hosted import HostedVector
from vecsample.protocol import AutoresetMode
from vecsample.results import StepResult
from vecsample.sampler import EnvMaker, VecSampler
from vecsample.vector_env import VectorEnv, make_vec

__all__ = [
    "AutoresetMode",
    "EnvMaker",
    "HostedVector",
    "StepResult",
    "VecSampler",
    "VectorEnv",
    "errors",
    "make_vec",
]
__version__ = "0.1.0"
