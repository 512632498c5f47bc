"""``Options``: every VecSampler option, written once: its default, its meaning, its check.

In the shape of CleanRL's ``Args``: one field per option, its default, and its docstring right
under it. ``Options(...)`` checks and normalises every field (a ``ConfigError`` that says what
was expected, what came and how to fix it) and ``options.replace(name=value)`` makes a changed
copy, refusing an unknown name with the closest field. The checks that need the envs
(``num_workers`` divides them, ``pipeline`` halves them) run where the envs are known, in
``Layout.build`` (_parent/layout.py).

Every public constructor (``VecSampler``, ``VectorEnv``, ``vecsample.sb3.VecEnv``,
``MultiTaskSampler``, ``RaySampler``) takes an ``options=`` and these names, so a bad value is
refused with the same words everywhere (docs/semantics.md, "Options").
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import multiprocessing as mp
import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import numpy as np

from vecsample.errors import ConfigError
from vecsample.types import AutoresetMode, PathArg

#: The automatic choice of the options that say "auto" (context) or None (spin_us, ...).
AUTO = "auto"
#: How long the parent and the workers poll the step handshake's counters before sleeping on a
#: pipe, when every worker can have a core of its own (µs): what ``spin_us=None`` means there.
#: It skips scheduler wake-ups (an IPI on a VM, docs/lab/benchmarks.md); with more workers than
#: cores, spinning would steal their CPU, so None means 0 then.
AUTO_SPIN_US = 200.0
#: The longest spin ``spin_us`` may ask for (µs). A spin saves one wake-up, tens of µs; past a
#: few ms that saving is noise and the spin only burns its core (docs/lab/benchmarks.md keeps the
#: workers spinning through a parent's 10 ms of work with it).
MAX_SPIN_US = 10_000.0
#: Default deadline (seconds) of each wait for workers, so that a hung worker never hangs a call.
DEFAULT_DEADLINE = 300.0
#: Building envs (imports, MuJoCo model compiles) may take longer than one call's deadline.
STARTUP_DEADLINE = 120.0
#: "auto": fork on Linux while the parent has no other thread (fast, nothing pickled, the main
#: script is not re-imported), forkserver otherwise (safe with threads and CUDA);
#: vecsample/_parent/startup.py resolves it when a sampler starts.
DEFAULT_CONTEXT = AUTO


# --- the checks, one per field -------------------------------------------------------------------


def check_context(requested: object, name: str = "context") -> str:
    """``requested`` if it is ``"auto"`` or a start method of this platform."""
    methods = mp.get_all_start_methods()
    if requested != AUTO and requested not in methods:
        raise ConfigError(name=name, expected=f"'auto' or one of {methods}", got=requested,
                          fix="'auto' forks while the parent has no other thread, else it "
                          "uses forkserver")
    return str(requested)


def check_seed(seed: object, name: str = "seed") -> int:
    """Returns ``seed`` as an int, or raises ConfigError saying what a seed must be (the same
    words wherever a seed is given: Options, reset, RaySampler)."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or int(seed) < 0:
        raise ConfigError(name=name, expected="None or an int >= 0", got=seed,
                          fix="pass a non-negative int, or None for unseeded envs")
    return int(seed)


def check_int(value: Any, name: str, minimum: int = 1, fix: str = "") -> int:
    """``value`` as an int ``>= minimum``; a bool, a float or a smaller int is a ConfigError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ConfigError(name=name, expected=f"an int >= {minimum}", got=value, fix=fix)
    return int(value)


def check_seconds(value: Any, name: str, fix: str = "") -> float | None:
    """``value`` as seconds (a real number >= 0) or None; anything else is a ConfigError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value) >= 0:
        raise ConfigError(name=name, expected="None or a number of seconds >= 0", got=value,
                          fix=fix)
    return None if math.isinf(value) else float(value)  # inf: no bound, as None


def check_mode(mode: object, name: str = "autoreset_mode") -> AutoresetMode:
    """An ``AutoresetMode`` from ours, gymnasium's, or their string value."""
    if isinstance(mode, AutoresetMode):
        return mode
    value = getattr(mode, "value", mode)  # accepts gymnasium's own AutoresetMode enum too
    try:
        return AutoresetMode(value)
    except ValueError:
        choices = [m.value for m in AutoresetMode]
        raise ConfigError(name=name, expected=f"one of {choices}", got=mode,
                          fix="pass the string or vecsample.AutoresetMode (gymnasium's "
                          "AutoresetMode works too)") from None


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise ConfigError(name=name, expected="True or False", got=value,
                          fix=f"pass {name}=True or {name}=False")
    return bool(value)


def _seed(value: Any, name: str) -> int | None:
    return None if value is None else check_seed(value, name)


def _affinity(value: Any, name: str) -> tuple[tuple[int, ...], ...] | bool | None:
    if value is None or isinstance(value, bool):
        return value
    fix = "pass True (one core per worker), one list of core ids per worker, or None"
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ConfigError(name=name, expected="True, None or core lists", got=value, fix=fix)
    sets = []
    for cores in value:
        if (isinstance(cores, str | bytes) or not isinstance(cores, Sequence) or not cores
                or any(isinstance(c, bool) or not isinstance(c, numbers.Integral) or c < 0
                       for c in cores)):
            raise ConfigError(name=name, expected="core lists of ints >= 0, one per worker",
                              got=value, fix=fix)
        sets.append(tuple(int(c) for c in cores))
    return tuple(sets)


def _spin(value: Any, name: str) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)
                              or not 0 <= float(value) <= MAX_SPIN_US):
        raise ConfigError(name=name, expected=f"None or a number of microseconds from 0 to "
                          f"{MAX_SPIN_US:.0f} (10 ms)", got=value, fix="None spins 200 us while "
                          "every worker has a core of its own, else 0; a longer spin only burns "
                          "CPU")
    return None if value is None else float(value)


def _path(value: Any, name: str) -> PathArg | None:
    if value is not None and not isinstance(value, str | os.PathLike):
        raise ConfigError(name=name, expected="None or a file path", got=value,
                          fix=f"pass {name}='run.log' (a str or a pathlib.Path)")
    return value


def _handshake(value: Any, name: str) -> str:
    choices = (AUTO, "native", "python")
    if value not in choices:
        raise ConfigError(name=name, expected=f"one of {list(choices)}", got=value,
                          fix="'auto' takes the C path where it was built, else Python")
    return str(value)


#: ``env_placement``'s values: where the blocks are stepped (docs/semantics.md).
PLACEMENTS = ("workers", "share", "parent", AUTO)


def _placement(value: Any, name: str) -> str:
    if value not in PLACEMENTS:
        raise ConfigError(name=name, expected=f"one of {list(PLACEMENTS)}", got=value,
                          fix="'workers' steps every block in a process of its own, 'share' "
                          "the last one in this process, 'parent' all of them here; 'auto' "
                          "times a step and chooses")
    return str(value)


def _workers(value: Any, name: str) -> int:
    return check_int(value, name, fix="pass how many worker processes to start")


def _wait(value: Any, name: str) -> float | None:
    return check_seconds(value, name, fix="None (or inf) waits forever")


def _threads(value: Any, name: str) -> int | None:
    return None if value is None else check_int(
        value, name, fix="None leaves the workers' thread pools as they are")


def _restarts(value: Any, name: str) -> int:
    return check_int(value, name, minimum=0, fix="0 raises at the first failure")


def _checked(check: Callable[[Any, str], Any], *, tuning: bool = False) -> dict[str, Any]:
    """An option's field metadata: ``check(value, name)``, which ``Options`` runs on the field
    when it is made (it returns the normalised value or raises a ConfigError), and ``tuning``:
    the option changes how a run is carried out (its timing, placement, checks, files) but not
    what it samples, so a replay may change it (replay_log.header)."""
    return {"check": check, "tuning": tuning}


class _NotesGiven:
    """The base of ``Options``: notes which fields a call named, whatever their value (no
    default can tell "set to the default" from "not set"). Python calls ``__new__`` with the
    arguments of ``Options(...)`` before the dataclass's own ``__init__`` sets the fields, so
    that ``__init__``, and the signature ``help`` shows, stay the dataclass's."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        for name in kwargs:
            if name not in NAMES:
                raise unknown_option(name)  # the ConfigError replace() gives, not a TypeError
        self = super().__new__(cls)
        object.__setattr__(self, "given", frozenset(NAMES[:len(args)]) | frozenset(kwargs))
        return self


@dataclass(frozen=True)
class Options(_NotesGiven):
    """VecSampler's options; ``VecSampler(env_fns, options=..., **overrides)`` takes them.

    Each field is checked and normalised when an ``Options`` is made (strings become
    ``AutoresetMode``, an infinite deadline becomes None, core lists become tuples), so a bad
    value fails here with a ``ConfigError``. ``replace(**changes)`` returns a changed copy.
    ``given`` names the fields that were set (by the constructor or ``replace``), whatever
    their value: a constructor built on VecSampler fills its own defaults only for the others.

    Example:
        >>> from vecsample import Options
        >>> options = Options(num_workers=2, seed=0, autoreset_mode="NextStep")
        >>> options.autoreset_mode, options.replace(deadline=float("inf")).deadline
        (<AutoresetMode.NEXT_STEP: 'NextStep'>, None)
    """

    #: The fields set by the constructor (``_NotesGiven``) or by ``replace``, even to their
    #: default value.
    given: ClassVar[frozenset[str]] = frozenset()

    num_workers: int = field(default=1, metadata=_checked(_workers))
    """Worker processes, each stepping a contiguous block of the envs; must divide the number of
    envs, unless ``uneven_split``. With ``pipeline`` each process serves two halves, so the step
    API has ``2 * num_workers`` workers (``VecSampler.num_slots``)."""

    seed: int | None = field(default=None, metadata=_checked(_seed))
    """Env ``j`` is seeded with child ``j`` of ``SeedSequence(seed)`` on the first ``reset()``,
    whatever the worker split. None: unseeded."""

    autoreset_mode: AutoresetMode = field(default=AutoresetMode.SAME_STEP,
                                          metadata=_checked(check_mode))
    """``"SameStep"`` (an ended env is reset in the same step, its last observation in
    ``final_obs``), ``"NextStep"`` (gymnasium's default) or ``"Disabled"``; the string, our
    ``AutoresetMode`` or gymnasium's."""

    infos: bool = field(default=True, metadata=_checked(_flag))
    """Collect the envs' info dicts (pickled through the pipes; off saves that cost)."""

    context: str = field(default=DEFAULT_CONTEXT, metadata=_checked(check_context, tuning=True))
    """The start method: ``"auto"`` is fork on Linux while the parent has no other thread, else
    forkserver; or "fork", "forkserver", "spawn". Factories travel by cloudpickle (lambdas and
    closures work); spawn and forkserver re-import the main script, which then needs
    ``if __name__ == "__main__":``. ``VecSampler.context`` says what "auto" chose."""

    deadline: float | None = field(default=DEFAULT_DEADLINE, metadata=_checked(_wait, tuning=True))
    """How long a wait for workers may last, in seconds (None or inf: forever): the whole wait of
    ``step``/``step_recv``, and each wait inside a command (``reset``, ``call``, ...; their own
    ``deadline=`` bounds the whole call). A silent worker is then reported hung, or respawned
    with ``restart``. docs/semantics.md, "What each timeout and deadline bounds", has the
    table."""

    startup_deadline: float | None = field(default=STARTUP_DEADLINE,
                                           metadata=_checked(_wait, tuning=True))
    """How long building a worker's envs may take, in seconds (None or inf: forever)."""

    threads_per_worker: int | None = field(default=1, metadata=_checked(_threads, tuning=True))
    """Caps the BLAS/OpenMP/torch threads of each worker (None: leave them)."""

    cpu_affinity: Sequence[Sequence[int]] | bool | None = field(
        default=None, metadata=_checked(_affinity, tuning=True))
    """True pins worker ``w`` to the ``w``-th usable core; one core list per worker gives each
    its cores; None leaves scheduling to the OS."""

    check_actions: bool = field(default=True, metadata=_checked(_flag, tuning=True))
    """Reject actions outside the action space before sending (an ``ActionError`` naming the
    rows); gymnasium's vector envs do not check. Shapes and dtypes are checked either way."""

    restart: bool = field(default=False, metadata=_checked(_flag))
    """Respawn a worker that died, raised or hung, and return its envs reset, flagged
    ``restarted`` and truncated, instead of raising (docs/reliability.md)."""

    max_restarts: int = field(default=3, metadata=_checked(_restarts))
    """Restarts allowed over the sampler's life (one more: ``RestartLimitError``)."""

    spin_us: float | None = field(default=None, metadata=_checked(_spin, tuning=True))
    """Microseconds both sides poll shared memory before sleeping on a pipe (None: 200 while
    every worker can have a core of its own, else 0), at most ``MAX_SPIN_US`` (10 ms). The
    trade: a side that spins sees the other's next step without a wake-up (tens of µs saved
    per step), but keeps its core busy (yielding it between polls) for up to ``spin_us`` after
    each step, CPU the other processes on that core lose; past a few ms the saving is noise.
    Commands (reset, call, close) are not delayed by it: a spinning worker looks at its pipe
    between bursts of polls."""

    uneven_split: bool = field(default=False, metadata=_checked(_flag))
    """Allow a ``num_workers`` that does not divide the envs: the blocks then differ by at most
    one env."""

    pipeline: bool = field(default=False, metadata=_checked(_flag))
    """Each process serves its block as two halves, two workers of the step API
    (``VecSampler.num_slots`` is then ``2 * num_workers``): it steps one half while you compute
    the other's actions. Use it with step_send/step_recv (docs/semantics.md)."""

    record: PathArg | None = field(default=None, metadata=_checked(_path, tuning=True))
    """Append the arrival order of every step_recv, the sends, resets and restarts to this file;
    ``replay=`` that file makes a later run return the same data."""

    replay: PathArg | None = field(default=None, metadata=_checked(_path, tuning=True))
    """Make each step_recv return the workers recorded in this file, in its order
    (``ReplayDivergedError`` at the first call the log does not have). docs/semantics.md."""

    handshake: str = field(default=AUTO, metadata=_checked(_handshake, tuning=True))
    """The step handshake's code: ``"auto"`` (the C hot path where it was built when vecsample
    was installed, on x86-64 Linux, else the pure-Python one, saying so once), ``"native"``
    (the C path; a ConfigError where it cannot run) or ``"python"``. The same protocol and the
    same results either way; the C path costs the parent and the workers less per step
    (docs/architecture.md, "The native path")."""

    env_placement: str = field(default="workers", metadata=_checked(_placement, tuning=True))
    """Where the workers' blocks of envs are stepped: ``"workers"`` (each in a process of its
    own), ``"share"`` (the last worker's block in this process, the trainer's, which steps it
    while the other workers step theirs: on a machine with few cores the parent is then not one
    more busy process), ``"parent"`` (every block in this process: no worker process, a serial
    loop behind the same API) or ``"auto"`` (times a step of the envs here at start, picks the
    cheapest of the three for this machine and says which and why, once). The blocks, the step
    API and the data are the same whichever runs them. A block in this process gives up two
    guarantees: an env that hangs there cannot be killed, and one that crashes the process
    takes the trainer with it (docs/reliability.md, "The parent's share")."""

    def __post_init__(self) -> None:
        # Frozen, so the normalised values go in through object.__setattr__, before anyone can
        # read the object: every later reader gets the checked form.
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, f.metadata["check"](getattr(self, f.name), f.name))
        _check_together(self)

    def replace(self, **changes: Any) -> Options:
        """A copy with ``changes`` (field names); an unknown name is a ConfigError naming the
        closest field. The copy's ``given`` is this one's and the changed names."""
        for name in changes:
            if name not in NAMES:
                raise unknown_option(name)
        copy = dataclasses.replace(self, **changes)
        object.__setattr__(copy, "given", self.given | frozenset(changes))
        return copy

    def identity(self) -> dict[str, Any]:
        """The options that decide what a run samples (all but the ``tuning`` ones), as plain
        values: what a replay log records and checks (replay_log.header)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)
                if not f.metadata.get("tuning")}


#: The fields of Options, in order (``_NotesGiven`` reads positional arguments by it).
NAMES = tuple(f.name for f in dataclasses.fields(Options))


def unknown_option(name: str) -> ConfigError:
    """The error for an option name that is no field of ``Options``, naming the closest one."""
    close = difflib.get_close_matches(name, NAMES, n=1)
    fix = (f"the closest field is {close[0]!r}" if close
           else f"the fields are {', '.join(NAMES)}")
    return ConfigError(name="an option's name", expected="a field of vecsample.Options",
                       got=name, fix=fix)


def check_options(options: object) -> Options:
    """``options`` if it is an ``Options``; None gives the defaults."""
    if options is None:
        return DEFAULTS
    if not isinstance(options, Options):
        raise ConfigError(name="options", expected="a vecsample.Options or None", got=options,
                          fix="build one with vecsample.Options(name=value, ...), or pass the "
                          "options by keyword")
    return options


def adapted(options: Options | None, overrides: Mapping[str, Any], *, where: str,
            defaults: Mapping[str, Any] | None = None,
            fixed: Mapping[str, tuple[Any, str]] | None = None) -> Options:
    """The Options of a constructor built on VecSampler (``where`` names it): ``overrides``
    replace fields of ``options``; the constructor's own ``defaults`` fill the fields that
    neither sets (not in ``options.given``, whatever their value); a ``fixed`` field (its
    value, and why) may be set to nothing else."""
    base = check_options(options)
    chosen = base.replace(**overrides)
    for name, (value, why) in (fixed or {}).items():
        got = getattr(chosen, name)
        if got != value and name in chosen.given:
            raise ConfigError(name=name, expected=f"{_plain(value)!r} on {where} ({why})",
                              got=_plain(got), fix=f"{where} sets {name} itself: leave it out")
    filled = {name: value for name, value in (defaults or {}).items()
              if name not in chosen.given}
    filled.update({name: value for name, (value, _) in (fixed or {}).items()})
    return chosen.replace(**filled)


def _check_together(options: Options) -> None:
    """The checks that read two fields."""
    if options.record is not None and options.replay is not None:
        raise ConfigError("record= and replay= were both given; a sampler records a run or "
                          "replays one: pass one of them.")
    affinity = options.cpu_affinity
    if isinstance(affinity, tuple) and len(affinity) != options.num_workers:
        raise ConfigError(name="cpu_affinity", expected=f"one core list per worker "
                          f"(num_workers={options.num_workers})", got=f"{len(affinity)} lists",
                          fix="pass one list per worker, or True")


def _plain(value: Any) -> Any:
    """A field's value as msgpack and a message print it (an enum as its string)."""
    return value.value if isinstance(value, AutoresetMode) else value


DEFAULTS = Options()

__all__ = ["AUTO", "AUTO_SPIN_US", "DEFAULT_CONTEXT", "DEFAULT_DEADLINE", "MAX_SPIN_US",
           "PLACEMENTS", "STARTUP_DEADLINE", "Options", "adapted", "check_context", "check_int",
           "check_mode", "check_options", "check_seconds", "check_seed"]
