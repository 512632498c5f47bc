"""RaySampler on a fake two-node Ray cluster (``ray.cluster_utils.Cluster``), shared by the file.

Ray's start-up costs seconds, so one cluster serves every test here; it is torn down at the end
of this module so that the other test files see no Ray process. Chunks come from CountingEnv,
whose observation ``[env, t, episode, last action]`` makes a lost, repeated or misrouted step
visible, and from FixedActionPolicy, whose action is its weights.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import ray
from ray import cloudpickle
from ray.cluster_utils import Cluster
from ray_support import no_leaked_vecsample_workers

from vecsample import Options, errors
from vecsample.ray import Chunk, RaySampler
from vecsample.ray.actor import KILL_GRACE_S
from vecsample.testing import CountingEnv, DyingEnv, FixedActionPolicy, fns

ENVS = 4
LENGTH = 5  # CountingEnv episode length
CHUNK = 8


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A head and a worker node, 2 logical CPUs each (so SPREAD, not a lack of CPUs, is what
    puts one actor on each node)."""
    made = Cluster(initialize_head=True,
                   head_node_args={"num_cpus": 2, "include_dashboard": False})
    try:
        made.add_node(num_cpus=2)
        ray.init(address=made.address)
        yield made
    finally:
        ray.shutdown()
        made.shutdown()


@pytest.fixture(autouse=True)
def no_leaked_workers() -> Iterator[None]:
    """Replaces conftest's check, which would flag Ray's own processes (ray_support.py)."""
    yield from no_leaked_vecsample_workers()


@pytest.fixture
def make_ray_sampler(cluster: Cluster) -> Iterator[Callable[..., RaySampler]]:
    """``make_ray_sampler(**kwargs)``: a RaySampler over CountingEnvs, closed at teardown."""
    made: list[RaySampler] = []

    def make(env_fns: list[Callable[[], Any]] | None = None, **kwargs: Any) -> RaySampler:
        options: dict[str, Any] = {"chunk_length": CHUNK, "seed": 0, "actor_deadline": 60.0}
        options.update(kwargs)
        sampler = RaySampler(env_fns or fns(CountingEnv, ENVS, length=LENGTH), FixedActionPolicy,
                             **options)
        made.append(sampler)
        return sampler

    yield make
    for sampler in made:
        sampler.close()


def _check_chunk(chunk: Chunk, action: int) -> None:
    """The chunk is CHUNK consecutive steps of the ENVS CountingEnvs under ``action``."""
    assert chunk.obs.shape == (CHUNK, ENVS, 4)
    assert chunk.final_obs.shape == (CHUNK, ENVS, 4)
    assert chunk.next_obs.shape == (ENVS, 4)
    for name in ("actions", "rewards", "terminated", "truncated"):
        assert getattr(chunk, name).shape == (CHUNK, ENVS), name
    assert chunk.extras["weights_seen"].shape == (CHUNK, ENVS)
    assert (chunk.actions == action).all() and (chunk.rewards == action).all()
    np.testing.assert_array_equal(chunk.obs[:, :, 0], np.tile(np.arange(ENVS), (CHUNK, 1)))
    after = np.concatenate([chunk.obs[1:], chunk.next_obs[None]])
    done = chunk.terminated
    np.testing.assert_array_equal(after[:, :, 1][~done], chunk.obs[:, :, 1][~done] + 1)
    np.testing.assert_array_equal(after[:, :, 1][done], 0)
    np.testing.assert_array_equal(chunk.final_obs[:, :, 1][done], LENGTH)
    np.testing.assert_array_equal(after[:, :, 3][~done], action)
    assert len(chunk.episode_lengths) == done.sum()
    assert (chunk.episode_lengths <= LENGTH).all()


def test_one_actor_per_node_with_right_chunks(make_ray_sampler: Callable[..., RaySampler]) -> None:
    sampler = make_ray_sampler()
    nodes = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
    assert sampler.num_actors == len(nodes) == 2
    assert set(sampler.actor_nodes()) == nodes
    chunks = sampler.recv()
    assert sorted(c.actor_id for c in chunks) == [0, 1]
    assert {c.node_id for c in chunks} == nodes
    for chunk in chunks:
        assert chunk.version == 0
        _check_chunk(chunk, action=0)
        assert not chunk.obs.flags.writeable  # zero-copy from the object store
    assert sampler.stats()["env_steps"] == 2 * CHUNK * ENVS


def test_partial_recv_keeps_pending_chunks(make_ray_sampler: Callable[..., RaySampler]) -> None:
    sampler = make_ray_sampler(in_flight=2)
    received: dict[int, list[Chunk]] = {0: [], 1: []}
    sizes = []
    while min(len(v) for v in received.values()) < 4:
        chunks = sampler.recv(1, max_wait=0.0 if not sizes else 0.01)
        sizes.append(len(chunks))
        for chunk in chunks:
            received[chunk.actor_id].append(chunk)
    total = sum(len(v) for v in received.values())
    stats = sampler.stats()
    assert stats["chunks"] == total and stats["chunks_lost"] == 0
    assert stats["requests"] == total + sampler.pending()  # the rest is still pending
    for chunks in received.values():
        for before, after in itertools.pairwise(chunks):  # nothing lost, repeated or reordered
            np.testing.assert_array_equal(after.obs[0], before.next_obs)
    more = sampler.recv(3)
    assert len(more) >= 3


def test_weight_version_advances(make_ray_sampler: Callable[..., RaySampler]) -> None:
    sampler = make_ray_sampler(weights=1)
    assert sampler.version == 1
    first = sampler.recv()
    assert all(c.version == 1 for c in first)
    for chunk in first:
        _check_chunk(chunk, action=1)
    assert sampler.set_weights(3) == 2
    seen: dict[int, list[int]] = {0: [], 1: []}
    while min(v[-1] if v else 0 for v in seen.values()) < 2:
        for chunk in sampler.recv():
            seen[chunk.actor_id].append(chunk.version)
            _check_chunk(chunk, action={1: 1, 2: 3}[chunk.version])
    for versions in seen.values():
        assert versions == sorted(versions)
        assert versions.count(1) <= sampler.in_flight  # only requests sent before the update


def test_killed_actor_is_restarted_and_reported(
    make_ray_sampler: Callable[..., RaySampler],
) -> None:
    sampler = make_ray_sampler(weights=2, actor_restarts=1)
    sampler.recv()
    ray.kill(sampler.actor(0), no_restart=False)
    after_death: list[Chunk] = []
    end = time.monotonic() + 90.0
    while not after_death and time.monotonic() < end:
        after_death = [c for c in sampler.recv(max_wait=1.0) if c.actor_id == 0 and
                       sampler.stats()["actor_deaths"] == 1]
    stats = sampler.stats()
    assert stats["actor_deaths"] == 1 and stats["actors_alive"] == 2
    assert stats["requests"] == stats["chunks"] + stats["chunks_lost"] + sampler.pending()
    # Its in-flight chunks, and any request sent before Ray saw the death, are lost.
    assert stats["chunks_lost"] >= 1
    assert after_death, "actor 0 never delivered after its restart"
    chunk = after_death[0]
    assert chunk.version == sampler.version == 1  # the weights were sent again to the new actor
    _check_chunk(chunk, action=2)


class RayKillEnv(CountingEnv):
    """Env 0, at step ``at_step`` of its actor's first life (``marker`` absent), kills the actor
    as ``ray.kill`` does: the actor's children at once (under forkserver: the forkserver, and
    so the env processes), the actor itself ``lag`` seconds later."""

    def __init__(self, env_index: int, marker: str, at_step: int = 3, lag: float = 0.5) -> None:
        super().__init__(env_index=env_index, length=LENGTH)
        self.marker, self.at_step, self.lag = Path(marker), at_step, lag

    def step(self, action: Any) -> Any:
        if self.env_index == 0 and self.t + 1 >= self.at_step and not self.marker.exists():
            self.marker.touch()
            actor = next(p for p in psutil.Process().parents()  # Ray retitles its workers
                         if p.cmdline()[0].startswith("ray::SamplerActor"))
            children = " ".join(str(c.pid) for c in actor.children())
            subprocess.Popen(["sh", "-c", f"kill -9 {children}; sleep {self.lag}; "
                              f"kill -9 {actor.pid}"], start_new_session=True)
            time.sleep(60)  # killed with the forkserver
        return super().step(action)


def test_an_actor_killed_children_first_loses_its_chunk_not_the_run(
    make_ray_sampler: Callable[..., RaySampler], tmp_path: Path
) -> None:
    # The actor sees its env processes die before it dies itself; that death must count as the
    # actor's (a lost chunk and a restart), not reach the driver as an env crash.
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)  # the actors cannot import this file by name
    try:
        sampler = make_ray_sampler(fns(RayKillEnv, ENVS, marker=str(tmp_path / "killed")),
                                   num_actors=1, actor_restarts=1)
        chunks: list[Chunk] = []
        end = time.monotonic() + 90.0
        while len(chunks) < 3 and time.monotonic() < end:  # the killed one's recv has none
            chunks += sampler.recv(max_wait=1.0)
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    stats = sampler.stats()
    assert (tmp_path / "killed").exists()
    assert stats["actor_deaths"] == 1 and stats["chunks_lost"] >= 1
    assert len(chunks) == 3 and all(c.actor_id == 0 for c in chunks)


def test_an_env_crash_in_an_actor_reaches_the_driver_typed(
    make_ray_sampler: Callable[..., RaySampler],
) -> None:
    # Not an outside kill (exit code 3): reported at once, as the local VecSampler's error.
    sampler = make_ray_sampler(fns(DyingEnv, ENVS, at_step=3, bad_index=1), num_actors=1)
    start = time.monotonic()
    with pytest.raises(errors.WorkerDiedError, match="exit code 3") as caught:
        sampler.recv()
    assert caught.value.exitcode == 3 and 1 in caught.value.env_ids
    assert time.monotonic() - start < KILL_GRACE_S


def test_closed_sampler_refuses(make_ray_sampler: Callable[..., RaySampler]) -> None:
    sampler = make_ray_sampler(num_actors=1)
    sampler.close()
    sampler.close()
    with pytest.raises(errors.ClosedError):
        sampler.recv()
    with pytest.raises(errors.ClosedError):
        sampler.set_weights(1)


def test_bad_arguments_are_config_errors(cluster: Cluster) -> None:
    for kwargs in ({"chunk_length": 0}, {"in_flight": 0}, {"actor_restarts": -1},
                   {"num_actors": 0}):
        with pytest.raises(errors.ConfigError):
            RaySampler(fns(CountingEnv, 2), FixedActionPolicy, **kwargs)


def test_own_knobs_and_options_by_name(make_ray_sampler: Callable[..., RaySampler]) -> None:
    """``actor_restarts`` and ``actor_deadline`` are RaySampler's own; every Options field,
    ``max_restarts`` and ``deadline`` included, goes to each actor's VecSampler, as a keyword or
    in ``options=``, as every constructor takes them."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no name warns
        sampler = make_ray_sampler(fns(CountingEnv, 2), num_actors=1, actor_restarts=1,
                                   actor_deadline=50.0, max_restarts=7, deadline=9.0,
                                   options=Options(infos=False))
    assert (sampler.actor_restarts, sampler.actor_deadline) == (1, 50.0)
    options = sampler.options
    assert (options.max_restarts, options.deadline, options.infos) == (7, 9.0, False)
    assert not hasattr(sampler, "max_restarts") and not hasattr(sampler, "deadline")
    assert len(sampler.recv()) == 1


def test_the_ray_knobs_say_what_they_bound() -> None:
    """``timeout`` means the partial batch's window in vecsample; RaySampler's cap on a partial
    recv is ``max_wait`` (keyword-only: ``recv(3)`` asks for 3 chunks) and its bound on the
    actors is ``actor_deadline``, apart from ``Options.startup_deadline``."""
    recv = inspect.signature(RaySampler.recv).parameters
    assert list(recv) == ["self", "min_chunks", "max_wait"]
    assert recv["max_wait"].kind is inspect.Parameter.KEYWORD_ONLY
    init = inspect.signature(RaySampler.__init__).parameters
    assert "actor_deadline" in init and "start_deadline" not in init


def test_sampler_kwargs_is_no_argument(cluster: Cluster) -> None:
    """Nothing was released under ``sampler_kwargs=``: it is an unknown option's name, refused
    before Ray starts an actor."""
    with pytest.raises(errors.ConfigError, match="got 'sampler_kwargs'"):
        RaySampler(fns(CountingEnv, 2), FixedActionPolicy, sampler_kwargs={"infos": False})


def test_ppo_ray_example_runs_on_a_tiny_budget(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = Path(__file__).resolve().parents[1] / "examples" / "ppo_ray.py"
    spec = importlib.util.spec_from_file_location("ppo_ray", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "ppo_ray", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)  # the actors cannot import it by name
    args = module.Args(total_steps=64, actors=1, envs_per_actor=2, chunk_length=16, epochs=1)
    curve = module.train(args)
    assert len(curve) == 2  # 64 steps in chunks of 16 x 2
