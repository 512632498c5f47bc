"""Hosted vector envs: a worker steps one batch-native gymnasium ``VectorEnv`` for its block.

``HostedVector`` stands in a sampler's ``env_fns``: each worker then builds one vector env of its
block's size (a gymnasium vector entry point such as CartPole's, a ``SyncVectorEnv``, a numpy or
JAX batched env) instead of one env per row, steps it once per batch and copies each field into
its rows of shared memory with one copy per field. Everything around the step is the sampler's
as before: the handshake, partial batches, restarts, seeding, infos (docs/lab/benchmarks.md, "Past
the bare loop"; docs/semantics.md).

This module is the parent's side (what the user names, the probe and the checks made before
anything is sent); the worker's side, the block that steps the vector env, is
``vecsample/_worker/hosted_block.py``.

Per-env commands reach the block's vector env with the block's slice of the values:

- ``reset_task(tasks)``: the vector env's own ``reset_task(tasks: Sequence[task])``, one task per
  env of its batch, in row order (a batch-native task env implements it); failing that, for a
  vector env with an ``envs`` list (gymnasium's ``SyncVectorEnv``), ``env.unwrapped
  .reset_task(task)`` of each of its envs. Call ``reset()`` after it, as with single task envs.
- ``set_attr(name, values)``: the vector env's ``set_attr(name, values)`` with one value per env
  of its batch (gymnasium's ``VectorEnv.set_attr`` convention).

The parent builds the hosted env once (``make(1)``, to read its spaces) and notes which of these
methods it lacks; calling such a command then raises ``HostedMethodError`` (a
``HostedEnvError`` naming the method and the env type) before anything is sent, and the workers
go on.

``autoreset_mode="Disabled"`` works with a hosted env built for it (its
``metadata["autoreset_mode"]`` is ``DISABLED``, as a ``SyncVectorEnv(...,
autoreset_mode=AutoresetMode.DISABLED)``'s): nothing autoresets, and ended envs are reset with
``reset(mask=...)``, passed on as ``options["reset_mask"]``. Where single envs that ended stay
frozen, a hosted env freezes its ended rows only if it declares so in its ``metadata``
(``metadata["freezes_ended_envs"] = True``, read through its wrappers as the autoreset mode is; the
batch-native MuJoCo envs do): its ``step`` then steps only the rows that have not ended since their
reset, and the block writes what an env block writes for a frozen env whatever the env returns in
the others (their observation and ``terminated`` / ``truncated`` kept, reward 0, no infos). Any
other env steps all its rows, so a block with an ended env is refused (``HostedEnvError``) before
its step is posted, until that env is reset.

The sampler's autoreset mode is given once: a registered id whose vector entry point takes an
``autoreset_mode`` keyword (the batch-native MuJoCo envs) is built in it, unless ``env_kwargs``
names one; ``"sync"`` builds its ``SyncVectorEnv`` in it. What else a hosted env cannot honour
is refused with a ``HostedEnvError``: an autoreset mode other than the env's own
(``AutoresetMismatchError``: an entry point with no such keyword, such as CartPole's, runs in
gymnasium's NextStep only) and pickled (variable-shape) spaces, at
construction; ``reset(mask=...)`` of part of a block, in the worker, unless the env can reset
part of its batch (``SyncVectorEnv``, or ``metadata["supports_reset_mask"] = True``).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import load_env_creator

from vecsample._wire.protocol import Command
from vecsample._wire.spaces import leaves
from vecsample.errors import (
    AutoresetMismatchError,
    EnvFactoryError,
    HostedEnvError,
    HostedMethodError,
)
from vecsample.types import AutoresetMode, Space

#: Builds a batch of ``num_envs`` envs: ``fn(num_envs) -> gymnasium.vector.VectorEnv``.
VectorEnvFn = Callable[[int], gym.vector.VectorEnv]
#: ``gymnasium.make_vec``'s vectorization modes a worker can host ("async" would start
#: processes inside a worker, which a worker never does).
VECTORIZATIONS = ("vector_entry_point", "sync")


@dataclass(frozen=True)
class HostedVector:
    """One batch-native vector env per worker, in place of its block of single envs.

    Args:
        make: a registered env id (built with ``gymnasium.make_vec``), or a callable
            ``make(num_envs) -> gymnasium.vector.VectorEnv``; it is called once per worker with
            that worker's block size (and once with 1 in the parent, to read the spaces).
        vectorization_mode: with an env id, ``gymnasium.make_vec``'s ``vectorization_mode``:
            ``"vector_entry_point"`` (the env's own batched implementation) or ``"sync"``.
        env_kwargs: with an env id, keyword arguments for ``gymnasium.make_vec``.
        num_envs: the envs of all workers together, if the sampler is not given ``num_envs``.

    Example:
        >>> import numpy as np
        >>> from vecsample import HostedVector, VecSampler
        >>> with VecSampler(HostedVector("CartPole-v1"), num_envs=8, num_workers=2,
        ...                 autoreset_mode="NextStep", seed=0) as sampler:
        ...     obs, _ = sampler.reset()
        ...     print(obs.shape, sampler.step(np.zeros(8, dtype=np.int64)).rewards.sum())
        (8, 4) 8.0
    """

    make: str | VectorEnvFn
    vectorization_mode: str = "vector_entry_point"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    num_envs: int | None = None

    def __post_init__(self) -> None:
        # Frozen: the copy goes in through object.__setattr__, before anyone reads the field
        # (the caller's dict may change later; this one never does).
        object.__setattr__(self, "env_kwargs", dict(self.env_kwargs))
        self._check()

    def _check(self) -> None:
        if isinstance(self.make, str):
            if self.vectorization_mode not in VECTORIZATIONS:
                raise HostedEnvError(
                    feature=f"vectorization_mode={self.vectorization_mode!r}",
                    reason=f"a worker hosts one of {list(VECTORIZATIONS)}",
                    fix="use 'vector_entry_point' where the env has one, else 'sync'")
        elif not callable(self.make):
            raise HostedEnvError(feature=f"make={self.make!r}", reason="it is neither an env "
                                 "id nor a callable", fix="pass an env id or fn(num_envs)")

    def build(self, num_envs: int, mode: AutoresetMode) -> gym.vector.VectorEnv:
        """A vector env of ``num_envs`` envs autoresetting in ``mode`` (``"sync"`` is built in
        it), checked: one of another size or mode is closed and refused."""
        env = self._make(num_envs, mode)
        got = getattr(env, "num_envs", None)
        if got != num_envs:
            env.close()
            raise HostedEnvError(feature="num_envs", reason=f"asked for {num_envs} envs, the "
                                 f"vector env has {got}", fix="build num_envs envs in make()")
        env_mode = AutoresetMode(_env_mode(env).value)
        if env_mode is not mode:
            env.close()
            raise AutoresetMismatchError(env=env_name(env), env_mode=env_mode.value,
                                         sampler_mode=mode.value)
        return env

    def _make(self, num_envs: int, mode: AutoresetMode) -> gym.vector.VectorEnv:
        if not isinstance(self.make, str):
            return self.make(num_envs)
        if self.make not in gym.registry and importlib.util.find_spec("vecsample.envs"):
            importlib.import_module("vecsample.envs")  # registers the meta-RL task envs
        extra: dict[str, Any] = {}
        if self.vectorization_mode == "sync":
            extra["vector_kwargs"] = {"autoreset_mode": gym.vector.AutoresetMode(mode.value)}
        elif "autoreset_mode" not in self.env_kwargs and _takes_autoreset_mode(self.make):
            extra["autoreset_mode"] = mode.value  # the sampler's mode, given once (issue 34)
        return gym.make_vec(self.make, num_envs=num_envs,
                            vectorization_mode=self.vectorization_mode, **extra, **self.env_kwargs)

    def __getstate__(self) -> bytes:
        # Pickled to the workers through cloudpickle: ``make`` may be a lambda or a closure.
        return cloudpickle.dumps(dict(self.__dict__))  # type: ignore[no-any-return]

    def __setstate__(self, state: bytes) -> None:
        for name, value in cloudpickle.loads(state).items():
            object.__setattr__(self, name, value)  # frozen: set once, here


@dataclass(frozen=True)
class HostedProbe:
    """What the parent's probe of a hosted vector env found it can do (``probe_spaces``)."""

    #: The per-env commands it has no method for, with the env type that lacks it.
    lacking: dict[Command, str] = field(default_factory=dict)
    #: Whether it freezes its ended rows under DISABLED (``freezes``).
    freezes: bool = False


def probe_spaces(hosted: HostedVector, mode: AutoresetMode, obs: Space | None,
                 act: Space | None) -> tuple[Space, Space, HostedProbe]:
    """The single spaces of a hosted env, read from a vector env of 1 built here in ``mode``,
    and what it can do; what it cannot honour is refused now, at construction."""
    try:
        env = hosted.build(1, mode)
    except HostedEnvError:
        raise
    except Exception as exc:
        raise EnvFactoryError(f"the hosted vector env's make(1) raised {type(exc).__name__}: "
                              f"{exc}; fix it (it is called once in the parent to read the "
                              f"spaces and the autoreset mode).") from exc
    try:
        obs = env.single_observation_space if obs is None else obs
        act = env.single_action_space if act is None else act
        found = HostedProbe(lacking={command: name for command, probe in METHODS.items()
                                     if (name := probe(env)[1]) is not None},
                            freezes=freezes(env))
    finally:
        env.close()
    pickled = [leaf.name for space in (obs, act) for leaf in leaves(space) if not leaf.shared]
    if pickled:
        raise HostedEnvError(feature=f"the spaces {obs} / {act}", reason=f"leaves {pickled} have "
                             "no fixed shape", fix="host envs of fixed-shape spaces only")
    return obs, act, found


def block_seed(env: gym.vector.VectorEnv,
               seeds: Sequence[int | None]) -> int | list[int | None] | None:
    """What a hosted ``env``'s ``reset`` gets as ``seed`` for its block's per-env ``seeds``: the
    list, for an env whose ``reset`` takes one (``takes_seed_list``); else the first env's seed
    (an env with one generator for the whole batch); None when no env is seeded. The worker
    seeds its block with it, and ``vecsample.testing.SamplerContract`` its serial reference."""
    if all(s is None for s in seeds):
        return None
    if takes_seed_list(env):
        return list(seeds)
    return next(s for s in seeds if s is not None)


def takes_seed_list(env: gym.vector.VectorEnv) -> bool:
    """Whether ``reset`` takes a list of per-env seeds: gymnasium's own vector envs do; another
    env says so in the annotation of its ``seed`` parameter (``list[int | None]``...)."""
    if isinstance(env.unwrapped, (gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv)):
        return True
    try:
        param = inspect.signature(env.reset).parameters.get("seed")
    except (TypeError, ValueError):
        return False
    note = "" if param is None else str(param.annotation)
    return "list" in note or "Sequence" in note


def check_command(probe: HostedProbe | None, command: Command) -> None:
    """Refuses, before anything is sent, a per-env command whose method the parent's probe of
    the hosted env (``probe_spaces``; None: not hosted) did not find."""
    if probe is not None and command in probe.lacking:
        raise missing(command, probe.lacking[command])


def freezes(env: gym.vector.VectorEnv) -> bool:
    """Whether ``env`` declares ``metadata["freezes_ended_envs"] = True``: under DISABLED its
    ``step`` steps only the rows that have not ended since their reset. A capability of the
    env, read from its metadata as the autoreset mode is (a wrapper passes it through)."""
    return env.metadata.get("freezes_ended_envs", False) is True


def refuses_frozen(probe: HostedProbe | None, mode: AutoresetMode) -> bool:
    """Whether the parent must refuse to step a block with an ended row
    (``check_not_ended``): a hosted env (``probe``) under DISABLED that does not freeze its
    ended rows."""
    return probe is not None and mode is AutoresetMode.DISABLED and not probe.freezes


def check_not_ended(views: Any, lo: int) -> None:
    """DISABLED with a hosted env that does not freeze its ended rows (``refuses_frozen``): it
    steps all its rows, so a row that ended (and was not restarted since) must be reset with
    ``reset(mask=...)`` before its block steps; refused before anything is posted."""
    ended = (views.terminated | views.truncated) & ~views.restarted
    if ended.any():
        rows = (np.flatnonzero(ended) + lo).tolist()
        raise HostedEnvError(
            feature="autoreset_mode='Disabled'", reason=f"envs {rows} ended and the hosted "
            "vector env steps its whole batch, so they cannot stay frozen as single envs do",
            fix="reset them first with reset(mask=...) naming them, or host an env that "
            "freezes its ended rows (metadata['freezes_ended_envs'] = True)")


def missing(command: Command, env: str) -> HostedMethodError:
    """The error for a hosted env of type ``env`` without the method ``command`` needs."""
    return HostedMethodError(feature=command.name.lower(), env=env, fix=_FIXES[command])


_FIXES = {
    Command.RESET_TASK: "give the vector env reset_task(tasks), one task per env of its batch, "
    "or host a SyncVectorEnv whose envs have reset_task(task) on env.unwrapped",
    Command.SET_ATTR: "give the vector env set_attr(name, values), one value per env of its "
    "batch, as gymnasium's SyncVectorEnv has",
}


def task_setter(env: gym.vector.VectorEnv) -> tuple[Callable[[list[Any]], Any] | None,
                                                     str | None]:
    """``(set, None)``: the vector env's ``reset_task(tasks)``, else for a vector env with an
    ``envs`` list (``SyncVectorEnv``) one ``env.unwrapped.reset_task(task)`` per env; or
    ``(None, name)``: the type that has no ``reset_task``."""
    own = _method(env, "reset_task")
    if own is not None:
        return own, None
    envs = getattr(env.unwrapped, "envs", None)
    if not isinstance(envs, (list, tuple)) or not envs:
        return None, env_name(env)
    lacking = [type(e.unwrapped).__name__ for e in envs
               if not callable(getattr(e.unwrapped, "reset_task", None))]
    if lacking:
        return None, lacking[0]

    def each(tasks: list[Any]) -> None:
        for sub, task in zip(envs, tasks, strict=True):
            sub.unwrapped.reset_task(task)

    return each, None


def attr_setter(env: gym.vector.VectorEnv) -> tuple[Callable[..., Any] | None, str | None]:
    """``(set_attr, None)``: the vector env's ``set_attr(name, values)``; or ``(None, name)``."""
    own = _method(env, "set_attr")
    return (own, None) if own is not None else (None, env_name(env))


#: How the worker runs each per-env command on its vector env, and how the parent probes it.
METHODS: dict[Command, Callable[[gym.vector.VectorEnv], tuple[Any, str | None]]] = {
    Command.RESET_TASK: task_setter, Command.SET_ATTR: attr_setter}


def _method(env: gym.vector.VectorEnv, name: str) -> Callable[..., Any] | None:
    """``env``'s method ``name``, or its unwrapped env's (a VectorWrapper forwards nothing)."""
    for holder in (env, env.unwrapped):
        method = getattr(holder, name, None)
        if callable(method):
            return method  # type: ignore[no-any-return]
    return None


# --- helpers -------------------------------------------------------------------------------------


def _takes_autoreset_mode(env_id: str) -> bool:
    """Whether ``env_id``'s vector entry point takes an ``autoreset_mode`` keyword, by name or
    through ``**kwargs`` (the batch-native envs and their task envs do; gymnasium's CartPole
    vector env does not, and stays NextStep)."""
    entry = gym.spec(env_id).vector_entry_point
    if entry is None:
        return False
    maker = load_env_creator(entry) if isinstance(entry, str) else entry
    try:
        parameters = inspect.signature(maker).parameters
    except (TypeError, ValueError):  # no signature to read (a C callable): leave it unset
        return False
    return "autoreset_mode" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def _env_mode(env: gym.vector.VectorEnv) -> Any:
    """The vector env's autoreset mode (gymnasium's default, NEXT_STEP, when it names none)."""
    mode = env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
    return gym.vector.AutoresetMode(getattr(mode, "value", mode))


def env_name(env: gym.vector.VectorEnv) -> str:
    """The type of the vector env under its wrappers, as errors name it."""
    return type(env.unwrapped).__name__
