"""R7 in CI: benchmarks/soak.py on 10^5 CartPole steps; parent and worker step counts match."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_soak_100k_steps_counters_match(tmp_path):
    out = tmp_path / "soak.json"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run(
        [sys.executable, "benchmarks/soak.py", "--steps", "100000", "--report-every", "2",
         "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=240,
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["parent_steps"] == result["worker_steps"] >= 100_000
    assert result["parent_steps_per_worker"] == result["worker_steps_per_worker"]
    assert result["recvs"] > 100 and len(result["rss"]) >= 2
