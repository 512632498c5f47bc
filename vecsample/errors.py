"""Every exception vecsample raises, in one place.

Each class also derives from the builtin a caller would naturally catch (``ValueError`` for bad
input, ``RuntimeError`` for a broken worker, ``TimeoutError`` for a deadline), so code written
for gymnasium's vector envs keeps working. Messages say what was expected, what was got, and how
to fix it.
"""

from __future__ import annotations

from typing import Any


class VecSampleError(Exception):
    """Base class of every error raised by vecsample."""


# --- misuse of the API -------------------------------------------------------------------------


class ConfigError(VecSampleError, ValueError):
    """The sampler was configured in a way that cannot work (counts, start method, options)."""


class UnsupportedSpaceError(VecSampleError, TypeError):
    """A space type that cannot live in shared memory without per-step pickling."""


class EnvFactoryError(VecSampleError, RuntimeError):
    """An env factory could not be pickled, raised while building, or built mismatched spaces."""


class ClosedError(VecSampleError, RuntimeError):
    """A call was made after ``close()``."""


class PendingCallError(VecSampleError, RuntimeError):
    """A call is out of order with respect to what is pending (the state machine said no)."""


class NoPendingError(PendingCallError):
    """``step_recv`` was called while no worker had a step in flight."""


class WorkerBusyError(PendingCallError):
    """``step_send`` targeted a worker whose previous step has not been received yet."""


class WorkerIndexError(VecSampleError, IndexError):
    """A worker index outside ``range(num_workers)``."""


class ActionError(VecSampleError, ValueError):
    """Base class of the errors for actions rejected before anything is sent."""


class ActionShapeError(ActionError):
    """The action batch has the wrong shape."""


class ActionDtypeError(ActionError):
    """The action batch has a dtype that cannot be cast safely to the action space's dtype."""


class ActionSpaceError(ActionError):
    """An action lies outside the action space (out of bounds, NaN, wrong category)."""


# --- failures on the worker side ---------------------------------------------------------------


class RemoteTraceback(Exception):
    """Carries the text of a traceback raised in a worker, so it is printed with the error."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


class WorkerError(VecSampleError, RuntimeError):
    """An env raised inside a worker. Carries the worker, the env and the remote traceback."""

    def __init__(
        self,
        message: str,
        *,
        worker: int,
        env: int | None,
        command: str,
        remote_traceback: str = "",
        results: list[Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.worker = worker
        self.env = env
        self.command = command
        self.remote_traceback = remote_traceback
        #: Results that were received in the same call before the failure: nothing is lost.
        self.results: list[Any] = results if results is not None else []


class WorkerDiedError(WorkerError):
    """A worker process exited (crash, ``os._exit``, SIGKILL) while the parent expected a reply."""

    def __init__(
        self,
        message: str,
        *,
        worker: int,
        exitcode: int | None,
        command: str,
        results: list[Any] | None = None,
    ) -> None:
        super().__init__(message, worker=worker, env=None, command=command, results=results)
        self.exitcode = exitcode


class DeadlineExceededError(VecSampleError, TimeoutError):
    """A call's whole-call ``deadline`` passed with workers still silent (reported as hung)."""

    def __init__(
        self, message: str, *, hung_workers: list[int], results: list[Any] | None = None
    ) -> None:
        super().__init__(message)
        self.hung_workers = hung_workers
        #: Results received before the deadline; the hung workers stay pending.
        self.results: list[Any] = results if results is not None else []


class RestartLimitError(WorkerError):
    """A worker failed more often than ``max_restarts`` allows."""


# --- the Ray backend (vecsample.ray) ------------------------------------------------------------


class ActorsLostError(VecSampleError, RuntimeError):
    """Every Ray actor of a RaySampler died more often than ``max_restarts`` allows."""


# --- meta-RL (issue 5) -------------------------------------------------------------------------


class TaskEnvError(ConfigError):
    """An env used for meta-RL has no ``sample_tasks`` / ``reset_task`` (it is not a task env)."""


class EpisodesError(VecSampleError, ValueError):
    """``BatchEpisodes`` was read before it held what was asked (no steps, no advantages)."""


class BaselineFitError(VecSampleError, RuntimeError):
    """The linear baseline's normal equations stayed singular at every regularisation tried."""


# --- device placement --------------------------------------------------------------------------


class PlacementError(VecSampleError, ValueError):
    """A device cannot be used as asked (unknown name, no CUDA, policies that do not match)."""
