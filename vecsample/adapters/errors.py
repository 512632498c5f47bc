"""The errors only ``vecsample.VectorEnv`` raises: gymnasium's own error types, subclassed so
that code written for ``AsyncVectorEnv`` catches them, with vecsample's messages. They live
here only (``vecsample.errors`` holds the core's), so the core's errors never load the adapter.
"""

from __future__ import annotations

import builtins

from gymnasium import error as gym_error

from vecsample.errors import (
    ActionShapeError,
    ConfigError,
    PendingCallError,
    UnsupportedSpaceError,
    WorkerError,
)


class SharedMemorySpaceError(UnsupportedSpaceError, ValueError):
    """``VectorEnv(shared_memory=True)`` with an observation space that shared memory cannot hold.

    Both a ``TypeError`` and a ``ValueError``: ``AsyncVectorEnv`` raises the first for spaces of
    dynamic shape (``Graph``, ``Sequence``) and the second for custom spaces.
    """


class UnsupportedOptionError(ConfigError):
    """An ``AsyncVectorEnv`` keyword that vecsample accepts but cannot honour with this value."""


class AlreadyPendingError(PendingCallError, gym_error.AlreadyPendingCallError):
    """``vecsample.VectorEnv``: a call while another one (``name``) waits for its ``*_wait``."""


class ActionCountError(ActionShapeError, TypeError):
    """A single scalar was given where a vector env needs one action per env (also a
    ``TypeError``, as gymnasium raises for an action batch it cannot iterate)."""


_MIRRORS: dict[tuple[type[WorkerError], type[Exception]], type[WorkerError]] = {}


def as_env_exception(exc: WorkerError) -> WorkerError:
    """``exc``, made an instance of the builtin exception type the env raised, if it has one.

    ``AsyncVectorEnv`` re-raises a sub-env's exception as its own type (``ValueError``, ...);
    this keeps vecsample's ``WorkerError`` (worker, env, remote traceback) and adds that type as
    a base, so ``except ValueError`` around ``step`` works with both. A type that is not a
    builtin (only its name crosses the pipe) or cannot share the layout (``OSError``) is left
    out: ``exc`` is returned as it is.
    """
    raised = getattr(builtins, exc.exc_type, None)
    if (not isinstance(raised, type) or not issubclass(raised, Exception)
            or isinstance(exc, raised)):
        return exc
    key = (type(exc), raised)
    if key not in _MIRRORS:
        try:
            _MIRRORS[key] = type(type(exc).__name__, key, {"__module__": key[0].__module__,
                                                            "__qualname__": key[0].__qualname__})
        except TypeError:  # the layouts cannot be combined
            return exc
    try:
        exc.__class__ = _MIRRORS[key]
    except TypeError:
        return exc
    return exc


__all__ = ["ActionCountError", "AlreadyPendingError", "SharedMemorySpaceError",
           "UnsupportedOptionError", "as_env_exception"]
