"""The array types of the batch envs, one row per env: ``Array`` (float64, gymnasium's MuJoCo
dtype) and ``Bools`` (a flag or mask per env)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]
Bools = NDArray[np.bool_]
