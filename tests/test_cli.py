"""The README's commands stay true, and `vecsample compare` runs on a tiny budget."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```bash\n(.+?)\n```", readme)
    ci_lines = [ln for ln in (ROOT / ".ci/run").read_text().splitlines()
                if ln and not ln.startswith("#") and not ln.startswith(("set ", "cd "))]
    assert ci_lines == [commands[1]], "README's test command and .ci/run have drifted apart"
    assert commands[0].endswith("vecsample compare")


def test_compare_prints_a_table_and_counts_add_up(tmp_path):
    out = tmp_path / "compare.json"
    proc = subprocess.run(
        [sys.executable, "-m", "vecsample", "compare", "--envs", "CartPole-v1", "straggler",
         "--seconds", "0.2", "--repeats", "1", "--envs-per-worker", "2",
         "--json", str(out)],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=True,
    )
    assert "steps/s" in proc.stdout and "straggler" in proc.stdout
    rows = json.loads(out.read_text())
    assert len(rows) == 4
    for row in rows:
        assert row["steps_sent"] == row["steps_received"] > 0
        assert row["workers_per_recv"] <= 2.0


def test_unknown_command_and_help():
    bad = subprocess.run([sys.executable, "-m", "vecsample", "nope"], capture_output=True,
                         text=True, cwd=ROOT)
    assert bad.returncode == 2 and "unknown command" in bad.stderr
    ok = subprocess.run([sys.executable, "-m", "vecsample", "--help"], capture_output=True,
                        text=True, cwd=ROOT)
    assert ok.returncode == 0 and "compare" in ok.stdout


def test_readme_quick_start_runs(tmp_path):
    readme = (ROOT / "README.md").read_text()
    code = re.findall(r"```python\n(.+?)```", readme, re.S)[0]
    body = "\n".join("    " + line for line in code.splitlines())
    script = tmp_path / "quick_start.py"
    script.write_text(f'if __name__ == "__main__":\n{body}\n    print("done")\n')
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done"


def test_queue_choice_experiment_runs():
    proc = subprocess.run([sys.executable, "experiments/queue_choice.py", "--round-trips", "50",
                           "--repeats", "1"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, check=True)
    assert "pipe-bytes" in proc.stdout


def test_step_timeline_experiment_stamps_every_step():
    proc = subprocess.run([sys.executable, "-m", "experiments.step_timeline", "--num-envs", "4",
                           "--batches", "30", "--pause-ms", "1"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, check=True)
    assert "worker stepping its envs" in proc.stdout
    per_step = float(proc.stdout.split("slowest worker:")[-1].split()[0])
    assert per_step > 0


def test_core_throughput_experiment_runs():
    proc = subprocess.run([sys.executable, "-m", "experiments.core_throughput", "--num-envs", "4",
                           "--seconds", "0.1", "--repeats", "1"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, check=True)
    assert "ratio to one bare loop" in proc.stdout
