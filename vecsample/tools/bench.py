"""``vecsample bench``: vecsample against the bare loop and the other samplers, in one run.

For each env id and env count, every backend of ``vecsample.tools.bench_backends`` is built once,
then measured ``--repeats`` times, the backends taking turns, so load from elsewhere on the
machine falls on every row alike. Each figure is the median of its repeats, also given as a
ratio to the bare loop in one process (the per-core limit) and to ``cores`` bare loops at once
(the machine limit). Then the round trip of step_send + step_recv with 1 worker × 1 env. The
table has a legend, numbered notes for skipped rows, and ends with one line per (env, env count)
saying whether VecSampler's full or partial batches won and by how much.
See docs/lab/benchmarks.md for a run and how to read it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from vecsample.errors import ConfigError
from vecsample.extras import require
from vecsample.factories import EnvMaker
from vecsample.hosted import VECTORIZATIONS
from vecsample.machine import usable_cores
from vecsample.tools import compare, efficiency
from vecsample.tools.bench_backends import (
    BACKENDS,
    HOSTED_BACKENDS,
    Backend,
    Config,
    Unavailable,
    cpu_seconds,
    make_id,
    round_trips,
    sampler_stats,
)
from vecsample.types import AutoresetMode

#: The rows of hosted vector envs only: measured with --vectorization (or named in --backends).
HOSTED_ONLY = ("vector_one", "hosted", "hosted_defaults", "hosted_no_infos", "hosted_share")
#: The partial-batch row recording a replay log: measured only with --record.
RECORD_ROW = "vecsample_partial_record"
DEFAULT_BACKENDS = [name for name in BACKENDS
                    if name != RECORD_ROW and name not in HOSTED_ONLY]
#: Env ids when --envs is not given: a cheap env, a MuJoCo env and an Atari env (issue 24).
DEFAULT_ENVS = ["CartPole-v1", "HalfCheetah-v5", "ALE/Pong-v5"]
#: With --vectorization: envs with a batched form (CartPole's entry point, the batch-native
#: HalfCheetah of vecsample.envs).
HOSTED_ENVS = ["CartPole-v1", "HalfCheetah-v5"]
#: Env counts per env id when --num-envs is not given (the targets of issues 4 and 24).
DEFAULT_COUNTS = {"CartPole-v1": [64, 128], "HalfCheetah-v5": [64], "ALE/Pong-v5": [16]}
#: With --vectorization: the counts of issue 18 (a batch pays more the larger it is), and
#: issue 25's 32 MuJoCo envs.
HOSTED_COUNTS = {"CartPole-v1": [64, 512, 4096], "HalfCheetah-v5": [32], "Ant-v5": [32]}
VERSIONED = ("vecsample", "numpy", "gymnasium", "mujoco", "torch", "stable_baselines3",
             "envpool", "ale_py")


@dataclass
class Row:
    """One backend at one (env, env count): the median of its repeats, and its ratios."""

    env: str
    num_envs: int
    backend: str
    label: str
    layout: str
    steps_per_s: float | None
    repeats: list[float] = field(default_factory=list)
    vs_bare: float | None = None
    vs_machine: float | None = None
    #: CPU time of the parent and its workers per env step (median), and the bare loop's
    #: divided by it: how much of the CPU the sampler spends on the envs, whatever the load.
    cpu_us_per_step: float | None = None
    cpu_vs_bare: float | None = None
    skipped: str | None = None
    #: vecsample rows: the autoreset mode they run, the workers' utilization U (time inside
    #: the env loop ÷ wall time, mean over workers) and the in-worker efficiency E of that mode
    #: (tools/efficiency.py); the parent's µs per batch (per step_recv): posting (send),
    #: blocked waiting (wait), reading the finished steps (return) and outside the sampler
    #: (policy, VectorEnv's own work). Medians of the repeats.
    mode: str | None = None
    utilization: float | None = None
    efficiency: float | None = None
    #: E of every autoreset mode for this group's block of envs (the row's is ``efficiency``).
    efficiency_by_mode: dict[str, float] | None = None
    parent_us: dict[str, float] | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _what_arguments(parser)
    _how_arguments(parser)


def _what_arguments(parser: argparse.ArgumentParser) -> None:
    """What is measured: the envs, their counts, the rows."""
    parser.add_argument("--envs", nargs="+", default=None,
                        help="gymnasium ids (default: " + ", ".join(DEFAULT_ENVS) + "; with "
                        "--vectorization: " + ", ".join(HOSTED_ENVS) + "); ALE ids need "
                        "ale-py (the bench extra)")
    parser.add_argument("--num-envs", nargs="+", type=int, default=None,
                        help="env counts (default: 64 and 128 for CartPole, 16 for ALE/Pong, 64 "
                        "otherwise; with --vectorization: 64, 512 and 4096 for CartPole, 32 for "
                        "HalfCheetah and Ant)")
    parser.add_argument("--backends", nargs="+", default=None, choices=list(BACKENDS),
                        metavar="NAME", help="the rows to measure, in this order: "
                        + ", ".join(BACKENDS) + " (default: " + ", ".join(DEFAULT_BACKENDS)
                        + "; with --vectorization: " + ", ".join(HOSTED_BACKENDS) + ")")
    parser.add_argument("--record", action="store_true",
                        help=f"add the row {RECORD_ROW} (partial batches recording a replay log) "
                        "after the partial row, and the cost of recording against it")
    parser.add_argument("--vectorization", choices=VECTORIZATIONS, default=None,
                        help="measure hosted vector envs (one batched vector env per worker: "
                        "gymnasium's vector entry point, or vecsample's batch-native MuJoCo "
                        "env, e.g. HalfCheetahBatch-v5 for HalfCheetah-v5) against the same "
                        "vector env in one process, VecSampler over the single envs, EnvPool, "
                        "the bare loop and the machine limit")
    parser.add_argument("--sleep-env", type=float, default=0.0, metavar="SECONDS",
                        help="instead of --envs: envs that sleep SECONDS per worker batch and "
                        "use no CPU, to show the parent's limit with many workers (e.g. "
                        "--sleep-env 0.0005 --workers 16 --num-envs 64)")


def _how_arguments(parser: argparse.ArgumentParser) -> None:
    """How it is measured and reported: workers, cores, policy, durations, outputs."""
    parser.add_argument("--workers", type=int, default=None,
                        help="vecsample workers (default: the cores)")
    parser.add_argument("--cores", type=int, default=None,
                        help="bare loops at once for the machine limit (default: usable cores)")
    parser.add_argument("--policy", choices=["none", "mlp"], default="none",
                        help="none: pre-sampled actions; mlp: a 64×64 torch MLP in the parent")
    parser.add_argument("--timeout", type=float, default=0.0005,
                        help="step_recv timeout of the partial-batch row (seconds)")
    parser.add_argument("--seconds", type=float, default=1.0, help="duration of one measurement")
    parser.add_argument("--repeats", type=int, default=5, help="figures are their median")
    parser.add_argument("--latency-steps", type=int, default=2000,
                        help="round trips per repeat for the latency (0: skip it)")
    parser.add_argument("--json", type=str, default=None, help="write all results here")
    parser.add_argument("--plot", type=str, default=None, help="write a PNG of the ratios here")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def configs(args: argparse.Namespace) -> list[Config]:
    """One Config per (env id, env count), checked (--record adds its row to the backends;
    without --backends, --vectorization picks the hosted rows)."""
    if args.backends is None:
        args.backends = list(HOSTED_BACKENDS if getattr(args, "vectorization", None)
                             else DEFAULT_BACKENDS)
    if getattr(args, "record", False) and RECORD_ROW not in args.backends:
        at = args.backends.index("vecsample_partial") + 1 if (
            "vecsample_partial" in args.backends) else len(args.backends)
        args.backends = [*args.backends[:at], RECORD_ROW, *args.backends[at:]]
    cores = args.cores or usable_cores()
    workers = args.workers or cores
    hosted = getattr(args, "vectorization", None)
    counts = HOSTED_COUNTS if hosted else DEFAULT_COUNTS
    args.envs = args.envs or list(HOSTED_ENVS if hosted else DEFAULT_ENVS)
    out = []
    if args.sleep_env < 0:
        raise ConfigError(name="--sleep-env", expected="seconds >= 0", got=args.sleep_env,
                          fix="give the sleep per worker batch, e.g. 0.0005")
    envs = [f"sleep {args.sleep_env * 1e3:g} ms"] if args.sleep_env else args.envs
    for env_id in envs:
        if env_id.startswith("ALE/"):
            require("ale_py", feature=f"vecsample bench's {env_id} rows", extra="bench")
        for n in args.num_envs or counts.get(env_id, [64]):
            for name, parts in (("workers", workers), ("cores", cores)):
                if parts < 1 or n % parts:
                    raise ConfigError(
                        f"--num-envs {n} must split evenly over --{name} {parts}; choose a "
                        f"multiple of {parts}."
                    )
            out.append(Config(env_id, n, workers, cores, args.timeout, args.policy,
                              args.sleep_env, hosted or "vector_entry_point"))
    if args.repeats < 1 or args.seconds <= 0:
        raise ConfigError(f"--repeats must be >= 1 and --seconds > 0, got {args.repeats}, "
                          f"{args.seconds}.")
    return out


def layout(name: str, cfg: Config) -> str:
    """How the envs are spread: processes × envs each (or threads, for EnvPool)."""
    if name == "bare":
        return f"1 × {cfg.envs_per_core}"
    if name == "machine":
        return f"{cfg.cores} × {cfg.envs_per_core}"
    if name in ("async", "sb3"):
        return f"{cfg.num_envs} × 1"
    if name == "vector_one" and cfg.batch_native:
        return f"1 × {cfg.num_envs}, {cfg.cores} threads"
    if name in ("sync", "vector_one"):
        return f"1 × {cfg.num_envs}"
    if name == "envpool":
        return f"{cfg.cores} threads"
    if name == "vecsample_pipeline":
        return f"{cfg.workers} × 2 × {cfg.envs_per_worker // 2}"
    return f"{cfg.workers} × {cfg.envs_per_worker}"


# --- measuring -------------------------------------------------------------------------------


@contextlib.contextmanager
def built(cfg: Config, names: Sequence[str]) -> Iterator[dict[str, Backend | str]]:
    """Every backend of a group, built before any is timed; closed at exit, pass or fail."""
    with contextlib.ExitStack() as stack:
        out: dict[str, Backend | str] = {}
        for name in names:
            try:
                backend = BACKENDS[name][1](cfg)
            except Unavailable as exc:
                out[name] = str(exc)
                continue
            stack.callback(backend.close)
            out[name] = backend
        yield out


#: The autoreset mode each vecsample row runs (VecSampler's default, VectorEnv's default).
MODES = {"vecsample": AutoresetMode.SAME_STEP, "vecsample_partial": AutoresetMode.SAME_STEP,
         "vecsample_pipeline": AutoresetMode.SAME_STEP,
         "vector_env": AutoresetMode.NEXT_STEP}
#: One measurement: (steps/s, CPU µs per env step, the sampler's profile or None).
Run = tuple[float, float | None, dict[str, float] | None]


def measure(cfg: Config, args: argparse.Namespace, tick: Any) -> list[Row]:
    """The rows of one group: each backend's repeats, interleaved, then medians and ratios."""
    effs = efficiencies(cfg) if any(n in MODES for n in args.backends) else {}
    with built(cfg, args.backends) as backends:
        runs: dict[str, list[Run]] = {
            n: [] for n, b in backends.items() if not isinstance(b, str)
        }
        for _ in range(args.repeats):
            for name, done in runs.items():
                backend = backends[name]
                assert not isinstance(backend, str)
                done.append(timed_run(backend, args.seconds, cfg.workers))
                tick()
        skipped = {n: b for n, b in backends.items() if isinstance(b, str)}
    rows = [_row(cfg, name, runs.get(name, []), skipped.get(name)) for name in args.backends]
    for r in rows:
        if r.backend in MODES:
            r.mode = MODES[r.backend].value
            r.efficiency = effs.get(r.mode)
            r.efficiency_by_mode = effs or None
    _add_ratios(rows)
    return rows


def efficiencies(cfg: Config) -> dict[str, float]:
    """E of every autoreset mode for one worker's block of envs (not for sleep envs)."""
    if cfg.sleep:
        return {}
    block = [EnvMaker(cfg.make_id)] * cfg.envs_per_worker
    return {mode.value: efficiency.measure(block, mode, infos=True).efficiency
            for mode in AutoresetMode}


def timed_run(backend: Backend, seconds: float, workers: int) -> Run:
    """One run of ``backend`` for ``seconds``: (steps/s, CPU µs per env step of its processes,
    and for a VecSampler backend its profile: U and the parent's µs per batch by phase). The
    bench's own measurement, public for the scripts in experiments/ that reuse it."""
    pids = backend.pids()
    before, stats, parent = cpu_seconds(pids), sampler_stats(backend), time.process_time()
    rate = backend.run(seconds)
    parent = time.process_time() - parent
    after, stats_after = cpu_seconds(pids), sampler_stats(backend)
    profile = None if stats is None or stats_after is None else _profile(
        stats, stats_after, workers, parent)
    if before is None or after is None or not backend.steps():
        return rate, None, profile
    return rate, (after - before) / backend.steps() * 1e6, profile


def _profile(a: dict[str, float], b: dict[str, float], workers: int,
             parent_cpu_s: float) -> dict[str, float]:
    """U, and the parent's µs per batch (wall time by phase, and its CPU time: the work it
    does, whatever else runs on the machine, less what it spent spinning while it waited),
    from two ``VecSampler.stats()``."""
    d = {k: b[k] - a[k] for k in ("wall_s", "env_step_s", "send_s", "wait_s", "return_s",
                                  "wait_cpu_s", "recvs")}
    per = 1e6 / max(d["recvs"], 1.0)
    return {"utilization": d["env_step_s"] / (workers * d["wall_s"]),
            "send": d["send_s"] * per, "wait": (d["wait_s"] - d["return_s"]) * per,
            "return": d["return_s"] * per,
            "outside": (d["wall_s"] - d["send_s"] - d["wait_s"]) * per,
            "cpu": (parent_cpu_s - d["wait_cpu_s"]) * per}


def _row(cfg: Config, name: str, runs: list[Run], skipped: str | None) -> Row:
    rates = [rate for rate, _, _ in runs]
    cpus = [cpu for _, cpu, _ in runs if cpu is not None]
    profiles = [p for _, _, p in runs if p is not None]
    row = Row(env=cfg.env_id, num_envs=cfg.num_envs, backend=name, label=BACKENDS[name][0],
              layout=layout(name, cfg),
              steps_per_s=statistics.median(rates) if rates else None, repeats=rates,
              cpu_us_per_step=statistics.median(cpus) if cpus else None, skipped=skipped)
    if profiles:
        row.utilization = statistics.median(p["utilization"] for p in profiles)
        row.parent_us = {k: statistics.median(p[k] for p in profiles)
                         for k in ("send", "wait", "return", "outside", "cpu")}
    return row


def _add_ratios(rows: list[Row]) -> None:
    by_name = {r.backend: r for r in rows}
    bare, machine = by_name.get("bare"), by_name.get("machine")
    for r in rows:
        if bare is not None:
            r.vs_bare = _ratio(r.steps_per_s, bare.steps_per_s)
            r.cpu_vs_bare = _ratio(bare.cpu_us_per_step, r.cpu_us_per_step)
        if machine is not None:
            r.vs_machine = _ratio(r.steps_per_s, machine.steps_per_s)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def latency(args: argparse.Namespace) -> dict[str, Any] | None:
    """Round trip of step_send + step_recv, 1 worker × 1 env: median of the block medians."""
    if args.latency_steps <= 0:
        return None
    blocks, env_s = round_trips(make_id(args.envs[0]), args.repeats, args.latency_steps)
    medians = [statistics.median(b) * 1e6 for b in blocks]
    every = sorted(t * 1e6 for b in blocks for t in b)
    return {
        "env": args.envs[0], "round_trips_per_repeat": args.latency_steps,
        "median_us": statistics.median(medians), "repeats_median_us": medians,
        "p10_us": every[len(every) // 10], "p90_us": every[(len(every) * 9) // 10],
        "env_step_us": env_s * 1e6,
    }


# --- reporting -------------------------------------------------------------------------------


def meta() -> dict[str, Any]:
    """Hardware, versions, commit, command and load: what a results table must name."""
    versions = {}
    for name in VERSIONED:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    return {
        "cpu": _cpu_model(), "cores": usable_cores(), "python": platform.python_version(),
        "platform": platform.platform(), "versions": versions, "commit": _commit(),
        "command": "vecsample bench " + " ".join(sys.argv[2:] if _is_cli() else []),
        "loadavg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def _is_cli() -> bool:
    return len(sys.argv) > 1 and sys.argv[1] == "bench"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


#: Row names where BACKENDS' label is too long for the table (the JSON keeps the label).
SHORT = {"vecsample": "VecSampler full batches", "vecsample_partial": "VecSampler partial",
         RECORD_ROW: "VecSampler partial + record", "vector_one": "vector env, 1 process",
         "hosted": "VecSampler hosted vector envs",
         "hosted_defaults": "VecSampler hosted, defaults",
         "hosted_no_infos": "VecSampler hosted, infos off",
         "hosted_share": "VecSampler hosted, share",
         "vecsample_pipeline": "VecSampler pipelined halves"}
HEADER = ("backend", "layout", "steps/s", "× bare", "× machine", "CPU µs", "CPU eff")
#: The second block of a group: vecsample's rows, their U and E, the parent's µs per batch.
PARENT_HEADER = ("vecsample row", "mode", "U", "E", "send", "wait", "return", "outside",
                 "parent CPU")
PARENT_NAMES = {"vecsample": "VecSampler full", "vecsample_partial": "VecSampler partial",
                "vecsample_pipeline": "VecSampler pipelined", "vector_env": "VectorEnv"}


def name_of(r: Row, timeout: float | None) -> str:
    """The row's name in the table: the partial-batch row names its timeout."""
    if r.backend == "vecsample_partial":
        return f"VecSampler {compare.batches(timeout)}"
    if r.backend == RECORD_ROW:
        return f"VecSampler {compare.batches(timeout)} + record"
    return SHORT.get(r.backend, r.label)


def _cells(r: Row, timeout: float | None, notes: dict[str, int]) -> list[str]:
    """One line of the table; a skipped row gets a numbered note instead of figures."""
    def fixed(x: float | None, decimals: int) -> str:
        return "-" if x is None else f"{x:,.{decimals}f}"

    name = name_of(r, timeout)
    if r.skipped:
        name += f" [{notes.setdefault(r.skipped, len(notes) + 1)}]"
    return [name, r.layout, fixed(r.steps_per_s, 0), fixed(r.vs_bare, 3),
            fixed(r.vs_machine, 3), fixed(r.cpu_us_per_step, 2), fixed(r.cpu_vs_bare, 3)]


def legend(repeats: int) -> list[str]:
    """What each column means, one line each."""
    return [
        f"Medians of {repeats} repeats, and ratios of those medians; in each repeat the backends "
        "take turns.",
        "  layout     processes × envs each (EnvPool: threads); the bare loop is 1 process with "
        "envs ÷ cores",
        "  steps/s    env steps per second",
        "  × bare     steps/s ÷ the bare loop's steps/s: above 1 is more than one core gives",
        "  × machine  steps/s ÷ the machine limit's (a bare loop on every core, rates summed)",
        "  CPU µs     CPU time (user + system) of the parent and its workers per env step",
        "  CPU eff    the bare loop's CPU µs ÷ this row's: the share of the CPU spent in the envs",
        "  U          vecsample: the workers' time inside the env loop ÷ wall time (mean)",
        "  E          vecsample: bare loop ÷ the worker loop of the row's autoreset mode, per",
        "             env step, in one process (docs/lab/benchmarks.md: U × E predicts × machine)",
        "  send, wait, return, outside: the parent's wall µs per batch posting, blocked, reading",
        "             results, and outside the sampler; parent CPU: its CPU µs per batch, not",
        "             counting its waits",
    ]


def _groups(rows: list[Row]) -> dict[tuple[str, int], list[Row]]:
    """The rows by (env, env count), in order: one block of the table each."""
    groups: dict[tuple[str, int], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.env, r.num_envs), []).append(r)
    return groups


def parent_lines(group: list[Row]) -> list[str]:
    """vecsample's rows: U, E, and the parent's µs per batch (docs/lab/benchmarks.md)."""
    cells = []
    for r in group:
        if r.parent_us is not None:
            p = r.parent_us
            cells.append([PARENT_NAMES.get(r.backend, r.backend), r.mode or "-",
                          _fixed(r.utilization, 3), _fixed(r.efficiency, 3),
                          *(_fixed(p[k], 1) for k in ("send", "wait", "return", "outside",
                                                       "cpu"))])
    if not cells:
        return []
    by_mode = next((r.efficiency_by_mode for r in group if r.efficiency_by_mode), None)
    modes = ("E by autoreset mode: " + ", ".join(f"{m} {e:.3f}" for m, e in by_mode.items())
             if by_mode else "")
    return ["", *compare.columns(PARENT_HEADER, cells, right=range(2, 9)),
            *([modes] if modes else [])]


def _fixed(x: float | None, decimals: int) -> str:
    return "-" if x is None else f"{x:,.{decimals}f}"


def table(rows: list[Row], timeout: float | None = None) -> str:
    """The terminal table: a block per (env, env count), the legend, then the numbered notes
    (why a row was skipped)."""
    notes: dict[str, int] = {}
    lines = []
    for (env, n), group in _groups(rows).items():
        cells = [_cells(r, timeout, notes) for r in group]
        lines += [f"{env}, {n} envs", *compare.columns(HEADER, cells, right=range(2, 9)),
                  *parent_lines(group), ""]
    lines += legend(max((len(r.repeats) for r in rows), default=0))
    lines += [""] if notes else []
    for text, number in notes.items():
        lines.append(textwrap.fill(f"[{number}] {text}", width=100, subsequent_indent="    "))
    return "\n".join(lines)


def conclusion(rows: list[Row], timeout: float | None) -> str:
    """``CartPole-v1, 64 envs: full batches 1.09× partial (0.5 ms), at 0.686× the machine
    limit``: VecSampler's full against partial batches, or else the fastest row."""
    by = {r.backend: r for r in rows if r.steps_per_s}
    full, part = by.get("vecsample"), by.get("vecsample_partial")
    head = f"{rows[0].env}, {rows[0].num_envs} envs: "
    if "hosted" in by:
        return head + _hosted_conclusion(by)
    if full and part and full.steps_per_s and part.steps_per_s:
        which = f"partial ({compare.milliseconds(timeout or 0.0)})"
        x = part.steps_per_s / full.steps_per_s
        text = (f"{which} {x:.2f}× full batches" if x > 1
                else f"full batches {1 / x:.2f}× {which}")
        winner = part if x > 1 else full
    elif by:
        winner = max(by.values(), key=lambda r: r.steps_per_s or 0.0)
        text = f"fastest: {name_of(winner, timeout)}, {winner.steps_per_s:,.0f} steps/s"
    else:
        return head + "nothing was measured"
    if winner.vs_machine is not None:
        text += f", at {winner.vs_machine:.3f}× the machine limit"
    return head + text + recording_cost(rows)


def recording_cost(rows: list[Row]) -> str:
    """``; recording 0.985× partial (per repeat 0.97–1.00)``: the record row against the
    partial row, by the median of their per-repeat ratios (the two run back to back)."""
    by = {r.backend: r for r in rows}
    part, rec = by.get("vecsample_partial"), by.get(RECORD_ROW)
    if part is None or rec is None or not part.repeats or not rec.repeats:
        return ""
    ratios = [b / a for a, b in zip(part.repeats, rec.repeats, strict=False) if a]
    if not ratios:
        return ""
    return (f"; recording {statistics.median(ratios):.3f}× partial (per repeat "
            f"{min(ratios):.3f}–{max(ratios):.3f})")


def _hosted_conclusion(by: dict[str, Row]) -> str:
    """``hosted 1.62× one process, 1.51× the machine limit, ...``: issues 18's and 25's
    ratios."""
    hosted = by["hosted"].steps_per_s or 0.0
    parts = [f"{hosted / (by[name].steps_per_s or 1.0):.2f}× {what}"
             for name, what in (("vector_one", "one process"), ("machine", "the machine limit"),
                                ("vecsample", "VecSampler"), ("envpool", "EnvPool"),
                                ("bare", "the bare loop"))
             if name in by]
    line = "hosted " + ", ".join(parts)
    for name, what in (("hosted_defaults", "defaults"), ("hosted_no_infos", "infos off"),
                       ("hosted_share", "share")):
        steps = by[name].steps_per_s if name in by else None
        if steps and "envpool" in by and by["envpool"].steps_per_s:
            line += f"; hosted with {what} {steps / by['envpool'].steps_per_s:.2f}× EnvPool"
    on, off = (by[name].steps_per_s if name in by else None
               for name in ("hosted_defaults", "hosted_no_infos"))
    if on and off:  # issue 41: infos on (the default) against the same run with infos off
        line += f"; defaults with infos {on / off:.2f}× without"
    return line


def render(rows: list[Row], lat: dict[str, Any] | None, timeout: float | None) -> str:
    """Everything ``vecsample bench`` prints: the table, the round trip, and one line per
    (env, env count) saying which batches won and by how much."""
    out = [table(rows, timeout)]
    if lat is not None:
        out += ["", f"Round trip step_send + step_recv, 1 worker × 1 env ({lat['env']}): "
                f"median {lat['median_us']:,.1f} µs",
                f"  p10 {lat['p10_us']:,.1f} µs, p90 {lat['p90_us']:,.1f} µs; the env step in the "
                f"worker: {lat['env_step_us']:,.1f} µs"]
    return "\n".join([*out, "", *(conclusion(g, timeout) for g in _groups(rows).values())])


def plot(rows: list[Row], path: str) -> None:
    """Bars of each backend's ratio to the machine limit, one group per (env, env count)."""
    matplotlib = require("matplotlib", feature="vecsample bench --plot", extra="plot")
    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys((r.env, r.num_envs) for r in rows))
    names = list(dict.fromkeys(r.backend for r in rows))
    fig, ax = plt.subplots(figsize=(5.0 + 2.2 * len(groups), 4.5))
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        values = [next((r.vs_machine or 0.0 for r in rows if (r.env, r.num_envs) == g
                        and r.backend == name), 0.0) for g in groups]
        ax.bar([k + i * width for k in range(len(groups))], values, width,
               label=BACKENDS[name][0])
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(groups))])
    ax.set_xticklabels([f"{e}\n{n} envs" for e, n in groups])
    ax.set_ylabel("steps/s ÷ machine limit (bare loop × cores)")
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside, not over
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    groups = configs(args)
    total = len(groups) * args.repeats * len(args.backends) + (args.latency_steps > 0)
    tqdm: Any = require("tqdm", feature="vecsample bench", extra="cli").tqdm
    # No monitor thread: a thread left running in the parent makes later fork-context samplers
    # warn, and the bench starts AsyncVectorEnv and SB3 processes with fork.
    tqdm.monitor_interval = 0
    with tqdm(total=total, desc="vecsample bench", disable=args.no_progress,
             file=sys.stderr) as bar:
        rows = [row for cfg in groups for row in measure(cfg, args, lambda: bar.update(1))]
        lat = latency(args)
        bar.update(total - bar.n)
    out = render(rows, lat, args.timeout)
    sys.stdout.write(out + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"meta": meta(), "results": [asdict(r) for r in rows], "latency": lat}, indent=2))
    if args.plot:
        plot(rows, args.plot)
    return 0
