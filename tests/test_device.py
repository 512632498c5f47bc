"""Tests for vecsample.train.device (weight sync, placement) and the ``vecsample probe`` CLI.

CI has no GPU: the CUDA paths are skipped there with the reason "no CUDA"; the choice logic is
tested on a stubbed bench that pretends to time a GPU, so it runs everywhere.
"""

from __future__ import annotations

import copy
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from vecsample.__main__ import main
from vecsample.tools import probe
from vecsample.tools.policies import mlp
from vecsample.tools.probe import Cell, crossover
from vecsample.train import device as dev
from vecsample.train.errors import PlacementError

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="skipped: no CUDA")
no_cuda_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only path")

WORKLOAD = dev.Workload(
    num_envs=8, steps_per_rollout=128, minibatch_size=256, updates_per_rollout=16
)


def _policy() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 2))


def _train_once(policy: nn.Module) -> None:
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    policy.train()
    policy(torch.randn(32, 4)).pow(2).mean().backward()
    opt.step()


def _same(a: nn.Module, b: nn.Module) -> bool:
    return all(
        torch.equal(x, y) for x, y in zip(dev.state_tensors(a), dev.state_tensors(b), strict=True)
    )


# --- WeightSync ---------------------------------------------------------------------------------


def test_weight_sync_copies_parameters_and_running_stats() -> None:
    source = _policy()
    target = copy.deepcopy(source)
    sync = dev.WeightSync(source, target)
    _train_once(source)  # changes weights and the BatchNorm running mean/var
    assert not _same(source, target)
    seconds = sync()
    assert _same(source, target)
    assert seconds > 0 and sync.count == 1 and sync.total_s == pytest.approx(seconds)
    expected_bytes = sum(t.numel() * 4 for t in dev.state_tensors(source))
    assert sync.nbytes == expected_bytes


def test_weight_sync_reuses_its_preallocated_buffer() -> None:
    source = _policy()
    target = copy.deepcopy(source)
    sync = dev.WeightSync(source, target)
    pointers = [t.data_ptr() for t in dev.state_tensors(target)]
    for _ in range(3):
        _train_once(source)
        sync()
    assert [t.data_ptr() for t in dev.state_tensors(target)] == pointers
    assert _same(source, target) and sync.count == 3
    # The target's tensors are consecutive views into one flat buffer.
    first = dev.state_tensors(target)[0]
    assert all(
        t.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
        for t in dev.state_tensors(target)
    )


def test_weight_sync_keeps_the_target_usable_for_inference() -> None:
    source = _policy().eval()
    target = copy.deepcopy(source).eval()
    sync = dev.WeightSync(source, target)
    _train_once(source)
    source.eval()
    sync()
    obs = torch.randn(5, 4)
    with torch.no_grad():
        assert torch.equal(source(obs), target(obs))


def test_weight_sync_rejects_a_mismatched_copy() -> None:
    with pytest.raises(PlacementError, match=r"expected \(16, 4\)"):
        dev.WeightSync(nn.Linear(4, 16), nn.Linear(4, 8))
    with pytest.raises(PlacementError, match="deepcopy"):
        dev.WeightSync(nn.Linear(4, 16), nn.Linear(4, 16, bias=False))


@needs_cuda
def test_weight_sync_from_cuda_to_cpu() -> None:
    source = _policy().to("cuda")
    target = copy.deepcopy(source).to("cpu")
    sync = dev.WeightSync(source, target)
    _train_once_on(source, "cuda")
    sync()
    assert all(
        torch.equal(s.cpu(), t)
        for s, t in zip(dev.state_tensors(source), dev.state_tensors(target), strict=True)
    )


def _train_once_on(policy: nn.Module, device: str) -> None:
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    policy(torch.randn(32, 4, device=device)).pow(2).mean().backward()
    opt.step()


# --- the choice on a stubbed bench --------------------------------------------------------------


class StubBench:
    """Pretends to time devices: fixed seconds per call, and a record of what was asked."""

    def __init__(
        self, inference: dict[str, float], train: dict[str, float], transfer: float
    ) -> None:
        self._inference, self._train, self._transfer = inference, train, transfer
        self.calls: list[tuple[str, ...]] = []

    def inference(self, device: str, batch: int) -> float:
        self.calls.append(("inference", device, str(batch)))
        return self._inference[device]

    def train_step(self, device: str, batch: int) -> float:
        self.calls.append(("train", device, str(batch)))
        return self._train[device]

    def sync(self, source: str, target: str) -> float:
        return 1e-5 if source == target else self._transfer

    def batch_copy(self, source: str, target: str, rows: int) -> float:
        return self._transfer


@pytest.fixture
def no_cuda_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any CUDA query fails the test: the stubbed paths must never touch CUDA."""

    def forbidden() -> bool:
        raise AssertionError("torch.cuda.is_available() was called")

    monkeypatch.setattr(torch.cuda, "is_available", forbidden)


@pytest.mark.usefixtures("no_cuda_lookups")
def test_stubbed_auto_choice_picks_the_faster_device_for_each_role() -> None:
    # Inference: CPU 10x faster. Training: GPU 20x faster. Transfers are cheap.
    bench = StubBench({"cpu": 1e-4, "cuda": 1e-3}, {"cpu": 2e-2, "cuda": 1e-3}, transfer=1e-4)
    placement = dev.auto_placement(
        nn.Linear(4, 2), (4,), WORKLOAD, devices=["cpu", "cuda"], bench=bench
    )
    assert (placement.rollout_device, placement.train_device) == ("cpu", "cuda")
    assert ("inference", "cpu", "8") in bench.calls and ("train", "cuda", "256") in bench.calls
    assert min(placement.costs, key=placement.costs.__getitem__) == ("cpu", "cuda")


@pytest.mark.usefixtures("no_cuda_lookups")
def test_stubbed_auto_choice_picks_the_gpu_for_both_when_it_wins_both() -> None:
    bench = StubBench({"cpu": 5e-3, "cuda": 1e-4}, {"cpu": 2e-2, "cuda": 1e-3}, transfer=1e-4)
    placement = dev.auto_placement(
        nn.Linear(4, 2), (4,), WORKLOAD, devices=["cpu", "cuda"], bench=bench
    )
    assert (placement.rollout_device, placement.train_device) == ("cuda", "cuda")


@pytest.mark.usefixtures("no_cuda_lookups")
def test_margin_keeps_the_default_when_the_gain_is_small() -> None:
    # The GPU trains 5% faster overall: inside the 10% margin, so the CPU stays.
    bench = StubBench({"cpu": 1e-4, "cuda": 1e-4}, {"cpu": 1.0e-3, "cuda": 0.95e-3}, transfer=0.0)
    placement = dev.auto_placement(
        nn.Linear(4, 2), (4,), WORKLOAD, devices=["cpu", "cuda"], bench=bench
    )
    assert (placement.rollout_device, placement.train_device) == ("cpu", "cpu")
    assert "only" in placement.reason
    assert placement.costs[("cpu", "cuda")] < placement.costs[("cpu", "cpu")]
    # With no margin the cheaper pair wins.
    measured = placement.measurements
    assert measured is not None
    strict = dev.choose(measured, WORKLOAD, margin=0.0)
    assert (strict.rollout_device, strict.train_device) == ("cpu", "cuda")


@pytest.mark.usefixtures("no_cuda_lookups")
def test_expensive_transfers_keep_training_where_the_samples_are() -> None:
    # The GPU trains faster, but moving the rollout there and syncing back costs more than it saves.
    bench = StubBench({"cpu": 1e-4, "cuda": 1e-3}, {"cpu": 2e-3, "cuda": 1e-3}, transfer=0.1)
    placement = dev.auto_placement(
        nn.Linear(4, 2), (4,), WORKLOAD, devices=["cpu", "cuda"], bench=bench
    )
    assert (placement.rollout_device, placement.train_device) == ("cpu", "cpu")


def test_choose_rejects_a_bad_margin() -> None:
    m = dev.Measurements({"cpu": 1.0}, {"cpu": 1.0}, {("cpu", "cpu"): 0.0}, {("cpu", "cpu"): 0.0})
    with pytest.raises(PlacementError, match=r"margin must be in \[0, 1\), got 1.5"):
        dev.choose(m, WORKLOAD, margin=1.5)


@no_cuda_only
def test_auto_on_a_cpu_only_machine_is_cpu_without_measuring() -> None:
    class Exploding(StubBench):
        def inference(self, device: str, batch: int) -> float:
            raise AssertionError("nothing should be measured with one device")

    placement = dev.auto_placement(nn.Linear(4, 2), (4,), WORKLOAD, bench=Exploding({}, {}, 0.0))
    assert (placement.rollout_device, placement.train_device) == ("cpu", "cpu")
    assert placement.measurements is None


# --- the real bench on the CPU ------------------------------------------------------------------


def test_torch_bench_times_every_role_on_the_cpu_and_leaves_the_policy_alone() -> None:
    policy = mlp(4, [16], 2)
    before = copy.deepcopy(policy)
    bench = dev.TorchBench(policy, (4,), repeats=3, warmup=1)
    m = dev.measure(bench, ["cpu"], WORKLOAD)
    assert m.inference_s["cpu"] > 0 and m.train_s["cpu"] > 0 and m.sync_s[("cpu", "cpu")] > 0
    assert m.copy_s[("cpu", "cpu")] == 0.0
    assert _same(policy, before)


def test_torch_bench_accepts_a_custom_forward_with_tuple_output() -> None:
    body, head = nn.Linear(4, 8), nn.Linear(8, 1)
    net = nn.ModuleDict({"body": body, "head": head})
    bench = dev.TorchBench(
        net, (4,), forward=lambda m, x: (m["body"](x), m["head"](m["body"](x))), repeats=2, warmup=0
    )
    assert bench.train_step("cpu", 4) > 0
    no_float = dev.TorchBench(
        nn.Linear(4, 2), (4,), forward=lambda m, x: m(x).long(), repeats=1, warmup=0
    )
    with pytest.raises(PlacementError, match="no floating-point tensor"):
        no_float.train_step("cpu", 4)
    with pytest.raises(PlacementError, match="no parameters"):
        dev.TorchBench(nn.Identity(), (4,), repeats=1, warmup=0).train_step("cpu", 4)


def test_resolve_device() -> None:
    assert dev.resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(PlacementError, match="got 'auto'"):
        dev.resolve_device("auto")
    with pytest.raises(PlacementError, match="got 'gpu0'"):
        dev.resolve_device("gpu0")


@no_cuda_only
def test_resolve_cuda_without_cuda_says_how_to_fix() -> None:
    with pytest.raises(PlacementError, match="sees no CUDA device; use 'cpu' or 'auto'"):
        dev.resolve_device("cuda")


# --- the probe ----------------------------------------------------------------------------------


def _cells(cpu_ms: dict[int, float], gpu_ms: dict[int, float]) -> list[Cell]:
    return [
        Cell("train", 1, h, 0, 64, d, ms)
        for d, table in (("cpu", cpu_ms), ("cuda", gpu_ms))
        for h, ms in table.items()
    ]


def test_crossover_is_the_size_from_which_the_gpu_stays_faster() -> None:
    cpu = {64: 1.0, 128: 2.0, 256: 4.0}
    assert crossover(_cells(cpu, {64: 2.0, 128: 1.5, 256: 1.0}), "train", 1, 64, "cuda") == 128
    assert crossover(_cells(cpu, {64: 0.5, 128: 3.0, 256: 1.0}), "train", 1, 64, "cuda") == 256
    assert crossover(_cells(cpu, {64: 2.0, 128: 3.0, 256: 5.0}), "train", 1, 64, "cuda") is None


def test_probe_cli_on_the_cpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        torch.cuda, "is_available", lambda: False
    )  # the CPU-only path, even on a GPU box
    out_json = tmp_path / "probe.json"
    argv = ["probe", "--hidden", "8", "16", "--layers", "1", "2", "--batch-sizes", "1", "4"]
    argv += ["--repeats", "2", "--warmup", "0", "--json", str(out_json), "--profile"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "GPU columns not measured, CPU side only" in text
    assert "crossover: not measured (no GPU)" in text
    assert "sample and train on the CPU" in text
    assert "probe profile" in text
    rows = [line for line in text.splitlines() if line[:2] in ("1x", "2x")]
    assert len(rows) == 2 * (2 * 2 * 2)  # two tables x (2 layers x 2 hidden x 2 batch sizes)
    cells = json.loads(out_json.read_text())["cells"]
    assert len(cells) == 16 and {c["device"] for c in cells} == {"cpu"}
    assert all(c["ms"] > 0 for c in cells)


def test_probe_runs_as_a_command() -> None:
    cmd = [
        sys.executable,
        "-m",
        "vecsample",
        "probe",
        "--hidden",
        "8",
        "--layers",
        "1",
        "--batch-sizes",
        "2",
    ]
    done = subprocess.run(
        [*cmd, "--repeats", "1", "--warmup", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).resolve().parents[1],  # `-m vecsample` finds this checkout first
    )
    assert done.returncode == 0, done.stderr
    assert "training step (forward + backward + Adam)" in done.stdout


def test_probe_refuses_bad_input_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit status 2 and one line on stderr, before anything is measured (issue 35)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    small = ["--hidden", "8", "--layers", "1", "--batch-sizes", "1", "--warmup", "0"]
    for argv, said in ((["--repeats", "0"], "--repeats must be an int >= 1, got 0"),
                       (["--devices", "cuda"], "sees no CUDA device"),
                       (["--hidden", "0"], "each --hidden must be an int >= 1, got 0"),
                       (["--warmup", "-1"], "--warmup must be an int >= 0, got -1"),
                       (["--repeats", "many"], "invalid int value: 'many'")):
        assert main(["probe", *small, *argv]) == 2, argv
        out, err = capsys.readouterr()
        assert err.startswith("vecsample probe: ") and err.count("\n") == 1, err
        assert said in err and not out, (argv, err)


def test_probe_prints_what_it_measured_when_interrupted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real SIGINT as the second network starts: the first one's tables, the profile and
    the JSON still come out, and the exit status is 130 (issue 35)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    built: list[int] = []
    real = probe.TorchBench

    def bench(*args: Any, **kwargs: Any) -> dev.TorchBench:
        built.append(1)
        if len(built) == 2:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C
        return real(*args, **kwargs)

    monkeypatch.setattr(probe, "TorchBench", bench)
    out_json = tmp_path / "probe.json"
    argv = ["probe", "--hidden", "8", "16", "--layers", "1", "--batch-sizes", "1", "4",
            "--repeats", "2", "--warmup", "0", "--profile", "--json", str(out_json)]
    assert main(argv) == 130
    text = capsys.readouterr().out
    assert "interrupted (Ctrl-C) after 1 of 2 networks" in text
    rows = [line.split()[0] for line in text.splitlines() if line.startswith("1x")]
    assert rows == ["1x8"] * 4  # two tables x two batch sizes, of the network measured
    assert "probe profile" in text
    saved = json.loads(out_json.read_text())
    assert saved["interrupted"] and {c["hidden"] for c in saved["cells"]} == {8}


@needs_cuda
def test_probe_cli_with_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["probe", "--hidden", "8", "--layers", "1", "--batch-sizes", "1", "--repeats", "2"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "cpu/cuda" in text and "crossover (smallest hidden size" in text
