"""RaySampler under the faults a cluster meets (issue 35), on a fake two-node Ray cluster.

Every failed chunk is counted, with its cause, and the chunks taken beside it are delivered;
``requests == chunks + chunks_lost + pending()`` holds after each fault (``assert_accounted``).
The node faults (a node removed, every node gone) are in tests/test_ray_nodes.py: they take
nodes away, so they need a cluster of their own.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray
from ray.cluster_utils import Cluster
from ray_support import (
    ArgmaxLinear,
    MarkedFaultEnv,
    ModePolicy,
    actor_pid,
    assert_accounted,
    connected,
    no_leaked_vecsample_workers,
    ray_cluster,
)

from vecsample import Options, errors
from vecsample.ray import RaySampler, TorchPolicy, fleet, numpy_weights
from vecsample.ray.errors import ActorsLostError, PolicyError, RayShutdownError, WeightsError
from vecsample.testing import CountingEnv, FixedActionPolicy, fns

ENVS = 2
CHUNK = 8


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A head and a worker node of 2 logical CPUs each: two actors land on two nodes."""
    with ray_cluster(2, 2) as made:
        yield made


@pytest.fixture(autouse=True)
def no_leaked_workers() -> Iterator[None]:
    yield from no_leaked_vecsample_workers()


@pytest.fixture
def make(cluster: Cluster) -> Iterator[Callable[..., RaySampler]]:
    """``make(env_fns=None, policy=ModePolicy, **kwargs)``: a RaySampler closed at teardown;
    the driver is connected to the cluster again if a test shut Ray down."""
    made: list[RaySampler] = []

    def build(env_fns: list[Any] | None = None, policy: Any = ModePolicy,
              **kwargs: Any) -> RaySampler:
        kwargs = {"chunk_length": CHUNK, "seed": 0, "actor_deadline": 60.0, **kwargs}
        sampler = RaySampler(env_fns or fns(CountingEnv, ENVS), policy, **kwargs)
        made.append(sampler)
        return sampler

    yield build
    for sampler in made:
        sampler.close()
    if not ray.is_initialized():
        connected(cluster)


# --- item 1: a failed chunk is counted, and what came with it is delivered -----------------------


def test_a_failed_chunk_is_counted_lost_with_its_cause(
    make: Callable[..., RaySampler], tmp_path: Path
) -> None:
    (tmp_path / "all").touch()
    sampler = make(fns(MarkedFaultEnv, ENVS, folder=str(tmp_path)), num_actors=1)
    with pytest.raises(errors.WorkerError, match="injected failure in step 3"):
        sampler.recv()
    stats = sampler.stats()
    # The failed request is a lost chunk; the second one is still pending.
    assert (stats["requests"], stats["chunks"], stats["chunks_lost"], sampler.pending()) == \
        (2, 0, 1, 1)
    assert [(lost.actor_id, "injected failure in step 3" in lost.reason)
            for lost in sampler.losses] == [(0, True)]


def test_chunks_taken_beside_a_failed_one_ride_on_its_error(
    make: Callable[..., RaySampler], tmp_path: Path
) -> None:
    sampler = make(fns(MarkedFaultEnv, ENVS, folder=str(tmp_path)), num_actors=2)
    # Only actor 1 fails, and a recv takes it after actor 0: its chunk is taken first.
    (tmp_path / str(actor_pid(sampler, 1))).touch()
    delivered = []
    for _ in range(3):
        with pytest.raises(errors.VecSampleError) as caught:  # then its VecSampler is broken
            sampler.recv()
        delivered += caught.value.results
        assert_accounted(sampler)
    assert [c.actor_id for c in delivered] == [0, 0, 0]
    assert sampler.stats()["chunks"] == 3 and sampler.stats()["chunks_lost"] == 3
    for before, after in itertools.pairwise(delivered):  # actor 0's sequence is whole
        np.testing.assert_array_equal(after.obs[0], before.next_obs)


def test_chunks_taken_by_a_recv_that_ctrl_c_cut_short_come_back_from_the_next(
    make: Callable[..., RaySampler], monkeypatch: pytest.MonkeyPatch
) -> None:
    sampler = make(num_actors=2)
    real_get, calls = ray.get, []

    def get(*args: Any, **kwargs: Any) -> Any:  # Ctrl-C as the second chunk is fetched
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_get(*args, **kwargs)

    monkeypatch.setattr(fleet.ray, "get", get)
    with pytest.raises(KeyboardInterrupt):
        sampler.recv()
    monkeypatch.undo()
    assert_accounted(sampler)  # the interrupted fetch stays pending; the first one is held
    chunks = sampler.recv()
    assert sorted(c.actor_id for c in chunks) == [0, 0, 1]  # actor 0's held one, then one each
    assert sampler.stats()["chunks"] == 3
    assert_accounted(sampler)


#: The env faults of the outside suite that lost count of a chunk, caused by
#: ``MarkedFaultEnv(how=...)``, and the error recv raises. The policy's faults are below.
FAULTS: dict[str, tuple[dict[str, Any], type[Exception]]] = {
    "env raises": ({"how": "raise"}, errors.WorkerError),
    "env exits with 255": ({"how": "exit"}, errors.WorkerDiedError),
    "env SIGKILLs itself": ({"how": "sigkill"}, errors.WorkerDiedError),
    "env passes its deadline": ({"how": "hang", "options": Options(deadline=1.0)},
                                errors.DeadlineExceededError),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_every_fault_is_typed_and_keeps_the_books(
    make: Callable[..., RaySampler], tmp_path: Path, fault: str
) -> None:
    how, raised = FAULTS[fault]
    (tmp_path / "all").touch()
    sampler = make(fns(MarkedFaultEnv, ENVS, folder=str(tmp_path), how=how["how"]),
                   num_actors=1, options=how.get("options"))
    with pytest.raises(raised):
        sampler.recv()
    assert_accounted(sampler)
    assert sampler.stats()["chunks_lost"] >= 1
    assert sampler.losses and sampler.losses[0].actor_id == 0


# --- item 3: after every actor is lost, every call says so ------------------------------------


def test_recv_after_every_actor_is_lost_raises_the_same_error(
    make: Callable[..., RaySampler],
) -> None:
    sampler = make(num_actors=2, actor_restarts=0)
    sampler.recv()
    for actor_id in range(2):
        ray.kill(sampler.actor(actor_id), no_restart=True)
    with pytest.raises(ActorsLostError) as first:
        for _ in range(3):  # a chunk finished before the kill may still come first
            sampler.recv()
    message = str(first.value)
    for again in (sampler.recv, functools.partial(sampler.recv, max_wait=0.1),
                  functools.partial(sampler.recv, 1),
                  functools.partial(sampler.set_weights, 1)):
        with pytest.raises(ActorsLostError) as caught:  # never [] (a loop would spin forever)
            again()
        assert str(caught.value) == message
    # It names each actor and why Ray let it go.
    assert "actor 0: " in message and "actor 1: " in message and "ray.kill" in message
    assert sorted(first.value.lost) == [0, 1]
    assert_accounted(sampler)
    assert sampler.stats()["actors_alive"] == 0


def test_an_actor_killed_for_good_with_restarts_left_is_retired_not_awaited(
    make: Callable[..., RaySampler],
) -> None:
    # Ray will not restart it, restarts left or not: it is lost now, not "restarting" forever.
    sampler = make(num_actors=1, actor_restarts=2, actor_deadline=60.0)
    sampler.recv()
    ray.kill(sampler.actor(0), no_restart=True)
    start = time.monotonic()
    with pytest.raises(ActorsLostError, match=r"ray\.kill") as caught:
        for _ in range(3):  # a chunk finished before the kill may still come first
            sampler.recv()
    assert time.monotonic() - start < 30.0  # well inside actor_deadline: it was not waited for
    assert sorted(caught.value.lost) == [0]
    assert_accounted(sampler)


# --- item 4: ray.shutdown() under a live sampler --------------------------------------------------


def test_ray_shutdown_under_a_sampler_is_a_typed_error_and_starts_nothing(
    make: Callable[..., RaySampler],
) -> None:
    sampler = make(num_actors=1)
    sampler.recv()
    ray.shutdown()
    for call in (sampler.recv, functools.partial(sampler.recv, max_wait=0.1),
                 functools.partial(sampler.set_weights, 1)):
        with pytest.raises(RayShutdownError, match=r"ray\.shutdown"):
            call()
        assert not ray.is_initialized(), "the sampler started Ray behind the user's back"
    assert_accounted(sampler)
    sampler.close()  # quiet
    sampler.close()
    assert sampler.closed and not ray.is_initialized()


# --- item 6: arguments checked before Ray starts --------------------------------------------------


def test_arguments_are_checked_before_ray_starts(cluster: Cluster) -> None:
    ray.shutdown()  # the docstring's promise: refused "before Ray is started"
    try:
        for kwargs in ({"num_actors": -1}, {"num_actors": 2.5}, {"num_actors": True},
                       {"workers_per_actor": 3}, {"workers_per_actor": 0}):
            start = time.monotonic()
            with pytest.raises(errors.ConfigError, match=r"num_actors|workers_per_actor"):
                RaySampler(fns(CountingEnv, 2), FixedActionPolicy, actor_deadline=5.0, **kwargs)
            assert not ray.is_initialized(), kwargs
            assert time.monotonic() - start < 2.0, kwargs  # no actor waited for either
    finally:
        connected(cluster)


def test_workers_per_actor_that_does_not_divide_the_envs_says_so(cluster: Cluster) -> None:
    # Each would otherwise wait out actor_deadline for CPUs, then blame them.
    with pytest.raises(errors.ConfigError, match=r"not divisible .* choose workers_per_actor "
                       r"from \[1, 2, 4\]"):
        RaySampler(fns(CountingEnv, 4), FixedActionPolicy, workers_per_actor=3,
                   actor_deadline=5.0)
    with pytest.raises(errors.ConfigError, match="at most"):
        RaySampler(fns(CountingEnv, 2), FixedActionPolicy, workers_per_actor=3,
                   uneven_split=True, actor_deadline=5.0)


# --- item 7: bad weights and bad policy outputs -------------------------------------------------


def test_weights_that_do_not_fit_the_policy_are_refused_at_set_weights(
    make: Callable[..., RaySampler],
) -> None:
    good = numpy_weights(ArgmaxLinear())
    sampler = make(policy=functools.partial(TorchPolicy, ArgmaxLinear), num_actors=1,
                   weights=good)
    wrong: dict[str, dict[str, Any]] = {
        "missing": {"net.weight": good["net.weight"]},
        "unknown": {**good, "net.scale": good["net.bias"]},
        "shape": {**good, "net.weight": good["net.weight"][:, :3]},
        "dtype": {**good, "net.bias": good["net.bias"].astype(np.float64)},
    }
    said = {"missing": r"missing \['net.bias'\]", "unknown": r"unknown \['net.scale'\]",
            "shape": r"got shape \(4, 3\)", "dtype": "dtype float64"}
    for what, weights in wrong.items():
        with pytest.raises(WeightsError, match=said[what]):
            sampler.set_weights(weights)
    assert sampler.version == 1  # nothing was sent: requests keep the good weights
    chunks = sampler.recv()
    assert [c.version for c in chunks] == [1]
    assert_accounted(sampler)
    assert sampler.stats()["chunks_lost"] == 0


def test_a_policy_that_misbehaves_gets_the_samplers_own_errors(
    make: Callable[..., RaySampler],
) -> None:
    sampler = make(num_actors=1, in_flight=1)  # one request at a time: one per set_weights
    for mode, raised, said in (
        ("shape", errors.ActionShapeError, r"expected shape \(2,\)"),  # as VecSampler says
        ("nan", errors.ActionDtypeError, "expected dtype int64"),
        ("raise", PolicyError, r"in act\(\): ValueError: injected failure in act"),
        ("bad", PolicyError, r"in set_weights\(\): ValueError"),  # no weights_spec to check
    ):
        sampler.set_weights(mode)
        with pytest.raises(raised, match=said) as caught:
            sampler.recv()
        assert_accounted(sampler)
        if raised is PolicyError:  # the policy's own traceback, from the actor
            assert "Traceback" in str(caught.value.__cause__)
    sampler.set_weights(1)
    assert [c.version for c in sampler.recv()] == [5]  # the actor goes on after all of them
    assert [lost.actor_id for lost in sampler.losses] == [0] * 4
    assert_accounted(sampler)
