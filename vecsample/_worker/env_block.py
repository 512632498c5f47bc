"""The env block: a worker's gymnasium envs, one per row, stepped one after another.

A step runs one of three loops, one per autoreset mode, chosen once when the block is made; none
branches on the mode per env. Each is inlined (no function call per env beyond the env's own
``step``/``reset`` and ``put_obs``): rewards and flags are gathered in lists and written with one
slice copy per field at the end (``_flush_rows``), observations with one slice copy for a bare
array space (``rows.obs_batcher``), a row write per env otherwise. What each mode writes, per
row of the block:

| per row       | SAME_STEP                 | NEXT_STEP                | DISABLED                 |
|---------------|---------------------------|--------------------------|--------------------------|
| stepped       | every row                 | every row not ``ended``  | every row not ``ended``  |
| not stepped   | -                         | ``ended``: reset instead | ``ended``: frozen        |
| rewards       | the step's                | the step's; 0 if reset   | the step's; 0 if frozen  |
| terminated,   | the step's                | the step's; False if     | the step's; kept if      |
| truncated     |                           | reset                    | frozen                   |
| obs           | the step's; the reset's   | the step's; the reset's  | the step's; kept if      |
|               | if the row ended          | if reset                 | frozen                   |
| final_obs     | the last obs if it ended  | not written              | not written              |
| has_final_obs | True if it ended, else    | not written              | not written              |
|               | False                     |                          |                          |
| records       | ``(j, info, reset_info)`` | ``(j, {}, reset_info)``  | ``(j, info, None)`` if   |
|               | if it ended, else ``(j,`` | if reset, else ``(j,``   | stepped with an info     |
|               | ``info, None)`` if it     | ``info, None)`` if it    |                          |
|               | has an info               | has an info              |                          |
| ``ended``     | not used                  | set where the row ended: | set where the row ended: |
|               |                           | reset at the next step   | frozen until ``reset``   |

A record is ``(env, info, reset_info)``; ``reset`` (RESET, any mode) clears the flags,
``has_final_obs``, ``restarted`` and ``ended`` of the rows it resets.

When an env raises, the rows before it keep what they wrote (rewards, flags, observations, and
under SAME_STEP ``has_final_obs``), and the error names it (``Cursor``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from vecsample._wire.infos import InfoRecord
from vecsample._wire.protocol import ResetReply
from vecsample._wire.shm import SharedBuffers, Views
from vecsample._wire.spaces import unflatten
from vecsample._wire.spec import WorkerSpec
from vecsample._worker.rows import FINAL_OBS, first_non_scalar, lane, obs_batcher, obs_writer
from vecsample._worker.step_loop import Cursor
from vecsample.types import AutoresetMode


class EnvBlock:
    """The worker's envs (a ``StepLoop``): ``step`` is the loop of the worker's autoreset mode."""

    step: Callable[[list[InfoRecord]], None]

    def __init__(self, spec: WorkerSpec, views: Views, cursor: Cursor) -> None:
        self.spec, self.views, self.cursor = spec, views, cursor
        self.count = spec.count
        self.envs: list[gym.Env[Any, Any]] = []
        self.ended = np.zeros(self.count, dtype=bool)  # NEXT_STEP: reset next; DISABLED: frozen
        buffers = spec.buffers
        self.write_obs = obs_writer(buffers, views.obs_leaves)
        # The loops hand each observation to put_obs(j, obs); _flush_rows calls flush_obs at the
        # end: one slice copy for a bare array space, a row write per env otherwise.
        self.put_obs, self.flush_obs = obs_batcher(buffers, views.obs_leaves, self.write_obs,
                                                   cursor)
        self.write_final = obs_writer(buffers, views.final_obs_leaves, FINAL_OBS)
        self.obs_lane = any(not leaf.shared for leaf in buffers.obs_leaves)
        self.step = functools.partial(LOOPS[spec.autoreset_mode], self)

    def build(self) -> None:
        for j, env_fn in enumerate(self.spec.env_fns):
            self.cursor.env = j
            self.envs.append(env_fn())
        _check_spaces(self.envs, self.spec.buffers, self.cursor)
        self.cursor.env = None

    def actions(self) -> Sequence[Any]:
        """This step's actions, one per row: the shared rows themselves for a bare space."""
        views = self.views.action_leaves
        if len(views) == 1 and not self.spec.buffers.action_leaves[0].path:
            return views[0]  # type: ignore[return-value]  # rows (or scalars) straight from shm
        space = self.spec.buffers.action_space
        return [unflatten(space, (v[j] for v in views)) for j in range(self.count)]

    # --- commands ----------------------------------------------------------------------------

    def reset(self, payload: tuple[list[Any], Any, Any]) -> ResetReply:
        seeds, options, mask = payload
        infos: list[tuple[int, dict[str, Any]]] = []
        done: list[int] = []  # envs reset so far: their flags are cleared, even on an error
        try:
            for j, env in enumerate(self.envs):
                if mask is not None and not mask[j]:
                    continue
                self.cursor.env = j
                obs, info = env.reset(seed=seeds[j], options=options)  # as gymnasium calls it
                self.write_obs(j, obs)
                done.append(j)
                infos.append((j, info))
        finally:
            v = self.views
            for flags in (v.terminated, v.truncated, v.has_final_obs, v.restarted, self.ended):
                flags[done] = False
        self.cursor.env = None
        return infos, (lane(self.spec.buffers, self.spec.env_offset, self.count)
                       if self.obs_lane else None)

    def reset_task(self, tasks: Sequence[Any]) -> list[None]:
        for j, (env, task) in enumerate(zip(self.envs, tasks, strict=True)):
            self.cursor.env = j
            reset_task = getattr(env.unwrapped, "reset_task", None)
            if reset_task is None:
                raise AttributeError(
                    f"{type(env.unwrapped).__name__} has no reset_task(task); reset_task needs "
                    f"a meta-RL task env (see vecsample.envs)."
                )
            reset_task(task)
        self.cursor.env = None
        return [None] * self.count

    def call(self, payload: tuple[str, tuple[Any, ...], dict[str, Any]]) -> list[Any]:
        name, args, kwargs = payload
        out = []
        for j, env in enumerate(self.envs):
            self.cursor.env = j
            attr = env.get_wrapper_attr(name)
            out.append(attr(*args, **kwargs) if callable(attr) else attr)
        self.cursor.env = None
        return out

    def get_attr(self, name: str) -> list[Any]:
        out = []
        for j, env in enumerate(self.envs):
            self.cursor.env = j
            out.append(env.get_wrapper_attr(name))
        self.cursor.env = None
        return out

    def set_attr(self, payload: tuple[str, Sequence[Any]]) -> list[None]:
        name, values = payload
        for j, (env, value) in enumerate(zip(self.envs, values, strict=True)):
            self.cursor.env = j
            env.set_wrapper_attr(name, value)
        self.cursor.env = None
        return [None] * self.count

    def close(self) -> None:
        for env in self.envs:
            # One env failing to close must not stop the others from closing.
            with contextlib.suppress(Exception):
                env.close()


# --- the three loops, side by side (the table above) ---------------------------------------------


def _step_same(block: EnvBlock, records: list[InfoRecord]) -> None:
    """SAME_STEP over every env: an env that ended is reset in the same step, its last
    observation written to final_obs."""
    n, actions = block.count, block.actions()
    rewards: list[Any] = [0.0] * n
    terminated, truncated = [False] * n, [False] * n
    has_final = [False] * n
    envs, put_obs, write_final = block.envs, block.put_obs, block.write_final
    j = 0
    try:
        for j in range(n):
            env = envs[j]
            obs, rewards[j], term, trunc, info = env.step(actions[j])
            if term or trunc:
                write_final(j, obs)
                has_final[j] = True
                obs, reset_info = env.reset()
                records.append((j, info, reset_info))
            elif info:
                records.append((j, info, None))
            put_obs(j, obs)
            terminated[j], truncated[j] = term, trunc
        j = n
    except BaseException:
        block.cursor.env = j
        raise
    finally:
        # Envs before a failing one keep what they wrote.
        _flush_rows(block, rewards, terminated, truncated, j)
        block.views.has_final_obs[:j] = has_final[:j]


def _step_next(block: EnvBlock, records: list[InfoRecord]) -> None:
    """NEXT_STEP over every env: an env that ended at its last step is reset instead of stepped
    (reward 0, flags False, its action ignored)."""
    n, actions = block.count, block.actions()
    envs, ended, put_obs = block.envs, block.ended, block.put_obs
    rewards: list[Any] = [0.0] * n
    terminated, truncated = [False] * n, [False] * n
    j = 0
    try:
        for j in range(n):
            env = envs[j]
            if ended[j]:
                obs, reset_info = env.reset()
                ended[j] = False
                records.append((j, {}, reset_info))
            else:
                obs, rewards[j], term, trunc, info = env.step(actions[j])
                terminated[j], truncated[j] = term, trunc
                ended[j] = term or trunc
                if info:
                    records.append((j, info, None))
            put_obs(j, obs)
        j = n
    except BaseException:
        block.cursor.env = j
        raise
    finally:
        _flush_rows(block, rewards, terminated, truncated, j)


def _step_disabled(block: EnvBlock, records: list[InfoRecord]) -> None:
    """DISABLED over every env: an env that ended stays frozen (not stepped, reward 0, its flags
    as they were) until reset(mask=...) names it."""
    n, actions = block.count, block.actions()
    envs, ended, put_obs = block.envs, block.ended, block.put_obs
    rewards: list[Any] = [0.0] * n
    terminated: list[Any] = block.views.terminated.tolist()  # frozen envs keep their flags
    truncated: list[Any] = block.views.truncated.tolist()
    j = 0
    try:
        for j in range(n):
            if ended[j]:
                continue
            obs, rewards[j], term, trunc, info = envs[j].step(actions[j])
            terminated[j], truncated[j] = term, trunc
            ended[j] = term or trunc
            if info:
                records.append((j, info, None))
            put_obs(j, obs)
        j = n
    except BaseException:
        block.cursor.env = j
        raise
    finally:
        _flush_rows(block, rewards, terminated, truncated, j)


#: The loop of each autoreset mode.
LOOPS: dict[AutoresetMode, Callable[[EnvBlock, list[InfoRecord]], None]] = {
    AutoresetMode.SAME_STEP: _step_same,
    AutoresetMode.NEXT_STEP: _step_next,
    AutoresetMode.DISABLED: _step_disabled,
}


def _flush_rows(block: EnvBlock, rewards: list[Any], terminated: list[Any],
                truncated: list[Any], count: int) -> None:
    """The end of every step loop: one slice copy per scalar field, then the gathered
    observations, for the first ``count`` envs (those before a failing one)."""
    v = block.views
    try:
        v.rewards[:count] = rewards[:count]
        v.terminated[:count] = terminated[:count]
        v.truncated[:count] = truncated[:count]
    except (ValueError, TypeError):  # one env returned a non-scalar: name it
        block.cursor.env, error = first_non_scalar(rewards, terminated, truncated, count)
        raise error from None
    block.flush_obs(count)


def _check_spaces(envs: list[gym.Env[Any, Any]], buffers: SharedBuffers, cursor: Cursor) -> None:
    for j, env in enumerate(envs):
        cursor.env = j
        if env.observation_space != buffers.observation_space:
            raise ValueError(
                f"env built observation_space {env.observation_space}, expected "
                f"{buffers.observation_space} (the first env's); all envs must match."
            )
        if env.action_space != buffers.action_space:
            raise ValueError(
                f"env built action_space {env.action_space}, expected "
                f"{buffers.action_space} (the first env's); all envs must match."
            )
