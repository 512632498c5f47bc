"""Rollouts from a ``VecSampler`` (or ``vecsample.VectorEnv``) with a torch policy.

:class:`Rollout` collects ``num_steps`` transitions from every env into preallocated
``(T, N, ...)`` tensors and hands them out as a :class:`RolloutBatch`:

* **Sampling copy.** Inference runs on a copy of the training policy on ``rollout_device``. It is
  synced from the training policy once per :meth:`Rollout.collect`, never per step, through a
  preallocated flat buffer (:class:`vecsample.train.device.WeightSync`); the sync is timed.
* **Placement.** ``device="auto"`` measures inference, a training step and the transfers on each
  available device and chooses where to sample and where to train (:mod:`vecsample.train.device`).
* **Partial batches, by default.** The rollout sends each worker its next actions as soon as
  that worker's step arrives (``timeout``: the window after the first arrival, 0 by default,
  for the others already done; ``recv_batch(timeout)`` and ``step_send_many``, one call each
  whatever the number of workers), instead of waiting for the slowest one: the workers step
  while the policy runs. Each env keeps its own position ``t``, so whatever order steps arrive
  in, env ``i``'s ``k``-th step lands in row ``k`` of column ``i``: the batch has the same
  layout as with full batches (and, for a deterministic policy, the same data; the tests check
  this). An env that has its ``T`` steps waits for the others. ``timeout=None`` steps full
  batches, as a loop over ``VecSampler.step`` does.

Storage lives on ``storage_device`` (the CPU by default), in pinned memory when a GPU is
involved. Host-to-device copies are ``non_blocking`` only where that is safe: the source is
pinned host memory that nothing overwrites before the copy has run. Rollout rows are written
once per rollout, and the next :meth:`collect` starts with the weight sync, which synchronises
both devices, so a copy queued from the batch (:meth:`RolloutBatch.to`) or from a row for
inference has always finished before that memory is written again. Observations from shared
memory are never copied non_blocking: that memory is pageable and is rewritten by the next step.
Device-to-host copies (actions for the workers) are always blocking: the workers read them next.

**Interrupts.** A ``collect`` cut short (Ctrl-C, a KeyboardInterrupt out of it) leaves the
rollout usable, as a ``VecSampler`` is: the next ``collect`` first takes back the steps still in
flight (their rewards count in ``episodes`` and ``global_step``) and starts a whole new rollout
from every env's current observation, the sampler's. The interrupted rollout's rows are dropped.

Observations are stored as float32 whatever the env's dtype; rewards as float32.
Requires ``AutoresetMode.SAME_STEP``: an ended env is reset inside its last step, and its last
observation is kept in ``final_obs`` (flagged by ``has_final_obs``) for value bootstrapping on
truncation.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from vecsample import errors
from vecsample.results import StepResult
from vecsample.sampler import VecSampler
from vecsample.train.device import (
    CPU,
    Forward,
    Placement,
    WeightSync,
    Workload,
    auto_placement,
    resolve_device,
    state_tensors,
)
from vecsample.train.profile import PhaseTimer
from vecsample.types import AutoresetMode

#: ``act(sampling_policy, obs) -> {"actions": tensor, **extras}`` (or just the actions tensor).
#: ``obs`` is a float32 (n, *obs_shape) tensor on the rollout device; every output has n rows.
Act = Callable[[nn.Module, torch.Tensor], "Mapping[str, torch.Tensor] | torch.Tensor"]


@dataclass
class RolloutBatch:
    """One rollout, time-major: row ``t`` of column ``i`` is env ``i``'s ``t``-th step."""

    obs: torch.Tensor  # (T, N, *obs_shape) float32: what each action was taken on
    actions: torch.Tensor  # (T, N, *action_shape) as the policy returned them (before clipping)
    rewards: torch.Tensor  # (T, N) float32
    terminated: torch.Tensor  # (T, N) bool
    truncated: torch.Tensor  # (T, N) bool
    final_obs: torch.Tensor  # (T, N, *obs_shape): the last obs of an episode that ended at t
    has_final_obs: torch.Tensor  # (T, N) bool: where final_obs is valid
    next_obs: torch.Tensor  # (N, *obs_shape): the obs after the last step, for bootstrapping
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # (T, N, ...) from act

    def to(self, device: str | torch.device) -> RolloutBatch:
        """The batch on ``device``; non_blocking from pinned memory (safe: see module doc)."""
        dev = torch.device(device)

        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(dev, non_blocking=t.device.type == CPU and t.is_pinned())

        moved = {f.name: move(getattr(self, f.name)) for f in fields(self) if f.name != "extras"}
        return RolloutBatch(**moved, extras={k: move(v) for k, v in self.extras.items()})


@dataclass(frozen=True)
class Episode:
    """An episode that ended during a rollout: its env, return, length and the global step."""

    env: int
    ret: float
    length: int
    step: int


class _Store:
    """Where a step's rows go: numpy views of the batch's tensors where they are in host
    memory (numpy writes a few rows in a fifth of torch's time, and casts as it writes), the
    tensors themselves elsewhere."""

    def __init__(self, batch: RolloutBatch, host: bool | None = None) -> None:
        """``host``: write through numpy views (default: where the batch is in host memory)."""
        tensors = {f.name: getattr(batch, f.name) for f in fields(batch) if f.name != "extras"}
        tensors.update(batch.extras)
        self.host = batch.rewards.device.type == CPU if host is None else host
        self._to: dict[str, Any] = {k: t.numpy() if self.host else t for k, t in tensors.items()}

    def put(self, name: str, at: Any, value: np.ndarray) -> None:
        """Writes ``value`` (rows as a numpy array) at ``at`` (a row or rows of time, the
        envs: an int or index arrays, and a slice or index arrays) of field ``name``."""
        to = self._to[name]
        if self.host:
            to[at] = value
        else:
            to[at] = torch.from_numpy(np.asarray(value)).to(to.device, to.dtype)


def _sampler_of(envs: VecSampler | Any) -> VecSampler:
    sampler = envs if isinstance(envs, VecSampler) else getattr(envs, "sampler", None)
    if not isinstance(sampler, VecSampler):
        raise errors.ConfigError(
            f"Rollout needs a VecSampler or a vecsample.VectorEnv, got {type(envs).__name__}."
        )
    if sampler.autoreset_mode is not AutoresetMode.SAME_STEP:
        raise errors.ConfigError(
            f"Rollout needs autoreset_mode=SAME_STEP, got {sampler.autoreset_mode.name}; build the "
            "sampler (or VectorEnv) with autoreset_mode=vecsample.AutoresetMode.SAME_STEP."
        )
    return sampler


def _box_shape(space: gym.Space[Any], what: str) -> tuple[int, ...]:
    if isinstance(space, gym.spaces.Box | gym.spaces.Discrete | gym.spaces.MultiDiscrete):
        return tuple(space.shape or ())
    raise errors.UnsupportedSpaceError(
        f"Rollout supports Box, Discrete and MultiDiscrete {what} spaces, got {space}; "
        "flatten it with gymnasium.wrappers.FlattenObservation inside the env factory."
    )


def _spaces(sampler: VecSampler, clip: bool) -> tuple[tuple[int, ...], gym.Space[Any], bool]:
    """The observation shape, the action space, and whether to clip actions (Box spaces only)."""
    obs_shape = _box_shape(sampler.single_observation_space, "observation")
    action_space = sampler.single_action_space
    _box_shape(action_space, "action")
    return obs_shape, action_space, clip and isinstance(action_space, gym.spaces.Box)


def _blocks(sampler: VecSampler) -> tuple[np.ndarray, np.ndarray]:
    """Each worker's first env and its block's size."""
    blocks = [sampler.worker_env_ids(w) for w in range(sampler.num_slots)]
    return (np.array([b.start for b in blocks], dtype=np.int64),
            np.array([len(b) for b in blocks], dtype=np.int64))


def _default_act(policy: nn.Module, obs: torch.Tensor) -> Mapping[str, torch.Tensor] | torch.Tensor:
    out: Mapping[str, torch.Tensor] | torch.Tensor = policy(obs)
    return out


class Rollout:
    """Collects ``num_steps`` steps of every env into preallocated ``(T, N, ...)`` tensors.

    Each :meth:`collect` syncs the weights once, then steps until every env has ``num_steps`` new
    rows, and returns :attr:`batch` (the same tensors every time: clone what you keep). The first
    ``collect`` resets the envs; later ones continue where the last one stopped. See the module
    docstring for the sampling copy, placement, partial batches and memory.

    Args:
        envs: A ``VecSampler`` or a ``vecsample.VectorEnv`` (its ``.sampler`` is used), built
            with ``autoreset_mode=AutoresetMode.SAME_STEP``. The rollout drives it: no step may be
            in flight when it is given, nor between collects. The rollout never closes it.
        policy: The training policy. Inference runs on a deep copy of it on ``rollout_device``
            (``sampling_policy``), synced from it at the start of every ``collect``.
        num_steps: ``T``, the steps per env per rollout (>= 1).
        act: ``act(sampling_policy, obs) -> actions`` or ``{"actions": ..., **extras}``, every
            output with one row per observation; each extra is stored in ``batch.extras``.
            ``obs`` is a float32 tensor on the rollout device. Default: ``policy(obs)``. It is
            called once at construction, on zeros, to size the storage.
        device: Where inference runs: a device name (the training policy stays where it is), or
            ``"auto"``, which measures the policy on each available device, picks where to
            sample and where to train, and moves the *training* policy to the latter (build its
            optimizer after the Rollout).
        storage_device: Where the batch lives (the CPU by default); pinned host memory when a
            GPU is involved.
        timeout: The partial batches' window (``recv_batch(timeout)``): each worker gets its
            next actions as soon as its step arrives, with the others done within ``timeout``
            seconds of it (default 0: those already done). ``None`` steps full batches (a
            barrier every step). The batch has the same layout either way.
        seed: Passed to the sampler's ``reset(seed=...)`` at the first ``collect`` only.
        clip_actions: Clip ``Box`` actions to the action space before they are sent; the batch
            stores them as ``act`` returned them. Other spaces are never clipped.
        minibatch_size: With ``"auto"``: the training minibatch (default: the whole rollout).
        updates_per_rollout: With ``"auto"``: training steps per rollout.
        forward: With ``"auto"``: how the measurement calls the policy (default ``policy(obs)``).

    Raises:
        vecsample.errors.ConfigError: ``num_steps < 1``; ``envs`` is neither a VecSampler nor a
            VectorEnv, or does not autoreset in ``SAME_STEP`` mode; ``act`` returns no
            ``"actions"``, something other than tensors, or the wrong number of rows.
        vecsample.errors.UnsupportedSpaceError: an observation or action space other than
            ``Box``, ``Discrete`` or ``MultiDiscrete``.

    Observations and rewards are stored as float32 whatever the env's dtypes. ``final_obs`` is
    valid where ``has_final_obs``; ``episodes`` lists the episodes that ended (from the env's
    ``RecordEpisodeStatistics`` info when there is one) and ``stats()`` includes the rollout's
    inference, copy and sync phases.

    Example:
        >>> from torch import nn
        >>> from vecsample import VecSampler
        >>> from vecsample.train import Rollout
        >>> with VecSampler("CartPole-v1", num_envs=2, seed=0) as sampler:
        ...     rollout = Rollout(sampler, nn.Linear(4, 2), 8, device="cpu",
        ...                       act=lambda policy, obs: policy(obs).argmax(dim=1))
        ...     batch = rollout.collect()
        >>> tuple(batch.obs.shape), tuple(batch.actions.shape), tuple(batch.next_obs.shape)
        ((8, 2, 4), (8, 2), (2, 4))
        >>> rollout.global_step, rollout.sync_count
        (16, 1)
        >>> bool((batch.rewards == 1.0).all())  # CartPole pays 1 per step
        True
    """

    def __init__(
        self,
        envs: VecSampler | Any,
        policy: nn.Module,
        num_steps: int,
        *,
        act: Act | None = None,
        device: str | torch.device = "auto",
        storage_device: str | torch.device = CPU,
        timeout: float | None = 0.0,
        seed: int | None = None,
        clip_actions: bool = True,
        minibatch_size: int | None = None,
        updates_per_rollout: int = 1,
        forward: Forward | None = None,
    ) -> None:
        if num_steps < 1:
            raise errors.ConfigError(f"num_steps must be >= 1, got {num_steps}.")
        self.sampler = _sampler_of(envs)
        self.num_steps, self.num_envs = num_steps, self.sampler.num_envs
        self.timeout, self._seed, self._act = timeout, seed, act or _default_act
        self._obs_shape, self._action_space, self._clip = _spaces(self.sampler, clip_actions)
        self.placement = self._place(policy, device, minibatch_size, updates_per_rollout, forward)
        self.policy = policy
        self.rollout_device = torch.device(self.placement.rollout_device)
        self.train_device = torch.device(self.placement.train_device)
        self.sampling_policy = copy.deepcopy(policy).to(self.rollout_device)
        self._weight_sync = WeightSync(policy, self.sampling_policy)
        #: Inference, copy and sync; the sampler's stats() splits its wall time among them too.
        self.timer = PhaseTimer()
        self.sampler.add_phases(self.timer)
        uses_cuda = "cuda" in (self.rollout_device.type, self.train_device.type)
        self.batch = self._allocate(torch.device(storage_device), pin=uses_cuda)
        self._store = _Store(self.batch)
        self._start_counting()

    def _start_counting(self) -> None:
        """What the rollout counts as it collects: episodes, steps, each env's position."""
        self.episodes: list[Episode] = []
        self.global_step = 0
        self._started = False
        self._returns, self._lengths = np.zeros(self.num_envs), np.zeros(self.num_envs, np.int64)
        self._pos = np.zeros(self.num_envs, dtype=np.int64)
        self._every = np.arange(self.num_envs)  # a full batch's env ids
        #: Each worker's first env and block size: a partial batch's rows, worker by worker.
        self._first, self._sizes = _blocks(self.sampler)
        self._unfinished = False  # a collect raised (Ctrl-C): the next one recovers first

    # --- construction ----------------------------------------------------------------------------

    def _place(
        self,
        policy: nn.Module,
        device: str | torch.device,
        minibatch_size: int | None,
        updates: int,
        forward: Forward | None,
    ) -> Placement:
        if not (isinstance(device, str) and device == "auto"):
            rollout = str(resolve_device(device))
            params = state_tensors(policy)
            train = str(params[0].device) if params else rollout
            return Placement(rollout, train, reason="given")
        rows = self.num_envs * self.num_steps
        workload = Workload(self.num_envs, self.num_steps, minibatch_size or rows, updates)
        # The workers are already running: looking for CUDA now cannot affect how they started.
        placement = auto_placement(policy, self._obs_shape, workload, forward=forward)
        policy.to(placement.train_device)
        return placement

    def _allocate(self, device: torch.device, *, pin: bool) -> RolloutBatch:
        T, N = self.num_steps, self.num_envs
        pin = pin and device.type == CPU  # pinned host memory: DMA copies that may be async

        def empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype, device=device, pin_memory=pin)

        probe = self._call_act(torch.zeros((N, *self._obs_shape), device=self.rollout_device))
        out = {k: empty((T, *v.shape), v.dtype) for k, v in probe.items()}
        return RolloutBatch(
            obs=empty((T, N, *self._obs_shape), torch.float32),
            actions=out.pop("actions"),
            rewards=empty((T, N), torch.float32),
            terminated=empty((T, N), torch.bool),
            truncated=empty((T, N), torch.bool),
            final_obs=empty((T, N, *self._obs_shape), torch.float32),
            has_final_obs=empty((T, N), torch.bool),
            next_obs=empty((N, *self._obs_shape), torch.float32),
            extras=out,
        )

    def _call_act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            out = self._act(self.sampling_policy, obs)
        result = {"actions": out} if isinstance(out, torch.Tensor) else dict(out)
        if "actions" not in result or not all(isinstance(v, torch.Tensor) for v in result.values()):
            raise errors.ConfigError(
                "act() must return a tensor of actions or a dict of tensors with 'actions', got "
                f"{ {k: type(v).__name__ for k, v in result.items()} }."
            )
        bad = {k: tuple(v.shape) for k, v in result.items() if v.shape[:1] != obs.shape[:1]}
        if bad:
            raise errors.ConfigError(
                f"every output of act() needs one row per observation ({obs.shape[0]}), got "
                f"shapes {bad}."
            )
        return result

    # --- collecting ------------------------------------------------------------------------------

    @property
    def sync_count(self) -> int:
        """How many weight syncs ran: one per :meth:`collect`."""
        return self._weight_sync.count

    def sync(self) -> float:
        """Copy the training policy's weights into the sampling copy; returns the seconds."""
        start = time.perf_counter()
        params = state_tensors(self.policy)
        if params and params[0].device != self._weight_sync.source_device:
            self._weight_sync = WeightSync(self.policy, self.sampling_policy)  # policy moved
        seconds = self._weight_sync()
        self.timer.add("sync", time.perf_counter() - start)
        return seconds

    def collect(self) -> RolloutBatch:
        """Sync the weights once, then step until every env has ``num_steps`` new rows.

        After a ``collect`` that raised (a KeyboardInterrupt), this one first takes back the
        steps still in flight and starts from every env's current observation.
        """
        if self._unfinished:
            self._recover()
        self._unfinished = True  # until this collect returns
        self.sync()
        if not self._started:
            self._reset()
        with self.timer.phase("copy"):
            self.batch.obs[0].copy_(self.batch.next_obs)
        self._pos[:] = 0
        if self.timeout is None:
            self._collect_full()
        else:
            self._collect_partial(self.timeout)
        self._unfinished = False
        return self.batch

    def _collect_full(self) -> None:
        """Full batches: every env's step ``t`` at once, as a hand-written loop over
        ``VecSampler.step`` does (one result, one copy per field a step)."""
        every = slice(None)
        for t in range(self.num_steps):
            actions = self._act_on(self.batch.obs[t], (t, every))
            self._record(self.sampler.step(actions), t, every)

    def _collect_partial(self, window: float) -> None:
        """Partial batches: each worker gets its next actions as soon as its step arrives
        (with the others done within ``window``), in one call for all of them
        (``recv_batch(window)``, ``step_send_many``); each env keeps its own position."""
        self.sampler.send_all(self._act_on(self.batch.obs[0], (0, slice(None))))
        flying = self.sampler.num_slots
        while flying:
            r = self.sampler.recv_batch(window)
            assert r.workers is not None and isinstance(r.env_ids, np.ndarray)
            flying -= len(r.workers)
            ids = r.env_ids
            t = self._pos[ids]
            self._record(r, t, ids)
            more = self._pos[self._first[r.workers]] < self.num_steps  # per worker
            if not more.any():
                continue
            rows = np.repeat(more, self._sizes[r.workers])
            obs = torch.from_numpy(np.asarray(r.obs, dtype=np.float32)[rows])
            actions = self._act_on(obs, (t[rows] + 1, ids[rows]))
            self.sampler.step_send_many(r.workers[more], actions)
            flying += int(more.sum())

    def _recover(self) -> None:
        """After a collect that raised: takes back every step the sampler still has in flight
        (the sampler knows: an interrupt may fall between a send and its bookkeeping), then
        makes every env's current observation the next rollout's start."""
        while True:
            try:
                results = self.sampler.step_recv(None)
            except errors.NoPendingError:  # nothing in flight any more
                break
            for r in results:  # the envs stepped: their rewards still count
                self._track_episodes(r, np.arange(r.block.start, r.block.stop))
                self.global_step += len(r.rewards)
                self.timer.add_steps(len(r.rewards))
        if self._started:
            with self.timer.phase("copy"):
                current = np.asarray(self.sampler.batch().obs)  # every env, as it is now
                self.batch.next_obs.copy_(torch.from_numpy(current))
        self._unfinished = False

    def _reset(self) -> None:
        obs, _ = self.sampler.reset(seed=self._seed)
        with self.timer.phase("copy"):
            self.batch.next_obs.copy_(torch.from_numpy(np.asarray(obs)))
        self._started = True

    def _act_on(self, obs: torch.Tensor, at: tuple[Any, Any]) -> np.ndarray:
        """The policy's actions for ``obs`` (rows of the batch), stored with its extras at
        ``at`` (a row of time and the envs: a row and a slice, or index arrays), clipped for
        the envs where that is asked."""
        with self.timer.phase("inference"):
            out = self._call_act(obs.to(self.rollout_device, non_blocking=obs.is_pinned()))
            values = {name: value.cpu().numpy() for name, value in out.items()}
        actions = values["actions"]
        with self.timer.phase("copy"):
            for name, value in values.items():
                self._store.put(name, at, value)
            if self._clip:
                space = self._action_space
                assert isinstance(space, gym.spaces.Box)
                actions = np.clip(actions, space.low, space.high)
        return actions

    def _record(self, r: StepResult, t: Any, ids: Any) -> None:
        """Stores a result's rows at their envs' positions ``t`` (an int, or an array of one
        per row) and envs ``ids`` (a slice for every env, or an array), and counts them."""
        with self.timer.phase("copy"):
            put, at = self._store.put, (t, ids)
            put("rewards", at, r.rewards)
            put("terminated", at, r.terminated)
            put("truncated", at, r.truncated)
            put("has_final_obs", at, r.has_final_obs)
            if r.has_final_obs.any():
                put("final_obs", at, np.asarray(r.final_obs))
            obs = np.asarray(r.obs)
            if isinstance(t, int) and t < self.num_steps - 1:  # every env at the same step
                put("obs", (t + 1, ids), obs)
            elif isinstance(t, int):
                put("next_obs", ids, obs)
            else:
                inside = t < self.num_steps - 1
                put("obs", (t[inside] + 1, ids[inside]), obs[inside])
                put("next_obs", ids[~inside], obs[~inside])
            env_ids = self._every if isinstance(ids, slice) else ids
            self._pos[env_ids] += 1
            self._track_episodes(r, env_ids)
        self.global_step += len(r.rewards)
        self.timer.add_steps(len(r.rewards))

    def _track_episodes(self, r: StepResult, env_ids: np.ndarray) -> None:
        """Adds a result's rewards to its envs' returns and lists the episodes that ended."""
        self._returns[env_ids] += r.rewards
        self._lengths[env_ids] += 1
        ended = np.flatnonzero(r.terminated | r.truncated)
        if not ended.size:
            return
        envs = env_ids[ended]
        rets, lengths = self._returns[envs].tolist(), self._lengths[envs].tolist()
        self._returns[envs], self._lengths[envs] = 0.0, 0
        blocks, leftovers = r.infos.columnar()
        infos = r.infos if blocks or leftovers else None  # no infos: none to build
        first = self.global_step + 1
        for j, env, ret, length in zip(ended.tolist(), envs.tolist(), rets, lengths,
                                       strict=True):
            stats = infos.get(env, {}).get("episode") if infos is not None else None
            if isinstance(stats, Mapping):  # RecordEpisodeStatistics inside the env: raw return
                ret, length = float(np.asarray(stats["r"])), int(np.asarray(stats["l"]))
            self.episodes.append(Episode(env, ret, length, first + j))

    def stats(self) -> dict[str, float]:
        """The sampler's stats, which include this rollout's phases (see ``VecSampler.stats``)."""
        return self.sampler.stats()
