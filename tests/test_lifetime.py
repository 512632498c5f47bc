"""Processes live and die with their owner, and close() frees every process, fd and mapping.

Workers never outlive the parent (even stopped ones), a sampler made in a thread outlives the
thread, a forked child leaves the parent's sampler working; close() is bounded and idempotent,
everything after it is a ClosedError, and create/close cycles leak nothing.

A scenario number in a docstring is that of the outside fault-injection run
(docs/reliability.md, "The second pass").
"""

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
import threading
import time
import weakref

import numpy as np
import psutil
import pytest
from gymnasium import spaces
from helpers import ones, posix_only

from vecsample import VecSampler, errors
from vecsample._wire.shm import SharedBuffers
from vecsample.testing import CountingEnv, HangingEnv, fns

# --- workers die with their parent ----------------------------------------------------------------


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


class StoppingEnv(CountingEnv):
    """Env 1 stops its own process (SIGSTOP) at its first step, as a debugger or a stuck C call
    would hold it: no Python code of that worker runs again."""

    def step(self, action):
        if self.env_index == 1:
            os.kill(os.getpid(), signal.SIGSTOP)
        return super().step(action)


STOPPED_WORKER_PARENT = """
import sys
import numpy as np
from vecsample import VecSampler
from test_lifetime import StoppingEnv
from vecsample.testing import fns
if __name__ == "__main__":
    s = VecSampler(fns(StoppingEnv, 2), num_workers=2, context=sys.argv[1], deadline=60)
    s.reset()
    print(" ".join(map(str, s.worker_pids())), flush=True)
    s.step(np.ones(2, dtype=np.int64))  # worker 1 stops; we wait here until killed
"""


@posix_only
@pytest.mark.parametrize("context", ["forkserver", "spawn", "fork"])
def test_a_stopped_worker_dies_within_2s_of_its_parents_sigkill(tmp_path, context):
    """Scenario 8 of the outside fault-injection run."""
    script = tmp_path / "parent.py"
    script.write_text(STOPPED_WORKER_PARENT)
    path = os.pathsep.join([os.getcwd(), os.path.dirname(__file__)])
    with subprocess.Popen([sys.executable, str(script), context], stdout=subprocess.PIPE,
                          text=True, env={**os.environ, "PYTHONPATH": path}) as parent:
        pids = [int(p) for p in parent.stdout.readline().split()]
        try:
            time.sleep(0.5)
            assert psutil.Process(pids[1]).status() == psutil.STATUS_STOPPED
            parent.kill()
            parent.wait(5)
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and any(_alive(p) for p in pids):
                time.sleep(0.05)
            assert not [p for p in pids if _alive(p)]
        finally:
            for p in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# --- threads and forked children ------------------------------------------------------------------



@posix_only
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_sampler_made_in_a_thread_outlives_the_thread(context):
    """Scenario 9 of the outside fault-injection run."""
    made: list[VecSampler] = []
    thread = threading.Thread(target=lambda: made.append(
        VecSampler(fns(CountingEnv, 2), num_workers=2, context=context, deadline=10)))
    thread.start()
    thread.join()
    (s,) = made
    try:
        time.sleep(0.5)  # PR_SET_PDEATHSIG would have killed the workers by now
        s.reset()
        np.testing.assert_array_equal(s.step(ones(2)).obs[:, 1], [1, 1])
    finally:
        s.close()


FORKING_PARENT = """
import os, sys
import numpy as np
from vecsample import VecSampler
from vecsample.testing import CountingEnv, fns
if __name__ == "__main__":
    s = VecSampler(fns(CountingEnv, 2), num_workers=2, context=sys.argv[1], deadline=10)
    s.reset()
    child = os.fork()
    if child == 0:
        sys.exit(0)  # a normal exit: atexit and finalizers run in the child
    os.waitpid(child, 0)
    print(s.step(np.ones(2, dtype=np.int64)).obs[:, 1].tolist())
    s.close()
"""


@posix_only
@pytest.mark.parametrize("context", ["fork", "forkserver"])
def test_a_forked_child_that_exits_leaves_the_parents_sampler_working(tmp_path, context):
    """Scenario 10 of the outside fault-injection run."""
    script = tmp_path / "forking.py"
    script.write_text(FORKING_PARENT)
    proc = subprocess.run([sys.executable, str(script), context], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[1.0, 1.0]"


# --- close ----------------------------------------------------------------------------------------


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


@pytest.mark.parametrize("timeout", [None, float("inf")])
def test_close_with_no_bound_closes_and_reaps(timeout):
    """Scenario 15 of the outside fault-injection run."""
    s = VecSampler(fns(CountingEnv, 2), num_workers=2)
    pids = s.worker_pids()
    s.close(timeout=timeout)
    assert s.closed
    assert not [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_a_bad_close_timeout_is_refused_before_anything_is_torn_down(make_sampler):
    """Scenario 15 of the outside fault-injection run."""
    s = make_sampler(fns(CountingEnv, 2), num_workers=2)
    with pytest.raises(errors.ConfigError, match="timeout"):
        s.close(timeout=-1)
    assert not s.closed
    s.reset()


class StubbornCloseEnv(CountingEnv):
    """close() hangs, and SIGTERM is ignored from then on."""

    def close(self) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(3600)


@posix_only
@pytest.mark.parametrize("workers", [1, 4])
def test_close_timeout_bounds_the_whole_call(workers):
    """Scenario 16 of the outside fault-injection run."""
    probe = CountingEnv()  # given the spaces, the parent builds no env (whose close would hang)
    s = VecSampler(fns(StubbornCloseEnv, workers), num_workers=workers,
                   observation_space=probe.observation_space, action_space=probe.action_space)
    start = time.monotonic()
    s.close(timeout=0.5)
    elapsed = time.monotonic() - start
    assert elapsed < 0.5 + 0.5 + 0.5, elapsed  # timeout, the SIGTERM grace, slack


def test_every_call_after_close(make_sampler):
    s = make_sampler(fns(CountingEnv, 2), num_workers=1)
    s.close()
    s.close()  # idempotent
    for call, args in [("reset", ()), ("step", (ones(2),)), ("step_send", (0, ones(2))),
                       ("step_recv", ()), ("call", ("t",)), ("reset_task", ([1, 2],))]:
        with pytest.raises(errors.ClosedError, match="closed"):
            getattr(s, call)(*args)


# --- create/close cycles (R5) ---------------------------------------------------------------------


def _children() -> int:
    return sum(1 for p in psutil.Process().children(recursive=True)
               if p.status() != psutil.STATUS_ZOMBIE)


def test_200_create_close_cycles_leak_no_process_fd_or_memory():
    me = psutil.Process()
    env_fns = fns(CountingEnv, 4)

    def cycle() -> None:
        with VecSampler(env_fns, num_workers=2, context="fork") as s:
            s.reset(seed=1)
            s.step(ones(4))

    for _ in range(10):  # warm-up: imports, allocator arenas, the forkserver-free baseline
        cycle()
    gc.collect()
    before = (_children(), me.num_fds(), me.memory_info().rss)
    start = time.monotonic()
    for _ in range(200):
        cycle()
    gc.collect()
    after = (_children(), me.num_fds(), me.memory_info().rss)
    print(f"\nR5 200 cycles in {time.monotonic() - start:.1f}s: children {before[0]} -> "
          f"{after[0]}, open fds {before[1]} -> {after[1]}, RSS {before[2] / 2**20:.1f} -> "
          f"{after[2] / 2**20:.1f} MiB ({100 * (after[2] / before[2] - 1):+.2f}%)")
    assert after[0] <= before[0]
    assert after[1] <= before[1]
    assert after[2] < 1.10 * before[2]


# --- what close() gives back: fds, shared memory, mappings (issue 23) -----------------------------


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
