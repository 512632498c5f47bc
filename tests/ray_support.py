"""What the Ray test files share: a fake cluster that is always torn down, a leak check that
ignores Ray's own processes, the chunk accounting, and fakes that the actors run.

Ray's start-up costs seconds, so each test file starts one ``ray.cluster_utils.Cluster`` for all
its tests and shuts it down at the end of the file: the other test files see no Ray process.
The fakes are defined here, at top level, so that cloudpickle ships them to the actors by value
(``cloudpickle.register_pickle_by_value``: the actors cannot import this folder by name).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import ray
import torch
from ray import cloudpickle
from ray.cluster_utils import Cluster
from torch import nn

from vecsample.ray import RaySampler
from vecsample.testing import CountingEnv


@contextlib.contextmanager
def ray_cluster(head_cpus: int, *node_cpus: int) -> Iterator[Cluster]:
    """A head of ``head_cpus`` logical CPUs and one node per ``node_cpus``, with the driver
    connected; shut down on the way out, whatever happened."""
    # No dashboard: seconds of start-up and a process per node that no test reads. Logical
    # CPUs, not the machine's: they decide where Ray puts each actor (one per node here).
    made = Cluster(initialize_head=True,
                   head_node_args={"num_cpus": head_cpus, "include_dashboard": False})
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)  # the fakes below travel to the actors
    try:
        for cpus in node_cpus:
            made.add_node(num_cpus=cpus)
        ray.init(address=made.address)
        yield made
    finally:
        cloudpickle.unregister_pickle_by_value(module)
        ray.shutdown()
        made.shutdown()


def connected(cluster: Cluster) -> None:
    """The driver connected to ``cluster`` again (after a test shut Ray down)."""
    if ray.is_initialized():
        ray.shutdown()  # a Ray started by the code under test, not the cluster
    ray.init(address=cluster.address)


def no_leaked_vecsample_workers() -> Iterator[None]:
    """For an autouse fixture that replaces conftest's check, which would flag Ray's own
    processes: here, no vecsample worker (a multiprocessing child below an actor) may outlive
    the test's sampler."""
    yield
    assert_no_leaked_workers()


def assert_no_leaked_workers() -> None:
    """No vecsample worker left below this process, once its samplers are closed."""
    end = time.monotonic() + 15.0  # ray.kill is asynchronous; the workers follow their actor
    while (leaked := _vecsample_workers()) and time.monotonic() < end:
        time.sleep(0.2)
    assert not leaked, f"processes left behind: {[(p.pid, p.cmdline()) for p in leaked]}"


def _vecsample_workers() -> list[psutil.Process]:
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            mine = proc.ppid() == os.getpid()  # our own forkserver from other tests is fine
            if not mine and proc.status() != psutil.STATUS_ZOMBIE and \
                    "multiprocessing" in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


def assert_accounted(sampler: RaySampler) -> None:
    """Every request is a chunk received, a chunk lost, or still pending: none vanished."""
    stats = sampler.stats()
    assert stats["requests"] == stats["chunks"] + stats["chunks_lost"] + sampler.pending(), (
        stats, sampler.pending())


def actor_pid(sampler: RaySampler, actor_id: int) -> int:
    """The process id of an actor (ask before anything is queued on it: it answers in turn)."""
    return int(ray.get(sampler.actor(actor_id).__ray_call__.remote(lambda _: os.getpid())))


# --- fakes the actors run -------------------------------------------------------------------------


class MarkedFaultEnv(CountingEnv):
    """A CountingEnv whose env 0 fails from step ``at_step`` on, in an actor that is marked: a
    file ``folder/all``, or ``folder/<the actor's pid>``, exists. ``how``: "raise" (a
    RuntimeError), "exit" (exit code 255, as when a forkserver is gone), "sigkill" (itself), or
    "hang" (sleeps past any deadline)."""

    def __init__(self, env_index: int = 0, folder: str = "", how: str = "raise",
                 at_step: int = 3) -> None:
        super().__init__(env_index=env_index, length=1000)
        self.folder, self.how, self.at_step = Path(folder), how, at_step
        self._actor: int | None = None

    def _marked(self) -> bool:
        if self._actor is None:  # Ray retitles its workers; the env's process is below one
            self._actor = next(p.pid for p in psutil.Process().parents()
                               if p.cmdline()[0].startswith("ray::SamplerActor"))
        return (self.folder / "all").exists() or (self.folder / str(self._actor)).exists()

    def step(self, action: Any) -> Any:
        if self.env_index == 0 and self.t + 1 >= self.at_step and self._marked():
            if self.how == "raise":
                raise RuntimeError(f"injected failure in step {self.t + 1}")
            if self.how == "exit":
                os._exit(255)
            if self.how == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(3600)  # "hang"
        return super().step(action)


class ModePolicy:
    """Action ``int(weights)`` (0 at first), or misbehaving after ``set_weights(mode)``: "nan"
    returns NaN actions, "raise" raises in ``act``, "shape" returns one action too many.
    Weights that are none of these and no int (``"bad"``) raise in ``set_weights``."""

    MODES = ("nan", "raise", "shape")

    def __init__(self) -> None:
        self.mode: int | str = 0

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if self.mode == "nan":
            return np.full(len(obs), np.nan), {}
        if self.mode == "raise":
            raise ValueError("injected failure in act")
        if self.mode == "shape":
            return np.zeros(len(obs) + 1, np.int64), {}
        return np.full(len(obs), self.mode, np.int64), {}

    def set_weights(self, weights: Any) -> None:
        self.mode = weights if weights in self.MODES else int(weights)


class ArgmaxLinear(nn.Module):
    """obs (4) -> 4 logits -> the greedy action: a TorchPolicy module for CountingEnv."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 4)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs).argmax(-1)
