"""Spaces as flat lists of leaves, so every step's fixed-shape data fits in shared memory.

A space is flattened depth-first into ``Leaf`` entries, and nested Dict/Tuple values are taken
apart and put back together in the same order. Box, Discrete, MultiDiscrete and MultiBinary
leaves have a fixed shape and dtype: they live in shared memory. Any other space (Text, Graph,
Sequence, OneOf, a custom Space) is a *pickled* leaf: one Python object per env, carried through
the worker's pipe with the step (docs/semantics.md, "Spaces and their lanes"). Only something
that is not a gymnasium Space at all is refused, with ``UnsupportedSpaceError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import singledispatch
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from vecsample.errors import (
    ActionDtypeError,
    ActionShapeError,
    ActionSpaceError,
    UnsupportedSpaceError,
)

#: Actions as a caller passes them: array-likes with one row per env, nested like the space.
Actions = npt.ArrayLike | Mapping[str, "Actions"] | tuple["Actions", ...]

SHARED = "Box, Discrete, MultiDiscrete, MultiBinary"


@dataclass(frozen=True)
class Leaf:
    """One fixed-shape array of a space: its path in the nesting, shape, dtype and space."""

    path: tuple[str | int, ...]
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    space: spaces.Space[Any]
    #: False: one Python object per env, pickled through the pipe (dtype object, shape ()).
    shared: bool = True

    @property
    def name(self) -> str:
        return "/".join(str(p) for p in self.path) or "<root>"


@singledispatch
def leaves(space: object, path: tuple[str | int, ...] = ()) -> list[Leaf]:
    """The leaves of ``space`` in depth-first order: shared ones for Box, Discrete,
    MultiDiscrete and MultiBinary, a pickled one
    for any other Space; anything that is not a Space raises UnsupportedSpaceError."""
    if isinstance(space, spaces.Space):
        return [Leaf(path, (), np.dtype(object), space, shared=False)]
    where = f" at {'/'.join(map(str, path))}" if path else ""
    raise UnsupportedSpaceError(
        f"expected a gymnasium.spaces.Space{where}, got {type(space).__name__} ({space!r}); "
        f"give the env an observation_space and action_space from gymnasium.spaces."
    )


@leaves.register
def _(space: spaces.Box, path: tuple[str | int, ...] = ()) -> list[Leaf]:
    return [Leaf(path, tuple(space.shape), np.dtype(space.dtype), space)]


@leaves.register
def _(space: spaces.Discrete, path: tuple[str | int, ...] = ()) -> list[Leaf]:
    return [Leaf(path, (), np.dtype(space.dtype), space)]


@leaves.register
def _(space: spaces.MultiDiscrete, path: tuple[str | int, ...] = ()) -> list[Leaf]:
    return [Leaf(path, tuple(space.shape), np.dtype(space.dtype), space)]


@leaves.register
def _(space: spaces.MultiBinary, path: tuple[str | int, ...] = ()) -> list[Leaf]:
    return [Leaf(path, tuple(space.shape), np.dtype(space.dtype), space)]


@leaves.register
def _(space: spaces.Dict, path: tuple[str | int, ...] = ()) -> list[Leaf]:
    return [leaf for key, sub in space.spaces.items() for leaf in leaves(sub, (*path, key))]


@leaves.register(spaces.Tuple)
def _(space: Any, path: tuple[str | int, ...] = ()) -> list[Leaf]:
    return [leaf for i, sub in enumerate(space.spaces) for leaf in leaves(sub, (*path, i))]


def flatten(space: spaces.Space[Any], value: Any) -> list[Any]:
    """Takes a (possibly nested) value apart into one entry per leaf, in leaf order."""
    if isinstance(space, spaces.Dict):
        return [x for key, sub in space.spaces.items() for x in flatten(sub, _get(value, key))]
    if isinstance(space, spaces.Tuple):
        return [x for i, sub in enumerate(space.spaces) for x in flatten(sub, _get(value, i))]
    return [value]


def _get(value: Any, key: str | int) -> Any:
    try:
        return value[key]
    except (KeyError, IndexError, TypeError) as exc:
        raise ActionShapeError(
            f"expected a value with entry {key!r} for a Dict/Tuple space, got "
            f"{type(value).__name__}; pass the same nesting as the space."
        ) from exc


def unflatten(space: spaces.Space[Any], parts: Iterator[Any]) -> Any:
    """Puts leaf values back into the nesting of ``space`` (dict for Dict, tuple for Tuple)."""
    if isinstance(space, spaces.Dict):
        return {key: unflatten(sub, parts) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(unflatten(sub, parts) for sub in space.spaces)
    return next(parts)


def index_tree(tree: Any, index: Any) -> Any:
    """``tree[index]`` applied to every array of a nested dict/tuple structure."""
    if isinstance(tree, dict):
        return {k: index_tree(v, index) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(index_tree(v, index) for v in tree)
    return tree[index]


def concat_trees(trees: Sequence[Any]) -> Any:
    """The arrays of several nested dict/tuple structures of one shape, joined along rows."""
    first = trees[0]
    if isinstance(first, dict):
        return {k: concat_trees([t[k] for t in trees]) for k in first}
    if isinstance(first, tuple):
        return tuple(concat_trees([t[i] for t in trees]) for i in range(len(first)))
    return np.concatenate(trees)


def copy_tree(tree: Any) -> Any:
    """A deep copy of a nested dict/tuple of arrays."""
    if isinstance(tree, dict):
        return {k: copy_tree(v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(copy_tree(v) for v in tree)
    return np.array(tree, copy=True)


# --- action validation, done in the parent before anything is sent -----------------------------


def check_action_leaf(
    leaf: Leaf, value: Any, batch: int, bounds: Callable[[np.ndarray], None] | None
) -> np.ndarray:
    """Returns ``value`` as an array of shape (batch, *leaf.shape) or raises a typed ActionError.

    ``bounds``: the leaf's ``bounds_checker`` (None: trust the values, ``check_actions=False``).
    """
    if not leaf.shared:
        return _object_batch(leaf, value, batch, bounds)
    arr = value if isinstance(value, np.ndarray) else _as_array(leaf, value, batch)
    if arr.shape != (batch, *leaf.shape):
        raise ActionShapeError(
            f"action {leaf.name!r}: expected shape {(batch, *leaf.shape)} (one row per env), "
            f"got {arr.shape}. Stack one action per env along the first axis."
        )
    if arr.dtype != leaf.dtype and not np.can_cast(arr.dtype, leaf.dtype, casting="same_kind"):
        raise ActionDtypeError(
            f"action {leaf.name!r}: expected dtype {leaf.dtype} for {leaf.space}, got "
            f"{arr.dtype}. Convert with np.asarray(actions, dtype=np.{leaf.dtype})."
        )
    if bounds is not None:
        bounds(arr)
    return arr


def _as_array(leaf: Leaf, value: Any, batch: int) -> np.ndarray:
    try:
        return np.asarray(value)
    except ValueError as exc:  # a ragged list: rows of different lengths
        raise ActionShapeError(
            f"action {leaf.name!r}: expected shape {(batch, *leaf.shape)} (one row per env), "
            f"got a ragged sequence ({exc}). Give every env's action the same shape."
        ) from None


class ActionWriter:
    """Checks a batch of actions against the action space, then copies it to shared memory.

    Every leaf is checked before any is written, so a rejected batch leaves nothing behind.
    """

    def __init__(self, space: spaces.Space[Any], check_bounds: bool) -> None:
        self._space = space
        self._leaves = leaves(space)
        self._bounds = [bounds_checker(leaf) if check_bounds else None for leaf in self._leaves]
        self._bare = len(self._leaves) == 1 and not self._leaves[0].path

    def write(self, actions: Actions, views: list[np.ndarray], batch: int) -> None:
        """Checks ``actions`` (``batch`` rows, nested like the space) and writes ``views``."""
        for view, part in zip(views, self._checked(actions, batch), strict=True):
            if view.dtype == object:
                view[:] = part  # a pickled leaf: one object per env, no casting
            else:
                np.copyto(view, part, casting="same_kind")

    def write_rows(self, actions: Actions, views: list[np.ndarray], rows: np.ndarray) -> None:
        """Checks ``actions`` (``len(rows)`` rows, nested like the space) and writes them to
        ``rows`` of ``views`` (every env's leaves), in that order: one scatter per leaf."""
        for view, part in zip(views, self._checked(actions, len(rows)), strict=True):
            if view.dtype == object:
                view[rows] = part
            else:
                view[rows] = np.asarray(part).astype(view.dtype, casting="same_kind",
                                                     copy=False)

    def _checked(self, actions: Actions, batch: int) -> list[np.ndarray]:
        """``actions`` checked, one array per leaf of the space (every leaf before any is
        written)."""
        if self._bare:  # the common case: one leaf, no Dict/Tuple to take apart
            return [check_action_leaf(self._leaves[0], actions, batch, self._bounds[0])]
        return [check_action_leaf(leaf, part, batch, bounds) for leaf, part, bounds
                in zip(self._leaves, flatten(self._space, actions), self._bounds, strict=True)]


def _object_batch(leaf: Leaf, value: Any, batch: int,
                  bounds: Callable[[np.ndarray], None] | None) -> np.ndarray:
    """A pickled leaf's actions as a (batch,) object array: a sequence of one object per env."""
    items = list(value) if isinstance(value, (list, tuple, np.ndarray)) else None
    if items is None or len(items) != batch:
        got = f"{type(value).__name__} of length {len(items)}" if items is not None else (
            type(value).__name__)
        raise ActionShapeError(
            f"action {leaf.name!r}: expected a sequence of {batch} actions of {leaf.space} "
            f"(one per env), got {got}. Pass a tuple or list with one action per env."
        )
    arr = np.empty(batch, dtype=object)
    for i, item in enumerate(items):
        arr[i] = item
    if bounds is not None:
        bounds(arr)
    return arr


def bounds_checker(leaf: Leaf) -> Callable[[np.ndarray], None]:
    """The bounds check of one action leaf, with its bounds read once: it runs on every step.

    The common case (one low and one high for every element) costs a min and a max: Python's
    over a list for small integer batches, numpy's reductions otherwise; per-element bounds and
    the error message take the slower elementwise path.
    """
    if not leaf.shared:
        return _contains_checker(leaf)
    # Walk the MRO so user subclasses of Box/Discrete/... are checked like their base.
    for cls in type(leaf.space).__mro__:
        if cls in _BOUNDS:
            return _BOUNDS[cls](leaf)
    raise UnsupportedSpaceError(f"no bounds check for {type(leaf.space).__name__}")


def _contains(space: spaces.Space[Any], value: Any) -> bool:
    """``space.contains(value)``; a space whose contains() raises on the value does not hold it."""
    try:
        return bool(space.contains(value))
    except Exception:  # a custom space's own check failed on this value: it is not in it
        return False


def _contains_checker(leaf: Leaf) -> Callable[[np.ndarray], None]:
    """A pickled leaf: each env's action must be in the space (``space.contains``)."""

    def check(arr: np.ndarray) -> None:
        bad = np.array([not _contains(leaf.space, x) for x in arr], dtype=bool)
        if bad.any():
            raise _out_of_space(leaf, bad, arr, "space.contains() is False")

    return check


_amin, _amax = np.minimum.reduce, np.maximum.reduce
#: Integer action batches up to this size are bounds-checked with Python's min() and max().
_PYTHON_MAX = 256


def _within(arr: np.ndarray, low: Any, high: Any) -> bool:
    """min >= low and max <= high; False for NaN (every comparison with NaN is False)."""
    return arr.size == 0 or bool(_amin(arr, axis=None) >= low and _amax(arr, axis=None) <= high)


def _uniform(bound: np.ndarray) -> Any:
    """The single value of ``bound`` if all its elements are equal, else the array itself."""
    flat = np.asarray(bound).reshape(-1)
    return flat[0] if flat.size and (flat == flat[0]).all() else bound


def _out_of_space(leaf: Leaf, bad: np.ndarray, arr: np.ndarray, rule: str) -> ActionSpaceError:
    rows = np.nonzero(bad.reshape(bad.shape[0], -1).any(axis=1))[0]
    first = int(rows[0])
    return ActionSpaceError(
        f"action {leaf.name!r}: env rows {rows[:8].tolist()} are outside {leaf.space} "
        f"({rule}); e.g. row {first} = {arr[first]!r}. Clip or resample those actions."
    )


def _box_checker(leaf: Leaf) -> Callable[[np.ndarray], None]:
    space = leaf.space
    assert isinstance(space, spaces.Box)
    low, high = _uniform(space.low), _uniform(space.high)
    fast = np.ndim(low) == 0 and np.ndim(high) == 0

    def check(arr: np.ndarray) -> None:
        if fast and _within(arr, low, high):
            return
        if arr.dtype.kind in "fc" and np.isnan(arr).any():
            raise _out_of_space(leaf, np.isnan(arr), arr, "NaN is never in a Box")
        bad = (arr < space.low) | (arr > space.high)
        if bad.any():
            raise _out_of_space(leaf, bad, arr, "below low or above high")

    return check


def _integral_checker(leaf: Leaf, low: Any, high: Any) -> Callable[[np.ndarray], None]:
    low, high = _uniform(low), _uniform(high)
    fast = np.ndim(low) == 0 and np.ndim(high) == 0

    def check(arr: np.ndarray) -> None:
        kind = arr.dtype.kind
        if kind not in "iub":
            raise ActionDtypeError(
                f"action {leaf.name!r}: expected an integer dtype for {leaf.space}, got "
                f"{arr.dtype} (NaN and fractions are not categories). Convert with "
                f"arr.astype(np.int64)."
            )
        if fast and kind in "iu" and 0 < arr.size <= _PYTHON_MAX:
            # Right after the parent wakes, numpy's reduction machinery runs cold: for a few
            # hundred ints, min() and max() over a list cost less (in a running 2x64 CartPole
            # sampler: 8.4 µs per check against 13.8 for one numpy reduction).
            values = (arr if arr.ndim == 1 else arr.ravel()).tolist()
            if min(values) >= low and max(values) <= high:
                return
        elif fast and _within(arr, low, high):
            return
        bad = (arr < low) | (arr > high)
        if bad.any():
            raise _out_of_space(leaf, bad, arr, f"allowed {low}..{high}")

    return check


def _discrete_checker(leaf: Leaf) -> Callable[[np.ndarray], None]:
    space = leaf.space
    assert isinstance(space, spaces.Discrete)
    return _integral_checker(leaf, int(space.start), int(space.start + space.n - 1))


def _multi_discrete_checker(leaf: Leaf) -> Callable[[np.ndarray], None]:
    space = leaf.space
    assert isinstance(space, spaces.MultiDiscrete)
    return _integral_checker(leaf, space.start, space.start + space.nvec - 1)


def _multi_binary_checker(leaf: Leaf) -> Callable[[np.ndarray], None]:
    return _integral_checker(leaf, 0, 1)


_BOUNDS: dict[type, Callable[[Leaf], Callable[[np.ndarray], None]]] = {
    spaces.Box: _box_checker,
    spaces.Discrete: _discrete_checker,
    spaces.MultiDiscrete: _multi_discrete_checker,
    spaces.MultiBinary: _multi_binary_checker,
}
