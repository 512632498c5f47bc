"""gymnasium's vector infos, built for many envs at once.

gymnasium's ``VectorEnv._add_info`` adds one env's info dict to the batch's: each key becomes an
array of ``num_envs`` values (zeros where an env has none) and a mask ``_key``; a dict value
becomes a nested dict of the same form. Here a batch env holds its infos as *columns*, one array
of ``num_envs`` rows per key (or a nested dict of them), and ``add_rows`` adds the rows of a mask
in one go, with the result ``_add_info`` would give env by env: the same keys, dtypes, values
and masks. A key appears only once some env has it.

Each column is a fresh array of the step that computed it (never a view of an env's state), so
that ``every_row``, the common case of a step in which no env ended, hands the columns over as
the infos themselves instead of copying them row by row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

#: A batch's infos as columns: ``key -> (num_envs, ...) array``, or a nested dict of them
#: (a column is an ``np.ndarray``; anything else is taken for a nested dict).
Columns = Mapping[str, Any]


def add_rows(infos: dict[str, Any], columns: Columns, rows: NDArray[np.bool_]) -> dict[str, Any]:
    """Adds the rows of ``rows`` of every column to gymnasium's vector ``infos``."""
    if not rows.any():
        return infos
    for key, column in columns.items():
        if not isinstance(column, np.ndarray):  # a nested dict of columns
            infos[key] = add_rows(infos.get(key, {}), column, rows)
        elif key in infos:
            infos[key][rows] = column[rows]
        else:  # those rows, zeros elsewhere (one np.where instead of zeros and two indexings)
            mask = rows.reshape(rows.shape + (1,) * (column.ndim - 1))
            infos[key] = np.where(mask, column, np.zeros((), dtype=column.dtype))
        mask_key = f"_{key}"
        if mask_key in infos:
            infos[mask_key] |= rows
        else:
            infos[mask_key] = rows.copy()
    return infos


def every_row(columns: Columns, num_envs: int) -> dict[str, Any]:
    """What ``add_rows({}, columns, rows)`` gives when ``rows`` holds every env: the columns
    themselves, which the infos now own, with all-True masks."""
    every = np.ones(num_envs, dtype=np.bool_)
    infos: dict[str, Any] = {}
    for key, column in columns.items():
        infos[key] = column if isinstance(column, np.ndarray) else every_row(column, num_envs)
        infos[f"_{key}"] = every.copy()
    return infos


def add_final(infos: dict[str, Any], obs: NDArray[Any], columns: Columns,
              ended: NDArray[np.bool_]) -> dict[str, Any]:
    """``final_obs`` (an object array of each ended env's last observation, ``None`` elsewhere)
    and ``final_info`` (the ended envs' step infos), as gymnasium's same-step autoreset adds
    them, with their masks."""
    if not ended.any():
        return infos
    final_obs = np.full(ended.shape, None, dtype=object)
    for i in np.flatnonzero(ended).tolist():
        final_obs[i] = obs[i].copy()
    infos["final_obs"], infos["_final_obs"] = final_obs, ended.copy()
    infos["final_info"] = add_rows({}, columns, ended)
    infos["_final_info"] = ended.copy()
    return infos
