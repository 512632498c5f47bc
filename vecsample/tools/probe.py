"""``vecsample probe``: CPU against GPU time for small MLP policies, the crossover, the advice.

It reproduces the seed document's measurement: for hidden sizes 64/128/256, one and two hidden
layers, and a few batch sizes, it times inference (numpy in, numpy out, as a rollout step does
it) and one training step (forward + backward + Adam) on each device, and the weight sync
between them. Without a CUDA device it says so and still prints the CPU side.

CUDA is looked up only inside :func:`run`; importing this module touches no device. Bad input
(a count below 1, a device that is not there) is a ``ConfigError`` before anything is
measured, which the command line prints as one line (exit status 2). Ctrl-C prints what was
measured by then, the profile too with ``--profile``, and exits with status 130.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from vecsample.extras import require

require("torch", feature="vecsample probe", extra="cli")

# The imports below come after the check, so a missing torch is one error that names the extra.
# ruff: noqa: E402
import torch

from vecsample.options import check_int
from vecsample.tools.policies import mlp
from vecsample.train.device import CPU, TorchBench, available_devices, resolve_device
from vecsample.train.profile import PhaseTimer, format_report

ROLES = ("inference", "train")
ROLE_TITLES = {
    "inference": "inference (numpy -> device -> forward -> numpy), median ms per call",
    "train": "training step (forward + backward + Adam), median ms per step",
}
#: A GPU must beat the CPU by this much to be recommended (the same hysteresis as device.choose).
MARGIN = 0.1
#: The exit status after Ctrl-C, as a shell reports a process ended by SIGINT (128 + 2).
INTERRUPTED = 130

#: A network of the grid: (hidden layers, units per layer).
Net = tuple[int, int]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--obs-dim", type=int, default=4, help="1-D state size (default: 4)")
    parser.add_argument("--out-dim", type=int, default=2, help="policy outputs (default: 2)")
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64, 1024])
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per cell (median)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls per cell first")
    parser.add_argument("--devices", nargs="+", default=None,
                        help="default: cpu + cuda if any; the CPU is always measured (the "
                        "reference)")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch intra-op CPU threads (default: torch's)"
    )
    parser.add_argument("--json", default=None, help="also write every number to this file")
    parser.add_argument("--profile", action="store_true", help="print where the probe's time went")


@dataclass(frozen=True)
class Cell:
    """One measured number: a role of one network at one batch size on one device."""

    role: str
    layers: int
    hidden: int
    params: int
    batch: int
    device: str
    ms: float


def _measure_net(
    args: argparse.Namespace, devices: Sequence[str], layers: int, hidden: int, timer: PhaseTimer
) -> tuple[list[Cell], dict[str, float]]:
    net = mlp(args.obs_dim, [hidden] * layers, args.out_dim)  # ``layers`` of ``hidden`` units
    params = sum(p.numel() for p in net.parameters())
    bench = TorchBench(net, (args.obs_dim,), repeats=args.repeats, warmup=args.warmup)
    cells = []
    for batch in args.batch_sizes:
        for device in devices:
            with timer.phase("inference"):
                ms = 1e3 * bench.inference(device, batch)
            cells.append(Cell("inference", layers, hidden, params, batch, device, ms))
            with timer.phase("train"):
                ms = 1e3 * bench.train_step(device, batch)
            cells.append(Cell("train", layers, hidden, params, batch, device, ms))
    syncs = {}
    for device in devices:
        if device != CPU:
            with timer.phase("sync"):
                syncs[device] = 1e3 * bench.sync(device, CPU)
    return cells, syncs


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _header(args: argparse.Namespace, devices: Sequence[str]) -> list[str]:
    lines = [
        f"vecsample probe: obs_dim={args.obs_dim} out_dim={args.out_dim} "
        f"repeats={args.repeats} (median) warmup={args.warmup}",
        f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, CPU: {_cpu_name()}",
    ]
    if any(d != CPU for d in devices):
        names = [torch.cuda.get_device_name(torch.device(d)) for d in devices if d != CPU]
        lines.append(f"GPU: {', '.join(names)}")
    else:
        lines.append(
            "GPU: no CUDA device (torch.cuda.is_available() is False): "
            "GPU columns not measured, CPU side only."
        )
    return lines


def _lookup(cells: Sequence[Cell]) -> dict[tuple[str, int, int, int, str], float]:
    return {(c.role, c.layers, c.hidden, c.batch, c.device): c.ms for c in cells}


def _table(
    role: str, cells: Sequence[Cell], args: argparse.Namespace, devices: Sequence[str],
    nets: Sequence[Net],
) -> list[str]:
    ms = _lookup(cells)
    gpu = next((d for d in devices if d != CPU), None)
    head = f"{'net':<7}{'params':>8}{'batch':>7}" + "".join(f"{d:>10}" for d in devices)
    lines = ["", ROLE_TITLES[role], head + (f"{'cpu/' + gpu:>11}" if gpu else "")]
    for layers, hidden in nets:
        params = next(c.params for c in cells if (c.layers, c.hidden) == (layers, hidden))
        for b in args.batch_sizes:
            vals = [ms[(role, layers, hidden, b, d)] for d in devices]
            line = f"{layers}x{hidden:<5}{params:>8}{b:>7}" + "".join(f"{v:>10.3f}" for v in vals)
            if gpu:
                line += f"{vals[0] / vals[1]:>10.2f}x"
            lines.append(line)
    return lines


def crossover(cells: Sequence[Cell], role: str, layers: int, batch: int, gpu: str) -> int | None:
    """The smallest hidden size from which ``gpu`` stays faster than the CPU; None if never."""
    ms = _lookup(cells)
    sizes = sorted({c.hidden for c in cells if c.role == role and c.layers == layers})
    found: int | None = None
    for hidden in reversed(sizes):
        if ms[(role, layers, hidden, batch, gpu)] < ms[(role, layers, hidden, batch, CPU)]:
            found = hidden
        else:
            break
    return found


def _crossovers(cells: Sequence[Cell], args: argparse.Namespace, gpu: str) -> list[str]:
    lines = ["", "crossover (smallest hidden size in the grid from which the GPU stays faster):"]
    for role in ROLES:
        for layers in sorted({c.layers for c in cells}):  # those measured
            for b in args.batch_sizes:
                h = crossover(cells, role, layers, b, gpu)
                where = f"from hidden {h}" if h is not None else "never in this grid (CPU faster)"
                lines.append(f"  {role:<9} {layers} layer(s), batch {b:<6}: GPU faster {where}")
    return lines


def _faster(
    ms: dict[tuple[str, int, int, int, str], float], key: tuple[str, int, int, int], gpu: str
) -> str:
    cpu_ms, gpu_ms = ms[(*key, CPU)], ms[(*key, gpu)]
    return gpu if gpu_ms < (1.0 - MARGIN) * cpu_ms else CPU


def _recommendation(
    cells: Sequence[Cell],
    args: argparse.Namespace,
    gpu: str | None,
    syncs: dict[Net, dict[str, float]],
) -> list[str]:
    small, big = min(args.batch_sizes), max(args.batch_sizes)
    lines = [
        "",
        f"recommendation (sampling at batch {small}, training at batch {big}, "
        f"GPU only when >{100 * MARGIN:.0f}% faster):",
    ]
    if gpu is None:
        lines.append(
            "  no CUDA device here: sample and train on the CPU. Run the probe on a "
            "GPU machine to see where the GPU starts to pay."
        )
        return lines
    ms = _lookup(cells)
    for layers, hidden in syncs:  # the networks measured
        rollout = _faster(ms, ("inference", layers, hidden, small), gpu)
        train = _faster(ms, ("train", layers, hidden, big), gpu)
        sync = syncs[(layers, hidden)].get(gpu, 0.0)
        lines.append(
            f"  {layers}x{hidden:<5} sample on {rollout:<5} train on {train:<5}"
            f" (weight sync {gpu}->cpu {sync:.3f} ms, once per rollout)"
        )
    return lines


def checked_devices(args: argparse.Namespace) -> list[str]:
    """Refuses bad input before anything is measured (a ``ConfigError``: a count below 1, a
    device torch cannot use); returns the devices to measure, the CPU first."""
    for name in ("obs_dim", "out_dim", "repeats", "threads"):
        if getattr(args, name) is not None:
            check_int(getattr(args, name), f"--{name.replace('_', '-')}")
    check_int(args.warmup, "--warmup", minimum=0)
    for name in ("hidden", "layers", "batch_sizes"):
        for value in getattr(args, name):
            check_int(value, f"each --{name.replace('_', '-')}")
    asked = [str(resolve_device(d)) for d in args.devices or available_devices()]
    return [CPU, *dict.fromkeys(d for d in asked if d != CPU)]  # the CPU: every ratio's base


def run(args: argparse.Namespace) -> int:
    devices = checked_devices(args)
    if args.threads is not None:
        # The CPU side depends heavily on this: measure at the count the trainer will use.
        torch.set_num_threads(args.threads)
    timer = PhaseTimer()
    cells: list[Cell] = []
    syncs: dict[Net, dict[str, float]] = {}
    try:
        for layers in args.layers:
            for hidden in args.hidden:
                net_cells, net_syncs = _measure_net(args, devices, layers, hidden, timer)
                cells += net_cells
                syncs[(layers, hidden)] = net_syncs  # last: a net is measured once this is set
    except KeyboardInterrupt:  # Ctrl-C: what was measured by then is still worth printing
        _report(args, devices, cells, syncs, timer, interrupted=True)
        return INTERRUPTED
    _report(args, devices, cells, syncs, timer, interrupted=False)
    return 0


def _report(args: argparse.Namespace, devices: Sequence[str], cells: list[Cell],
            syncs: dict[Net, dict[str, float]], timer: PhaseTimer, *, interrupted: bool) -> None:
    """The tables of the networks measured in full, the advice, the JSON and the profile."""
    nets = list(syncs)
    cells = [c for c in cells if (c.layers, c.hidden) in syncs]
    gpu = next((d for d in devices if d != CPU), None)
    lines = _header(args, devices)
    if interrupted:
        total = len(args.layers) * len(args.hidden)
        lines.append(f"interrupted (Ctrl-C) after {len(nets)} of {total} networks: the tables "
                     f"show those.")
    for role in ROLES:
        lines += _table(role, cells, args, devices, nets) if nets else []
    lines += _crossovers(cells, args, gpu) if gpu else ["", "crossover: not measured (no GPU)."]
    lines += _recommendation(cells, args, gpu, syncs)
    sys.stdout.write("\n".join(lines) + "\n")
    if args.json:
        payload = {
            "header": _header(args, devices),
            "cells": [asdict(c) for c in cells],
            "sync_ms": {f"{k[0]}x{k[1]}": v for k, v in syncs.items()},
            "interrupted": interrupted,
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(payload, f, indent=1)
    if args.profile:
        sys.stdout.write("\n" + format_report(timer.report(), title="probe profile") + "\n")
