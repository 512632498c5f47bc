"""gymnasium's vector infos (``info[k]``, ``info["_k"]``) built from info columns, not per env.

``VectorEnv`` hands every step's ``InfoMap``s here, restarts included: it has no other info
path. In the common step (every worker wrote the same columns, no env reset in it) each key is
its workers' column copies joined end to end. Otherwise each key that lives in a column becomes
one ``np.where`` over whole arrays: the step column, or the reset column for the envs reset in
this step. Only keys that also have pickled
values (another type than their column's, a nested dict, a string, a restart's reset infos)
are built env by env, through gymnasium's own ``_add_info``, so the dtype comes from the first
env that has the key, as in ``SyncVectorEnv``. The result equals what ``SyncVectorEnv``
returns, value for value and dtype for dtype (tests/test_info_columns.py); only the order of
the keys may differ.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from vecsample._wire.infos import Block, Column, InfoMap
from vecsample.types import AutoresetMode

#: gymnasium's ``VectorEnv._add_info(vector_infos, env_info, env_num)``.
AddInfo = Callable[[dict[str, Any], dict[str, Any], int], dict[str, Any]]
#: key -> (its column, values of every env (zeros where absent), presence of every env).
Full = dict[str, tuple[Column, np.ndarray, np.ndarray]]


def _full(blocks: list[Block], n: int) -> Full:
    """Every block's columns placed at their envs' rows, one array per key."""
    joined = _joined(blocks, n)
    if joined is not None:
        return joined
    out: Full = {}
    for lo, columns in blocks:
        for column, values, present in columns:
            if column.key not in out:
                out[column.key] = (column, np.zeros((n, *column.shape), column.dtype),
                                   np.zeros(n, dtype=bool))
            _, full, mask = out[column.key]
            full[lo:lo + len(values)] = values
            mask[lo:lo + len(values)] = present
    return out


def _joined(blocks: list[Block], n: int) -> Full | None:
    """The common step, in two numpy calls a key: every worker wrote the same columns and the
    blocks tile the rows [0, n), so each key's values are the blocks' joined end to end. None
    otherwise (a key some workers lack, a partial batch): ``_full`` places them row by row."""
    if not blocks:
        return None
    ordered = sorted(blocks, key=lambda block: block[0])
    first = [column.index for column, _, _ in ordered[0][1]]
    end = 0
    for lo, columns in ordered:
        if lo != end or [column.index for column, _, _ in columns] != first:
            return None
        end += len(columns[0][1])
    if end != n:
        return None
    if len(ordered) == 1:  # one worker: its copies are already whole
        return {column.key: (column, values, present)
                for column, values, present in ordered[0][1]}
    return {column.key: (column, np.concatenate([cols[j][1] for _, cols in ordered]),
                         np.concatenate([cols[j][2] for _, cols in ordered]))
            for j, (column, _, _) in enumerate(ordered[0][1])}


def _pick(use_b: np.ndarray, a: tuple[Column, np.ndarray, np.ndarray] | None,
          b: tuple[Column, np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray]:
    """Per env, ``b``'s value where ``use_b``, else ``a``'s (zeros and False where absent)."""
    some = a if a is not None else b
    assert some is not None
    column, like, _ = some
    zeros, none = np.zeros_like(like), np.zeros(len(use_b), dtype=bool)
    va, ma = (a[1], a[2]) if a is not None else (zeros, none)
    vb, mb = (b[1], b[2]) if b is not None else (zeros, none)
    shape = (-1, *([1] * len(column.shape)))
    mask = np.where(use_b, mb, ma)
    return np.where(mask.reshape(shape), np.where(use_b.reshape(shape), vb, va), zeros), mask


def _merge(infos: dict[str, Any], use_b: np.ndarray, a: Full, b: Full,
           left: dict[int, dict[str, Any]], add_info: AddInfo) -> dict[str, Any]:
    """Columns of ``a`` (``b`` where ``use_b``) plus the pickled ``left`` per env."""
    slow = {key for info in left.values() for key in info}
    any_b = bool(np.count_nonzero(use_b))
    for key in a.keys() | b.keys():
        pa, pb = a.get(key), b.get(key)
        if pa is not None and pb is not None and (pa[0].dtype, pa[0].shape) != (
                pb[0].dtype, pb[0].shape):
            slow.add(key)
        if key in slow:
            continue
        if pb is None and not any_b and pa is not None:
            # The common step (no env took the reset side, no reset column for the key): the
            # key's full arrays are already the answer (zeros where absent, made for this call).
            values, mask = pa[1], pa[2]
        else:
            values, mask = _pick(use_b, pa, pb)
        if np.count_nonzero(mask):  # a tenth of .any()'s cost on a short array
            infos[key], infos[f"_{key}"] = values, mask
    if slow:
        infos = _by_env(infos, slow, use_b, a, b, left, add_info)
    return infos


def _by_env(infos: dict[str, Any], keys: set[str], use_b: np.ndarray, a: Full, b: Full,
            left: dict[int, dict[str, Any]], add_info: AddInfo) -> dict[str, Any]:
    """``keys`` built env by env with gymnasium's ``_add_info``, in env order."""
    for i in range(len(use_b)):
        source = b if use_b[i] else a
        info = {}
        for key in keys:
            found = source.get(key)
            if found is not None and found[2][i]:
                info[key] = found[0].python(found[1], np.array([i]))[0]
        info.update(left.get(i, {}))
        if info:
            infos = add_info(infos, info, i)
    return infos


def build(step: InfoMap, reset: InfoMap, mode: AutoresetMode, has_final: np.ndarray,
          final_obs: Callable[[int], Any], add_info: AddInfo) -> dict[str, Any]:
    """The vector infos of one step of every env, a restart's included (its infos are
    leftovers beside the other workers' columns)."""
    s, r = step.columnar(), reset.columnar()
    finals = mode is AutoresetMode.SAME_STEP and bool(np.count_nonzero(has_final))
    if not (s[0] or s[1] or r[0] or r[1] or finals):
        return {}  # no info at all this step (CartPole's common case): nothing to build
    n = len(has_final)
    if not (r[0] or r[1] or s[1] or finals):
        # The common step: columns only, no env reset in it. Each key present in some env
        # is its joined column and the presence mask, as they are.
        return {name: value for key, (_, values, mask) in _full(s[0], n).items()
                if np.count_nonzero(mask) for name, value in ((key, values), (f"_{key}", mask))}
    s_full, r_full = _full(s[0], n), _full(r[0], n)
    if mode is AutoresetMode.SAME_STEP:
        use_reset = has_final
    elif mode is AutoresetMode.NEXT_STEP:  # a reset step has no step info: its reset info wins
        use_reset = np.zeros(n, dtype=bool)
        for _, mask in ((c, m) for c, _, m in r_full.values()):
            use_reset |= mask
        use_reset[list(r[1])] = True
    else:
        use_reset = np.zeros(n, dtype=bool)
    left = {i: (r[1].get(i, {}) if use_reset[i] else s[1].get(i, {}))
            for i in set(s[1]) | set(r[1])}
    infos: dict[str, Any] = {}
    if finals:
        infos = _finals(infos, s_full, s[1], has_final, final_obs, add_info)
    return _merge(infos, use_reset, s_full, r_full, {i: v for i, v in left.items() if v},
                  add_info)


def _rows(mask: np.ndarray, column: Column) -> np.ndarray:
    """``mask`` shaped to broadcast over the rows of ``column``'s values."""
    return mask.reshape(-1, *([1] * len(column.shape)))


def _finals(infos: dict[str, Any], s_full: Full, s_left: dict[int, dict[str, Any]],
            ended: np.ndarray, final_obs: Callable[[int], Any], add_info: AddInfo,
            ) -> dict[str, Any]:
    """SAME_STEP's ``final_obs`` and ``final_info`` of the envs that ended in this step."""
    idx = np.flatnonzero(ended)
    obs = np.full(len(ended), None, dtype=object)
    for i in idx:
        obs[i] = final_obs(int(i))
    only_ended = {key: (c, np.where(_rows(ended, c), v, 0).astype(v.dtype, copy=False),
                        m & ended) for key, (c, v, m) in s_full.items()}
    none = np.zeros(len(ended), dtype=bool)
    final_info = _merge({}, none, only_ended, {},
                        {int(i): s_left[int(i)] for i in idx if s_left.get(int(i))}, add_info)
    infos["final_obs"], infos["_final_obs"] = obs, ended.copy()
    infos["final_info"], infos["_final_info"] = final_info, ended.copy()
    return infos
