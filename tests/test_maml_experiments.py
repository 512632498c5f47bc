"""Smoke runs of examples/maml_trpo.py, examples/maml_test.py and experiments/maml_timing.py on
a tiny budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(script: str, *args: str) -> str:
    """``script`` (a path from the checkout's root) run with ``args``; its stdout."""
    proc = subprocess.run(
        [sys.executable, script, *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout's code, not an install
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_maml_trpo_then_maml_test(tmp_path: Path) -> None:
    out = tmp_path / "run"
    stdout = run(
        "examples/maml_trpo.py", "--config", "2d-navigation", "--num-batches", "2",
        "--meta-batch-size", "2", "--fast-batch-size", "2", "--num-workers", "1",
        "--output-dir", str(out),
    )  # fmt: skip
    assert "last meta-batch: pre" in stdout
    record = json.loads((out / "returns.json").read_text())
    assert [b["batch"] for b in record["batches"]] == [0, 1]
    for batch in record["batches"]:
        assert -1000 < batch["pre_return"] < 0 and -1000 < batch["post_return"] < 0
        assert batch["kl_after"] <= 0.01  # the trust region of the config
    assert record["config"]["env-name"] == "2DNavigation-v0"
    assert (out / "returns.png").stat().st_size > 1000
    assert (out / "policy.th").exists()

    stdout = run(
        "examples/maml_test.py", "--run-dir", str(out), "--num-steps", "2", "--num-batches", "1",
        "--meta-batch-size", "2", "--num-workers", "1",
    )  # fmt: skip
    assert "2 inner steps: mean return" in stdout
    adaptation = json.loads((out / "adaptation.json").read_text())
    assert adaptation["steps"] == [0, 1, 2] and len(adaptation["mean_return"]) == 3


def test_maml_timing_runs(tmp_path: Path) -> None:
    out = tmp_path / "timing.json"
    stdout = run(
        "experiments/maml_timing.py", "--config", "bandit-k5-n10", "--repeats", "1",
        "--bare-steps", "200", "--json", str(out),
    )  # fmt: skip
    assert "ratio" in stdout
    record = json.loads(out.read_text())
    assert record["steps"] == 20 * 10 * 2  # 20 tasks x 10 one-step episodes x (train + valid)
    for bare in (record["1env"], record["block"]):
        assert bare["ratio"] > 0 and bare["cpu_ratio"] > 0
        assert len(bare["rates_before_after"]) == 2
    assert record["block"]["envs"] == 100  # 20 tasks x 10 episodes over 2 workers
