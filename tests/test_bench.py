"""``vecsample bench`` on a tiny budget: it runs, and its JSON and plot have the right shape.

Never a speed: the figures of a run this short on a shared machine mean nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import threading

import gymnasium as gym
import pytest
from helpers import record_calls

import vecsample.envs
from vecsample import extras
from vecsample.envs.mujoco_batch import ENVS
from vecsample.errors import ConfigError, MissingExtraError
from vecsample.tools import bench, bench_backends

TINY = ["--envs", "CartPole-v1", "--num-envs", "4", "--workers", "2", "--cores", "2",
        "--seconds", "0.05", "--repeats", "2", "--latency-steps", "20", "--no-progress"]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(argv)


@pytest.fixture
def without_optional(monkeypatch):
    """SB3 and EnvPool look absent, as in the CI, whether or not they are installed here."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name in ("stable_baselines3", "envpool"):
            return None
        return real(name, *args, **kwargs)

    monkeypatch.setattr(bench_backends.importlib.util, "find_spec", find_spec)


def test_tiny_run_writes_json_of_the_right_shape(tmp_path, capsys, without_optional):
    out = tmp_path / "bench.json"
    png = tmp_path / "bench.png"
    assert bench.run(parse([*TINY, "--json", str(out), "--plot", str(png)])) == 0
    data = json.loads(out.read_text())
    assert set(data) == {"meta", "results", "latency"}
    assert {"cpu", "cores", "versions", "commit", "command"} <= set(data["meta"])
    rows = {r["backend"]: r for r in data["results"]}
    assert list(rows) == bench.DEFAULT_BACKENDS == [
        n for n in bench_backends.BACKENDS
        if n not in ("vecsample_partial_record", "vector_one", "hosted", "hosted_defaults",
                      "hosted_no_infos", "hosted_share")]
    for name in ("bare", "machine", "vecsample", "vecsample_partial", "vector_env", "sync",
                 "async"):
        row = rows[name]
        assert row["skipped"] is None and row["env"] == "CartPole-v1" and row["num_envs"] == 4
        assert len(row["repeats"]) == 2 and row["steps_per_s"] > 0
        assert row["vs_machine"] == pytest.approx(row["steps_per_s"] / rows["machine"]
                                                  ["steps_per_s"])
    assert rows["bare"]["vs_bare"] == pytest.approx(1.0)
    assert rows["vecsample"]["layout"] == "2 × 2" and rows["async"]["layout"] == "4 × 1"
    for name in ("sb3", "envpool"):  # absent: skipped with the reason, never a number
        assert rows[name]["steps_per_s"] is None and rows[name]["repeats"] == []
        assert "not installed" in rows[name]["skipped"]
    lat = data["latency"]
    assert len(lat["repeats_median_us"]) == 2 and lat["median_us"] > 0
    assert lat["p10_us"] <= lat["p90_us"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = capsys.readouterr().out
    assert "SB3 SubprocVecEnv" in table and "not installed" in table and "Round trip" in table
    check_table(table, data["results"])


#: The columns after the row name; the legend explains each on its own line.
COLUMNS = ("layout", "steps/s", "× bare", "× machine", "CPU µs", "CPU eff")


def check_table(text: str, results: list[dict]) -> None:
    """The table of one (env, env count) block fits 100 columns, has no trailing spaces and one
    number format, names the batches, explains every column and every skipped row, and ends with
    the conclusion of the full against the partial row."""
    lines = text.splitlines()
    for line in lines:
        assert len(line) <= 100 and line == line.rstrip(), repr(line)
    assert not re.search(r"\d[eE][+-]?\d", text), "a number in e notation"
    assert not re.search(r"(?<![\d.,])\d{4,}", text), "a number without thousands separators"
    for column in COLUMNS:
        assert sum(line.startswith(f"  {column}  ") for line in lines) == 1, column
    rows = {r["backend"]: r for r in results}
    full, part = rows["vecsample"], rows["vecsample_partial"]
    for row, name in ((full, "VecSampler full batches"),
                      (part, "VecSampler partial batches (timeout 0.5 ms)")):
        line = next(line for line in lines if line.startswith(name + "  "))
        assert re.split(r"\s{2,}", line)[2:5] == [
            f"{row['steps_per_s']:,.0f}", f"{row['vs_bare']:.3f}", f"{row['vs_machine']:.3f}"]
    for name in ("SB3 SubprocVecEnv", "EnvPool (C++ envs)"):  # skipped: a note says why
        number = re.search(re.escape(name) + r" \[(\d)\]", text)
        assert number, name
        assert re.search(rf"^\[{number[1]}\] \w+ is not installed", text, re.M)
    x = part["steps_per_s"] / full["steps_per_s"]
    winner = (f"partial (0.5 ms) {x:.2f}× full batches, at {part['vs_machine']:.3f}×" if x > 1
              else f"full batches {1 / x:.2f}× partial (0.5 ms), at {full['vs_machine']:.3f}×")
    assert lines[-1] == f"CartPole-v1, 4 envs: {winner} the machine limit"


def fake_row(backend: str, steps_per_s: float | None, **kw) -> bench.Row:
    return bench.Row(env="Pendulum-v1", num_envs=8, backend=backend,
                     label=bench_backends.BACKENDS[backend][0], layout="2 × 4",
                     steps_per_s=steps_per_s, **kw)


def test_conclusion_names_the_winner_or_else_the_fastest_row():
    rows = [fake_row("vecsample", 2000.0, vs_machine=0.5),
            fake_row("vecsample_partial", 3000.0, vs_machine=0.75)]
    assert bench.conclusion(rows, 0.001) == (
        "Pendulum-v1, 8 envs: partial (1 ms) 1.50× full batches, at 0.750× the machine limit")
    rows[1] = fake_row("vecsample_partial", None, skipped="it failed")
    rows.append(fake_row("sync", 2500.0))
    assert bench.conclusion(rows, 0.001) == (
        "Pendulum-v1, 8 envs: fastest: gymnasium SyncVectorEnv, 2,500 steps/s")
    reason = "EnvPool has no Pendulum-v1, " * 6  # a long reason: wrapped, never cut
    rows.append(fake_row("envpool", None, skipped=reason))
    text = bench.table(rows, 0.001)
    assert "VecSampler partial batches (timeout 1 ms) [1]" in text
    assert "EnvPool (C++ envs) [2]" in text
    lines = text.splitlines()
    assert lines[-3] == "[1] it failed" and all(len(line) <= 100 for line in lines)
    assert " ".join(lines[-2:]).split() == ["[2]", *reason.split()]


def test_leaves_no_thread_behind(tmp_path):
    # A thread left in the parent would make later fork-context samplers warn (and risk).
    before = threading.active_count()
    bench.run(parse([*TINY, "--backends", "sync", "--latency-steps", "0"]))
    bench.run(parse([*TINY[:-1], "--backends", "sync", "--latency-steps", "0"]))  # with a bar
    assert threading.active_count() == before


def test_mlp_policy_and_a_subset_of_backends(tmp_path):
    out = tmp_path / "bench.json"
    argv = [*TINY, "--policy", "mlp", "--backends", "bare", "vecsample", "--latency-steps", "0",
            "--json", str(out)]
    assert bench.run(parse(argv)) == 0
    data = json.loads(out.read_text())
    assert [r["backend"] for r in data["results"]] == ["bare", "vecsample"]
    assert data["results"][1]["vs_bare"] is not None and data["results"][1]["vs_machine"] is None
    assert data["latency"] is None


def test_env_counts_must_split_over_workers_and_cores():
    with pytest.raises(ConfigError, match="--num-envs 6 must split evenly over --workers 4"):
        bench.configs(parse(["--num-envs", "6", "--workers", "4", "--cores", "2"]))
    default = bench.configs(parse(["--cores", "2"]))
    assert [(c.env_id, c.num_envs) for c in default] == [
        ("CartPole-v1", 64), ("CartPole-v1", 128), ("HalfCheetah-v5", 64), ("ALE/Pong-v5", 16)]


def test_the_ale_rows_need_ale_py_and_say_which_extra_installs_it(monkeypatch):
    real = extras.importlib.import_module

    def import_module(name, *args, **kwargs):
        if name == "ale_py":
            raise ModuleNotFoundError("No module named 'ale_py'", name="ale_py")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(extras.importlib, "import_module", import_module)
    with pytest.raises(MissingExtraError, match=r"ALE/Pong-v5 rows needs ale_py .*vecsample"
                       r"\[bench\]") as info:
        bench.configs(parse(["--cores", "2"]))
    assert info.value.extra == "bench"
    assert [c.env_id for c in bench.configs(parse(["--cores", "2", "--envs", "CartPole-v1"]))
            ] == ["CartPole-v1", "CartPole-v1"]  # no ALE id named: not needed


def test_an_ale_env_runs_in_every_process_through_its_module_prefix(tmp_path):
    pytest.importorskip("ale_py")
    out = tmp_path / "bench.json"
    argv = [*TINY, "--envs", "ALE/Pong-v5", "--backends", "bare", "machine", "vecsample",
            "--latency-steps", "5", "--json", str(out)]
    assert bench.run(parse(argv)) == 0
    data = json.loads(out.read_text())
    assert [(r["env"], r["backend"]) for r in data["results"]] == [
        ("ALE/Pong-v5", name) for name in ("bare", "machine", "vecsample")]
    assert all(r["steps_per_s"] > 0 for r in data["results"])
    assert data["latency"]["env"] == "ALE/Pong-v5"
    assert bench_backends.make_id("ALE/Pong-v5") == "ale_py:ALE/Pong-v5"
    assert bench_backends.make_id("CartPole-v1") == "CartPole-v1"


def test_cli_lists_bench():
    out = subprocess.run([sys.executable, "-m", "vecsample", "bench", "--help"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert "--num-envs" in out and "--policy" in out


def test_every_option_has_help():
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    for action in parser._actions:
        assert action.help, f"{action.option_strings} has no help text"


def test_record_adds_the_recording_row_after_the_partial_one_and_its_cost(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = [*TINY, "--backends", "vecsample", "vecsample_partial", "--record",
            "--latency-steps", "0", "--json", str(out)]
    assert bench.run(parse(argv)) == 0
    rows = {r["backend"]: r for r in json.loads(out.read_text())["results"]}
    assert list(rows) == ["vecsample", "vecsample_partial", "vecsample_partial_record"]
    assert len(rows["vecsample_partial_record"]["repeats"]) == 2
    ratios = [b / a for a, b in zip(rows["vecsample_partial"]["repeats"],
                                    rows["vecsample_partial_record"]["repeats"], strict=True)]
    printed = capsys.readouterr().out
    assert "VecSampler partial batches (timeout 0.5 ms) + record" in printed
    assert f"recording {sorted(ratios)[0] / 2 + sorted(ratios)[1] / 2:.3f}× partial" in printed


def test_vectorization_measures_hosted_vector_envs_beside_one_process(tmp_path, capsys,
                                                                      without_optional):
    out = tmp_path / "bench.json"
    argv = [*TINY, "--vectorization", "vector_entry_point", "--latency-steps", "0",
            "--json", str(out)]
    assert bench.run(parse(argv)) == 0
    rows = {r["backend"]: r for r in json.loads(out.read_text())["results"]}
    assert list(rows) == list(bench_backends.HOSTED_BACKENDS)
    for name in ("bare", "machine", "vector_one", "hosted"):
        assert rows[name]["skipped"] is None and rows[name]["steps_per_s"] > 0, name
    assert rows["hosted"]["layout"] == "2 × 2" and rows["vector_one"]["layout"] == "1 × 4"
    assert "envpool is not installed" in rows["envpool"]["skipped"]
    for name in ("hosted_defaults", "hosted_no_infos", "hosted_share"):  # NextStep only
        assert "SameStep" in rows[name]["skipped"], rows[name]
    assert "CartPole-v1, 4 envs: hosted " in capsys.readouterr().out


def test_vectorization_defaults_and_an_env_without_a_batched_form():
    default = bench.configs(parse(["--cores", "2", "--vectorization", "vector_entry_point"]))
    assert [(c.env_id, c.num_envs) for c in default] == [
        ("CartPole-v1", 64), ("CartPole-v1", 512), ("CartPole-v1", 4096), ("HalfCheetah-v5", 32)]
    pendulum = bench_backends.Config("Pendulum-v1", 2, 1, 1, 0.0, "none")
    for name in ("hosted", "vector_one"):
        with pytest.raises(bench_backends.Unavailable, match="no vector entry point"):
            bench_backends.BACKENDS[name][1](pendulum)


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Ant-v5", "InvertedPendulum-v5"])
def test_vectorization_hosts_the_batch_native_mujoco_env(tmp_path, capsys, env_id):
    pytest.importorskip("mujoco")
    out = tmp_path / "bench.json"
    argv = [*TINY, "--envs", env_id, "--vectorization", "vector_entry_point",
            "--latency-steps", "0", "--json", str(out)]
    assert bench.run(parse(argv)) == 0
    rows = {r["backend"]: r for r in json.loads(out.read_text())["results"]}
    assert list(rows) == list(bench_backends.HOSTED_BACKENDS)
    for name in ("bare", "machine", "vecsample", "vector_one", "hosted", "hosted_defaults",
                 "hosted_no_infos", "hosted_share"):
        assert rows[name]["skipped"] is None and rows[name]["steps_per_s"] > 0, name
    assert rows["vector_one"]["layout"] == "1 × 4, 2 threads"
    assert rows["hosted"]["layout"] == rows["hosted_defaults"]["layout"] == "2 × 2"
    assert rows["envpool"]["skipped"] is None or "EnvPool" in rows["envpool"]["skipped"] or (
        "not installed" in rows["envpool"]["skipped"])
    cfg = bench_backends.Config(env_id, 4, 2, 2, 0.0, "none")
    hosted = bench_backends.BACKENDS["hosted"][1](cfg)
    try:  # the hosted row really hosts the batch env: the spec of its workers' env
        spec = hosted.sampler.get_attr("spec")[0]
    finally:
        hosted.close()
    assert spec.id == vecsample.envs.BATCH_IDS[env_id]
    share = bench_backends.BACKENDS["hosted_share"][1](cfg)
    try:  # the user's one line, with its defaults: SameStep reached the batch env
        assert share.sampler.get_attr("autoreset_mode")[0].name == "SAME_STEP"
        assert share.sampler.options.env_placement == "share"
    finally:
        share.close()
    assert f"{env_id}, 4 envs: hosted " in capsys.readouterr().out


def test_vectorization_builds_the_batch_env_of_every_gymnasium_mujoco_env_beside_envpool():
    """Every gymnasium MuJoCo v5 env with a batch form gets its batch env in the vector rows
    (here the one-process row, which the hosted row hosts), and EnvPool's row where EnvPool is
    installed (it ships every one of them)."""
    pytest.importorskip("mujoco")
    ids = [s.gym_id for s in ENVS if str(gym.spec(s.gym_id).entry_point).startswith(
        "gymnasium.envs.mujoco")]
    assert len(ids) == 11
    for env_id in ids:
        cfg = bench_backends.Config(env_id, 2, 1, 1, 0.0, "none")
        assert cfg.batch_native, env_id
        backend = bench_backends.BACKENDS["vector_one"][1](cfg)
        try:
            assert backend.env.spec.id == vecsample.envs.BATCH_IDS[env_id]
            assert backend.run(0.01) > 0
        finally:
            backend.close()
        if importlib.util.find_spec("envpool") is not None:
            bench_backends.BACKENDS["envpool"][1](cfg).close()  # Unavailable would fail here


@pytest.mark.parametrize("name", ["vecsample_partial", "vecsample_pipeline"])
def test_the_partial_and_pipelined_rows_take_each_batch_in_one_call(name, monkeypatch):
    """Their loop is ``vecsample compare``'s: recv_batch(timeout), one policy call, then
    step_send_many(result.workers, rows); never step_recv's list of per-worker results."""
    cfg = bench_backends.Config("CartPole-v1", 8, 2, 2, 0.0005, "none")
    backend = bench_backends.BACKENDS[name][1](cfg)
    try:
        s = backend.sampler
        calls = record_calls(s, ("step_recv", "recv_batch", "step_send", "step_send_many"),
                             monkeypatch)
        assert backend.run(0.05) > 0
        assert "step_recv" not in calls and "step_send" not in calls, set(calls)
        assert calls.count("step_send_many") == calls.count("recv_batch") > 1
    finally:
        backend.close()
