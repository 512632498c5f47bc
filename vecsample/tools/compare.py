"""``vecsample compare``: full against partial batches and pipelined halves, side by side.

The sampling loop: send to every worker, ``recv_batch(timeout)``, run the policy once on the
rows that came back, send those workers again with ``step_send_many(result.workers, rows)``.
``timeout=None`` is the full batch; a small float is the partial batch, and the same on a second
sampler with ``pipeline=True`` (two halves per worker, one stepping while the parent serves the
other) the pipelined row. Reports steps/s, workers per recv, policy calls per 1000
steps and where the time went (wait / policy / send / env), and checks that every step sent was
received; the table has a legend and ends with one line per env saying which batches won and by
how much, or that they tie within noise. The default is a small preset (CartPole and a straggler
env, 2 workers, < 1 minute); the options reach the whole experiment of
experiments/timeout_comparison.py (docs/timeout.md).

Timeouts of one (env, workers, envs per worker) group share one sampler (the pipelined rows a
second one) and are interleaved repeat by repeat, so a ratio is measured side by side even on a
loaded machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import time
from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from vecsample.extras import require
from vecsample.sampler import VecSampler
from vecsample.tools.policies import (
    SPEC_HELP,
    Policy,
    make_policy,
    mlp_policy,
    parse_hidden,
    random_policy,
    with_latency,
)
from vecsample.tools.workloads import SYNTHETIC_ENVS, env_factories, parse_timeouts

# The policies moved to vecsample.tools.policies; their names stay importable from here.
__all__ = [
    "SYNTHETIC_ENVS",
    "Grid",
    "LoopResult",
    "Policy",
    "env_factories",
    "format_table",
    "make_policy",
    "mlp_policy",
    "parse_hidden",
    "random_policy",
    "report",
    "sampling_loop",
    "summarize",
    "sweep",
    "with_latency",
]

@dataclass
class LoopResult:
    """What one run of the sampling loop measured (times in seconds, summed over the run)."""

    env: str
    timeout: float | None
    workers: int
    envs_per_worker: int
    steps: int
    seconds: float
    steps_per_s: float
    workers_per_recv: float
    policy_calls_per_1000_steps: float
    wait_s: float
    policy_s: float
    env_step_s: float
    steps_sent: int
    steps_received: int
    recvs: int = 0
    policy_calls: int = 0
    send_s: float = 0.0
    policy: str = ""
    policy_latency: float = 0.0
    repeat: int = 0
    #: Pipelined halves (``VecSampler(pipeline=True)``): its workers are the halves.
    pipeline: bool = False


def sampling_loop(sampler: VecSampler, timeout: float | None, seconds: float, policy: Policy,
                  seed: int = 0, max_steps: int | None = None, obs: Any = None) -> LoopResult:
    """Runs the partial/full loop for ``seconds`` (or ``max_steps``), then drains every worker.
    Each recv is one ``recv_batch(timeout)``: the workers done (all of them with ``timeout``
    None), as one result whose rows go to the policy in one call and whose workers
    ``step_send_many`` sends again with the policy's rows, in a fixed number of calls whatever
    the number of workers. A pipelined sampler's workers are its halves. It starts with
    ``reset(seed=seed)``, or from ``obs`` (envs already reset, workers idle), so a caller timing
    it from outside keeps the reset out of its window. ``env_step_s`` is summed over workers
    (time inside ``env.step``); ``wait_s`` is the parent's time in ``recv_batch`` and
    ``policy_s`` its time in ``policy``."""
    obs = sampler.reset(seed=seed)[0] if obs is None else obs
    everyone = np.arange(sampler.num_slots)
    sampler.step_send_many(everyone, policy(np.asarray(obs)))
    sent, received, recvs, calls, policy_s = sampler.num_envs, 0, 0, 1, 0.0
    before = sampler.stats()
    start = time.perf_counter()
    limit = float("inf") if max_steps is None else max_steps
    while time.perf_counter() - start < seconds and received < limit:
        r = sampler.recv_batch(timeout)
        recvs += 1
        received += len(r.env_ids)
        t0 = time.perf_counter()
        actions = policy(np.asarray(r.obs))
        calls += 1
        policy_s += time.perf_counter() - t0
        # A full batch's result names no workers (``workers`` None): it holds every one.
        sampler.step_send_many(everyone if r.workers is None else r.workers, actions)
        sent += len(r.env_ids)
    if received < sent:  # drain: nothing sent is left unreceived
        sampler.recv_batch(None)  # waits for every worker still stepping
        recvs += 1
    return _result(sampler, timeout, before, time.perf_counter() - start, sent, recvs, calls,
                   policy_s)


def _result(sampler: VecSampler, timeout: float | None, before: dict[str, float],
            seconds: float, steps: int, recvs: int, calls: int, policy_s: float) -> LoopResult:
    """The LoopResult of a drained loop (``steps`` sent and received) from the sampler's
    stats before it and now."""
    delta = {k: v - before[k] for k, v in sampler.stats().items() if k in before}
    return LoopResult(
        env="", timeout=timeout, workers=sampler.num_workers,
        envs_per_worker=sampler.envs_per_worker,
        steps=steps, seconds=seconds, steps_per_s=steps / seconds,
        workers_per_recv=steps / recvs / sampler.envs_per_worker,
        policy_calls_per_1000_steps=1000.0 * calls / steps, wait_s=delta["wait_s"],
        policy_s=policy_s, env_step_s=delta["env_step_s"], steps_sent=steps,
        steps_received=steps, recvs=recvs, policy_calls=calls, send_s=delta["send_s"],
        pipeline=sampler.num_slots > sampler.num_workers,
    )


# --- the sweep -----------------------------------------------------------------------------------


@dataclass
class Grid:
    """Everything one sweep measures: the product of the list fields, ``repeats`` times."""

    envs: list[str] = field(default_factory=lambda: ["CartPole-v1", "straggler"])
    """gymnasium ids, or sleep / uniform / straggler (SlowEnv with that step-time tail)"""
    workers: list[int] = field(default_factory=lambda: [2])
    """numbers of worker processes"""
    envs_per_worker: list[int] = field(default_factory=lambda: [16])
    """envs stepped serially by each worker"""
    timeouts: list[float | None] = field(default_factory=lambda: [None, 0.0005])
    """recv timeouts in seconds; none is the full batch"""
    policies: list[str] = field(default_factory=lambda: ["mlp:64,64"])
    """random, or mlp:H1,H2,...: a torch MLP, so inference cost scales with the batch"""
    policy_latencies: list[float] = field(default_factory=lambda: [0.0])
    """a fixed per-call policy cost in seconds (sleep), like a GPU round trip"""
    step_time: float = 2e-4
    """median step time of the sleep / uniform / straggler envs, seconds"""
    seconds: float = 2.0
    """duration of one measurement (when iterations is not set)"""
    iterations: int | None = None
    """steps per env of one measurement; replaces seconds"""
    repeats: int = 3
    """repeats of each measurement; tables show medians, ratios are per repeat"""
    seed: int = 0
    """seeds the samplers and the policies; repeat k resets its envs with seed + k"""
    interleave_groups: bool = False
    """open every group's sampler at once and alternate groups each repeat"""
    pipelined: bool = False
    """also run each float timeout on pipelined halves (VecSampler(pipeline=True), a second
    sampler per group), where the envs per worker are even; ``vecsample compare`` does"""

    def groups(self) -> Iterator[tuple[str, int, int]]:
        for env in self.envs:
            for workers in self.workers:
                for per in self.envs_per_worker:
                    yield env, workers, per

    def halves(self, per: int) -> bool:
        """Whether a group of ``per`` envs per worker runs pipelined halves too."""
        return self.pipelined and per % 2 == 0 and any(t is not None for t in self.timeouts)

    def runs_per_group(self, per: int | None = None) -> int:
        """Runs of one group (of ``per`` envs per worker: its pipelined ones too)."""
        timeouts = len(self.timeouts)
        if per is not None and self.halves(per):
            timeouts += sum(t is not None for t in self.timeouts)
        return self.repeats * len(self.policies) * len(self.policy_latencies) * timeouts

    def size(self) -> int:
        return sum(self.runs_per_group(per) for _, _, per in self.groups())


@dataclass
class _Group:
    """The open samplers of a sweep's group (its pipelined one, if any), with its policies."""

    env: str
    sampler: VecSampler
    policies: dict[tuple[str, float], Policy]
    halves: VecSampler | None = None

    def __enter__(self) -> _Group:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.halves is not None:
                self.halves.close()
        finally:
            self.sampler.close()


def _open_group(grid: Grid, env: str, workers: int, per: int) -> _Group:
    fns = env_factories(env, workers * per, grid.step_time)
    sampler = VecSampler(fns, num_workers=workers, infos=False, seed=grid.seed)
    g = _Group(env, sampler, {})
    with contextlib.ExitStack() as undo:  # what was opened is closed if the rest fails
        undo.enter_context(g)
        spaces = sampler.single_observation_space, sampler.single_action_space
        g.policies = {(spec, lat): make_policy(spec, *spaces, lat, grid.seed)
                      for spec in grid.policies for lat in grid.policy_latencies}
        if grid.halves(per):
            g.halves = VecSampler(fns, num_workers=workers, infos=False, seed=grid.seed,
                                  pipeline=True)
        undo.pop_all()
    return g


def _runs(grid: Grid, g: _Group) -> list[tuple[VecSampler, float | None]]:
    """The (sampler, timeout) of each run of a group's repeat: every timeout on its sampler,
    then each float one on its pipelined halves."""
    runs: list[tuple[VecSampler, float | None]] = [(g.sampler, t) for t in grid.timeouts]
    if g.halves is not None:
        runs += [(g.halves, t) for t in grid.timeouts if t is not None]
    return runs


def _run_repeat(grid: Grid, g: _Group, repeat: int,
                progress: Callable[[LoopResult], None] | None) -> list[LoopResult]:
    """Every policy and timeout of one group (and its pipelined halves), once."""
    n = g.sampler.num_envs
    max_steps = None if grid.iterations is None else grid.iterations * n
    seconds = math.inf if grid.iterations is not None else grid.seconds
    out = []
    for (spec, lat), policy in g.policies.items():
        for sampler, timeout in _runs(grid, g):
            r = sampling_loop(sampler, timeout, seconds, policy, seed=grid.seed + repeat,
                              max_steps=max_steps)
            r.env, r.policy, r.policy_latency, r.repeat = g.env, spec, lat, repeat
            out.append(r)
            if progress is not None:
                progress(r)
    return out


def measure_group(grid: Grid, env: str, workers: int, per: int,
                  progress: Callable[[LoopResult], None] | None = None) -> list[LoopResult]:
    """One sampler for (env, workers, per), and one of pipelined halves where the grid asks;
    policies and timeouts interleaved per repeat."""
    with _open_group(grid, env, workers, per) as g:
        return [r for repeat in range(grid.repeats) for r in _run_repeat(grid, g, repeat, progress)]


def sweep(grid: Grid, progress: Callable[[LoopResult], None] | None = None) -> list[LoopResult]:
    """Every measurement of ``grid``: group by group, or with ``grid.interleave_groups`` every
    group's sampler open at once and the groups taking turns each repeat, so that ratios across
    groups (16 workers against 1) are side by side too."""
    if not grid.interleave_groups:
        return [r for g in grid.groups() for r in measure_group(grid, *g, progress=progress)]
    with contextlib.ExitStack() as stack:
        groups = []
        for key in grid.groups():
            groups.append(stack.enter_context(_open_group(grid, *key)))
        return [r for repeat in range(grid.repeats) for g in groups
                for r in _run_repeat(grid, g, repeat, progress)]


# --- summary -------------------------------------------------------------------------------------


def _key(r: LoopResult) -> tuple[Any, ...]:
    return (r.env, r.policy, r.policy_latency, r.workers, r.envs_per_worker)


def summarize(results: Sequence[LoopResult]) -> list[dict[str, Any]]:
    """One row per configuration: medians over repeats; ``x full`` is the median of the
    per-repeat ratio to the full batch of the same repeat (side by side), ``x full min`` and
    ``x full max`` the lowest and highest of those ratios. ``batches`` names the row's kind:
    full, partial or pipelined (halves, against the full batches of the plain sampler)."""
    full = {(*_key(r), r.repeat): r.steps_per_s for r in results
            if r.timeout is None and not r.pipeline}
    rows: dict[tuple[Any, ...], list[LoopResult]] = {}
    for r in results:
        rows.setdefault((*_key(r), r.pipeline, r.timeout), []).append(r)
    return [_row(rs, full) for rs in rows.values()]


def _row(rs: list[LoopResult], full: dict[tuple[Any, ...], float]) -> dict[str, Any]:
    r0 = rs[0]
    ratios = [r.steps_per_s / full[(*_key(r), r.repeat)] for r in rs
              if (*_key(r), r.repeat) in full]
    nan = float("nan")
    busy = [r.wait_s + r.policy_s + r.send_s for r in rs]
    return {
        "env": r0.env, "policy": r0.policy + (f"+{r0.policy_latency * 1e3:g}ms"
                                              if r0.policy_latency else ""),
        "W x n": f"{r0.workers}x{r0.envs_per_worker}",
        "batches": "pipelined" if r0.pipeline else "full" if r0.timeout is None else "partial",
        "timeout": "full" if r0.timeout is None else r0.timeout,
        "steps/s": float(np.median([r.steps_per_s for r in rs])),
        "x full": float(np.median(ratios)) if ratios else nan,
        "x full min": min(ratios, default=nan), "x full max": max(ratios, default=nan),
        "workers/recv": float(np.median([r.workers_per_recv for r in rs])),
        "calls/1k": float(np.median([r.policy_calls_per_1000_steps for r in rs])),
        "wait %": float(np.median([100 * r.wait_s / r.seconds for r in rs])),
        "policy %": float(np.median([100 * r.policy_s / r.seconds for r in rs])),
        "other %": float(np.median([100 * (1 - b / r.seconds) for b, r in zip(busy, rs,
                                                                              strict=True)])),
    }


def plain(x: float) -> str:
    """Any float in one format, never an exponent: thousands separators from 1,000 up, else 4
    significant digits (``nan`` is ``-``)."""
    if not math.isfinite(x):
        return "-"
    if abs(x) >= 999.5:
        return f"{x:,.0f}"
    return np.format_float_positional(x, precision=4, unique=False, fractional=False, trim="-")


def columns(header: Sequence[str], cells: Sequence[Sequence[str]],
            right: Container[int] = ()) -> list[str]:
    """Lines of a plain text table: columns two spaces apart, those in ``right`` (numbers)
    right-aligned, no trailing spaces."""
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(header)]

    def line(row: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()

    return [line(header), *(line(row) for row in cells)]


def format_table(rows: list[dict[str, Any]]) -> str:
    """Any rows of one set of keys as a plain text table; floats in the format of ``plain``,
    right-aligned."""
    cols = list(rows[0])
    cells = [[plain(r[c]) if isinstance(r[c], float) else str(r[c]) for c in cols] for r in rows]
    right = {i for i, c in enumerate(cols) if all(isinstance(r[c], int | float) for r in rows)}
    return "\n".join(columns(cols, cells, right))


# --- the report of ``vecsample compare`` ---------------------------------------------------------


def milliseconds(seconds: float) -> str:
    """``0.0005`` -> ``0.5 ms``: fixed decimals, trailing zeros dropped, never an exponent."""
    return f"{seconds * 1e3:.6f}".rstrip("0").rstrip(".") + " ms"


def batches(timeout: float | str | None, pipelined: bool = False) -> str:
    """The name of a row: ``full batches``, ``partial batches (timeout 0.5 ms)`` or, for
    pipelined halves, ``pipelined halves (timeout 0.5 ms)``."""
    if timeout is None or timeout == "full":
        return "full batches"
    kind = "pipelined halves" if pipelined else "partial batches"
    return f"{kind} (timeout {milliseconds(float(timeout))})"


REPORT_HEADER = ("batches", "steps/s", "× full", "per repeat", "W/recv", "calls/1k", "wait %",
                 "policy %")


def _cells(row: dict[str, Any]) -> list[str]:
    """One row of the report: steps/s with separators, ratios and W/recv with 2 decimals, calls
    and percentages with 1."""
    x, lo, hi = row["x full"], row["x full min"], row["x full max"]
    spread = "" if row["timeout"] == "full" or not math.isfinite(lo) else f"{lo:.2f}–{hi:.2f}"
    return [batches(row["timeout"], row["batches"] == "pipelined"), f"{row['steps/s']:,.0f}",
            f"{x:.2f}" if math.isfinite(x) else "-", spread, f"{row['workers/recv']:.2f}",
            f"{row['calls/1k']:.1f}", f"{row['wait %']:.1f}", f"{row['policy %']:.1f}"]


def _blocks(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """The summary rows by (env, policy, W x n): one sampler each, its timeouts side by side."""
    blocks: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        blocks.setdefault((row["env"], row["policy"], row["W x n"]), []).append(row)
    return blocks


#: A median ratio closer to 1 than this is a tie, whatever the repeats say: 1.01× is no win.
TIE_MARGIN = 0.02
_MARGIN = f"{TIE_MARGIN * 100:g} %"

#: The legend's lines for each synthetic env (vecsample.testing.SlowEnv), shown where it ran.
ENV_LEGEND = {
    "sleep": ("  sleep            an env that sleeps --step-time per step, the same every step",),
    "uniform": ("  uniform          an env that sleeps --step-time ± 50 % per step",),
    "straggler": ("  straggler        an env that sleeps --step-time per step with a heavy tail: 1 "
                  "step in 100",
                  "                   takes over 20× the median, so a full batch often waits for "
                  "one slow worker"),
}


#: The legend's lines for the pipelined rows, shown where they ran.
PIPELINED_LEGEND = (
    "  pipelined        the same on VecSampler(pipeline=True), a second sampler: two halves per",
    "                   worker, one stepping while the parent serves the other (n even only)",
)


def legend(repeats: int, envs: Sequence[str] = (), pipelined: bool = False) -> list[str]:
    """What each column of the report means, one line each; the synthetic envs among ``envs``;
    the pipelined rows, where they ran; and how to read the last lines."""
    samplers = "two samplers" if pipelined else "one sampler"
    return [
        f"Medians of {repeats} repeats; in each repeat the rows of a block take turns on "
        f"{samplers}.",
        "  full batches     recv_batch(None): wait for every worker, one policy call for all",
        "  partial batches  recv_batch(timeout): the first worker back and any others within the "
        "timeout",
        *(PIPELINED_LEGEND if pipelined else ()),
        "  steps/s          env steps per second",
        "  × full           median over repeats of steps/s ÷ full batches' steps/s in the same "
        "repeat",
        "  per repeat       lowest–highest of those ratios; the ratio of the steps/s shown lies "
        "within",
        "  W/recv           workers per recv, of the W above (full batches: all W; a half: ½)",
        "  calls/1k         policy calls per 1,000 env steps",
        "  wait %           share of the parent's time waiting in recv_batch",
        "  policy %         share of the parent's time in the policy (the rest: send, bookkeeping)",
        *(line for env, lines in ENV_LEGEND.items() if env in envs for line in lines),
        "Last lines: each block's best partial or pipelined row against full batches, as × full. "
        "A side",
        f"wins only where every repeat's ratio is on its side of 1 and the median is {_MARGIN} or "
        "more",
        "from 1; otherwise the line says a tie within noise, and why:",
        "  not all agree    some repeats had partial batches faster, others full batches",
        f"  within {_MARGIN}       every repeat agrees, but the median is less than {_MARGIN} "
        "from 1",
    ]


def verdict(x: float, lo: float, hi: float) -> str:
    """``partial``, ``full`` or ``tie`` for a row of median ratio ``x`` (partial ÷ full) and
    per-repeat ratios from ``lo`` to ``hi``: a side wins only where every repeat says so and
    the median is at least TIE_MARGIN from 1."""
    if abs(x - 1) < TIE_MARGIN or lo <= 1 <= hi:
        return "tie"
    return "partial" if x > 1 else "full"


def conclusion(label: str, rows: list[dict[str, Any]]) -> str:
    """``CartPole-v1: partial batches win, 1.12× full (0.5 ms); per repeat 1.05–1.20``: the
    best partial or pipelined row (a clear win first, then the highest ``× full``) against the
    full one, in the table's ratio, that row ÷ full. A tie within noise says so and why. The
    per-repeat range is left out where it would take the line past 100 characters."""
    others = [r for r in rows if r["timeout"] != "full" and math.isfinite(r["x full"])]
    if not others:
        return f"{label}: no full and partial batches side by side to compare"

    def judged(r: dict[str, Any]) -> str:
        return verdict(r["x full"], r["x full min"], r["x full max"])

    best = max(others, key=lambda r: (judged(r) == "partial", r["x full"]))
    x, lo, hi, said = best["x full"], best["x full min"], best["x full max"], judged(best)
    best_of = f", best of {len(others)}" if len(others) > 1 else ""
    kind, name = (("pipelined", "pipelined halves") if best["batches"] == "pipelined"
                  else ("partial", "partial batches"))
    head = {"partial": f"{name} win,", "full": f"full batches win, {kind}",
            "tie": f"a tie, {kind}"}[said]
    text = f"{label}: {head} {x:.2f}× full ({milliseconds(best['timeout'])}{best_of})"
    why = "" if said != "tie" else ", not all agree" if lo <= 1 <= hi else \
        f", within {_MARGIN}"
    spread = f"; per repeat {lo:.2f}–{hi:.2f}"
    if lo != hi and len(text + spread + why) <= 100:
        return text + spread + why
    return text + why


def report(results: Sequence[LoopResult]) -> str:
    """The output of ``vecsample compare``: a block per (env, policy, workers × envs), the
    legend, then one line per block saying which batches won and by how much, or that they
    tie."""
    blocks = _blocks(summarize(results))
    repeats = len({r.repeat for r in results})
    envs = [env for env, _, _ in blocks]
    lines, ends = [], []
    for (env, policy, wxn), rows in blocks.items():
        w, n = wxn.split("x")
        lines += [f"{env}: W = {w} workers × {n} envs, policy {policy}",
                  *columns(REPORT_HEADER, [_cells(r) for r in rows], right=range(1, 8)), ""]
        label = env if envs.count(env) == 1 else f"{env} ({w} × {n}, {policy})"
        ends.append(conclusion(label, rows))
    pipelined = any(r.pipeline for r in results)
    return "\n".join([*lines, *legend(repeats, envs, pipelined), "", *ends])


# --- the command line ----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = Grid()
    parser.add_argument("--envs", nargs="+", default=d.envs,
                        help="gymnasium ids, or 'sleep' / 'uniform' / 'straggler' (SlowEnv)")
    parser.add_argument("--workers", nargs="+", type=int, default=d.workers,
                        help="numbers of worker processes (default: 2)")
    parser.add_argument("--envs-per-worker", nargs="+", type=int, default=d.envs_per_worker,
                        help="envs stepped serially by each worker (default: 16)")
    parser.add_argument("--timeouts", nargs="+", default=["none", "0.0005"],
                        help="'none' for full batches, seconds for partial batches")
    parser.add_argument("--pipelined", action=argparse.BooleanOptionalAction, default=True,
                        help="also run each timeout in seconds on pipelined halves "
                        "(VecSampler(pipeline=True), two halves per worker), where the envs per "
                        "worker are even (default: on)")
    parser.add_argument("--policies", nargs="+", default=d.policies,
                        help=SPEC_HELP)
    parser.add_argument("--policy-latency", nargs="+", type=float, default=d.policy_latencies,
                        help="a fixed per-call cost in seconds (sleep), like a GPU round trip")
    parser.add_argument("--step-time", type=float, default=d.step_time,
                        help="median step time of sleep/uniform/straggler envs")
    parser.add_argument("--seconds", type=float, default=d.seconds,
                        help="duration of one measurement")
    parser.add_argument("--iterations", type=int, default=None,
                        help="steps per env of one measurement (replaces --seconds)")
    parser.add_argument("--repeats", type=int, default=d.repeats,
                        help="the table shows medians; × full is the median of per-repeat ratios")
    parser.add_argument("--seed", type=int, default=d.seed,
                        help="seeds the samplers and the policies; repeat k resets with seed + k")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="threads of the MLP policy in the parent")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--json", type=str, default=None, help="write all results here")
    parser.add_argument("--replay-check", action="store_true",
                        help="record one partial-batch run (the first env, workers, envs per "
                        "worker, policy and float timeout; --iterations steps per env, 100 by "
                        "default), replay it, and report a bit-exact match or the first "
                        "mismatch (docs/semantics.md)")


def grid_from_args(args: argparse.Namespace) -> Grid:
    return Grid(envs=list(args.envs), workers=list(args.workers),
                envs_per_worker=list(args.envs_per_worker),
                timeouts=parse_timeouts(args.timeouts), policies=list(args.policies),
                policy_latencies=list(args.policy_latency), step_time=args.step_time,
                seconds=args.seconds, iterations=args.iterations, repeats=args.repeats,
                seed=args.seed, pipelined=args.pipelined)


def set_torch_threads(threads: int, policies: Sequence[str]) -> None:
    """One thread by default: the workers need the cores, and a small MLP gains nothing."""
    if any(p != "random" for p in policies):
        torch = require("torch", feature="a torch policy (--policies mlp:...)", extra="cli")
        torch.set_num_threads(threads)


def run_sweep(grid: Grid, show_progress: bool) -> list[LoopResult]:
    """``sweep`` with a tqdm progress bar on stderr."""
    tqdm = require("tqdm", feature="vecsample compare", extra="cli").tqdm

    with tqdm(total=grid.size(), disable=not show_progress, unit="run") as bar:
        def tick(r: LoopResult) -> None:
            bar.set_postfix_str(f"{r.env} {r.workers}x{r.envs_per_worker} timeout={r.timeout}")
            bar.update()

        return sweep(grid, tick)


def run(args: argparse.Namespace) -> int:
    if args.replay_check:
        from vecsample.tools import replay_check

        set_torch_threads(args.torch_threads, args.policies[:1])
        return replay_check.run(args)
    grid = grid_from_args(args)
    set_torch_threads(args.torch_threads, grid.policies)
    results = run_sweep(grid, not args.no_progress)
    print(report(results))  # noqa: T201 - CLI output
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=2)
    return 0
