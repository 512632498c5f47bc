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


#: What a writer calls its values in its errors: a step's or reset's observation, or the last
#: observation of an episode that the SAME_STEP autoreset keeps in final_obs.
OBS, FINAL_OBS = "observation", "final observation (final_obs)"


def obs_writer(buffers: SharedBuffers, views: list[np.ndarray],
               field: str = OBS) -> Callable[[int, Any], None]:
    """``write(j, value)``: puts env j's (possibly nested) observation into ``views``.

    A fixed-shape leaf's value must have exactly the leaf's shape: numpy would broadcast
    a (2,) observation into a (2, 2) row without a word, so that is an EnvOutputError; so is
    a value numpy cannot convert to the leaf's dtype (a string for a float Box), and one whose
    dtype the leaf's does not take by numpy's same_kind rule (``check_dtype``: float64 for a
    uint8 Box would wrap)."""
    space, obs_leaves = buffers.observation_space, buffers.obs_leaves
    writers = [_leaf_writer(leaf, view, field) for leaf, view in zip(obs_leaves, views,
                                                                      strict=True)]
    # The common case: one bare leaf (not a Dict/Tuple of one), one numpy row assignment.
    if len(views) == 1 and not obs_leaves[0].path:
        return writers[0]

    def write_nested(j: int, value: Any) -> None:
        for write, part in zip(writers, flatten(space, value), strict=True):
            write(j, part)

    return write_nested


def _leaf_writer(leaf: Leaf, view: np.ndarray, field: str) -> Callable[[int, Any], None]:
    """``write(j, value)`` of one leaf: checked (shape, then dtype), then one row assignment.
    A numpy array of the leaf's dtype costs an identity check, one of another dtype seen to
    fit before a set lookup (``fits``)."""
    if not leaf.shared:  # a pickled leaf: one Python object per env, as it comes
        return view.__setitem__
    shape, dtype, fits = leaf.shape, leaf.dtype, {leaf.dtype}

    def write(j: int, value: Any) -> None:
        arr = value if type(value) is np.ndarray else _as_array(leaf, field, value)
        if arr.shape != shape:
            raise _shape_error(leaf, field, value)
        got = arr.dtype
        if got is not dtype and got not in fits:  # numpy's dtypes of its own types are one each
            check_dtype(leaf, field, value, arr, fits)
        try:
            view[j] = value
        except OverflowError as exc:  # Python ints that the leaf's range does not hold
            raise _cast_error(leaf, field, value, "Python ints", _out_of_range(leaf)) from exc
        except (ValueError, TypeError) as exc:
            raise _type_error(leaf, field, value) from exc

    return write


def _as_array(leaf: Leaf, field: str, value: Any) -> np.ndarray:
    try:
        return np.asarray(value)
    except ValueError:  # ragged: rows of different lengths
        raise _shape_error(leaf, field, value) from None


def check_dtype(leaf: Leaf, field: str, value: Any, arr: np.ndarray, fits: set[Any]) -> None:
    """Raises EnvOutputError unless ``value`` (``arr``, as an array) may be written to ``leaf``
    by numpy's same_kind rule, as gymnasium's SyncVectorEnv writes observations (and vecsample
    actions): float64 and int64 go to a float32 leaf, float64 does not go to an int leaf nor
    int64 to uint8. A dtype that passes joins ``fits``, the writer's set of the dtypes it saw
    pass. A Python number, or a list of them, has no dtype of its own (numpy 2 treats Python
    scalars so, NEP 50): its kind decides, and Python ints go to any integer leaf whose range
    holds them (checked on each value: a Discrete observation as a Python int, a uint8 image as
    a list of ints stay as they were)."""
    got, want = arr.dtype, leaf.dtype
    if got.kind not in _NUMERIC_KINDS:
        raise _type_error(leaf, field, value)
    if np.can_cast(got, want, casting="same_kind"):
        fits.add(got)
        return
    if isinstance(value, (np.ndarray, np.generic)) or got.kind not in "iu" or (
            want.kind not in "iu"):
        raise _cast_error(leaf, field, value, f"{got}", f"numpy's same_kind rule does not "
                          f"cast {got} to {want}: the values would wrap or be truncated")
    info = np.iinfo(want)
    if arr.size and not (arr.min() >= info.min and arr.max() <= info.max):
        raise _cast_error(leaf, field, value, f"Python ints ({got})", _out_of_range(leaf))


def _out_of_range(leaf: Leaf) -> str:
    info = np.iinfo(leaf.dtype)
    return (f"by numpy's same_kind rule Python ints go to an integer leaf only within its "
            f"range, {info.min}..{info.max} for {leaf.dtype}, and these are not all within it")


def obs_batcher(buffers: SharedBuffers, views: list[np.ndarray], write: Callable[[int, Any], None],
                cursor: Cursor) -> tuple[Callable[[int, Any], None], Callable[[int], None]]:
    """``(put, flush)`` for a step loop. A bare fixed-shape space gathers the observations in a
    list and ``flush(k)`` writes the first ``k`` with one slice copy, when they stack to exactly
    the rows' shape and to a dtype the leaf takes (one set lookup: ``check_dtype``). Otherwise
    (a scalar for a vector space, a wrong shape, ragged lists, a dtype that does not fit, Python
    ints to check one by one) each row is written on its own: the good ones land, and the first
    bad env is named. Other spaces write each row as it comes."""
    leaf = buffers.obs_leaves[0]
    if len(views) != 1 or leaf.path or not leaf.shared:
        return write, lambda k: None
    view = views[0]
    rows: list[Any] = [None] * len(view)
    fits = {leaf.dtype}

    def flush(k: int) -> None:
        try:
            stacked = np.asarray(rows if k == len(rows) else rows[:k])
        except (ValueError, TypeError):  # ragged: numpy cannot stack them
            stacked = None
        if (stacked is not None and stacked.shape == view[:k].shape
                and (stacked.dtype in fits or _stacks_to_fit(stacked, leaf, fits))):
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


def _stacks_to_fit(stacked: np.ndarray, leaf: Leaf, fits: set[Any]) -> bool:
    """Whether a stack of observations may be copied to the leaf as one (numbers only: strings
    would stack too, and fail the copy with no env to name; Python ints to an integer leaf
    that same_kind refuses are checked one row at a time)."""
    if stacked.dtype.kind not in _NUMERIC_KINDS:
        return False
    if np.can_cast(stacked.dtype, leaf.dtype, casting="same_kind"):
        fits.add(stacked.dtype)
        return True
    return False


def _shape_error(leaf: Leaf, field: str, value: Any) -> EnvOutputError:
    try:
        shape = f"of shape {np.shape(value)}"
    except ValueError:
        shape = "of ragged rows"
    return EnvOutputError(
        f"{field} {leaf.name!r} is a {type(value).__name__} {shape}, "
        f"expected {leaf.shape} of {leaf.dtype} for {leaf.space}; return observations of the "
        f"space's shape (nothing is broadcast)."
    )


def _type_error(leaf: Leaf, field: str, value: Any) -> EnvOutputError:
    return EnvOutputError(
        f"{field} {leaf.name!r} is a {type(value).__name__} ({reprlib.repr(value)}), expected "
        f"{leaf.dtype} values of shape {leaf.shape} for {leaf.space}; return numbers "
        f"of the space's dtype (np.asarray(obs, dtype=space.dtype)) from reset() and step()."
    )


def _cast_error(leaf: Leaf, field: str, value: Any, got: str, why: str) -> EnvOutputError:
    return EnvOutputError(
        f"{field} {leaf.name!r} is {got} ({reprlib.repr(value)}), expected {leaf.dtype} for "
        f"{leaf.space}: {why} (gymnasium's SyncVectorEnv refuses it too); return the space's "
        f"dtype from reset() and step() (round or clip as the env means, then "
        f"np.asarray(obs, dtype=np.{leaf.dtype})), or declare the space with the dtype the env "
        f"returns."
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
