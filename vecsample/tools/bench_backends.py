"""The samplers that ``vecsample bench`` puts side by side, each behind ``run(seconds)``.

A backend is built once per (env, env count), measured several times (interleaved with the
others, so a burst of load elsewhere on the machine hits every row alike), then closed. Each
``run`` returns env steps per second over ``seconds`` of stepping; building and resetting are
never timed. Optional backends (SB3, EnvPool) raise ``Unavailable`` with the reason, and their
row is skipped.

The hosted rows (``--vectorization``) build an env id's batched form: gymnasium's vector entry
point, or for a MuJoCo id with a batch-native form in ``vecsample.envs.BATCH_IDS``
(``HalfCheetah-v5`` -> ``HalfCheetahBatch-v5``, docs/mujoco_batch.md) that env. ALE's ids
(``ALE/Pong-v5``) are built as ``ale_py:ALE/Pong-v5`` (``Config.make_id``), so that every
process imports ale_py, which registers them, first.
"""

from __future__ import annotations

import contextlib
import importlib.util
import multiprocessing as mp
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from vecsample.adapters.gymnasium import VectorEnv
from vecsample.envs.mujoco_batch import BATCH_IDS  # vecsample.envs registers the batch ids
from vecsample.extras import require
from vecsample.factories import EnvMaker
from vecsample.hosted import HostedVector
from vecsample.sampler import VecSampler
from vecsample.testing import sleep_fns
from vecsample.tools.compare import sampling_loop
from vecsample.tools.policies import ACTION_TABLE, ActionTable, Policy, mlp_policy

#: forkserver for the bare loops: the processes start from a small clean server, not from a
#: copy of this process (which may hold torch threads), like vecsample's own workers.
BARE_CONTEXT = "forkserver"


class Unavailable(Exception):
    """A backend cannot run here (package missing, env not supported); the row is skipped."""


@dataclass(frozen=True)
class Config:
    """One group of rows: an env id at one env count."""

    env_id: str
    num_envs: int
    workers: int
    cores: int
    timeout: float
    policy: str  # "none" or "mlp"
    #: > 0: the sleep-env scenario (testing.SleepEnv): one sleep of this many seconds per
    #: worker batch, no CPU used by the envs; ``env_id`` is then only a label.
    sleep: float = 0.0
    #: gymnasium.make_vec's mode for the hosted rows ("vector_entry_point" or "sync").
    vectorization: str = "vector_entry_point"

    @property
    def envs_per_worker(self) -> int:
        return self.num_envs // self.workers

    @property
    def make_id(self) -> str:
        """The id that builds the env in any process (``make_id``)."""
        return make_id(self.env_id)

    @property
    def batch_native(self) -> bool:
        """Whether the hosted rows build vecsample's batch-native MuJoCo env for ``env_id``."""
        return self.vectorization == "vector_entry_point" and self.env_id in BATCH_IDS

    @property
    def envs_per_core(self) -> int:
        return self.num_envs // self.cores


def make_id(env_id: str) -> str:
    """``env_id`` as ``gymnasium.make`` builds it in a fresh process: ALE's ids with gymnasium's
    ``module:`` prefix (ale_py registers them when imported), any other id as it is."""
    return f"ale_py:{env_id}" if env_id.startswith("ALE/") else env_id


class Backend(Protocol):
    """What the bench needs from a sampler."""

    def run(self, seconds: float) -> float:
        """Steps for ``seconds``; returns env steps per second."""

    def steps(self) -> int:
        """Env steps done by the last ``run``."""

    def pids(self) -> list[int]:
        """Its child processes, whose CPU time counts with this process's."""

    def close(self) -> None: ...


def sampler_stats(backend: Backend) -> dict[str, float] | None:
    """``VecSampler.stats()`` of a vecsample backend; None for the others."""
    sampler = getattr(backend, "sampler", None) or getattr(backend, "env", None)
    if isinstance(sampler, VectorEnv):
        sampler = sampler.sampler
    return sampler.stats() if isinstance(sampler, VecSampler) else None


# --- policies --------------------------------------------------------------------------------


def make_policy(kind: str, obs_space: gym.Space[Any], act_space: gym.Space[Any],
                num_envs: int) -> Policy:
    """``none`` (pre-sampled actions) or ``mlp`` (a 64×64 torch MLP, one thread, no grad)."""
    if kind == "none":
        return ActionTable(act_space, num_envs)
    torch = require("torch", feature="vecsample bench --policy mlp", extra="cli")

    # One thread: the workers own the other cores; a torch pool the size of the machine would
    # fight them for it and measure the oversubscription, not the sampler.
    torch.set_num_threads(1)
    return mlp_policy(obs_space, act_space)


# --- bare loops ------------------------------------------------------------------------------


def bare_loop(env_id: str, count: int, conn: Connection) -> None:
    """A process stepping ``count`` envs in a plain loop whenever the parent sends seconds."""
    envs = [EnvMaker(env_id)() for _ in range(count)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    actions = ActionTable(envs[0].action_space, count).batches
    conn.send(None)  # built: the parent may start timing
    while (seconds := conn.recv()) is not None:
        conn.send(bare_steps(envs, actions, seconds))
    for env in envs:
        env.close()


def bare_steps(
    envs: list[gym.Env[Any, Any]], actions: list[np.ndarray], seconds: float,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[int, float]:
    """The bare loop (step; reset an env whose episode ended) for ``seconds`` of ``clock``,
    cycling through the action batches: (env steps, seconds taken)."""
    steps, k = 0, 0
    start = clock()
    while (elapsed := clock() - start) < seconds:
        k = (k + 1) % len(actions)
        for env, action in zip(envs, actions[k], strict=True):
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        steps += len(envs)
    return steps, elapsed


class BareLoops:
    """``procs`` bare loops at once, ``per_proc`` envs each; the sum of their rates."""

    def __init__(self, env_id: str, procs: int, per_proc: int) -> None:
        ctx: Any = mp.get_context(BARE_CONTEXT)
        self.procs: list[Any] = []
        self.conns: list[Connection] = []
        for _ in range(procs):
            parent, child = ctx.Pipe()
            # daemon=True: a crashed or interrupted bench must not leave loops spinning.
            proc = ctx.Process(target=bare_loop, args=(env_id, per_proc, child), daemon=True,
                               name="vecsample-bench-bare")
            proc.start()
            child.close()
            self.procs.append(proc)
            self.conns.append(parent)
        for conn in self.conns:
            conn.recv()
        self._steps = 0

    def run(self, seconds: float) -> float:
        for conn in self.conns:
            conn.send(seconds)
        done = [conn.recv() for conn in self.conns]
        self._steps = sum(steps for steps, _ in done)
        return float(sum(steps / elapsed for steps, elapsed in done))

    def steps(self) -> int:
        return self._steps

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):  # that loop is already gone
                conn.send(None)
        for proc in self.procs:
            proc.join(5.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self.conns:
            conn.close()


# --- vecsample -------------------------------------------------------------------------------


class Sampler:
    """VecSampler in the loop of ``vecsample compare``: full batches (timeout None: ``step``), or
    partial ones (``recv_batch(timeout)`` and ``step_send_many(result.workers, rows)``, of
    pipelined halves with ``pipeline``)."""

    def __init__(self, cfg: Config, timeout: float | None, record: bool = False,
                 sampler: VecSampler | None = None, pipeline: bool = False) -> None:
        # record: every recv appended to a replay log (bench --record measures what it costs).
        self._logs = tempfile.TemporaryDirectory() if record else None
        path = None if self._logs is None else os.path.join(self._logs.name, "run.vsreplay")
        # infos on: the default path (issue 15); their numeric values travel in shared memory.
        self.sampler = sampler or VecSampler(_fns(cfg) if cfg.sleep else cfg.make_id,
                                             num_envs=cfg.num_envs, num_workers=cfg.workers,
                                             record=path, pipeline=pipeline)
        self.timeout = timeout
        s = self.sampler
        self.policy = make_policy(cfg.policy, s.single_observation_space, s.single_action_space,
                                  cfg.num_envs)
        self._steps = 0
        # Reset here, once, as GymnasiumStyle does: a reset inside run() would fall inside the
        # bench's stats window and count as parent time "outside" the steps, lowering U (16 ALE
        # resets did: Pong's U read 0.53 for 0.90).
        self.obs: Any = s.reset(seed=0)[0]

    def run(self, seconds: float) -> float:
        if self.timeout is None:
            return self._run_full(seconds)
        result = sampling_loop(self.sampler, self.timeout, seconds, self.policy, obs=self.obs)
        self._steps = result.steps
        return result.steps_per_s

    def _run_full(self, seconds: float) -> float:
        """Full batches through ``step(actions)``: one action check and copy for all workers,
        from where the last run left the envs."""
        s = self.sampler
        obs = self.obs
        steps = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            obs = s.step(self.policy(obs)).obs
            steps += s.num_envs
        self.obs = obs
        self._steps = steps
        return steps / elapsed

    def steps(self) -> int:
        return self._steps

    def pids(self) -> list[int]:
        return _pids(self.sampler)

    def close(self) -> None:
        self.sampler.close()
        if self._logs is not None:
            self._logs.cleanup()


class GymnasiumStyle:
    """Any env with gymnasium's vector API: vecsample VectorEnv, Sync/AsyncVectorEnv, EnvPool."""

    def __init__(self, env: Any, cfg: Config, seeded: bool = False) -> None:
        self.env = env
        obs_space = getattr(env, "single_observation_space", None) or env.observation_space
        act_space = getattr(env, "single_action_space", None) or env.action_space
        self.policy = make_policy(cfg.policy, obs_space, act_space, cfg.num_envs)
        self.num_envs = cfg.num_envs
        # EnvPool takes its seed in make() and warns on reset(seed=...).
        self.obs, _ = env.reset() if seeded else env.reset(seed=0)

    def run(self, seconds: float) -> float:
        steps = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            self.obs, *_ = self.env.step(self.policy(np.asarray(self.obs)))
            steps += self.num_envs
        self._steps = steps
        return steps / elapsed

    def steps(self) -> int:
        return getattr(self, "_steps", 0)

    def pids(self) -> list[int]:
        return _pids(self.env)

    def close(self) -> None:
        self.env.close()


class SB3Style(GymnasiumStyle):
    """SB3's VecEnv API: ``reset()`` takes no seed and returns only the observations."""

    def __init__(self, env: Any, cfg: Config) -> None:
        self.env = env
        self.policy = make_policy(cfg.policy, env.observation_space, env.action_space,
                                  cfg.num_envs)
        self.num_envs = cfg.num_envs
        env.seed(0)
        self.obs = env.reset()


def _pids(sampler: Any) -> list[int]:
    """Worker pids of a vecsample sampler or VectorEnv, an AsyncVectorEnv or a SubprocVecEnv."""
    if isinstance(sampler, VectorEnv):
        sampler = sampler.sampler
    if isinstance(sampler, VecSampler):
        return list(dict.fromkeys(sampler.worker_pids()))  # a pipelined process serves two
    procs = getattr(sampler, "processes", None) or []  # gymnasium's and SB3's attribute
    return [p.pid for p in procs if p.pid is not None]


def cpu_seconds(pids: list[int]) -> float | None:
    """CPU time (user + system) of this process and of ``pids``; None off Linux.

    Clock ticks of /proc (10 ms): over a 1 s run of a few processes, within about 2 %.
    """
    total = time.process_time()
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


# --- the registry ----------------------------------------------------------------------------


def _fns(cfg: Config) -> list[Callable[[], gym.Env[Any, Any]]]:
    if cfg.sleep:
        return sleep_fns(cfg.num_envs, cfg.workers, cfg.sleep)
    return [EnvMaker(cfg.make_id)] * cfg.num_envs


def _bare(cfg: Config, procs: int) -> Backend:
    if cfg.sleep:
        raise Unavailable("not run with sleep envs: their limit is num_envs ÷ the sleep")
    return BareLoops(cfg.make_id, procs, cfg.envs_per_core)


def _no_sleep(builder: Callable[[Config], Backend]) -> Callable[[Config], Backend]:
    """Only vecsample's rows run with sleep envs: the scenario measures its parent."""
    def build(cfg: Config) -> Backend:
        if cfg.sleep:
            raise Unavailable("only vecsample's rows run with sleep envs")
        return builder(cfg)

    return build


def _need(module: str, extra: str = "bench") -> None:
    if importlib.util.find_spec(module) is None:
        raise Unavailable(f"{module} is not installed (pip install 'vecsample[{extra}]')")


def _sb3(cfg: Config) -> Backend:
    _need("stable_baselines3")
    from stable_baselines3.common.vec_env import SubprocVecEnv

    # fork: SubprocVecEnv starts one process per env; forkserver would import gymnasium in
    # each of them, minutes of CPU at 64 envs on 2 cores. The bench builds every backend
    # before it runs any torch op, so no torch thread exists yet to be copied.
    return SB3Style(SubprocVecEnv(_fns(cfg), start_method="fork"), cfg)


def _async(cfg: Config) -> Backend:
    # fork, for the same reason as SB3: one process per env.
    env = gym.vector.AsyncVectorEnv(_fns(cfg), shared_memory=True, context="fork")
    return GymnasiumStyle(env, cfg)


def _envpool(cfg: Config) -> Backend:
    _need("envpool")
    import envpool

    if cfg.env_id not in envpool.list_all_envs():
        raise Unavailable(f"EnvPool has no {cfg.env_id}")
    env = envpool.make(cfg.env_id, env_type="gymnasium", num_envs=cfg.num_envs,
                       batch_size=cfg.num_envs, num_threads=cfg.cores, seed=0)
    return GymnasiumStyle(env, cfg, seeded=True)


def _batched(cfg: Config) -> tuple[str, dict[str, Any]]:
    """The id and keywords of the env's batched form, for ``gymnasium.make_vec``: the
    batch-native MuJoCo env where there is one (in NextStep, as the hosted row runs), else the
    env's own; Unavailable for an env that has none."""
    if cfg.batch_native:
        return BATCH_IDS[cfg.env_id], {"autoreset_mode": "NextStep"}
    spec = gym.spec(cfg.env_id)
    if cfg.vectorization == "vector_entry_point" and spec.vector_entry_point is None:
        raise Unavailable(f"{cfg.env_id} has no vector entry point in gymnasium "
                          f"{gym.__version__} and no batch-native form in vecsample.envs"
                          f".BATCH_IDS; --vectorization sync hosts a SyncVectorEnv per worker "
                          f"instead")
    return cfg.env_id, {}


def _hosted(cfg: Config) -> Backend:
    """VecSampler with one vector env per worker (NextStep: CartPole's entry point's mode; a
    batch-native MuJoCo env steps its physics on one thread per worker)."""
    env_id, kwargs = _batched(cfg)
    # infos off, as in the run of docs/lab/benchmarks.md (CartPole's vector infos are empty).
    sampler = VecSampler(HostedVector(env_id, cfg.vectorization, env_kwargs=kwargs),
                         num_envs=cfg.num_envs, num_workers=cfg.workers, infos=False,
                         autoreset_mode="NextStep")
    return Sampler(cfg, None, sampler=sampler)


def _hosted_defaults(cfg: Config, placement: str = "workers", infos: bool = True) -> Backend:
    """``VecSampler(HostedVector(batch id), num_envs, num_workers)`` as a user writes it (issue
    34's hosted target): every default (SameStep, which the sampler gives the batch env; infos
    on); ``placement``: ``env_placement`` (``"share"``: the trainer's process steps one block);
    ``infos=False``: the same with infos off (what infos cost with every other default)."""
    if not cfg.batch_native:
        raise Unavailable(f"{cfg.env_id}'s vector entry point takes no autoreset_mode, so "
                          f"VecSampler's default (SameStep) is refused for it; the 'hosted' row "
                          f"runs it in NextStep")
    sampler = VecSampler(HostedVector(BATCH_IDS[cfg.env_id]), num_envs=cfg.num_envs,
                         num_workers=cfg.workers, env_placement=placement, infos=infos)
    return Sampler(cfg, None, sampler=sampler)


def _vector_one(cfg: Config) -> Backend:
    """The same vector env as the hosted rows' in this process, all envs in one batch (a
    batch-native MuJoCo env with one physics thread per core)."""
    env_id, kwargs = _batched(cfg)
    if cfg.batch_native:
        kwargs["num_threads"] = cfg.cores
    env = gym.make_vec(env_id, num_envs=cfg.num_envs, vectorization_mode=cfg.vectorization,
                       **kwargs)
    return GymnasiumStyle(env, cfg)


#: name -> (label, builder). The order is the table's.
BACKENDS: dict[str, tuple[str, Callable[[Config], Backend]]] = {
    "bare": ("bare loop, 1 process", lambda c: _bare(c, 1)),
    "machine": ("bare loop × cores (machine limit)", lambda c: _bare(c, c.cores)),
    "vecsample": ("vecsample VecSampler, full batches", lambda c: Sampler(c, None)),
    "vecsample_partial": ("vecsample VecSampler, partial batches",
                          lambda c: Sampler(c, c.timeout)),
    # Two halves per process: any ready half is received and sent back at once (timeout 0).
    "vecsample_pipeline": ("vecsample VecSampler, pipelined halves",
                           lambda c: Sampler(c, 0.0, pipeline=True)),
    # Only with --record: the partial row again, recording a replay log (its cost).
    "vecsample_partial_record": ("vecsample VecSampler, partial batches + record",
                                 lambda c: Sampler(c, c.timeout, record=True)),
    "vector_env": ("vecsample VectorEnv",
                   lambda c: GymnasiumStyle(VectorEnv(_fns(c), c.workers), c)),
    "sync": ("gymnasium SyncVectorEnv",
             _no_sleep(lambda c: GymnasiumStyle(gym.vector.SyncVectorEnv(_fns(c)), c))),
    "async": ("gymnasium AsyncVectorEnv (shared memory)", _no_sleep(_async)),
    "sb3": ("SB3 SubprocVecEnv", _no_sleep(_sb3)),
    "envpool": ("EnvPool (C++ envs)", _no_sleep(_envpool)),
    "vector_one": ("gymnasium make_vec (the hosted rows' vector env), 1 process",
                   _no_sleep(_vector_one)),
    "hosted": ("vecsample VecSampler, one hosted vector env per worker", _no_sleep(_hosted)),
    "hosted_defaults": ("vecsample VecSampler(HostedVector(batch id)), its defaults",
                        _no_sleep(_hosted_defaults)),
    "hosted_no_infos": ("vecsample VecSampler(HostedVector(batch id)), infos=False",
                        _no_sleep(lambda c: _hosted_defaults(c, infos=False))),
    "hosted_share": ("vecsample VecSampler(HostedVector(batch id)), env_placement='share'",
                     _no_sleep(lambda c: _hosted_defaults(c, "share"))),
}
#: The rows of --vectorization ("Past the bare loop", docs/lab/benchmarks.md): the bare loop, the
#: machine limit, VecSampler over the single envs, the vector env in one process, hosted, EnvPool.
HOSTED_BACKENDS = ("bare", "machine", "vecsample", "vector_one", "hosted", "hosted_defaults",
                   "hosted_no_infos", "hosted_share", "envpool")


# --- latency ---------------------------------------------------------------------------------


def round_trips(env_id: str, blocks: int, count: int) -> tuple[list[list[float]], float]:
    """``blocks`` × ``count`` step_send + step_recv round trips with 1 worker × 1 env.

    Returns each block's round-trip times (seconds) and the worker's mean time per env step
    (its own clock), the part of a round trip that is the env and not the transport.
    """
    with VecSampler(make_id(env_id), num_envs=1, num_workers=1, infos=False) as s:
        s.reset(seed=0)
        actions = ActionTable(s.single_action_space, 1).batches
        _round_trips(s, actions, min(count, 50))  # warm up caches and the pipe
        before = s.stats()
        times = [_round_trips(s, actions, count) for _ in range(blocks)]
        after = s.stats()
    env_s = (after["env_step_s"] - before["env_step_s"]) / max(blocks * count, 1)
    return times, env_s


def _round_trips(s: VecSampler, actions: list[np.ndarray], count: int) -> list[float]:
    times = []
    for k in range(count):
        start = time.perf_counter()
        s.step_send(0, actions[k % ACTION_TABLE])
        s.step_recv(None)
        times.append(time.perf_counter() - start)
    return times
