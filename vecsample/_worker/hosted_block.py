"""The hosted block: one batch-native gymnasium ``VectorEnv`` for all the rows of a worker
(``vecsample.HostedVector``), stepped once per batch, each field copied into the block's rows
with one copy (the parent's side, the user's ``HostedVector`` and its checks, is
``vecsample/hosted.py``).

A step writes what the env block's loop of the same mode writes (``env_block.py``), from the vector
env's own autoreset: under SAME_STEP the final observations come from ``infos["final_obs"]``
(gymnasium's convention); under NEXT_STEP the rows that ended at the last step come back reset,
their infos as reset infos; under DISABLED a row that ended is frozen, as in the env block's table,
for an env that freezes its ended rows (its ``metadata["freezes_ended_envs"]``): its observation,
``terminated`` and ``truncated`` are kept, its reward is 0 and it has no record, whatever the env
returned for it. The parent posts no step to a block with an ended row of any other env
(``hosted.check_not_ended``).
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from vecsample._wire.infos import RESET, STEP, InfoRecord, InfoWriter
from vecsample._wire.protocol import Command, ResetReply
from vecsample._wire.shm import Views
from vecsample._wire.spaces import unflatten
from vecsample._wire.spec import WorkerSpec
from vecsample._worker.rows import FINAL_OBS, check_dtype, obs_writer
from vecsample.adapters.vector_infos import LazyInfos
from vecsample.errors import EnvOutputError, HostedEnvError
from vecsample.hosted import (
    HostedVector,
    attr_setter,
    block_seed,
    env_name,
    missing,
    task_setter,
)
from vecsample.types import AutoresetMode, Space

#: gymnasium's vector info keys for the SAME_STEP autoreset's final step.
_FINAL_KEYS = frozenset({"final_obs", "_final_obs", "final_info", "_final_info"})


class HostedBlock:
    """The vector env of one worker's block (a ``StepLoop``): one step of the whole batch."""

    env: gym.vector.VectorEnv  # set by build()

    def __init__(self, spec: WorkerSpec, hosted: HostedVector, views: Views,
                 writer: InfoWriter) -> None:
        self.hosted, self.spec, self.views = hosted, spec, views
        self.writer = writer  # the worker's info columns: a batch env's columns go straight in
        self.count, self.infos, self.mode = spec.count, spec.infos, spec.autoreset_mode
        self.write_final = obs_writer(spec.buffers, views.final_obs_leaves, FINAL_OBS)
        # Batched, in shared memory: the env reads this step's actions where the parent wrote them.
        self.actions = unflatten(spec.buffers.action_space, iter(views.action_leaves))
        # NEXT_STEP: reset at the next step; DISABLED: frozen until reset (a freezing env)
        self.ended = np.zeros(self.count, dtype=bool)
        self.after_step = {AutoresetMode.SAME_STEP: self._same_step,
                           AutoresetMode.NEXT_STEP: self._next_step,
                           AutoresetMode.DISABLED: self._disabled}[self.mode]
        self.masks = False  # set by build(), from the env
        #: Each observation leaf, and the dtypes seen to fit it (``rows.check_dtype``).
        self.obs_leaves = [(leaf, {leaf.dtype}) for leaf in spec.buffers.obs_leaves]

    def build(self) -> None:
        buffers = self.spec.buffers
        env = self.hosted.build(self.count, self.mode)
        _check_spaces(env, buffers.observation_space, buffers.action_space)
        self.env = env
        self.masks = _masks_resets(env)

    def step(self, records: list[InfoRecord]) -> None:
        """One step of the whole block, with its batched actions straight from shared memory."""
        obs, rewards, terminated, truncated, infos = self.env.step(self.actions)
        _check_infos(infos, "step")  # one check per batch, not per env
        self.after_step(obs, (rewards, terminated, truncated), infos, records)

    def _next_step(self, obs: Any, scalars: tuple[Any, Any, Any], infos: dict[str, Any],
                   records: list[InfoRecord]) -> None:
        """NEXT_STEP: the env resets the rows that ended last step; their infos are resets'."""
        v = self.views
        self._put_obs(obs)
        _put_scalars(v, scalars)
        if self.infos and not self._put_columns(infos, records):
            split = _split(infos, self.count)
            records += [(j, {}, split.pop(j, {})) for j in np.flatnonzero(self.ended).tolist()]
            records += [(j, info, None) for j, info in sorted(split.items()) if info]
        np.logical_or(v.terminated, v.truncated, out=self.ended)

    def _disabled(self, obs: Any, scalars: tuple[Any, Any, Any], infos: dict[str, Any],
                  records: list[InfoRecord]) -> None:
        """DISABLED: nothing resets. The rows that ended before this step (only an env that
        freezes them is posted a step with such rows: ``check_not_ended``) are written as the
        env block writes a frozen env: nothing but a reward of 0."""
        v, frozen = self.views, self.ended.copy()
        live = None if not frozen.any() else ~frozen
        self._put_obs(obs, live)
        if live is not None:
            rewards, terminated, truncated = (np.asarray(x) for x in scalars)
            scalars = (np.where(live, rewards, 0), np.where(live, terminated, v.terminated),
                       np.where(live, truncated, v.truncated))
        _put_scalars(v, scalars)
        np.logical_or(v.terminated, v.truncated, out=self.ended)
        if self.infos and not self._put_columns(infos, records):
            records += [(j, info, None) for j, info in sorted(_split(infos, self.count).items())
                        if info and not frozen[j]]

    def _same_step(self, obs: Any, scalars: tuple[Any, Any, Any], infos: dict[str, Any],
                   records: list[InfoRecord]) -> None:
        """SAME_STEP: rows that ended are already reset; their last observation and info come
        in ``infos["final_obs"]`` and ``infos["final_info"]`` (gymnasium's convention)."""
        v = self.views
        self._put_obs(obs)
        _put_scalars(v, scalars)
        np.logical_or(v.terminated, v.truncated, out=v.has_final_obs)
        ended = np.flatnonzero(v.has_final_obs)
        columns = infos.columns if isinstance(infos, LazyInfos) else None
        if columns is not None:  # a batch env's final observations: one copy of their rows
            if ended.size:
                if columns.ended is None or not columns.ended[ended].all():
                    raise _no_final_obs(int(ended[0]))
                self._put_obs(columns.final_obs, v.has_final_obs, final=True)
        else:
            self._write_finals(infos, ended)
        if self.infos and not self._put_columns(infos, records):
            finals = _split(infos.get("final_info", {}), self.count)
            rest = _split({k: x for k, x in infos.items() if k not in _FINAL_KEYS}, self.count)
            records += [(j, finals.get(j, {}), rest.pop(j, {})) for j in ended.tolist()]
            records += [(j, info, None) for j, info in sorted(rest.items()) if info]

    def _write_finals(self, infos: dict[str, Any], ended: np.ndarray) -> None:
        """Each ended env's last observation, from ``infos["final_obs"]``."""
        final_obs = infos.get("final_obs")
        for e in ended.tolist():
            if final_obs is None or not infos.get("_final_obs", self.views.has_final_obs)[e]:
                raise _no_final_obs(e)
            self.write_final(e, final_obs[e])

    def _put_columns(self, infos: dict[str, Any], records: list[InfoRecord]) -> bool:
        """A batch env's info columns (``LazyInfos.columns``: a step's infos as arrays),
        written straight into the shared columns, one copy per key, with no per-env dict; a
        key with no shared column of its type yet (the first steps) goes env by env, as any
        env's infos. False where the env returned no columns (or its infos were read or
        changed on the way, by a wrapper): nothing was written, the caller splits them."""
        columns = infos.columns if isinstance(infos, LazyInfos) else None
        if columns is None:
            return False
        step = self.writer.put(STEP, columns.step, columns.step_rows)
        reset = self.writer.put(RESET, columns.reset, columns.reset_rows)
        if step or reset:
            records += _by_env(step, columns.step_rows, reset, columns.reset_rows)
        return True

    def _put_obs(self, obs: Any, rows: np.ndarray | None = None, final: bool = False) -> None:
        """One copy per observation leaf (of the rows of the mask ``rows`` only, if given), to
        the final observations' leaves with ``final``; the batch must have each leaf's exact
        shape, and a dtype the leaf takes by numpy's same_kind rule (``rows.check_dtype``: one
        set lookup per leaf and batch)."""
        views = self.views.final_obs_leaves if final else self.views.obs_leaves
        field = FINAL_OBS if final else "the hosted vector env's observation"
        parts = [obs] if len(views) == 1 and not isinstance(obs, (dict, tuple)) else (
            _leaves_of(self.views.obs, obs))
        for view, part, (leaf, fits) in zip(views, parts, self.obs_leaves, strict=True):
            arr = np.asarray(part)
            if leaf.shared and arr.dtype not in fits and arr.shape == view.shape:
                check_dtype(leaf, field, part, arr, fits)
            _copy_exact(view, arr, "observations",
                        " (the block's envs times the leaf's shape); nothing is broadcast.", rows)

    def reset(self, payload: tuple[list[Any], Any, Any]) -> ResetReply:
        """Resets the block (the rows of ``mask``) with the block's seeds."""
        seeds, options, mask = payload
        partial = mask is not None and not bool(np.all(mask))
        if partial:
            if not self.masks:
                raise HostedEnvError(
                    feature="reset(mask=...) of part of a block", reason=f"{env_name(self.env)} "
                    "cannot reset part of its batch", fix="reset whole blocks, or host a "
                    "SyncVectorEnv or an env with metadata['supports_reset_mask'] = True")
            options = {**(options or {}), "reset_mask": np.array(mask, dtype=bool)}
        seed: Any = block_seed(self.env, seeds)  # VectorEnv annotates only int seeds
        obs, infos = self.env.reset(seed=seed, options=options)
        _check_infos(infos, "reset")
        v = self.views
        self._put_obs(obs)
        rows = np.ones(self.count, bool) if mask is None else np.asarray(mask, bool)
        for flags in (v.terminated, v.truncated, v.has_final_obs, v.restarted, self.ended):
            flags[rows] = False
        split = _split(infos, self.count)
        return [(j, split.get(j, {})) for j in np.flatnonzero(rows).tolist()], None

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
        setter, lacking = task_setter(self.env)
        if setter is None:
            raise missing(Command.RESET_TASK, str(lacking))
        setter(list(tasks))
        return [None] * self.count

    def set_attr(self, payload: tuple[str, Sequence[Any]]) -> list[None]:
        """``set_attr(name, values)`` of the vector env, with one value per env of the block."""
        name, values = payload
        setter, lacking = attr_setter(self.env)
        if setter is None:
            raise missing(Command.SET_ATTR, str(lacking))
        setter(name, list(values))
        return [None] * self.count

    def close(self) -> None:
        env: gym.vector.VectorEnv | None = getattr(self, "env", None)  # None: build() raised
        if env is not None:
            env.close()


# --- helpers -------------------------------------------------------------------------------------


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


def _copy_exact(view: np.ndarray, value: Any, name: str, fix: str,
                rows: np.ndarray | None = None) -> None:
    """One copy of a whole field into its view (of the rows of the mask ``rows`` only, if
    given); a shape other than the view's is an error (``fix``: the end of its message), never
    broadcast."""
    arr = np.asarray(value)
    if arr.shape != view.shape:
        raise EnvOutputError(f"the hosted vector env returned {name} of shape {arr.shape}, "
                             f"expected {view.shape}{fix}")
    where: Any = True if rows is None else rows.reshape(rows.shape + (1,) * (view.ndim - 1))
    np.copyto(view, arr, casting="unsafe", where=where)


def _check_infos(infos: Any, call: str) -> None:
    """The vector infos of a ``call`` ("step" or "reset") must be a dict (gymnasium's format)."""
    if not isinstance(infos, Mapping):
        raise EnvOutputError(
            f"the hosted vector env's {call}() returned infos as a {type(infos).__name__} "
            f"({reprlib.repr(infos)}), expected a dict (gymnasium's vector infos: each key's "
            f"values for the batch, with its '_key' mask); return {{}} for none.")


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


def _by_env(step: Mapping[str, Any], step_rows: np.ndarray, reset: Mapping[str, Any],
            reset_rows: np.ndarray) -> list[InfoRecord]:
    """The records of columns (``key -> (count, ...) array``, or a nested dict of them) present
    in ``step_rows`` (step infos) and ``reset_rows`` (infos of resets made in the step)."""
    out: list[InfoRecord] = []
    for j in np.flatnonzero(step_rows | reset_rows).tolist():
        info = {key: _row(column, j) for key, column in step.items()} if step_rows[j] else {}
        reset_info = ({key: _row(column, j) for key, column in reset.items()}
                      if reset_rows[j] else None)
        if info or reset_info:
            out.append((j, info, reset_info))
    return out


def _row(column: Any, j: int) -> Any:
    """Env ``j``'s value of a column (a nested dict of columns gives a dict)."""
    if isinstance(column, np.ndarray):
        return column[j]
    return {key: _row(sub, j) for key, sub in column.items()}


def _no_final_obs(env: int) -> EnvOutputError:
    return EnvOutputError(
        f"env {env} of the hosted vector env ended but infos['final_obs'] has no entry for "
        f"it; a SameStep vector env must return each ended env's last observation there "
        f"(gymnasium's convention).")


def _check_spaces(env: gym.vector.VectorEnv, obs: Space, act: Space) -> None:
    for what, got, expected in (("observation", env.single_observation_space, obs),
                                ("action", env.single_action_space, act)):
        if got != expected:
            raise HostedEnvError(feature=f"single_{what}_space", reason=f"this worker's vector "
                                 f"env has {got}, the sampler {expected}", fix="build the "
                                 "same spaces for every block size")


def _masks_resets(env: gym.vector.VectorEnv) -> bool:
    """Whether ``reset(options={"reset_mask": m})`` resets only the rows of ``m``: gymnasium's
    own vector envs do; another env says so in its metadata (``supports_reset_mask``)."""
    own = isinstance(env.unwrapped, (gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv))
    return own or env.metadata.get("supports_reset_mask", False) is True
