"""The same faults in vecsample and three other backends (docs/lab/reliability.md#comparison).

Injects the same faults into vecsample, gymnasium AsyncVectorEnv, SB3 SubprocVecEnv and EnvPool.
Every (backend, fault) trial runs in its own subprocess with a wall-clock limit, so a backend
that hangs is recorded as hanging instead of hanging this script. The child prints one JSON line
per phase it finished; the parent turns the last line into a table row.

Run: ``python experiments/faults_compare.py --out faults.json``
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import psutil
import tyro

BackendName = Literal["vecsample", "gymnasium", "sb3", "envpool"]
BACKENDS: list[BackendName] = list(get_args(BackendName))
FAULTS = ["raise", "sigkill_worker", "hang", "bad_action", "sigkill_parent", "sigterm_parent"]
N = 4
#: Seconds a trial may take to build its envs (not part of any fault's timing).
STARTUP_LIMIT = 180.0


@dataclass
class Args:
    limit: float = 20.0
    """seconds a trial may run before it is recorded as hanging"""
    out: str = ""
    """write the results as JSON to this path"""
    backends: list[BackendName] = field(default_factory=lambda: list(BACKENDS))
    """backends to try, each against every fault"""


# --- child side -----------------------------------------------------------------------------


def emit(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def env_fns(fault: str, marker: str) -> list[Callable[[], Any]]:
    from vecsample import testing as t

    if fault == "raise":
        return t.fns(t.RaisingEnv, N, where="step", at_step=1, bad_index=N - 1)
    if fault == "sigkill_worker":
        return t.fns(t.SlowEnv, N, step_time=0.5)
    if fault == "hang":
        return t.fns(t.HangingEnv, N, at_step=1, bad_index=N - 1)
    if fault == "sigterm_parent":
        return t.fns(t.CloseRecordingEnv, N, marker=marker, step_time=0.01)
    return t.fns(t.CountingEnv, N)


class Backend:
    """step_async / step_wait / close over one of the four libraries."""

    def __init__(self, name: str, fns: list[Callable[[], Any]]) -> None:
        self.name = name
        if name == "vecsample":
            from vecsample import VecSampler

            self.env: Any = VecSampler(fns, num_workers=2, deadline=3.0)
            self.pids = self.env.worker_pids()
        elif name == "gymnasium":
            from gymnasium.vector import AsyncVectorEnv

            self.env = AsyncVectorEnv(fns)
            self.pids = [p.pid for p in self.env.processes]
        elif name == "sb3":
            from stable_baselines3.common.vec_env import SubprocVecEnv

            self.env = SubprocVecEnv(fns)
            self.pids = [p.pid for p in self.env.processes]
        else:
            import envpool

            self.env = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=N)
            self.pids = [p.pid for p in psutil.Process().children(recursive=True)]
        self.env.reset()

    def step_async(self, actions: np.ndarray) -> None:
        if self.name == "vecsample":
            self.env.send_all(actions)
        elif self.name == "envpool":
            self.env.send(actions)
        else:
            self.env.step_async(actions)

    def step_wait(self) -> None:
        if self.name == "vecsample":
            self.env.step_recv(None)
        elif self.name == "gymnasium":
            self.env.step_wait(timeout=3.0)  # its own recv deadline, as fair as ours
        elif self.name == "envpool":
            self.env.recv()
        else:
            self.env.step_wait()

    def close(self) -> None:
        if self.name == "vecsample":
            self.env.close(timeout=1.0)
        else:
            self.env.close()


def child(backend: str, fault: str, marker: str) -> None:
    if backend == "envpool" and fault not in ("bad_action", "sigkill_parent", "sigterm_parent"):
        emit(phase="n/a", note="EnvPool runs its own C++ envs; no Python env to inject into")
        return
    b = Backend(backend, env_fns(fault, marker))
    emit(phase="started", pids=b.pids)
    actions = np.zeros(N, dtype=np.int64)
    if fault == "bad_action":
        actions[-1] = 9  # Discrete(4) (CartPole: Discrete(2))
    if fault in ("sigkill_parent", "sigterm_parent"):
        while True:
            b.step_async(actions)
            b.step_wait()
    start = time.monotonic()
    try:
        b.step_async(actions)
        if fault == "sigkill_worker":
            time.sleep(0.1)
            os.kill(b.pids[-1], signal.SIGKILL)
            start = time.monotonic()
        emit(phase="waiting")
        b.step_wait()
        emit(phase="stepped", outcome="returned normally", detect_s=time.monotonic() - start)
    except BaseException as exc:
        first = str(exc).strip().splitlines()[0][:110] if str(exc).strip() else ""
        emit(phase="stepped", outcome=f"{type(exc).__name__}: {first}",
             detect_s=time.monotonic() - start)
    start = time.monotonic()
    close = "ok"
    try:
        b.close()
    except BaseException as exc:
        close = f"{type(exc).__name__}: {str(exc)[:60]}"
    alive = [p for p in b.pids if _alive(p)]
    emit(phase="closed", close=close, close_s=time.monotonic() - start,
         alive_after_close=len(alive))


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# --- parent side ----------------------------------------------------------------------------


def trial(backend: str, fault: str, limit: float) -> dict[str, Any]:
    marker = tempfile.mktemp(prefix="vecsample-close-")
    cmd = [sys.executable, __file__, "--child", backend, fault, marker]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    # Unbuffered bytes: the first line is read byte by byte, so nothing is read ahead and lost
    # to communicate(), which reads the pipe's file descriptor directly.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                            bufsize=0, start_new_session=True)
    # Startup is not timed: SB3's workers import torch, which takes long on a loaded machine.
    killer = threading.Timer(STARTUP_LIMIT, _kill_group, (proc,))
    killer.start()
    assert proc.stdout is not None
    first = proc.stdout.readline().decode()
    killer.cancel()
    try:
        if fault in ("sigkill_parent", "sigterm_parent"):
            return _parent_signal(proc, first, fault, marker, limit)
        try:
            out = first + proc.communicate(timeout=limit)[0].decode()
            hung = False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out = first + proc.communicate()[0].decode()
            hung = True
        lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        return _summary(lines, hung=hung)
    finally:
        _kill_group(proc)
        if os.path.exists(marker):
            os.unlink(marker)


def _summary(lines: list[dict[str, Any]], hung: bool) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for line in lines:
        merged.update(line)
    merged["hung"] = hung
    if hung:  # the last phase it finished says where it hung
        merged["hung_after_phase"] = merged.get("phase")
    return merged


def _parent_signal(proc: subprocess.Popen[bytes], line: str, fault: str, marker: str,
                   limit: float) -> dict[str, Any]:
    first = json.loads(line or "{}")
    if first.get("phase") != "started":
        return _summary([first], hung=False)
    pids = first["pids"]
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL if fault == "sigkill_parent" else signal.SIGTERM)
    proc.wait(limit)
    time.sleep(2.0)
    alive = [p for p in pids if _alive(p)]
    lines = Path(marker).read_text().splitlines() if os.path.exists(marker) else []
    closed = sum(1 for line in lines if int(line.split()[1]) in pids)  # by a worker
    for p in alive:
        os.kill(p, signal.SIGKILL)
    return {"outcome": f"parent exit {proc.returncode}", "workers": len(pids),
            "alive_after_2s": len(alive), "envs_closed": closed, "hung": False}


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        for p in psutil.Process(proc.pid).children(recursive=True):
            p.kill()
        os.killpg(proc.pid, signal.SIGKILL)
    except (psutil.NoSuchProcess, ProcessLookupError, PermissionError):
        pass
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line)."""
    return tyro.cli(Args, description=__doc__, args=argv)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":  # one trial, started by trial()
        child(*sys.argv[2:5])
        return 0
    args = parse_args()
    results = {f"{b}/{f}": trial(b, f, args.limit) for f in FAULTS for b in args.backends}
    for key, r in results.items():
        print(f"{key:28s} {json.dumps(r)}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
