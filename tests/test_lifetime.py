"""Processes live and die with their owner, and close() frees every process, fd and mapping.

Workers never outlive the parent (even stopped ones), a sampler made in a thread outlives the
thread, a forked child leaves the parent's sampler working; close() is bounded and idempotent,
everything after it is a ClosedError, and create/close cycles leak nothing.

A scenario number in a docstring is that of the outside fault-injection run
(docs/reliability.md#19-outside-fault-scenarios).
"""

from __future__ import annotations

import contextlib
import gc
import math
import multiprocessing.heap
import os
import pickle
import select
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
from vecsample.testing import CountingEnv, HangingEnv, SlowEnv, fns

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


#: Every call a thread must hold the sampler for, with arguments for a 1-worker, 1-env sampler.
GUARDED_CALLS = {
    "step_send": lambda s: s.step_send(0, ones(1)), "step_recv": lambda s: s.step_recv(None),
    "send_all": lambda s: s.send_all(ones(1)), "step": lambda s: s.step(ones(1)),
    "reset": lambda s: s.reset(), "reset_task": lambda s: s.reset_task([None]),
    "call": lambda s: s.call("process_info"), "call_with": lambda s: s.call_with("process_info"),
    "get_attr": lambda s: s.get_attr("env_index"), "set_attr": lambda s: s.set_attr("x", 1),
}


def _in_thread(call):
    """What ``call()`` raised in a thread of its own (None if it returned)."""
    raised: list[BaseException | None] = [None]

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the test, which asserts on it
            raised[0] = exc

    thread = threading.Thread(target=run, name="intruder")
    thread.start()
    thread.join()
    return raised[0]


def test_another_thread_cannot_take_the_steps_a_thread_has_pending(make_sampler):
    """Issue 33, item 2: two threads driving separate workers received each other's results
    (a full batch returns every pending step), and the loser waited for the deadline."""
    s = make_sampler(fns(CountingEnv, 2), num_workers=2, context="fork")
    s.reset()
    s.step_send(0, ones(1))
    for name in ("step_send", "step_recv", "reset"):
        raised = _in_thread(lambda name=name: GUARDED_CALLS[name](s))
        assert isinstance(raised, errors.ConcurrentUseError), name
        assert str(raised).startswith(f"{name}() called from thread 'intruder' while thread "
                                      f"'MainThread' has the steps of workers [0] pending")
    assert [r.worker for r in s.step_recv(None)] == [0]  # nothing was taken or sent
    assert _in_thread(lambda: s.step(ones(2))) is None  # nothing pending: handed over
    np.testing.assert_array_equal(s.step(ones(2)).obs[:, 1], [3, 2])  # and back


class GateEnv(CountingEnv):
    """``call("hold", entered, release)`` writes a byte to ``entered``, then blocks until a byte
    comes on ``release``: the test knows the caller is inside the call, and ends it."""

    def hold(self, entered: int, release: int) -> None:
        os.write(entered, b"1")
        os.read(release, 1)


@posix_only
def test_a_call_while_another_thread_is_inside_one_is_refused_at_once(make_sampler):
    """Issue 33, item 2: refused with a typed error naming the thread inside, not queued
    behind it or mixed into its wait; once that call returns, the sampler is free again."""
    entered_r, entered_w = os.pipe()  # before the worker forks: it inherits them
    release_r, release_w = os.pipe()
    try:
        s = make_sampler([GateEnv], num_workers=1, context="fork")
        s.reset()
        holder = threading.Thread(target=s.call, args=("hold", entered_w, release_r),
                                  name="holder")
        holder.start()
        try:
            assert select.select([entered_r], [], [], 10.0)[0], "the env never entered hold()"
            start = time.monotonic()
            for name, call in GUARDED_CALLS.items():
                with pytest.raises(errors.ConcurrentUseError, match=f"^{name}\\(\\) called "
                                   f"from thread 'MainThread' while thread 'holder' is inside"):
                    call(s)
            assert time.monotonic() - start < 1.0  # at once: no wait behind the holder
        finally:
            os.write(release_w, b"1")
            holder.join()
    finally:
        for fd in (entered_r, entered_w, release_r, release_w):
            os.close(fd)
    assert s.step(ones(1)).obs[0, 1] == 1  # taken over, now that the holder is out


def test_close_from_another_thread_ends_a_blocked_step_recv_with_closed_error(make_sampler):
    """Issue 33, item 2: the blocked call raised ProtocolError ("cannot go from closed to dead;
    this is a bug in vecsample"). close() is how a trainer stops a sampler from another
    thread on shutdown: the call it cuts short raises ClosedError."""
    s = make_sampler(fns(SlowEnv, 2, step_time=30.0), num_workers=2, context="fork",
                     deadline=60.0)
    s.reset()
    s.send_all(ones(2))
    # The close comes while step_recv waits (a 30 s step); one that came first would be met by
    # step_recv's own check, with the same error.
    closer = threading.Timer(0.5, s.close, kwargs={"timeout": 0.5})
    closer.start()
    start = time.monotonic()
    try:
        with pytest.raises(errors.ClosedError, match=r"closed \(by another thread's close\(\)\)"):
            s.step_recv(None)
    finally:
        closer.join()
    assert time.monotonic() - start < 5.0 and s.closed


@posix_only
def test_close_from_another_thread_ends_a_command_under_way_with_closed_error(make_sampler):
    """Issue 33, item 2, for the command RPC's wait: a call() under way when another thread
    closes the sampler raises ClosedError once close() has ended its worker."""
    entered_r, entered_w = os.pipe()  # before the worker forks: it inherits them
    release_r, release_w = os.pipe()
    try:
        s = make_sampler([GateEnv], num_workers=1, context="fork")

        def close_once_inside() -> None:
            select.select([entered_r], [], [], 10.0)
            s.close(timeout=0.5)

        closer = threading.Thread(target=close_once_inside)
        closer.start()
        try:
            with pytest.raises(errors.ClosedError, match=r"closed \(by another thread's "
                               r"close\(\)\) (during|while) call"):
                s.call("hold", entered_w, release_r)
        finally:
            closer.join()
    finally:
        for fd in (entered_r, entered_w, release_r, release_w):
            os.close(fd)
    assert s.closed


def test_a_thread_that_ended_leaves_its_pending_steps_to_the_next(make_sampler):
    """The holder ended with a step pending: nobody else can receive it, so the next thread
    takes the sampler over, step and all (docs/semantics.md, "Threads and processes")."""
    s = make_sampler(fns(CountingEnv, 2), num_workers=2, context="fork")
    s.reset()
    assert _in_thread(lambda: s.step_send(1, ones(1))) is None
    assert [r.worker for r in s.step_recv(None)] == [1]


@posix_only
def test_a_forked_child_calling_its_parents_sampler_gets_a_typed_error(make_sampler):
    """Issue 33, item 7: a forked child of the trainer that called the parent's sampler stepped
    the parent's workers behind its back. Each call is refused there; the parent's goes on."""
    s = make_sampler([CountingEnv], num_workers=1, context="fork")
    s.reset()
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover  # the child reports on the pipe and never returns
        try:
            got = []
            for name, call in GUARDED_CALLS.items():
                try:
                    call(s)
                    got.append(f"{name}: returned")
                except errors.ForkedSamplerError as exc:
                    got.append(f"{name}: {type(exc).__name__}: {exc}")
                except BaseException as exc:  # reported to the parent's asserts
                    got.append(f"{name}: {type(exc).__name__}: {exc}")
            os.write(w, "\n".join(got).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as pipe:
        lines = pipe.read().splitlines()
    os.waitpid(child, 0)
    assert [line.split(":")[0] for line in lines] == list(GUARDED_CALLS)
    for line in lines:
        assert f"ForkedSamplerError: {line.split(':')[0]}() called in process {child}, a fork of " \
               f"process {os.getpid()}" in line, line
    assert s.step(ones(1)).obs[0, 1] == 1  # the parent's sampler is untouched


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
