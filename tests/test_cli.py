"""The README's commands stay true, and `vecsample compare` runs on a tiny budget."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_script

from vecsample.tools import compare

ROOT = Path(__file__).resolve().parents[1]


CI_SETUP = ["rm -rf .ci/venv", "python3 -m venv .ci/venv", "source .ci/venv/bin/activate",
            "unset PYTHONPATH PYTHONHOME PIP_TARGET PIP_PREFIX PIP_USER",
            # CI has gymnasium's vector tests and expects them (tests/test_gymnasium_suite.py)
            'export VECSAMPLE_GYMNASIUM_TESTS="$PWD/../shared/conformance"']


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```bash\n(.+?)\n```", readme)
    ci_lines = [ln for ln in (ROOT / ".ci/run").read_text().splitlines()
                if ln and not ln.startswith("#") and not ln.startswith(("set ", "cd "))]
    # a fresh venv of its own, gymnasium's tests named, then the README's command, nothing else
    assert ci_lines == [*CI_SETUP, commands[1]], "README's test command and .ci/run drifted apart"
    assert commands[0].endswith("vecsample compare")


def test_under_ci_the_suite_runs_in_a_venv_that_sees_no_system_packages():
    """.ci/run's venv: the machine's own site-packages are not on the path (CI only)."""
    if not os.environ.get("CI"):
        return  # a developer may run the suite from any venv
    assert sys.prefix != sys.base_prefix and Path(sys.prefix).name == "venv", sys.prefix
    base = Path(sys.base_prefix).resolve()
    leaked = [p for p in sys.path
              if "site-packages" in p and Path(p).resolve().is_relative_to(base)]
    assert not leaked, leaked


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
    assert len(rows) == 6  # per env: full, partial and pipelined (the default, issue 38)
    assert [(r["timeout"], r["pipeline"]) for r in rows[:3]] == [
        (None, False), (0.0005, False), (0.0005, True)]
    assert "pipelined halves (timeout 0.5 ms)" in proc.stdout
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


def _readme_quick_start() -> str:
    readme = (ROOT / "README.md").read_text()
    return re.findall(r"## Quick start\n\n```python\n(.+?)```", readme, re.S)[0]


def _run_script(path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_readme_quick_start_runs_verbatim_as_a_saved_file(tmp_path):
    """Exactly what a newcomer does: paste the snippet into quickstart.py, run it; its one line
    of output says what it did."""
    script = tmp_path / "quickstart.py"
    script.write_text(_readme_quick_start())
    proc = _run_script(script, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    said = re.fullmatch(r"([\d,]+) env steps received, ([\d,]+) episodes ended\n", proc.stdout)
    assert said is not None, proc.stdout
    steps, episodes = (int(n.replace(",", "")) for n in said.groups())
    assert steps % 32 == 0 and steps >= 64 and 0 < episodes < steps, proc.stdout


def _readme_python_snippets() -> list[str]:
    return re.findall(r"```python\n(.+?)```", (ROOT / "README.md").read_text(), re.S)


def test_every_other_readme_python_snippet_runs_verbatim_as_a_saved_file(tmp_path):
    others = [s for s in _readme_python_snippets() if s != _readme_quick_start()]
    assert len(others) == len(_readme_python_snippets()) - 1 >= 2
    for i, snippet in enumerate(others):
        script = tmp_path / f"snippet_{i}.py"
        script.write_text(snippet)
        proc = _run_script(script, tmp_path)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, f"{snippet}\n{proc.stderr}"


def test_an_unguarded_script_under_forkserver_gets_one_short_error(tmp_path):
    """Where the script's top level would run again in every worker, one typed error says so."""
    code = _readme_quick_start().replace("seed=0)", 'seed=0, context="forkserver")')
    assert 'context="forkserver"' in code
    script = tmp_path / "unguarded.py"
    script.write_text(code)
    proc = _run_script(script, tmp_path)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("vecsample.errors.MainGuardError: "), proc.stderr
    assert 'if __name__ == "__main__":' in last and "unguarded.py:" in last
    assert proc.stderr.count("Traceback") == 1, proc.stderr  # no worker tracebacks follow


def test_queue_choice_experiment_runs():
    proc = subprocess.run([sys.executable, "experiments/queue_choice.py", "--round-trips", "50",
                           "--repeats", "1"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, check=True)
    assert "pipe-bytes" in proc.stdout


def test_small_workloads_experiment_runs_on_a_tiny_budget(tmp_path):
    """experiments/small_workloads.py (docs/lab/benchmarks.md, "Small workloads and the parent's
    share"): its table, the load average beside it, and the JSON the docs' figures come from."""
    out = tmp_path / "small.json"
    proc = run_script("small_workloads", "--env-ids", "CartPole-v1", "--num-envs", "2",
                      "--seconds", "0.05", "--rounds", "2", "--placements", "parent",
                      "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert [line.split()[2] for line in lines[1:-1]] == ["sync", "vecsample", "auto", "parent"]
    assert "load average" in lines[-1]
    saved = json.loads(out.read_text())
    assert len(saved["results"][0]["rounds"]) == 2 and "load_before" in saved["machine"]


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


def test_lane_cost_experiment_prints_every_lane():
    proc = run_script("lane_cost", "--seconds", "0.05", "--repeats", "1")
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if "(" in line]
    assert [r.split(" (")[0] for r in rows] == ["shared", "pickled", "mixed"], proc.stdout


def test_hosted_cost_experiment_reports_every_worker(tmp_path):
    out = tmp_path / "cost.json"
    proc = run_script("hosted_cost", "--num-envs", "8", "--workers", "2", "--seconds", "0.1",
                      "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    cost = json.loads(out.read_text())
    assert len(cost["worker_user_us"]) == 2 and cost["wall_us"] > 0 and cost["worker_step_us"] > 0
    assert "one block stepped in this process" in proc.stdout


def test_vector_env_parts_experiment_times_every_part():
    proc = run_script("vector_env_parts", "--env-id", "CartPole-v1", "--num-envs", "4",
                      "--steps", "50")
    assert proc.returncode == 0, proc.stderr
    parts = [line.split("  ")[0] for line in proc.stdout.splitlines()[2:]]
    # VectorEnv.step is one VecSampler.step (the post, the wait and the rows in one call)
    assert parts == ["VecSampler.step: post, wait, read", "vector infos from the columns",
                     "observation copy (copy=True)", "the whole step()"], proc.stdout


# --- `vecsample compare`'s last lines: who won, in the table's own ratio -------------------------


def _results(env: str, ratios: list[float]) -> list[compare.LoopResult]:
    """One full and one 0.5 ms partial run per repeat; the partial one at ``ratio`` × full."""
    def run(timeout: float | None, repeat: int, rate: float) -> compare.LoopResult:
        return compare.LoopResult(
            env=env, timeout=timeout, workers=2, envs_per_worker=16, steps=1000, seconds=1.0,
            steps_per_s=rate, workers_per_recv=2.0, policy_calls_per_1000_steps=31.2,
            wait_s=0.5, policy_s=0.1, env_step_s=1.0, steps_sent=1000, steps_received=1000,
            policy="random", repeat=repeat)

    return [r for k, x in enumerate(ratios)
            for r in (run(None, k, 20_000.0), run(0.0005, k, 20_000.0 * x))]


@pytest.mark.parametrize(("ratios", "expected"), [
    ([0.98, 1.00, 1.01], "a tie, partial 1.00× full (0.5 ms); per repeat 0.98–1.01, not all agree"),
    ([0.70, 0.95, 1.20], "a tie, partial 0.95× full (0.5 ms); per repeat 0.70–1.20, not all agree"),
    ([1.004, 1.01, 1.016], "a tie, partial 1.01× full (0.5 ms); per repeat 1.00–1.02, within 2 %"),
    ([1.20, 1.25, 1.30], "partial batches win, 1.25× full (0.5 ms); per repeat 1.20–1.30"),
    ([0.80, 0.85, 0.90], "full batches win, partial 0.85× full (0.5 ms); per repeat 0.80–0.90"),
])
def test_compare_calls_a_tie_a_tie_and_a_win_a_win(ratios, expected):
    last = compare.report(_results("CartPole-v1", ratios)).splitlines()[-1]
    assert last == f"CartPole-v1: {expected}"


def test_the_conclusion_repeats_the_tables_ratio_in_the_same_direction():
    lines = compare.report(_results("CartPole-v1", [0.80, 0.85, 0.90])).splitlines()
    row = next(ln for ln in lines if ln.startswith("partial batches (timeout 0.5 ms)"))
    x, spread = re.split(r"\s{2,}", row)[2:4]
    assert (x, spread) == ("0.85", "0.80–0.90")
    assert f"partial {x}× full (0.5 ms); per repeat {spread}" in lines[-1]


def test_the_legend_explains_the_verdicts_and_the_straggler_env():
    text = compare.report(_results("straggler", [0.98, 1.00, 1.01]))
    legend = text.split("Medians of 3 repeats")[1]
    assert "  not all agree    some repeats had partial batches faster, others full" in legend
    assert "  within 2 %       every repeat agrees, but the median is less than 2 %" in legend
    assert "  straggler        an env that sleeps --step-time per step with a heavy tail" in legend
    assert text.splitlines()[-1].endswith(", not all agree")
    assert "  straggler  " not in compare.report(_results("CartPole-v1", [1.0, 1.1]))
    assert all(len(line) <= 100 for line in text.splitlines())


@pytest.mark.parametrize(("x", "lo", "hi", "expected"), [
    (1.10, 1.05, 1.20, "partial"), (0.90, 0.85, 0.95, "full"), (1.10, 0.95, 1.20, "tie"),
    (0.90, 0.85, 1.00, "tie"), (1.015, 1.01, 1.02, "tie"), (0.985, 0.98, 0.99, "tie"),
    (1.03, 1.03, 1.03, "partial"),
])
def test_verdict_needs_every_repeat_and_a_margin(x, lo, hi, expected):
    assert compare.verdict(x, lo, hi) == expected
