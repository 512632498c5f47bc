"""Writing a block's rows of shared memory: observation writers, the batcher the step loops use,
the pickled lane, and the errors for env outputs that do not fit their rows."""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vecsample._wire.infos import InfoRecord
from vecsample._wire.shm import Lane, SharedBuffers
from vecsample._wire.spaces import Leaf, flatten
from vecsample._worker.step_loop import Cursor
from vecsample.errors import EnvOutputError

#: numpy dtype kinds a batch of observations may stack to and be copied in one slice: bool,
#: ints, floats, complex (not strings, bytes or objects).
_NUMERIC_KINDS = "biufc"


def lane(buffers: SharedBuffers, lo: int, count: int) -> Lane:
    """The pickled observation leaves of rows ``[lo, lo + count)``, to send with a step or a
    reset reply."""
    return buffers.lane(lo, lo + count)


def obs_writer(buffers: SharedBuffers, views: list[np.ndarray]) -> Callable[[int, Any], None]:
    """``write(j, value)``: puts env j's (possibly nested) observation into ``views``.

    A fixed-shape leaf's value must have exactly the leaf's shape: numpy would broadcast
    a (2,) observation into a (2, 2) row without a word, so that is an EnvOutputError; so is
    a value numpy cannot convert to the leaf's dtype (a string for a float Box)."""
    space, obs_leaves = buffers.observation_space, buffers.obs_leaves
    shapes = [leaf.shape if leaf.shared else None for leaf in obs_leaves]
    # The common case: one bare leaf (not a Dict/Tuple of one), one numpy row assignment.
    if len(views) == 1 and not obs_leaves[0].path:
        view, shape = views[0], shapes[0]

        def write(j: int, value: Any) -> None:
            if shape is not None and shape != (
                    value.shape if type(value) is np.ndarray else np.shape(value)):
                raise _shape_error(obs_leaves[0], value)
            try:
                view[j] = value
            except (ValueError, TypeError) as exc:
                raise _type_error(obs_leaves[0], value) from exc

        return write

    def write_nested(j: int, value: Any) -> None:
        for leaf, leaf_view, shape, part in zip(obs_leaves, views, shapes,
                                                flatten(space, value), strict=True):
            if shape is not None and np.shape(part) != shape:
                raise _shape_error(leaf, part)
            try:
                leaf_view[j] = part
            except (ValueError, TypeError) as exc:
                raise _type_error(leaf, part) from exc

    return write_nested


def obs_batcher(buffers: SharedBuffers, views: list[np.ndarray], write: Callable[[int, Any], None],
                cursor: Cursor) -> tuple[Callable[[int, Any], None], Callable[[int], None]]:
    """``(put, flush)`` for a step loop. A bare fixed-shape space gathers the observations in a
    list and ``flush(k)`` writes the first ``k`` with one slice copy. When they do not stack to
    exactly the rows' shape (a scalar for a vector space, a wrong shape, ragged lists), each row
    is written on its own: the good ones land, and the first bad env is named. Other spaces
    write each row as it comes."""
    leaf = buffers.obs_leaves[0]
    if len(views) != 1 or leaf.path or not leaf.shared:
        return write, lambda k: None
    view = views[0]
    rows: list[Any] = [None] * len(view)

    def flush(k: int) -> None:
        try:
            stacked = np.asarray(rows if k == len(rows) else rows[:k])
        except (ValueError, TypeError):  # ragged: numpy cannot stack them
            stacked = None
        # Numbers only: strings would stack too, and fail the copy with no env to name.
        if (stacked is not None and stacked.shape == view[:k].shape
                and stacked.dtype.kind in _NUMERIC_KINDS):
            view[:k] = stacked
            return
        bad: list[tuple[int, Exception]] = []
        for j in range(k):
            try:
                write(j, rows[j])
            except (EnvOutputError, ValueError, TypeError) as exc:
                bad.append((j, exc))
        if bad:
            cursor.env = bad[0][0]
            raise bad[0][1]

    return rows.__setitem__, flush


def _shape_error(leaf: Leaf, value: Any) -> EnvOutputError:
    return EnvOutputError(
        f"observation {leaf.name!r} is a {type(value).__name__} of shape {np.shape(value)}, "
        f"expected {leaf.shape} of {leaf.dtype} for {leaf.space}; return observations of the "
        f"space's shape (nothing is broadcast)."
    )


def _type_error(leaf: Leaf, value: Any) -> EnvOutputError:
    return EnvOutputError(
        f"observation {leaf.name!r} is a {type(value).__name__} ({reprlib.repr(value)}), "
        f"expected {leaf.dtype} values of shape {leaf.shape} for {leaf.space}; return numbers "
        f"of the space's dtype (np.asarray(obs, dtype=space.dtype)) from reset() and step()."
    )


def _scalar_error(field: str, value: Any) -> EnvOutputError:
    return EnvOutputError(
        f"{field} has shape {np.shape(value)}, expected a scalar; return float(reward), "
        f"bool(terminated) and bool(truncated) from step()."
    )


def first_non_scalar(rewards: list[Any], terminated: list[Any], truncated: list[Any],
                      count: int) -> tuple[int, EnvOutputError]:
    """The first env (and its error) whose reward or flags are not scalars."""
    for j in range(count):
        for name, values in (("reward", rewards), ("terminated", terminated),
                             ("truncated", truncated)):
            if np.ndim(values[j]) != 0:
                return j, _scalar_error(name, values[j])
    return 0, EnvOutputError("a step's reward or flags could not be stored as scalars")


def first_bad_info(records: list[InfoRecord]) -> tuple[int, EnvOutputError] | None:
    """The first env (and its error) whose info, or the info of its autoreset's reset, is not
    a dict; None if every one is (the caller's error was something else)."""
    for j, info, reset_info in records:
        for field, value in (("info (the fifth value of step())", info),
                             ("reset info (of reset(), called by the autoreset)", reset_info)):
            if value and not isinstance(value, Mapping):
                return j, EnvOutputError(
                    f"{field} is a {type(value).__name__} ({reprlib.repr(value)}), expected a "
                    f"dict; return a dict of the step's information from step() and reset(), "
                    f"{{}} for none (gymnasium's API).")
    return None
