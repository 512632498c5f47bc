"""vecsample: fast, hang-free multiprocess sampling of gymnasium environments.

The public surface, re-exported here: ``VecSampler`` (the core) and its ``Options``,
``VectorEnv`` and ``make_vec`` (the gymnasium adapter), ``StepResult``, ``AutoresetMode``,
``EnvMaker``, ``HostedVector`` (one batch-native vector env per worker) and the ``errors``
module. torch is never imported by ``import vecsample``.
"""

from vecsample import errors
from vecsample._wire.protocol import AutoresetMode
from vecsample.adapters.gymnasium import VectorEnv, make_vec
from vecsample.hosted import HostedVector
from vecsample.options import Options
from vecsample.results import StepResult
from vecsample.sampler import EnvMaker, VecSampler

__all__ = [
    "AutoresetMode",
    "EnvMaker",
    "HostedVector",
    "Options",
    "StepResult",
    "VecSampler",
    "VectorEnv",
    "errors",
    "make_vec",
]
__version__ = "0.1.0"
