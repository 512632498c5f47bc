"""Workers never outlive the parent, and close() frees every process, fd and mapping."""

from __future__ import annotations

import contextlib
import gc
import math
import multiprocessing.heap
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
import weakref

import numpy as np
import psutil
import pytest
from gymnasium import spaces

from vecsample import VecSampler, errors
from vecsample._wire.shm import SharedBuffers
from vecsample.testing import CountingEnv, HangingEnv, fns

CHILD = textwrap.dedent("""
    import sys, time
    import numpy as np
    from vecsample import VecSampler
    from vecsample.testing import SlowEnv, fns
    if __name__ == "__main__":
        s = VecSampler(fns(SlowEnv, 4, step_time=0.05), num_workers=2, context=sys.argv[1])
        s.reset()
        s.step_send(0, np.ones(2, dtype=np.int64))  # worker 0 busy mid-step, worker 1 idle
        print(" ".join(map(str, s.worker_pids())), flush=True)
        time.sleep(60)
""")


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    end = time.monotonic() + seconds
    alive = pids
    while alive and time.monotonic() < end:
        alive = [p for p in alive if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.05)
    return alive


@pytest.mark.parametrize("context", ["forkserver", "spawn", "fork"])
def test_workers_exit_within_2s_when_the_parent_is_sigkilled(tmp_path, context):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    with subprocess.Popen([sys.executable, str(script), context], stdout=subprocess.PIPE,
                          env=env, text=True) as parent:
        try:
            pids = [int(p) for p in parent.stdout.readline().split()]
            assert len(pids) == 2
            shm_before = set(os.listdir("/dev/shm"))
            parent.send_signal(signal.SIGKILL)
            parent.wait(5)
            assert _wait_gone(pids, 2.0) == []
            assert not {f for f in os.listdir("/dev/shm") if f.startswith("pym-")} - shm_before
        finally:
            parent.kill()


def test_close_frees_processes_and_returns_with_a_hung_worker():
    s = VecSampler(fns(HangingEnv, 2, at_step=1), num_workers=2, deadline=0.2)
    pids = s.worker_pids()
    s.reset()
    s.step_send(0, [1])
    start = time.monotonic()
    s.close(timeout=0.3)
    assert time.monotonic() - start < 3.0
    assert _wait_gone(pids, 1.0) == []


def test_forgotten_sampler_is_cleaned_up_by_its_finalizer():
    s = VecSampler(fns(CountingEnv, 2), num_workers=2)
    pids = s.worker_pids()
    del s
    assert _wait_gone(pids, 3.0) == []


# --- what close() gives back: fds, shared memory, mappings (issue 23) ----------------------------


def _fds() -> dict[int, str]:
    """This process's open fds, and what each one is."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the fd of the listing itself, closed by now
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return found


def _shared_mappings() -> set[str]:
    """This process's shared mappings (address range and file), from /proc/self/maps."""
    with open("/proc/self/maps") as maps:
        lines = [line.split() for line in maps]
    return {f"{f[0]} {' '.join(f[5:])}" for f in lines if f[1].endswith("s")}


@pytest.fixture
def no_gc():
    """No garbage collection while the test runs: what close() leaves open stays open, and
    nothing is freed by chance (as in a training loop that holds its sampler)."""
    enabled = gc.isenabled()
    gc.disable()
    yield
    if enabled:
        gc.enable()


@pytest.fixture
def first_sampler(monkeypatch):
    """A fresh ``multiprocessing.heap``, as a process's first sampler finds it: that heap is
    process-wide and keeps the arenas of every sampler before, so without this, whether shared
    memory from there shows as new fds would depend on which tests ran first."""
    monkeypatch.setattr(multiprocessing.heap.BufferWrapper, "_heap", multiprocessing.heap.Heap())


def _warm(make_sampler, context: str) -> None:
    """A sampler opened and closed first: multiprocessing's process-wide helpers (the
    forkserver, the resource tracker's pipe) are started once and then stay, by design."""
    make_sampler(fns(CountingEnv, 2), num_workers=2, context=context).close()


def _run(make_sampler, context: str, **options):
    """A sampler that reset and stepped (and, with restart, respawned worker 1)."""
    s = make_sampler(fns(CountingEnv, 4), num_workers=2, context=context, **options)
    s.reset()
    if options.get("restart"):
        os.kill(s.worker_pids()[1], signal.SIGKILL)
    if options.get("pipeline"):
        for w in range(s.num_slots):
            s.step_send(w, np.ones(s.envs_per_slot, dtype=np.int64))
        return s, s.batch(s.step_recv())  # timeout None: every worker sent
    return s, s.step(np.ones(4, dtype=np.int64))


CLOSES = [{"timeout": None}, {}, {"timeout": math.inf}]


@pytest.mark.parametrize("close", CLOSES, ids=["None", "default", "inf"])
@pytest.mark.parametrize("context", ["fork", "forkserver"])
def test_close_gives_back_every_fd_without_gc(make_sampler, no_gc, first_sampler, context,
                                              close):
    _warm(make_sampler, context)
    before, shm_before = _fds(), set(os.listdir("/dev/shm"))
    s, result = _run(make_sampler, context)
    kept = [result.obs.copy(), result.rewards.copy()]
    s.close(**close)
    assert _fds() == before  # the sampler is still referenced, and nothing was collected
    assert set(os.listdir("/dev/shm")) == shm_before
    # The result's views still read what the last step wrote (docs/semantics.md).
    np.testing.assert_array_equal(result.obs, kept[0])
    np.testing.assert_array_equal(result.rewards, kept[1])


@pytest.mark.parametrize(("context", "options"), [
    ("spawn", {}),
    ("fork", {"restart": True}),
    ("forkserver", {"restart": True}),
    ("spawn", {"restart": True}),
    ("fork", {"pipeline": True}),
    ("forkserver", {"pipeline": True}),
], ids=lambda x: x if isinstance(x, str) else "-".join(x) or "plain")
def test_close_gives_back_every_fd_after_restart_and_pipelined(make_sampler, no_gc,
                                                               first_sampler, context, options):
    _warm(make_sampler, context)
    before = _fds()
    s, _ = _run(make_sampler, context, **options)
    if options.get("restart"):
        assert [w for w, _ in s.restart_log] == [1]
    s.close(timeout=None)
    assert _fds() == before


@pytest.fixture
def forgettable_sampler():
    """``make(...)``: a sampler this fixture holds only weakly, so a test can drop it; one
    still alive at teardown (a failed test) is closed then."""
    made: list[weakref.ref[VecSampler]] = []

    def make(*args, **kwargs) -> VecSampler:
        sampler = VecSampler(*args, **kwargs)
        made.append(weakref.ref(sampler))
        return sampler

    yield make
    for ref in made:
        sampler = ref()
        if sampler is not None:
            sampler.close(timeout=2.0)


def test_shared_memory_is_unmapped_with_the_last_view(forgettable_sampler, first_sampler):
    gc.collect()  # earlier tests' garbage goes now, not in the middle of this one
    before = _shared_mappings()
    s = forgettable_sampler(fns(CountingEnv, 4), num_workers=2, context="fork")
    s.reset()
    result = s.step(np.ones(4, dtype=np.int64))
    s.close(timeout=None)
    del s
    gc.collect()
    assert _shared_mappings() - before  # the result's views hold the mapping: still readable
    np.testing.assert_array_equal(result.rewards, np.ones(4))
    del result
    gc.collect()
    assert _shared_mappings() - before == set()


def test_shared_memory_travels_only_to_the_workers_a_sampler_starts():
    buffers = SharedBuffers(spaces.Box(-1, 1, (3,)), spaces.Discrete(2), 2, 1)
    with pytest.raises(errors.SharedMemoryError, match="a pickle outside one"):
        pickle.dumps(buffers)
    buffers.release()
    assert buffers.region.fd == -1
    view = buffers.views().obs
    view[:] = 1.0  # released: still mapped while viewed
    assert view.sum() == 6.0
