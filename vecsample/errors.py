"""Every exception vecsample raises, in one place.

Each class also derives from the builtin a caller would naturally catch (``ValueError`` for bad
input, ``RuntimeError`` for a broken worker, ``TimeoutError`` for a deadline) and, where gymnasium
has one, from gymnasium's matching error (``AlreadyPendingCallError``, ``NoAsyncCallError``,
``ClosedEnvironmentError``, ``multiprocessing.TimeoutError`` as ``AsyncVectorEnv`` raises it), so
code written for gymnasium's vector envs keeps working. Messages say what was expected, what was
got, and how to fix it.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gymnasium import error as gym_error

if TYPE_CHECKING:
    from vecsample.results import StepResult


class VecSampleError(Exception):
    """Base class of every error raised by vecsample."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors cross processes: a Ray actor's reaches its driver pickled. Most take keyword-only
        # fields, which Exception's own pickling (``cls(*args)``) cannot call, so the copy is
        # rebuilt without ``__init__``, from the message and the fields as they are.
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[VecSampleError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    remote = state.get("remote_traceback", "")
    if remote:  # a cause is not part of the pickled state
        error.__cause__ = RemoteTraceback(remote)
    return error


_UNSET: Any = object()


# --- misuse of the API -------------------------------------------------------------------------


class ConfigError(VecSampleError, ValueError):
    """The sampler was configured in a way that cannot work (counts, start method, options).

    Built from fields (``name``, ``expected``, ``got``, ``fix``) it writes "``name`` must be
    ``expected``, got ``got!r``; ``fix``."; a full sentence can be passed instead.
    """

    def __init__(self, message: str = "", *, name: str = "", expected: str = "",
                 got: Any = _UNSET, fix: str = "") -> None:
        if not message:
            message = f"{name} must be {expected}, got {got!r}" + (f"; {fix}." if fix else ".")
        super().__init__(message)
        self.name = name
        self.expected = expected
        self.got = None if got is _UNSET else got


class UnsupportedSpaceError(VecSampleError, TypeError):
    """A space type that cannot live in shared memory without per-step pickling."""


class ResetMaskError(ConfigError, TypeError):
    """A bad ``options["reset_mask"]``: both a ``ValueError`` (a wrong shape, no True entry) and a
    ``TypeError`` (not an array, not bool), as gymnasium raises one or the other."""


class HostedEnvError(ConfigError):
    """A hosted vector env (``vecsample.HostedVector``) cannot honour what was asked: a method
    (``reset_task``, ``set_attr``), a space or a mode it does not have."""

    def __init__(self, *, feature: str, reason: str, fix: str) -> None:
        super().__init__(f"{feature} with a hosted vector env: {reason}; {fix}.")
        self.feature = feature
        self.reason = reason
        self.fix = fix


class HostedMethodError(HostedEnvError):
    """The hosted vector env lacks the method a command needs (``feature``: ``reset_task``,
    ``set_attr``); ``env`` names its type."""

    def __init__(self, *, feature: str, env: str, fix: str) -> None:
        super().__init__(feature=feature, reason=f"{env} has no {feature} method", fix=fix)
        self.env = env


class AutoresetMismatchError(HostedEnvError):
    """The hosted vector env autoresets in another mode than the sampler reports."""

    def __init__(self, *, env: str, env_mode: str, sampler_mode: str) -> None:
        super().__init__(
            feature=f"autoreset_mode={sampler_mode!r}",
            reason=f"{env} autoresets in mode {env_mode!r} (its metadata['autoreset_mode'])",
            fix=f"pass autoreset_mode={env_mode!r} to the sampler, or host an env built for "
            f"{sampler_mode!r}",
        )
        self.env_mode = env_mode
        self.sampler_mode = sampler_mode


class EnvFactoryError(VecSampleError, RuntimeError):
    """An env factory could not be pickled, raised while building, or built mismatched spaces."""


class FactoryImportError(EnvFactoryError):
    """An env factory (or an env registration it needs) names a module that a spawn or
    forkserver worker cannot import, so the worker cannot unpickle it.

    Raised in the worker, which reports it like any build error; the parent raises it again
    with the worker's message (``module`` and ``context`` are then None).
    """

    def __init__(self, message: str = "", *, module: str | None = None,
                 context: str | None = None, error: str = "",
                 what: str = "an env factory") -> None:
        if not message:
            message = (
                f"{what} could not be unpickled in a worker started with "
                f"context={context!r}: it needs the module {module!r}, which that worker cannot "
                f"import ({error}). A {context} worker is a fresh interpreter: it imports what "
                f"a pickle names, and runs the main script without its "
                f"`if __name__ == \"__main__\":` block. Install {module!r} where the workers "
                f"run, or make it importable before the sampler starts (PYTHONPATH, or "
                f"sys.path at the top of the script); or make the factory a function of the "
                f"main script that imports it when called (such a function travels by value); "
                f"or use context='fork'."
            )
        super().__init__(message)
        self.module = module
        self.context = context


class EnvNotRegisteredError(EnvFactoryError, gym_error.UnregisteredEnv):
    """An env factory made an env id that a spawn or forkserver worker does not have: it was
    registered where a worker does not run it, such as under ``if __name__ == "__main__":``,
    and the factory does not say which id it makes (a closure), so the worker was not given it.
    Also gymnasium's ``UnregisteredEnv``. Raised in the worker; the parent raises it again with
    the worker's message (``context`` is then None)."""

    def __init__(self, message: str = "", *, context: str | None = None,
                 error: str = "") -> None:
        if not message:
            message = (
                f"an env factory asked gymnasium for an env that a worker started with "
                f"context={context!r} does not have ({error}). Such a worker runs the main "
                f"script without its `if __name__ == \"__main__\":` block (context='auto' picks "
                f"forkserver once the parent runs a thread), so an env registered there is "
                f"missing unless vecsample gives the worker its registration, which it does "
                f"for the env ids, EnvMaker(id) and functools.partial(gymnasium.make, id) the "
                f"parent has registered, not for an id made inside another function. Pass the "
                f"id one of those ways, register the env at the top level of the script or in "
                f"a module the factory imports, or use context='fork'."
            )
        super().__init__(message)
        self.context = context


#: The build errors a worker reports by name, which the parent raises again as the same class.
BUILD_ERRORS: dict[str, type[FactoryImportError | EnvNotRegisteredError]] = {
    cls.__name__: cls for cls in (FactoryImportError, EnvNotRegisteredError)}


class MainGuardError(EnvFactoryError):
    """Workers would re-import a main script that builds a sampler at top level, unguarded."""

    def __init__(self, *, script: str, line: int, context: str) -> None:
        super().__init__(
            f"{script}:{line} builds a sampler at the top level of the main script, and "
            f"context={context!r} starts each worker by re-importing that script, so every "
            f"worker would build samplers of its own. Put the script's work under "
            f"`if __name__ == \"__main__\":`, or use context='fork' (Linux, no threads or "
            f"CUDA in the parent yet)."
        )
        self.script = script
        self.line = line
        self.context = context


class MissingExtraError(VecSampleError, ImportError):
    """A module of vecsample needs a package that only one of its extras installs.

    Also an ``ImportError``, so ``except ImportError`` around an optional import still works. The
    cause (``__cause__``) is the import's own error.
    """

    def __init__(self, *, feature: str, package: str, extra: str, reason: str = "",
                 fix: str = "") -> None:
        reason = reason or f"{package} is not installed"
        fix = fix or f'pip install "vecsample[{extra}]"'
        super().__init__(f"{feature} needs {package} (the {extra!r} extra), but {reason}; "
                         f"install it with: {fix}")
        self.feature = feature
        self.package = package
        self.extra = extra
        self.fix = fix


class ClosedError(VecSampleError, RuntimeError, gym_error.ClosedEnvironmentError):
    """A call was made after ``close()`` (also gymnasium's ``ClosedEnvironmentError``)."""

    def __init__(self, message: str = "", *, what: str = "VecSampler") -> None:
        super().__init__(message or f"this {what} is closed; create a new one.")
        self.what = what


class ConcurrentUseError(VecSampleError, RuntimeError):
    """A call from one thread while another thread holds the sampler: it is inside a call, or
    has steps pending (sent, not yet received). A sampler serves one thread at a time
    (docs/semantics.md, "Threads and processes"); ``close()`` works from any thread."""

    def __init__(self, *, call: str, thread: str, holder: str, doing: str,
                 what: str = "VecSampler") -> None:
        super().__init__(
            f"{call}() called from thread {thread!r} while thread {holder!r} {doing}; a {what} "
            f"serves one thread at a time, so this call would take or wait for that thread's "
            f"steps. Make its calls from one thread, or hand it over: once {holder!r} has "
            f"received its steps and returned, any thread may go on with it (close() works "
            f"from any thread)."
        )
        self.call = call
        self.thread = thread
        self.holder = holder
        self.doing = doing
        self.what = what


class ForkedSamplerError(VecSampleError, RuntimeError):
    """A sampler was called in a child forked from the process that made it: its workers,
    pipes and shared memory are that process's."""

    def __init__(self, *, call: str, pid: int, owner: int, what: str = "VecSampler") -> None:
        super().__init__(
            f"{call}() called in process {pid}, a fork of process {owner}, which made this "
            f"{what}: its workers, pipes and shared memory belong to process {owner}, and this "
            f"call would drive them behind its back. Make a new {what} in this process (after "
            f"the fork), or leave the sampling to process {owner}."
        )
        self.call = call
        self.pid = pid
        self.owner = owner
        self.what = what


class SamplerPicklingError(VecSampleError, TypeError):
    """A sampler (or a vector env on one) was pickled or copied: it owns worker processes,
    pipes and shared memory, which cannot travel; what builds it can."""

    def __init__(self, *, what: str, fix: str) -> None:
        super().__init__(
            f"a {what} cannot be pickled or copied: it owns the worker processes, pipes and "
            f"shared memory of the process that made it. {fix}."
        )
        self.what = what
        self.fix = fix


class SharedMemoryError(VecSampleError, OSError):
    """A sampler's shared memory (``vecsample/_wire/shm.py``'s ``Region``) could not be made or
    mapped, or was pickled outside a worker's start (the only way it can travel).

    ``step``: "create", "map" or "send"; ``nbytes``: its size; ``got``: what happened.
    """

    def __init__(self, *, step: str, nbytes: int, expected: str, got: str, fix: str) -> None:
        super().__init__(f"could not {step} {nbytes} bytes of shared memory: expected {expected}, "
                         f"got {got}; {fix}.")
        self.step = step
        self.nbytes = nbytes
        self.got = got


class PendingCallError(VecSampleError, RuntimeError):
    """A call is out of order with respect to what is pending (the state machine said no).

    ``name``: the call that is pending (``"step"``, ``"reset"``, ``"call"``), or the one that is
    not, as gymnasium's ``AlreadyPendingCallError`` and ``NoAsyncCallError`` name it.

    This base is neither of gymnasium's two errors: its subclasses say which one they are
    (``WorkerBusyError`` and the adapter's ``AlreadyPendingError`` are ``AlreadyPendingCallError``s,
    ``NoPendingError`` is a ``NoAsyncCallError``), so an ``except`` for one of gymnasium's never
    catches the opposite case.
    """

    def __init__(self, message: str = "", *, name: str = "") -> None:
        super().__init__(message)
        self.name = name


class NoPendingError(PendingCallError, gym_error.NoAsyncCallError):
    """A ``*_wait``/``step_recv`` call with nothing of that kind in flight (``name``: that kind)."""

    def __init__(self, message: str = "", *, name: str = "step") -> None:
        super().__init__(message or (
            "step_recv() called with no step in flight; call step_send(worker, actions) first "
            "(or step(actions) for a full batch)."), name=name)


class WorkerBusyError(PendingCallError, gym_error.AlreadyPendingCallError):
    """A call targeted workers whose previous step has not been received yet (``name``:
    ``"step"``, the pending call; ``call``: the refused one)."""

    def __init__(self, *, call: str, workers: list[int], to_one: bool = False) -> None:
        if to_one:  # a call to one worker (step_send), not to every worker (reset, step, ...)
            (w,) = workers
            message = (f"{call}() to worker {w}, whose previous step is still pending; call "
                       f"step_recv() until it returns worker {w} first.")
        else:
            message = (f"{call}() called while the steps of workers {workers} are pending; "
                       f"call step_recv() until they are received first.")
        super().__init__(message, name="step")
        self.call = call
        self.workers = workers


class ProtocolError(VecSampleError, RuntimeError):
    """A worker state change outside ``protocol.TRANSITIONS``: a bug in vecsample, not in yours."""

    def __init__(self, *, worker: int, current: str, requested: str) -> None:
        super().__init__(
            f"worker {worker} cannot go from {current} to {requested}; this is a bug in "
            f"vecsample, please report it with the calls that led here."
        )
        self.worker = worker
        self.current = current
        self.requested = requested


class WorkerIndexError(VecSampleError, IndexError):
    """A worker index outside ``range(num_workers)``."""

    def __init__(self, *, worker: Any, num_workers: int) -> None:
        if isinstance(worker, int) and not isinstance(worker, bool):
            message = (f"worker {worker} is out of range: this sampler has {num_workers} "
                       f"workers (0..{num_workers - 1}).")
        else:
            message = f"worker must be an int in range({num_workers}), got {worker!r}."
        super().__init__(message)
        self.worker = worker
        self.num_workers = num_workers


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
    """An env raised inside a worker. Carries the worker, the env and the remote traceback.

    ``results``: the steps received in the same call, so nothing is lost. ``others``: the other
    workers lost in the same wait of a step (each its own error), raised as this one.
    """

    def __init__(
        self,
        *,
        worker: int,
        env: int | None,
        command: str,
        exc_type: str = "",
        message: str = "",
        remote_traceback: str = "",
        results: Sequence[StepResult] = (),
    ) -> None:
        super().__init__(self._format(worker, env, command, exc_type, message))
        self.worker = worker
        self.env = env
        self.command = command
        self.exc_type = exc_type
        self.remote_traceback = remote_traceback
        self.results: list[StepResult] = list(results)
        #: From a command (reset, call, ...): the replies of the workers that did answer.
        self.replies: dict[int, Any] = {}
        self.others: list[WorkerError] = []
        if remote_traceback:
            self.__cause__ = RemoteTraceback(remote_traceback)

    @staticmethod
    def _format(worker: int, env: int | None, command: str, exc_type: str, message: str) -> str:
        where = f"worker {worker}" if env is None else f"env {env} in worker {worker}"
        return f"{where} raised {exc_type} during {command}: {message}"

    @property
    def reason(self) -> str:
        """One line for the restart log: what went wrong."""
        lines = self.remote_traceback.strip().splitlines()
        return f"raised in env {self.env}: {lines[-1] if lines else self}"


class WorkerDiedError(WorkerError):
    """A worker process exited (crash, ``os._exit``, SIGKILL) while the parent expected a reply."""

    def __init__(
        self,
        *,
        worker: int,
        pid: int | None,
        exitcode: int | None,
        command: str,
        env_ids: Sequence[int] = (),
        results: Sequence[StepResult] = (),
    ) -> None:
        self.pid = pid
        self.exitcode = exitcode
        self.env_ids = list(env_ids)
        super().__init__(worker=worker, env=None, command=command, results=results)

    def _format(  # type: ignore[override]
        self, worker: int, env: int | None, command: str, exc_type: str, message: str
    ) -> str:
        return (
            f"worker {worker} (pid {self.pid}) died during {command} with exit code "
            f"{self.exitcode}; its envs {self.env_ids} are lost. Check the env for crashes "
            f"(os._exit, segfault, OOM kill), or enable restart."
        )

    @property
    def reason(self) -> str:
        return f"died with exit code {self.exitcode}"


class EnvOutputError(VecSampleError, ValueError):
    """An env returned a value that does not fit (an observation of the wrong shape, a
    reward that is not a scalar); raised in the worker, it reaches you as a WorkerError."""


class ReplyPicklingError(VecSampleError, TypeError):
    """A command's reply (an attribute, a call's result, a reset info) cannot be pickled back
    to the parent. The worker and its envs are fine and stay usable."""

    def __init__(self, *, worker: int, command: str, message: str) -> None:
        super().__init__(f"worker {worker}: {message}")
        self.worker = worker
        self.command = command
        self.replies: dict[int, Any] = {}  # the other workers' replies, as on WorkerError


class WorkerLostError(VecSampleError, RuntimeError):
    """A call needs a worker that an earlier call left dead or failed (restart is off)."""

    def __init__(self, *, call: str, worker: int, state: str) -> None:
        super().__init__(
            f"{call}() to worker {worker}, which is {state} since an earlier call; close() the "
            f"sampler and create a new one, or pass restart=True to respawn such workers."
        )
        self.call = call
        self.worker = worker
        self.state = state


class DeadlineExceededError(VecSampleError, TimeoutError, multiprocessing.TimeoutError):
    """A call's whole-call ``deadline`` passed with workers still silent (reported as hung).

    Both the builtin ``TimeoutError`` and ``multiprocessing.TimeoutError`` (which
    ``AsyncVectorEnv``'s ``*_wait(timeout)`` raises, and which is not a builtin one).

    ``results``: what was received before the deadline; the hung workers stay pending.
    """

    def __init__(
        self,
        *,
        hung_workers: list[int],
        deadline: float | None,
        who: str = "workers",
        fix: str = "they stay pending. Raise `deadline` if the envs are just slow, or close() "
        "the sampler to kill them",
        results: Sequence[Any] = (),
    ) -> None:
        super().__init__(
            f"{who} {hung_workers} did not answer within deadline={deadline} s; {fix}."
        )
        self.hung_workers = hung_workers
        self.deadline = deadline
        self.results: list[Any] = list(results)


class RestartLimitError(WorkerError):
    """A worker failed more often than ``max_restarts`` allows."""

    def __init__(self, *, worker: int, reason: str, history: list[tuple[int, str]],
                 max_restarts: int, env: int | None = None, command: str = "STEP",
                 remote_traceback: str = "", results: Sequence[StepResult] = ()) -> None:
        self.reason_text = reason
        self.history = list(history)
        self.max_restarts = max_restarts
        super().__init__(worker=worker, env=env, command=command,
                         remote_traceback=remote_traceback, results=results)

    def _format(  # type: ignore[override]
        self, worker: int, env: int | None, command: str, exc_type: str, message: str
    ) -> str:
        return (
            f"worker {worker} {self.reason_text}, and the sampler already restarted workers "
            f"{len(self.history)} times (max_restarts={self.max_restarts}); fix the env or "
            f"raise max_restarts. Earlier restarts: {self.history}."
        )


# --- recording and replaying a run (vecsample/_parent/replay.py) ----------------------------------


class ReplayError(VecSampleError):
    """Base class of the errors of ``VecSampler(record=...)`` and ``VecSampler(replay=...)``."""


class ReplayLogError(ReplayError, ValueError):
    """A replay log that cannot be read: missing, not a log, a newer format, or corrupt."""

    def __init__(self, *, path: str, problem: str, fix: str) -> None:
        super().__init__(f"replay log {path}: {problem}; {fix}.")
        self.path = path
        self.problem = problem


class ReplayDivergedError(ReplayError, RuntimeError):
    """The program being replayed did something else than the recorded run at call ``call``
    (0 is the sampler's construction, then one per recorded call: step_send, step_recv, ...)."""

    def __init__(self, *, path: str, call: int, expected: str, got: str, fix: str = "") -> None:
        fix = fix or (
            "replay needs the program that was recorded: the same env factories, seed and "
            "sampler arguments, the same sequence of step_send/step_recv/reset calls, and a "
            "policy that gives the same actions for the same observations; fix the program, "
            "or record it again"
        )
        super().__init__(f"replay of {path} diverged at call #{call}: the recorded run made "
                         f"{expected}, this program made {got}; {fix}.")
        self.path = path
        self.call = call
        self.expected = expected
        self.got = got


class ReplayUnsupportedError(ReplayError, RuntimeError):
    """The recorded run did something at call ``call`` that replay cannot make happen again."""

    def __init__(self, *, path: str, call: int, what: str, fix: str) -> None:
        super().__init__(f"replay of {path} cannot reproduce call #{call}: {what}; {fix}.")
        self.path = path
        self.call = call
        self.what = what


# --- notices ------------------------------------------------------------------------------------


class PlacementNotice(UserWarning):
    """What ``env_placement="auto"`` chose and why (what it measured): a notice, given once per
    process for each choice, not a problem. ``sampler.layout.placement_reason`` keeps it;
    ``warnings.filterwarnings("ignore", category=PlacementNotice)`` silences it."""
