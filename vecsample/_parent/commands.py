"""``EnvCommands``: VecSampler's synchronous commands to every env (reset_task, call, get_attr,
set_attr), each one pickled ``(Command, payload)`` per worker through the pool's RPC.

A base of ``VecSampler`` (sampler.py), which provides what is declared here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from vecsample import errors
from vecsample._wire.protocol import Command
from vecsample.config import Deadline

if TYPE_CHECKING:  # the sampler's parts, which it builds: no import at run time
    from vecsample._parent.pool import Heal, WorkerPool
    from vecsample._parent.replay import NoLog
    from vecsample._parent.restart import FailurePolicy

T = TypeVar("T")


class EnvCommands:
    """The commands that go to every env of the sampler, one reply per env."""

    num_envs: int
    deadline: float | None
    _pool: WorkerPool
    _heal: Heal | None
    _log: NoLog
    _restarts: FailurePolicy

    def _expect_commandable(self, call: str, deadline: Deadline | None = None) -> None:
        raise NotImplementedError  # VecSampler's

    def reset_task(self, tasks: Sequence[object], *, deadline: float | None = None) -> None:
        """Gives env j the task ``tasks[j]`` through ``env.unwrapped.reset_task``.

        ``deadline`` (here and in the other commands): seconds the whole call may take,
        restarts included (None: the sampler's ``deadline`` bounds each wait, and
        ``startup_deadline`` a restarted worker's build)."""
        tasks = per_env(tasks, self.num_envs, "tasks")
        self._each(Command.RESET_TASK, lambda lo, hi: tasks[lo:hi], deadline)
        self._restarts.remember(Command.RESET_TASK, "", tasks)  # a respawned env gets it again

    def call(self, name: str, /, *args: Any, deadline: float | None = None,
             **kwargs: Any) -> list[Any]:
        """Calls ``name`` on every env (or reads it, if not callable); one result per env.
        ``call_with`` passes the env's method a keyword that is itself named ``deadline``."""
        return self.call_with(name, args, kwargs, deadline=deadline)

    def call_with(self, name: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None,
                  *, deadline: float | None = None) -> list[Any]:
        """``call(name, *args, **kwargs)``, the method's arguments given as they are."""
        name, args, kwargs = _check_name(name), tuple(args), dict(kwargs or {})
        return self._each(Command.CALL, lambda lo, hi: (name, args, kwargs), deadline)

    def get_attr(self, name: str, *, deadline: float | None = None) -> list[Any]:
        """The attribute ``name`` of every env, through its wrappers; one value per env."""
        name = _check_name(name)
        return self._each(Command.GET_ATTR, lambda lo, hi: name, deadline)

    def set_attr(self, name: str, values: object, *, deadline: float | None = None) -> None:
        """Sets ``name`` on every env: a list gives one value per env, anything else is shared."""
        name = _check_name(name)
        if isinstance(values, (list, tuple)):
            values = per_env(values, self.num_envs, "values")
        else:
            values = [values] * self.num_envs
        self._each(Command.SET_ATTR, lambda lo, hi: (name, values[lo:hi]), deadline)
        self._restarts.remember(Command.SET_ATTR, name, values)  # a respawned env gets it again

    def _each(self, command: Command, payload: Callable[[int, int], object],
              deadline: float | None) -> list[Any]:
        bound = Deadline.of_call(deadline, self.deadline)  # checked before anything is sent
        self._expect_commandable(command.name.lower(), bound)
        self._log.command(command, payload(0, self.num_envs))  # a replay checks it first
        return self._pool.each_env(command, payload, bound, self._heal)


def per_env(values: Sequence[T], num_envs: int, name: str) -> list[T]:
    items = list(values)
    if len(items) != num_envs:
        raise errors.ConfigError(
            f"{name} needs one entry per env: expected {num_envs}, got {len(items)}; pass a "
            f"list of {num_envs}."
        )
    return items


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise errors.ConfigError(name="attribute name", expected="a non-empty str", got=name)
    return name
