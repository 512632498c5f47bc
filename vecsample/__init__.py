"""vecsample: fast, hang-free multiprocess sampling of gymnasium environments.

The public surface, re-exported here: ``VecSampler`` (the core) and its ``Options``,
``VectorEnv`` and ``make_vec`` (the gymnasium adapter), ``StepResult``, ``AutoresetMode``,
``EnvMaker``, ``HostedVector`` (one batch-native vector env per worker) and the ``errors``
module. torch is never imported by ``import vecsample``. The subpackages ``envs``, ``maml``,
``ray``, ``sb3``, ``tools`` and ``train`` load on first use (``vecsample.sb3.VecEnv`` after a
plain ``import vecsample``), as ``import vecsample.sb3`` would load them; one whose extra is
missing raises ``MissingExtraError`` then, naming the extra.
"""

import importlib
from types import ModuleType

from vecsample import errors
from vecsample.adapters.gymnasium import VectorEnv, make_vec
from vecsample.factories import EnvMaker
from vecsample.hosted import HostedVector
from vecsample.options import Options
from vecsample.results import StepResult
from vecsample.sampler import VecSampler
from vecsample.types import AutoresetMode

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

#: Public subpackages that ``import vecsample`` leaves unloaded (some need an extra).
_SUBPACKAGES = frozenset({"envs", "maml", "ray", "sb3", "tools", "train"})


def __getattr__(name: str) -> ModuleType:
    """``vecsample.<subpackage>`` on first use: imported then, not by ``import vecsample``."""
    if name in _SUBPACKAGES:
        return importlib.import_module(f"vecsample.{name}")
    raise AttributeError(f"module 'vecsample' has no attribute {name!r}")
