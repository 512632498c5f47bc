"""Hosted vector envs: a worker steps one batch-native gymnasium ``VectorEnv`` for its block.

``HostedVector`` stands in a sampler's ``env_fns``: each worker then builds one vector env of its
block's size (a gymnasium vector entry point such as CartPole's, a ``SyncVectorEnv``, a numpy or
JAX batched env) instead of one env per row, steps it once per batch and copies each field into
its rows of shared memory with one copy per field. Everything around the step is the sampler's
as before: the handshake, partial batches, restarts, seeding, infos (docs/benchmarks.md, "Past
the bare loop"; docs/semantics.md).

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
``reset(mask=...)``, passed on as ``options["reset_mask"]``. A batch steps all its rows, so where
single envs stay frozen, a block with an ended env is refused (``HostedEnvError``) before its
step is posted, until that env is reset.

What else a hosted env cannot honour is refused with a ``HostedEnvError``: an autoreset mode
other than the env's own (``AutoresetMismatchError``) and pickled (variable-shape) spaces, at
construction; ``reset(mask=...)`` of part of a block, in the worker, unless the env can reset
part of its batch (``SyncVectorEnv``, or ``supports_reset_mask = True``).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import cloudpickle
import gymnasium as gym
import numpy as np

from vecsample._wire.protocol import AutoresetMode, Command, InfoRecord, ResetReply, Space
from vecsample._wire.spaces import leaves, unflatten
from vecsample.errors import (
    AutoresetMismatchError,
    EnvFactoryError,
    EnvOutputError,
    HostedEnvError,
    HostedMethodError,
)

if TYPE_CHECKING:
    from vecsample._worker.main import _Worker

#: Builds a batch of ``num_envs`` envs: ``fn(num_envs) -> gymnasium.vector.VectorEnv``.
VectorEnvFn = Callable[[int], gym.vector.VectorEnv]
#: ``gymnasium.make_vec``'s vectorization modes a worker can host ("async" would start
#: processes inside a worker, which a worker never does).
VECTORIZATIONS = ("vector_entry_point", "sync")
#: gymnasium's vector info keys for the SAME_STEP autoreset's final step.
_FINAL_KEYS = frozenset({"final_obs", "_final_obs", "final_info", "_final_info"})


@dataclass(frozen=True)
class HostedVector:
    """One batch-native vector env per worker, in place of its block of single envs.

    Args:
        make: a registered env id (built with ``gymnasium.make_vec``), or a callable
            ``make(num_envs) -> gymnasium.vector.VectorEnv``; it is called once per worker with
            that worker's block size (and once with 1 in the parent, to read the spaces).
        vectorization: with an env id, ``gymnasium.make_vec``'s ``vectorization_mode``:
            ``"vector_entry_point"`` (the env's own batched implementation) or ``"sync"``.
        kwargs: with an env id, keyword arguments for ``gymnasium.make_vec``.
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
    vectorization: str = "vector_entry_point"
    kwargs: dict[str, Any] = field(default_factory=dict)
    num_envs: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.make, str):
            if self.vectorization not in VECTORIZATIONS:
                raise HostedEnvError(
                    feature=f"vectorization={self.vectorization!r}",
                    reason=f"a worker hosts one of {list(VECTORIZATIONS)}",
                    fix="use 'vector_entry_point' where the env has one, else 'sync'")
        elif not callable(self.make):
            raise HostedEnvError(feature=f"make={self.make!r}", reason="it is neither an env "
                                 "id nor a callable", fix="pass an env id or fn(num_envs)")

    def build(self, num_envs: int, mode: AutoresetMode) -> gym.vector.VectorEnv:
        """A vector env of ``num_envs`` envs (``"sync"`` is built in the sampler's ``mode``)."""
        if not isinstance(self.make, str):
            return self.make(num_envs)
        if self.make not in gym.registry and importlib.util.find_spec("vecsample.envs"):
            importlib.import_module("vecsample.envs")  # registers the meta-RL task envs
        extra: dict[str, Any] = {}
        if self.vectorization == "sync":
            extra["vector_kwargs"] = {"autoreset_mode": gym.vector.AutoresetMode(mode.value)}
        return gym.make_vec(self.make, num_envs=num_envs, vectorization_mode=self.vectorization,
                            **extra, **self.kwargs)

    def slots(self, count: int, mode: AutoresetMode) -> list[HostedSlot]:
        """``count`` env factories that stand for this hosted env (one object, once pickled)."""
        return [HostedSlot(self, mode)] * count


class HostedSlot:
    """One row of a hosted block in ``env_fns``; the worker builds one vector env for all its
    rows. Pickled through cloudpickle (``make`` may be a lambda), once per worker: the rows of
    a block are the same object."""

    def __init__(self, hosted: HostedVector, mode: AutoresetMode) -> None:
        self.hosted = hosted
        self.mode = mode
        #: The commands the parent's probe found no method for, with the env type it names.
        self.lacking: dict[Command, str] = {}

    def __call__(self) -> gym.Env[Any, Any]:
        raise HostedEnvError(feature="building one env", reason="a hosted vector env is built "
                             "once per worker, for the whole block", fix="use the sampler")

    def __getstate__(self) -> bytes:
        return cloudpickle.dumps((self.hosted, self.mode))  # type: ignore[no-any-return]

    def __setstate__(self, state: bytes) -> None:
        self.hosted, self.mode = cloudpickle.loads(state)
        self.lacking = {}

    def build(self, num_envs: int) -> gym.vector.VectorEnv:
        """The block's vector env, checked: its size and its autoreset mode."""
        env = self.hosted.build(num_envs, self.mode)
        got = getattr(env, "num_envs", None)
        if got != num_envs:
            env.close()
            raise HostedEnvError(feature="num_envs", reason=f"asked for {num_envs} envs, the "
                                 f"vector env has {got}", fix="build num_envs envs in make()")
        mode = AutoresetMode(_env_mode(env).value)
        if mode is not self.mode:
            env.close()
            raise AutoresetMismatchError(env=_name(env), env_mode=mode.value,
                                         sampler_mode=self.mode.value)
        return env


def is_hosted(env_fns: Sequence[Any]) -> bool:
    """Whether ``env_fns`` are the slots of a hosted vector env."""
    return bool(env_fns) and isinstance(env_fns[0], HostedSlot)


def probe_spaces(slot: Any, obs: Space | None, act: Space | None) -> tuple[Space, Space]:
    """The single spaces of a hosted env, read from a vector env of 1 built here; what the
    hosted env cannot honour is refused now, at construction."""
    assert isinstance(slot, HostedSlot)
    try:
        env = slot.build(1)
    except HostedEnvError:
        raise
    except Exception as exc:
        raise EnvFactoryError(f"the hosted vector env's make(1) raised {type(exc).__name__}: "
                              f"{exc}; fix it (it is called once in the parent to read the "
                              f"spaces and the autoreset mode).") from exc
    try:
        obs = env.single_observation_space if obs is None else obs
        act = env.single_action_space if act is None else act
        slot.lacking = {command: name for command, probe in METHODS.items()
                        if (name := probe(env)[1]) is not None}
    finally:
        env.close()
    pickled = [leaf.name for space in (obs, act) for leaf in leaves(space) if not leaf.shared]
    if pickled:
        raise HostedEnvError(feature=f"the spaces {obs} / {act}", reason=f"leaves {pickled} have "
                             "no fixed shape", fix="host envs of fixed-shape spaces only")
    return obs, act


def check_command(env_fns: Sequence[Any], command: Command) -> None:
    """Refuses, before anything is sent, a per-env command whose method the parent's probe of
    the hosted env (``probe_spaces``) did not find."""
    if is_hosted(env_fns) and command in env_fns[0].lacking:
        raise missing(command, env_fns[0].lacking[command])


def check_not_ended(views: Any, lo: int) -> None:
    """DISABLED: a hosted block steps all its rows, so a row that ended (and was not restarted
    since) must be reset with ``reset(mask=...)`` before its block steps; refused before
    anything is posted. Single envs stay frozen instead; a batch cannot."""
    ended = (views.terminated | views.truncated) & ~views.restarted
    if ended.any():
        rows = (np.flatnonzero(ended) + lo).tolist()
        raise HostedEnvError(
            feature="autoreset_mode='Disabled'", reason=f"envs {rows} ended and the hosted "
            "vector env steps its whole batch, so they cannot stay frozen as single envs do",
            fix="reset them first with reset(mask=...) naming them")


def missing(command: Command, env: str) -> HostedMethodError:
    """The error for a hosted env of type ``env`` without the method ``command`` needs."""
    return HostedMethodError(feature=command.name.lower(), env=env, fix=_FIXES[command])


_FIXES = {
    Command.RESET_TASK: "give the vector env reset_task(tasks), one task per env of its batch, "
    "or host a SyncVectorEnv whose envs have reset_task(task) on env.unwrapped",
    Command.SET_ATTR: "give the vector env set_attr(name, values), one value per env of its "
    "batch, as gymnasium's SyncVectorEnv has",
}


def _task_setter(env: gym.vector.VectorEnv) -> tuple[Callable[[list[Any]], Any] | None,
                                                     str | None]:
    """``(set, None)``: the vector env's ``reset_task(tasks)``, else for a vector env with an
    ``envs`` list (``SyncVectorEnv``) one ``env.unwrapped.reset_task(task)`` per env; or
    ``(None, name)``: the type that has no ``reset_task``."""
    own = _method(env, "reset_task")
    if own is not None:
        return own, None
    envs = getattr(env.unwrapped, "envs", None)
    if not isinstance(envs, (list, tuple)) or not envs:
        return None, _name(env)
    lacking = [type(e.unwrapped).__name__ for e in envs
               if not callable(getattr(e.unwrapped, "reset_task", None))]
    if lacking:
        return None, lacking[0]

    def each(tasks: list[Any]) -> None:
        for sub, task in zip(envs, tasks, strict=True):
            sub.unwrapped.reset_task(task)

    return each, None


def _attr_setter(env: gym.vector.VectorEnv) -> tuple[Callable[..., Any] | None, str | None]:
    """``(set_attr, None)``: the vector env's ``set_attr(name, values)``; or ``(None, name)``."""
    own = _method(env, "set_attr")
    return (own, None) if own is not None else (None, _name(env))


#: How the worker runs each per-env command on its vector env, and how the parent probes it.
METHODS: dict[Command, Callable[[gym.vector.VectorEnv], tuple[Any, str | None]]] = {
    Command.RESET_TASK: _task_setter, Command.SET_ATTR: _attr_setter}


def _method(env: gym.vector.VectorEnv, name: str) -> Callable[..., Any] | None:
    """``env``'s method ``name``, or its unwrapped env's (a VectorWrapper forwards nothing)."""
    for holder in (env, env.unwrapped):
        method = getattr(holder, name, None)
        if callable(method):
            return method  # type: ignore[no-any-return]
    return None


# --- the worker's side ---------------------------------------------------------------------------


def attach(worker: _Worker) -> Host | None:
    """For a hosted block, builds its vector env and gives the worker its step loop and
    commands; None (and nothing changed) for a block of single envs."""
    if not is_hosted(worker.spec.env_fns):
        return None
    host = Host(worker)
    worker.step_all = host.step_all
    worker.handlers.update(host.handlers)
    return host


class Host:
    """The vector env of one worker's block, with its step loop and commands."""

    def __init__(self, worker: _Worker) -> None:
        spec = worker.spec
        slot = spec.env_fns[0]
        assert isinstance(slot, HostedSlot)
        self.count, self.views, self.infos = worker.count, worker.views, spec.infos
        self.mode, self.write_final = spec.autoreset_mode, worker.write_final
        self.env = slot.build(self.count)
        _check_spaces(self.env, spec.buffers.observation_space, spec.buffers.action_space)
        views = self.views.action_leaves
        self.actions = unflatten(spec.buffers.action_space, iter(views))  # batched, in shm
        self.ended = np.zeros(self.count, dtype=bool)  # NEXT_STEP: reset at the next step
        self.seed_list = _takes_seed_list(self.env)
        self.masks = _masks_resets(self.env)
        self.after_step = {AutoresetMode.SAME_STEP: self._same_step,
                           AutoresetMode.NEXT_STEP: self._next_step,
                           AutoresetMode.DISABLED: self._disabled}[self.mode]
        self.handlers: dict[Command, Callable[[Any], Any]] = {
            Command.RESET: self.reset, Command.CALL: self.call, Command.GET_ATTR: self.get_attr,
            Command.RESET_TASK: self.reset_task, Command.SET_ATTR: self.set_attr}

    def step_all(self, _: Sequence[Any], records: list[InfoRecord]) -> None:
        """One step of the whole block; the worker's own actions list is not needed."""
        obs, rewards, terminated, truncated, infos = self.env.step(self.actions)
        self.after_step(obs, (rewards, terminated, truncated), infos, records)

    def _next_step(self, obs: Any, scalars: tuple[Any, Any, Any], infos: dict[str, Any],
                   records: list[InfoRecord]) -> None:
        """NEXT_STEP: the env resets the rows that ended last step; their infos are resets'."""
        v = self.views
        _put_obs(v.obs_leaves, obs, self.views)
        _put_scalars(v, scalars)
        if self.infos:
            split = _split(infos, self.count)
            records += [(j, {}, split.pop(j, {})) for j in np.flatnonzero(self.ended).tolist()]
            records += [(j, info, None) for j, info in sorted(split.items()) if info]
        np.logical_or(v.terminated, v.truncated, out=self.ended)

    def _disabled(self, obs: Any, scalars: tuple[Any, Any, Any], infos: dict[str, Any],
                  records: list[InfoRecord]) -> None:
        """DISABLED: nothing resets; the parent steps a block only when none of its rows has
        ended since its reset (``check_not_ended``)."""
        v = self.views
        _put_obs(v.obs_leaves, obs, v)
        _put_scalars(v, scalars)
        if self.infos:
            records += [(j, info, None) for j, info in sorted(_split(infos, self.count).items())
                        if info]

    def _same_step(self, obs: Any, scalars: tuple[Any, Any, Any], infos: dict[str, Any],
                   records: list[InfoRecord]) -> None:
        """SAME_STEP: rows that ended are already reset; their last observation and info come
        in ``infos["final_obs"]`` and ``infos["final_info"]`` (gymnasium's convention)."""
        v = self.views
        _put_obs(v.obs_leaves, obs, v)
        _put_scalars(v, scalars)
        np.logical_or(v.terminated, v.truncated, out=v.has_final_obs)
        ended = np.flatnonzero(v.has_final_obs)
        final_obs = infos.get("final_obs")
        for e in ended.tolist():
            if final_obs is None or not infos.get("_final_obs", v.has_final_obs)[e]:
                raise EnvOutputError(
                    f"env {e} of the hosted vector env ended but infos['final_obs'] has no "
                    f"entry for it; a SameStep vector env must return each ended env's last "
                    f"observation there (gymnasium's convention).")
            self.write_final(e, final_obs[e])
        if self.infos:
            finals = _split(infos.get("final_info", {}), self.count)
            rest = _split({k: x for k, x in infos.items() if k not in _FINAL_KEYS}, self.count)
            records += [(j, finals.get(j, {}), rest.pop(j, {})) for j in ended.tolist()]
            records += [(j, info, None) for j, info in sorted(rest.items()) if info]

    def reset(self, payload: tuple[list[Any], Any, Any]) -> ResetReply:
        """Resets the block (the rows of ``mask``) with the block's seeds."""
        seeds, options, mask = payload
        partial = mask is not None and not bool(np.all(mask))
        if partial:
            if not self.masks:
                raise HostedEnvError(
                    feature="reset(mask=...) of part of a block", reason=f"{_name(self.env)} "
                    "cannot reset part of its batch", fix="reset whole blocks, or host a "
                    "SyncVectorEnv or an env with supports_reset_mask = True")
            options = {**(options or {}), "reset_mask": np.array(mask, dtype=bool)}
        seed: Any = self._seed(seeds)  # gymnasium's VectorEnv annotates only int seeds
        obs, infos = self.env.reset(seed=seed, options=options)
        v = self.views
        _put_obs(v.obs_leaves, obs, v)
        rows = np.ones(self.count, bool) if mask is None else np.asarray(mask, bool)
        for flags in (v.terminated, v.truncated, v.has_final_obs, v.restarted, self.ended):
            flags[rows] = False
        split = _split(infos, self.count)
        return [(j, split.get(j, {})) for j in np.flatnonzero(rows).tolist()], None

    def _seed(self, seeds: Sequence[int | None]) -> int | list[int | None] | None:
        """The block's per-env seeds as a list, for an env whose reset takes one; else the
        first env's seed (an env with one generator for the whole batch)."""
        if all(s is None for s in seeds):
            return None
        if self.seed_list:
            return list(seeds)
        return next(s for s in seeds if s is not None)

    def call(self, payload: tuple[str, tuple[Any, ...], dict[str, Any]]) -> list[Any]:
        """``name`` of the vector env, called once if callable; the same value for each row."""
        name, args, kwargs = payload
        attr = getattr(self.env, name)
        return [attr(*args, **kwargs) if callable(attr) else attr] * self.count

    def get_attr(self, name: str) -> list[Any]:
        return [getattr(self.env, name)] * self.count

    def reset_task(self, tasks: Sequence[Any]) -> list[None]:
        """Gives each env of the block its task (``METHODS``); as with single task envs, the
        caller resets them after it."""
        setter, lacking = _task_setter(self.env)
        if setter is None:
            raise missing(Command.RESET_TASK, str(lacking))
        setter(list(tasks))
        return [None] * self.count

    def set_attr(self, payload: tuple[str, Sequence[Any]]) -> list[None]:
        """``set_attr(name, values)`` of the vector env, with one value per env of the block."""
        name, values = payload
        setter, lacking = _attr_setter(self.env)
        if setter is None:
            raise missing(Command.SET_ATTR, str(lacking))
        setter(name, list(values))
        return [None] * self.count

    def close(self) -> None:
        self.env.close()


# --- helpers -------------------------------------------------------------------------------------


def _put_obs(views: list[np.ndarray], obs: Any, all_views: Any) -> None:
    """One copy per observation leaf; the batch must have each leaf's exact shape."""
    parts = [obs] if len(views) == 1 and not isinstance(obs, (dict, tuple)) else _leaves_of(
        all_views.obs, obs)
    for view, part in zip(views, parts, strict=True):
        _copy_exact(view, part, "observations",
                    " (the block's envs times the leaf's shape); nothing is broadcast.")


def _leaves_of(template: Any, value: Any) -> list[Any]:
    """``value``'s leaves in the order of ``template`` (the nested views of the space)."""
    if isinstance(template, dict):
        return [x for k in template for x in _leaves_of(template[k], value[k])]
    if isinstance(template, tuple):
        return [x for i, t in enumerate(template) for x in _leaves_of(t, value[i])]
    return [value]


def _put_scalars(v: Any, scalars: tuple[Any, Any, Any]) -> None:
    """Rewards, terminated and truncated: one copy each, of shape (block size,)."""
    for view, value, name in zip((v.rewards, v.terminated, v.truncated), scalars,
                                 ("rewards", "terminated", "truncated"), strict=True):
        _copy_exact(view, value, name, "; return one value per env of the batch.")


def _copy_exact(view: np.ndarray, value: Any, name: str, fix: str) -> None:
    """One copy of a whole field into its view; a shape other than the view's is an error
    (``fix``: the end of its message), never broadcast."""
    arr = np.asarray(value)
    if arr.shape != view.shape:
        raise EnvOutputError(f"the hosted vector env returned {name} of shape {arr.shape}, "
                             f"expected {view.shape}{fix}")
    np.copyto(view, arr, casting="unsafe")


def _split(infos: dict[str, Any], count: int) -> dict[int, dict[str, Any]]:
    """gymnasium's vector infos (``key`` with its mask ``_key``) as one info dict per env,
    sparse: only the envs that have one (a step of empty infos costs nothing per env)."""
    out: dict[int, dict[str, Any]] = {}
    for key, value in infos.items():
        if key.startswith("_") and key[1:] in infos:
            continue  # a mask
        mask = infos.get(f"_{key}")
        rows = range(count) if mask is None else np.flatnonzero(mask).tolist()
        if isinstance(value, dict):
            parts = _split(value, count)
            for j in rows:
                if j in parts or mask is not None:
                    out.setdefault(j, {})[key] = parts.get(j, {})
            continue
        per_env = isinstance(value, np.ndarray) and value.shape[:1] == (count,)
        for j in rows:
            out.setdefault(j, {})[key] = value[j] if per_env else value
    return out


def _check_spaces(env: gym.vector.VectorEnv, obs: Space, act: Space) -> None:
    for what, got, expected in (("observation", env.single_observation_space, obs),
                                ("action", env.single_action_space, act)):
        if got != expected:
            raise HostedEnvError(feature=f"single_{what}_space", reason=f"this worker's vector "
                                 f"env has {got}, the sampler {expected}", fix="build the "
                                 "same spaces for every block size")


def _env_mode(env: gym.vector.VectorEnv) -> Any:
    """The vector env's autoreset mode (gymnasium's default, NEXT_STEP, when it names none)."""
    mode = env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
    return gym.vector.AutoresetMode(getattr(mode, "value", mode))


def _takes_seed_list(env: gym.vector.VectorEnv) -> bool:
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


def _masks_resets(env: gym.vector.VectorEnv) -> bool:
    """Whether ``reset(options={"reset_mask": m})`` resets only the rows of ``m``."""
    unwrapped = env.unwrapped
    return isinstance(unwrapped, (gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv)) or bool(
        getattr(unwrapped, "supports_reset_mask", False))


def _name(env: gym.vector.VectorEnv) -> str:
    return type(env.unwrapped).__name__
