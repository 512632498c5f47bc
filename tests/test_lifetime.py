"""Workers never outlive the parent, and close() frees every process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from vecsample import VecSampler
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
