"""gymnasium's vector infos (``info[k]``, ``info["_k"]``), built from info columns: the one
builder of the package.

Infos travel as *columns*: per key, one array of ``num_envs`` rows (or a nested dict of such
arrays), with a presence mask. Two sources hand them here:

- a batch-native env (``vecsample.envs.mujoco_batch``) computes its step's infos as columns,
  ``StepInfos``, and returns them inside a ``LazyInfos`` (``from_columns`` builds them); a
  hosted block writes those columns into the shared info columns as they are, without
  building anything (``_worker/hosted_block.py``);
- ``VectorEnv`` gets every step's ``InfoMap``s, restarts included: the columns the workers
  wrote in shared memory (``_wire/infos.py``) and the pickled rest (``build``), and builds its
  step's infos at once, as the plain ``dict`` gymnasium returns (its vector tests compare the
  type, which a ``dict`` filled when first read fails).

``LazyInfos`` is a ``dict`` that holds nothing until it is first read: a caller of a batch env
who never reads a step's infos pays nothing for them, one who reads them pays once per step,
and a hosted block reads the columns without building. Each key that
lives in a column becomes one ``np.where`` over whole arrays (the step's values, or the reset's
for the envs reset in this step); a key in every env of the step's columns only, the common
step, is its column as it is. Only keys that also have pickled values (another type than their
column's, a string, a restart's reset infos) or whose step and reset columns differ in dtype or
shape are built env by env, through gymnasium's own ``_add_info``, so the dtype comes from the
first env that has the key, as in ``SyncVectorEnv``. The result equals what ``SyncVectorEnv``
returns, value for value, dtype for dtype and mask for mask (tests/test_info_columns.py,
tests/test_mujoco_batch.py); only the order of the keys may differ.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from vecsample._wire.infos import Block, InfoMap
from vecsample.types import AutoresetMode

#: A batch's infos as columns: ``key -> (num_envs, ...) array``, or a nested dict of them (a
#: column is an ``np.ndarray``; anything else is taken for a nested dict).
Columns = Mapping[str, Any]
Bools = NDArray[np.bool_]
#: gymnasium's ``VectorEnv._add_info(vector_infos, env_info, env_num)``.
AddInfo = Callable[[dict[str, Any], dict[str, Any], int], dict[str, Any]]
#: One key's values for every env (zeros where absent, or a nested ``Full``), its presence
#: mask, and the type each env's value has where a shared column says it (else None: numpy's).
Entry = tuple[Any, np.ndarray, "type | None"]
Full = dict[str, Entry]


@dataclass(frozen=True)
class StepInfos:
    """One step's infos of a batch as columns, as a batch-native env computes them.

    ``step``: each env's step info, valid in the rows of ``step_rows``; ``reset``: the infos
    of the resets made in this step (autoreset, or ``reset()``), valid in the rows of
    ``reset_rows``. Under SameStep ``ended`` names the envs that ended in this step: their
    step info is gymnasium's ``final_info`` and their last observations are the rows of
    ``final_obs`` (a batch); None otherwise. Every array is the step's own (never a view of an
    env's state): the infos built from them may hand them over as they are."""

    step: Columns
    step_rows: Bools
    reset: Columns
    reset_rows: Bools
    ended: Bools | None = None
    final_obs: Any = None


class LazyInfos(dict[str, Any]):
    """gymnasium's vector infos: a ``dict``, filled by ``build()`` the first time it is read.

    Every way of reading or changing a dict fills it first (indexing, ``in``, ``len``,
    iteration, ``keys``/``items``/``values``, ``get``, ``==``, ``repr``, ``dict(infos)``,
    ``{**infos}``, pickling and copying, which give a plain dict). ``columns`` is what it is
    built from while it is not built: a hosted block writes those to shared memory instead."""

    __slots__ = ("_build", "columns")

    def __init__(self, build: Callable[[], dict[str, Any]],
                 columns: StepInfos | None = None) -> None:
        super().__init__()
        self._build: Callable[[], dict[str, Any]] | None = build
        self.columns = columns

    def built(self) -> LazyInfos:
        """Itself, filled (once: the first read builds, the next ones only read)."""
        build = self._build
        if build is not None:
            self._build = self.columns = None
            dict.update(self, build())
        return self

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return dict, (dict(self.built().items()),)


def _filling(name: str) -> Callable[..., Any]:
    """``dict``'s method ``name``, run on the filled dict."""
    method = getattr(dict, name)

    def fill_then(self: LazyInfos, *args: Any, **kwargs: Any) -> Any:
        return method(self.built(), *args, **kwargs)

    fill_then.__name__ = fill_then.__qualname__ = name
    return fill_then


for _name in ("__getitem__", "__setitem__", "__delitem__", "__contains__", "__iter__",
              "__reversed__", "__len__", "__repr__", "__eq__", "__ne__", "__or__", "__ror__",
              "__ior__", "keys", "values", "items", "get", "pop", "popitem", "setdefault",
              "update", "copy", "clear"):
    setattr(LazyInfos, _name, _filling(_name))


# --- the columns of a batch env ------------------------------------------------------------------


def _table(columns: Columns, rows: Bools) -> Full:
    """``columns`` present in ``rows``; a nested dict of columns is a nested table."""
    return {key: (column if isinstance(column, np.ndarray) else _table(column, rows), rows, None)
            for key, column in columns.items()}


def from_columns(infos: StepInfos, add_info: AddInfo) -> dict[str, Any]:
    """gymnasium's vector infos of a batch env's step (``add_info``: its ``_add_info``, for a
    key whose step and reset columns differ in dtype)."""
    step = _table(infos.step, infos.step_rows)
    out: dict[str, Any] = {}
    ended = infos.ended
    if ended is not None and bool(np.count_nonzero(ended)):
        batch = infos.final_obs
        out = _finals(out, step, {}, ended, lambda i: batch[i].copy(), add_info)
    return _merge(out, infos.reset_rows, step, _table(infos.reset, infos.reset_rows), {},
                  add_info)


# --- the columns the workers wrote ---------------------------------------------------------------


def _full(blocks: list[Block], n: int) -> Full:
    """Every block's columns placed at their envs' rows, one array per key."""
    joined = _joined(blocks, n)
    if joined is not None:
        return joined
    out: Full = {}
    for lo, columns in blocks:
        for column, values, present in columns:
            if column.key not in out:
                out[column.key] = (np.zeros((n, *column.shape), column.dtype),
                                   np.zeros(n, dtype=bool), column.kind)
            full, mask, _ = out[column.key]
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
        return {column.key: (values, present, column.kind)
                for column, values, present in ordered[0][1]}
    return {column.key: (np.concatenate([cols[j][1] for _, cols in ordered]),
                         np.concatenate([cols[j][2] for _, cols in ordered]), column.kind)
            for j, (column, _, _) in enumerate(ordered[0][1])}


def _plain(full: Full) -> dict[str, Any] | None:
    """The common step's vector infos, no env reset or ended in it and every key present in
    every env: the columns as ``_full`` gives them (each value array and its mask, in column
    order), what ``_merge`` would return for them, without picking; None otherwise."""
    infos: dict[str, Any] = {}
    for key, (values, present, _) in full.items():
        if not present.all():
            return None
        infos[key], infos[f"_{key}"] = values, present
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
    s_full = _full(s[0], n)
    if not (r[0] or r[1] or s[1] or finals):
        plain = _plain(s_full)
        if plain is not None:
            return plain
    r_full = _full(r[0], n)
    if mode is AutoresetMode.SAME_STEP:
        use_reset = has_final
    elif mode is AutoresetMode.NEXT_STEP:  # a reset step has no step info: its reset info wins
        use_reset = np.zeros(n, dtype=bool)
        for _, mask, _ in r_full.values():
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


# --- both ----------------------------------------------------------------------------------------


def _rows(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``mask`` shaped to broadcast over the rows of ``values``."""
    return mask.reshape(-1, *([1] * (values.ndim - 1)))


def _clash(a: Entry | None, b: Entry | None) -> bool:
    """Whether a key's step and reset columns differ in kind, dtype or shape (built env by
    env then, the first env's dtype winning, as gymnasium's ``_add_info`` does)."""
    if a is None or b is None:
        return False
    va, vb = a[0], b[0]
    if isinstance(va, np.ndarray) and isinstance(vb, np.ndarray):
        return (va.dtype, va.shape, a[2]) != (vb.dtype, vb.shape, b[2])
    return isinstance(va, np.ndarray) or isinstance(vb, np.ndarray)


def _pick(use_b: np.ndarray, a: Entry | None, b: Entry | None) -> tuple[Any, np.ndarray]:
    """Per env, ``b``'s value where ``use_b``, else ``a``'s (zeros and False where absent)."""
    none = np.zeros(len(use_b), dtype=bool)
    ma, mb = (a[1] if a is not None else none), (b[1] if b is not None else none)
    mask = np.where(use_b, mb, ma)
    some = a if a is not None else b
    assert some is not None
    if not isinstance(some[0], np.ndarray):  # a nested dict of columns
        return _merge({}, use_b, a[0] if a is not None else {}, b[0] if b is not None else {},
                      {}, None), mask
    if b is None and mask.all():  # the common step: the step's column, whole
        return some[0], mask
    zeros = np.zeros_like(some[0])
    va, vb = (a[0] if a is not None else zeros), (b[0] if b is not None else zeros)
    return np.where(_rows(mask, zeros), np.where(_rows(use_b, zeros), vb, va), zeros), mask


def _merge(infos: dict[str, Any], use_b: np.ndarray, a: Full, b: Full,
           left: dict[int, dict[str, Any]], add_info: AddInfo | None) -> dict[str, Any]:
    """Columns of ``a`` (``b`` where ``use_b``) plus the pickled ``left`` per env."""
    slow = {key for info in left.values() for key in info}
    for key in [*a, *(key for key in b if key not in a)]:
        pa, pb = a.get(key), b.get(key)
        if key in slow or _clash(pa, pb):
            slow.add(key)
            continue
        values, mask = _pick(use_b, pa, pb)
        if np.count_nonzero(mask):  # a tenth of .any()'s cost on a short array
            infos[key], infos[f"_{key}"] = values, mask
    if slow:
        assert add_info is not None, "a nested dict of columns with clashing keys"
        infos = _by_env(infos, slow, use_b, a, b, left, add_info)
    return infos


def _one(entry: Entry, i: int) -> Any:
    """Env ``i``'s value of a key, with the type the env gave it."""
    values, _, kind = entry
    if not isinstance(values, np.ndarray):
        return {key: _one(sub, i) for key, sub in values.items() if sub[1][i]}
    return values[i].item() if kind in (int, float, bool) else values[i]


def _by_env(infos: dict[str, Any], keys: set[str], use_b: np.ndarray, a: Full, b: Full,
            left: dict[int, dict[str, Any]], add_info: AddInfo) -> dict[str, Any]:
    """``keys`` built env by env with gymnasium's ``_add_info``, in env order."""
    for i in range(len(use_b)):
        source = b if use_b[i] else a
        info = {}
        for key in keys:
            found = source.get(key)
            if found is not None and found[1][i]:
                info[key] = _one(found, i)
        info.update(left.get(i, {}))
        if info:
            infos = add_info(infos, info, i)
    return infos


def _finals(infos: dict[str, Any], s_full: Full, s_left: dict[int, dict[str, Any]],
            ended: np.ndarray, final_obs: Callable[[int], Any], add_info: AddInfo,
            ) -> dict[str, Any]:
    """SAME_STEP's ``final_obs`` and ``final_info`` of the envs that ended in this step."""
    idx = np.flatnonzero(ended)
    obs = np.full(len(ended), None, dtype=object)
    for i in idx.tolist():
        obs[i] = final_obs(i)
    none = np.zeros(len(ended), dtype=bool)
    final_info = _merge({}, none, _only(s_full, ended), {},
                        {int(i): s_left[int(i)] for i in idx if s_left.get(int(i))}, add_info)
    infos["final_obs"], infos["_final_obs"] = obs, ended.copy()
    infos["final_info"], infos["_final_info"] = final_info, ended.copy()
    return infos


def _only(full: Full, rows: np.ndarray) -> Full:
    """``full`` in ``rows`` only: zeros and absent elsewhere."""
    out: Full = {}
    for key, (values, mask, kind) in full.items():
        if isinstance(values, np.ndarray):
            values = np.where(_rows(rows, values), values, 0).astype(values.dtype, copy=False)
        else:
            values = _only(values, rows)
        out[key] = (values, mask & rows, kind)
    return out
