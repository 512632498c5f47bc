"""The actor side of ``RaySampler``: what runs inside each Ray actor (docs/distributed.md).

A Ray actor call costs about a millisecond and an env step tens of microseconds, so an actor
never steps once per call: each actor owns a whole local ``VecSampler`` (its own worker processes
and shared memory) plus a CPU copy of the policy, and returns a rollout *chunk* of
``chunk_length`` steps of all its envs per call, as numpy (Ray returns numpy zero-copy and
read-only; torch tensors would be copied).

Crashes of env processes inside an actor stay the local VecSampler's job. The chunk collection
(``ChunkCollector``) is minimal and local on purpose, so that it can be swapped for the rollout
helper of issue 7 once that lands.
"""

from __future__ import annotations

import functools
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import gymnasium as gym
import numpy as np
import ray

from vecsample import errors
from vecsample.options import Options
from vecsample.ray.errors import PolicyError
from vecsample.results import StepResult
from vecsample.sampler import VecSampler
from vecsample.types import AutoresetMode, EnvFn

__all__ = [
    "KILL_GRACE_S",
    "ActorInfo",
    "ActorSpec",
    "Chunk",
    "ChunkCollector",
    "Policy",
    "SamplerActor",
    "TorchPolicy",
    "WeightsSpec",
    "numpy_weights",
    "policy_error",
    "remote_actor_class",
]

#: How long an actor holds back an env process's death by SIGKILL, or its forkserver's loss,
#: before reporting it. ``ray.kill`` kills the actor's children first and the actor itself tens
#: of ms later (Ray's core_worker_shutdown_executor); reported at once, that kill reached the
#: driver as an env crash, not as the loss of a dead actor's chunk.
KILL_GRACE_S = 5.0
#: Exit codes an outside kill leaves: SIGKILL, and 255, which multiprocessing reports for a
#: forkserver child when the forkserver itself is gone.
_OUTSIDE_KILL_EXITCODES = (-9, 255)


#: ``{name: (shape, dtype name)}``: the weights a policy loads, as ``weights_spec()`` says.
WeightsSpec = dict[str, tuple[tuple[int, ...], str]]


class Policy(Protocol):
    """What an actor runs: ``act`` on a batch of observations, ``set_weights`` on an update.

    A policy may also have ``weights_spec() -> {name: (shape, dtype name)}`` (``TorchPolicy``
    has): ``RaySampler.set_weights`` then refuses weights that do not fit it before they leave
    the driver (``WeightsError``), instead of every actor failing on them.
    """

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions for ``obs`` [N, ...], plus per-env extras (log-probs, values) [N, ...]."""
        ...

    def set_weights(self, weights: Any) -> None:
        """Loads weights produced by the trainer (whatever ``RaySampler.set_weights`` got)."""
        ...


@dataclass
class Chunk:
    """``length`` steps of one actor's ``N`` envs. Arrays are numpy, read-only when from Ray.

    Autoreset is SAME_STEP: row t is a real transition of every env; where ``terminated`` or
    ``truncated`` is set, ``final_obs[t]`` holds the last observation (for bootstrapping) and
    ``obs[t + 1]`` is already the first observation of the next episode.
    """

    obs: np.ndarray  # [T, N, ...] the observation each action was chosen on
    actions: np.ndarray  # [T, N, ...]
    rewards: np.ndarray  # [T, N] float32
    terminated: np.ndarray  # [T, N] bool
    truncated: np.ndarray  # [T, N] bool
    final_obs: np.ndarray  # [T, N, ...] zeros where the episode did not end
    next_obs: np.ndarray  # [N, ...] the observation after the last step
    extras: dict[str, np.ndarray]  # [T, N, ...] what the policy returned besides actions
    episode_returns: np.ndarray  # [E] returns of the episodes that ended in this chunk
    episode_lengths: np.ndarray  # [E]
    version: int = 0  # the weights version every step was sampled under
    actor_id: int = 0
    node_id: str = ""
    sample_s: float = 0.0  # seconds the actor spent collecting it

    @property
    def env_steps(self) -> int:
        return int(self.rewards.size)


# --- local chunk collection (to be replaced by the rollout helper of issue 7) ------------------


class ChunkCollector:
    """Steps one local VecSampler under a policy and packs ``length`` steps into a Chunk."""

    def __init__(self, sampler: VecSampler, policy: Policy, seed: int | None = None) -> None:
        if sampler.autoreset_mode is not AutoresetMode.SAME_STEP:
            raise errors.ConfigError(
                f"ChunkCollector needs autoreset_mode=SameStep, got "
                f"{sampler.autoreset_mode.value}; every row must be a real transition."
            )
        self.sampler = sampler
        self.policy = policy
        self._obs_array = _single_array(sampler.single_observation_space, "observation")
        self._act_array = _single_array(sampler.single_action_space, "action")
        obs, _ = sampler.reset(seed=seed)
        self._obs = np.array(obs)  # our own copy: the views are overwritten by the next step
        #: Each worker's first env and block size: a partial batch's rows, worker by worker.
        blocks = [sampler.worker_env_ids(w) for w in range(sampler.num_slots)]
        self._first = np.array([b.start for b in blocks], np.int64)
        self._sizes = np.array([len(b) for b in blocks], np.int64)
        self._returns = np.zeros(sampler.num_envs, np.float64)
        self._lengths = np.zeros(sampler.num_envs, np.int64)

    def collect(self, length: int) -> Chunk:
        """Runs ``length`` steps of every env; the envs carry on from chunk to chunk. Each
        worker gets its next actions as soon as its step arrives (partial batches: one result
        for the workers done at the first arrival, ``recv_batch(0)``, sent again in one call),
        so the actor's workers step while its policy runs; every env's ``t``-th step still
        lands in row ``t``, and the episodes are listed as a full batch would list them."""
        n = self.sampler.num_envs
        chunk = self._new_chunk(length)
        pos = np.zeros(n, np.int64)
        ended: list[tuple[int, int, float, int]] = []  # (row, env, return, length)
        chunk.obs[0] = self._obs
        everyone = np.arange(n)
        actions = self._act_rows(chunk, pos, everyone)
        self.sampler.send_all(actions)  # checks the actions (typed errors) before anything
        chunk.actions[0] = actions
        flying = self.sampler.num_slots
        while flying:
            r = self.sampler.recv_batch(0.0)
            assert r.workers is not None
            flying -= len(r.workers)
            ids = np.asarray(r.env_ids)
            self._store_step(chunk, pos[ids], ids, r, ended)
            pos[ids] += 1
            more = pos[self._first[r.workers]] < length  # per worker: all its envs alike
            if more.any():
                rows = ids[np.repeat(more, self._sizes[r.workers])]
                chunk.obs[pos[rows], rows] = self._obs[rows]
                actions = self._act_rows(chunk, pos, rows)
                self.sampler.step_send_many(r.workers[more], actions)  # checked first
                chunk.actions[pos[rows], rows] = actions
                flying += int(more.sum())
        ended.sort()
        chunk.next_obs = self._obs.copy()
        chunk.episode_returns = np.array([r for _, _, r, _ in ended], np.float64)
        chunk.episode_lengths = np.array([k for _, _, _, k in ended], np.int64)
        return chunk

    def _new_chunk(self, length: int) -> Chunk:
        """An empty chunk of ``length`` steps of every env."""
        n = self.sampler.num_envs
        return Chunk(
            obs=_empty(length, n, self._obs_array), actions=_empty(length, n, self._act_array),
            rewards=np.empty((length, n), np.float32),
            terminated=np.empty((length, n), np.bool_), truncated=np.empty((length, n), np.bool_),
            final_obs=np.zeros((length, n, *self._obs_array.shape), self._obs_array.dtype),
            next_obs=self._obs, extras={}, episode_returns=np.empty(0),
            episode_lengths=np.empty(0, np.int64),
        )

    def _act_rows(self, chunk: Chunk, pos: np.ndarray, rows: np.ndarray) -> Any:
        """The policy's actions for envs ``rows``, its extras stored at their rows
        ``pos[rows]``; the actions are stored once the sampler has taken them (it checks them
        first: an ActionError, as for any VecSampler user)."""
        actions, extras = self._act(self._obs[rows])
        self._store_extras(chunk, pos[rows], rows, extras)
        return actions

    def _store_step(self, chunk: Chunk, t: np.ndarray, ids: np.ndarray, r: StepResult,
                    ended: list[tuple[int, int, float, int]]) -> None:
        """A result's rows at their envs' rows ``t``; the episodes that ended, listed."""
        chunk.rewards[t, ids] = r.rewards
        chunk.terminated[t, ids] = r.terminated
        chunk.truncated[t, ids] = r.truncated
        has = np.asarray(r.has_final_obs)
        if has.any():
            chunk.final_obs[t[has], ids[has]] = np.asarray(r.final_obs)[has]
        self._obs[ids] = r.obs
        done = np.asarray(r.terminated) | np.asarray(r.truncated)
        self._returns[ids] += r.rewards
        self._lengths[ids] += 1
        for j in np.flatnonzero(done):
            env = int(ids[j])
            ended.append((int(t[j]), env, float(self._returns[env]), int(self._lengths[env])))
        self._returns[ids[done]] = 0.0
        self._lengths[ids[done]] = 0

    def _act(self, obs: np.ndarray) -> tuple[Any, dict[str, Any]]:
        try:
            return self.policy.act(obs)
        except Exception as exc:  # the policy's own error, typed: the actor and its envs are fine
            raise policy_error("act", exc, "fix the policy's act(); this chunk is lost, the next "
                               "request tries again") from None

    def _store_extras(self, chunk: Chunk, t: np.ndarray, rows: np.ndarray,
                      extras: dict[str, Any]) -> None:
        for name, value in extras.items():
            value = np.asarray(value)
            if name not in chunk.extras:
                chunk.extras[name] = np.empty((*chunk.rewards.shape, *value.shape[1:]),
                                              value.dtype)
            if value.shape[:1] != rows.shape or value.shape[1:] != chunk.extras[name].shape[2:]:
                raise PolicyError(
                    call="act", exc_type="",
                    message=f"extras[{name!r}] has shape {value.shape}, expected "
                    f"{(len(rows), *chunk.extras[name].shape[2:])} (one row per observation, "
                    f"the same every step)",
                    fix="return one row per observation for every extra")
            chunk.extras[name][t, rows] = value

    def close(self) -> None:
        self.sampler.close()


class _Array(NamedTuple):
    """The one array of a space, per env: its shape and dtype."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]


#: The spaces whose samples are one fixed-shape array (a Chunk stores each as one numpy array).
_ARRAY_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete,
                gym.spaces.MultiBinary)


def _single_array(space: gym.Space[Any], what: str) -> _Array:
    if not isinstance(space, _ARRAY_SPACES):
        raise errors.UnsupportedSpaceError(
            f"RaySampler needs a single-array {what} space (Box, Discrete, MultiDiscrete, "
            f"MultiBinary), got {space}; flatten it with a gymnasium wrapper."
        )
    return _Array(tuple(space.shape or ()), np.dtype(space.dtype))


def _empty(length: int, n: int, array: _Array) -> np.ndarray:
    return np.empty((length, n, *array.shape), array.dtype)


# --- policies ----------------------------------------------------------------------------------


class TorchPolicy:
    """A CPU torch module from ``module_fn()``; ``module(obs)`` returns actions, or
    ``(actions, {name: tensor})`` to ship extras such as log-probs and values with the chunk.

    Weights are a ``{name: numpy array}`` state dict (see ``numpy_weights``): numpy travels
    through Ray zero-copy, torch tensors do not.
    """

    def __init__(self, module_fn: Callable[[], Any], threads: int | None = 1) -> None:
        import torch

        if threads is not None:
            # One thread by default: the actor's CPUs are claimed by its env workers, and a small
            # policy gains nothing from intra-op threads that would compete with them.
            torch.set_num_threads(threads)
        self.module = module_fn().cpu().eval()

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        import torch

        with torch.no_grad():
            out = self.module(torch.as_tensor(obs, dtype=torch.float32))
        actions, extras = out if isinstance(out, tuple) else (out, {})
        return actions.numpy(), {k: v.numpy() for k, v in extras.items()}

    def set_weights(self, weights: Any) -> None:
        import torch

        self.module.load_state_dict({k: torch.as_tensor(np.array(v)) for k, v in weights.items()})

    def weights_spec(self) -> WeightsSpec:
        """The name, shape and dtype of every tensor ``set_weights`` loads (its state dict)."""
        return {k: (tuple(v.shape), str(v.dtype).removeprefix("torch."))
                for k, v in self.module.state_dict().items()}


def policy_error(call: str, exc: Exception, fix: str) -> PolicyError:
    """``exc``, raised by a policy's ``call``, as the typed error the driver gets."""
    return PolicyError(call=call, exc_type=type(exc).__name__, message=str(exc), fix=fix,
                       remote_traceback="".join(traceback.format_exception(exc)))


def numpy_weights(module: Any) -> dict[str, np.ndarray]:
    """A torch module's state dict as numpy copies, ready for ``RaySampler.set_weights``."""
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


# --- the actor ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ActorInfo:
    """An actor's answer to ``ready()``: its node, and its policy's ``weights_spec()`` (None
    when the policy has none)."""

    node_id: str
    weights_spec: WeightsSpec | None


@dataclass(frozen=True)
class ActorSpec:
    """Everything an actor needs to build itself again after a restart."""

    actor_id: int
    env_fns: list[EnvFn]
    policy_fn: Callable[[], Policy]
    seed: int | None
    #: The actor's VecSampler's options (num_workers: workers_per_actor; autoreset SameStep).
    options: Options = field(default_factory=Options)


class SamplerActor:
    """One per node: a local VecSampler and a policy copy, answering one chunk per call."""

    def __init__(self, spec: ActorSpec) -> None:
        context = ray.get_runtime_context()
        with warnings.catch_warnings():  # Ray's own property reads a deprecated one inside
            warnings.simplefilter("ignore", DeprecationWarning)
            reconstructed = context.was_current_actor_reconstructed
        # A restarted actor draws fresh env seeds from the OS: replaying the seeds of its first
        # life would sample the same episodes again.
        seed = None if reconstructed else spec.seed
        sampler = VecSampler(spec.env_fns, options=spec.options)
        try:
            self._collector = ChunkCollector(sampler, spec.policy_fn(), seed)
        except BaseException:
            sampler.close()
            raise
        self.actor_id = spec.actor_id
        self.node_id = str(context.get_node_id())
        self.version = -1  # nothing loaded yet: the first request always sets it

    def ready(self) -> ActorInfo:
        """Where this actor runs and what weights its policy takes; answering also proves the
        envs were built (and, after a restart, that the actor is back)."""
        spec = getattr(self._collector.policy, "weights_spec", None)
        return ActorInfo(self.node_id, spec() if callable(spec) else None)

    def sample(self, length: int, version: int, weights: list[Any]) -> Chunk:
        """One chunk under weights ``version``. ``weights`` is ``[ref]`` (or ``[None]`` for the
        policy's own initial weights): a nested ref is not fetched unless the version changed."""
        if version != self.version:
            if weights[0] is not None:
                self._load(ray.get(weights[0]), version)
            self.version = version
        start = time.perf_counter()
        try:
            chunk = self._collector.collect(length)
        except errors.WorkerDiedError as exc:
            if exc.exitcode in _OUTSIDE_KILL_EXITCODES:
                time.sleep(KILL_GRACE_S)  # killed by Ray, this actor dies in the meantime
            raise
        chunk.version, chunk.actor_id, chunk.node_id = version, self.actor_id, self.node_id
        chunk.sample_s = time.perf_counter() - start
        return chunk

    def _load(self, weights: Any, version: int) -> None:
        try:
            self._collector.policy.set_weights(weights)
        except Exception as exc:
            raise policy_error("set_weights", exc, f"the weights of version {version} do not fit "
                               f"the policy: send ones that do with set_weights() (a "
                               f"weights_spec() on the policy lets RaySampler check them before "
                               f"they leave)") from None

    def close(self) -> None:
        self._collector.close()


@functools.lru_cache(maxsize=1)
def remote_actor_class() -> Any:
    return ray.remote(SamplerActor)
