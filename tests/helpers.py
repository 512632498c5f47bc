"""Assertions shared by the tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from vecsample._parent import layout
from vecsample._wire.handshake import Transport


def assert_same(a: Any, b: Any, where: str = "", strict: bool = False) -> None:
    """Equal structure, values and dtypes; object arrays (gymnasium's final_obs) elementwise.
    ``strict``: to the bit, shapes and dtypes of every leaf too (scalars included), and the
    same dict keys whatever their order."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), f"{where}: keys {sorted(a)} {b}"
        for k in a:
            assert_same(a[k], b[k], f"{where}/{k}", strict)
    elif isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}/{i}", strict)
    elif isinstance(a, np.ndarray) and a.dtype == object:
        assert b.dtype == object and a.shape == b.shape, where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert (x is None) == (y is None), f"{where}[{i}]"
            if x is not None:
                assert_same(x, y, f"{where}[{i}]", strict)
    elif strict:
        x, y = np.asarray(a), np.asarray(b)
        assert x.dtype == y.dtype, f"{where}: dtype {x.dtype} != {y.dtype}"
        np.testing.assert_array_equal(x, y, err_msg=where, strict=True)
    else:
        np.testing.assert_array_equal(a, b, err_msg=where)
        if isinstance(a, np.ndarray):
            assert a.dtype == np.asarray(b).dtype, f"{where}: {a.dtype} != {np.asarray(b).dtype}"


def kill_and_wait(pid: int) -> None:
    """SIGKILLs ``pid`` and returns once it is dead (a zombie or gone), at most 5 s later."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} did not die")


def ones(n: int) -> np.ndarray:
    """``n`` actions of 1, as int64 (CountingEnv's and most fakes' action)."""
    return np.ones(n, dtype=np.int64)


#: A test that sends POSIX signals (SIGKILL, SIGSTOP) to workers.
posix_only = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX signals")


def record_calls(obj: Any, names: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Wraps ``obj``'s methods ``names`` (with ``monkeypatch``) so that each call appends its
    name to the returned list before it runs; the methods still do what they did."""
    calls: list[str] = []

    def wrapped(name: str) -> Any:
        method = getattr(obj, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return method(*args, **kwargs)
        return call

    for name in names:
        monkeypatch.setattr(obj, name, wrapped(name))
    return calls


#: The checkout the tests run from.
ROOT = Path(__file__).resolve().parents[1]


def run_script(name: str, *flags: str) -> subprocess.CompletedProcess[str]:
    """``python experiments/<name>.py flags...`` from the checkout, as its docstring runs it
    (this checkout on the path, output captured, at most two minutes)."""
    return run_file(f"experiments/{name}.py", *flags)


def run_file(path: str | Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``python <path> args...`` as a user runs a script (its ``__name__`` is ``"__main__"``),
    from ``cwd``, with this checkout on the path, output captured, at most two minutes."""
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)})



def force_transport(monkeypatch: pytest.MonkeyPatch, transport: Transport) -> None:
    """Every sampler built from now on in this test runs ``transport``, whatever its options
    ask: the one decision (``layout.decide_transport``) returns it."""
    monkeypatch.setattr(layout, "decide_transport", lambda requested: transport)
