"""Full against partial batches, swept over timeout, workers, envs and policy (docs/timeout.md).

The sampling loop (vecsample.tools.compare.sampling_loop): send to every worker,
``step_recv(timeout)``, run the policy on what came back, send those workers again. For every
configuration it reports steps/s, workers per recv, policy calls per 1000 steps and the time in
wait / policy / other, writes ``results.json`` and PNG plots under ``--out-dir``, and (with
``--model``) the prediction of the loop model (experiments/_timeout_model.py) next to each
measurement.

    python -m experiments.timeout_comparison --preset stragglers-vs-uniform   # from the checkout

The flags are the fields of ``vecsample.tools.compare.Grid`` (what ``vecsample compare`` sweeps)
plus this script's own. ``--preset NAME`` makes one of PRESETS the defaults: flags given on the
command line still override it, and ``--preset NAME --help`` shows its values. Presets:
``halfcheetah-8x20`` and ``halfcheetah-8x4000`` (8 workers x 20 or 4000 HalfCheetah envs, 1000
iterations each: the two setups of the blog post on pytorch-maml-rl's sampler that docs/timeout.md
checks; ``--scale`` shrinks envs per worker and iterations for a small machine), ``compare`` (the
defaults of ``vecsample compare``), ``sleep-scaling`` (sleeping envs, 1 vs 16 workers),
``stragglers-vs-uniform`` (envs with a heavy-tailed step time against uniform ones),
``crossover`` (a fixed per-call policy latency swept against a step-time spread) and ``n-sweep``
(envs per worker swept at a fixed per-call latency: the post's sqrt(n) argument). The old names
``seed-small``, ``seed-large``, ``p6`` and ``p7`` still work (PRESET_ALIASES), as in the commands
of the dated results. A timeout of ``none`` (or ``None``) is the full batch.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import tyro
from tyro.constructors import ConstructorRegistry, PrimitiveConstructorSpec, PrimitiveTypeInfo

from experiments import _timeout_model as tm
from vecsample.tools import compare

SEED_TIMEOUTS: list[float | None] = [None, 0.1, 0.01, 0.001, 0.0001]

PresetName = Literal["compare", "halfcheetah-8x20", "halfcheetah-8x4000", "sleep-scaling",
                     "stragglers-vs-uniform", "n-sweep", "crossover"]
#: Earlier names of presets, still accepted by ``--preset``: the commands of the dated results
#: in docs/lab/timeout.md use them.
PRESET_ALIASES = {"seed-small": "halfcheetah-8x20", "seed-large": "halfcheetah-8x4000",
                  "p6": "sleep-scaling", "p7": "stragglers-vs-uniform"}


@dataclass
class Args(compare.Grid):
    """What to sweep (the fields of compare.Grid, whose docstrings are their help) and how to
    report it."""

    preset: PresetName | None = None
    """one of PRESETS as the defaults; flags given on the command line override it"""
    scale: float = 1.0
    """multiplies envs per worker and iterations (of a preset or not), for a small machine"""
    model: bool = False
    """also predict each configuration with the loop model (_timeout_model.py)"""
    torch_threads: int = 1
    """threads of the MLP policy in the parent: the workers need the cores"""
    out_dir: str = "runs/timeout"
    """where results.json and the PNG plots go"""
    progress: bool = True
    """the progress bar on stderr"""


#: The defaults of each ``--preset``.
PRESETS: dict[str, compare.Grid] = {
    "compare": compare.Grid(),
    "halfcheetah-8x20": compare.Grid(envs=["HalfCheetah-v5"], workers=[8], envs_per_worker=[20],
                                     iterations=1000, timeouts=SEED_TIMEOUTS),
    "halfcheetah-8x4000": compare.Grid(envs=["HalfCheetah-v5"], workers=[8],
                                       envs_per_worker=[4000], iterations=1000,
                                       timeouts=SEED_TIMEOUTS),
    "sleep-scaling": compare.Grid(envs=["sleep"], workers=[1, 16], envs_per_worker=[1],
                                  step_time=0.05, timeouts=[None, 0.001], policies=["random"],
                                  seconds=3.0, repeats=5, interleave_groups=True),
    "stragglers-vs-uniform": compare.Grid(envs=["straggler", "sleep", "CartPole-v1"], workers=[8],
                                          envs_per_worker=[1], step_time=0.002,
                                          timeouts=[None, 0.0001], seconds=2.0, repeats=5,
                                          policy_latencies=[0.0, 0.001]),
    "n-sweep": compare.Grid(envs=["uniform"], workers=[8], envs_per_worker=[1, 4, 16, 64],
                            step_time=0.001, policy_latencies=[0.004], policies=["random"],
                            timeouts=[None, 0.0001], seconds=3.0, repeats=3),
    "crossover": compare.Grid(envs=["uniform"], workers=[8], envs_per_worker=[4],
                              step_time=0.005, policies=["random"], timeouts=[None, 0.0001],
                              policy_latencies=[0.0, 0.002, 0.004, 0.008, 0.016, 0.032],
                              seconds=2.0, repeats=5),
}

#: ``none`` as well as tyro's ``None`` for an absent value (a full-batch timeout), as in
#: ``vecsample compare --timeouts none 0.0005``.
FLAGS = ConstructorRegistry()


@FLAGS.primitive_rule
def _none_any_case(info: PrimitiveTypeInfo) -> PrimitiveConstructorSpec[None] | None:
    if info.type is not type(None):
        return None
    return PrimitiveConstructorSpec(
        nargs=1, metavar="{none}", choices=("none", "None"), instance_from_str=lambda _: None,
        is_instance=lambda x: x is None, str_from_instance=lambda _: ["none"])


HELP = ("-h", "--help")


def unalias(argv: Sequence[str]) -> list[str]:
    """``argv`` with an earlier preset name (PRESET_ALIASES) after ``--preset`` made current."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg.startswith("--preset="):
            name = arg.partition("=")[2]
            out[i] = f"--preset={PRESET_ALIASES.get(name, name)}"
        elif i and out[i - 1] == "--preset":
            out[i] = PRESET_ALIASES.get(arg, arg)
    return out


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line): the preset's defaults, then the flags.

    A first pass reads ``--preset`` (help aside); the second parses every flag over that
    preset, so flags given override it and ``--help`` shows its values as the defaults.
    """
    argv = unalias(sys.argv[1:] if argv is None else argv)
    with FLAGS:  # as a context: tyro.cli(registry=...) is ignored by older tyro (0.9.x)
        preset = tyro.cli(Args, description=__doc__, args=[a for a in argv if a not in HELP]).preset
        grid = {} if preset is None else dataclasses.asdict(PRESETS[preset])
        return tyro.cli(Args, description=__doc__, args=argv, default=Args(preset=preset, **grid))


def grid_of(args: Args) -> compare.Grid:
    """The Grid part of ``args``, with ``--scale`` applied to envs per worker and iterations."""
    grid = compare.Grid(**{f.name: getattr(args, f.name) for f in dataclasses.fields(compare.Grid)})
    iterations = None if grid.iterations is None else max(1, round(grid.iterations * args.scale))
    return dataclasses.replace(
        grid, envs_per_worker=[max(1, round(n * args.scale)) for n in grid.envs_per_worker],
        iterations=iterations)


# --- the model next to the measurements ----------------------------------------------------------


def step_times_of(env: str, step_time: float) -> np.ndarray:
    if env in compare.SYNTHETIC_ENVS:
        return tm.sleep_step_times(compare.SYNTHETIC_ENVS[env], step_time)
    fn = compare.env_factories(env, 1, step_time)[0]
    e = fn()
    try:
        return tm.env_step_times(e)
    finally:
        e.close()


def predict(grid: compare.Grid, rows: list[dict[str, Any]]) -> None:
    """Adds 'model steps/s' and 'model x full' to every summary row (in place)."""
    overheads = {w: tm.calibrate_overhead(w) for w in grid.workers}
    for env in grid.envs:
        times = step_times_of(env, grid.step_time)
        fn = compare.env_factories(env, 1, grid.step_time)[0]
        probe = fn()
        obs, _ = probe.reset(seed=0)
        spaces = probe.observation_space, probe.action_space
        probe.close()
        for row in rows:
            if row["env"] == env:
                _predict_row(row, times, overheads, spaces, np.asarray(obs))


def _predict_row(row: dict[str, Any], times: np.ndarray, overheads: dict[int, float],
                 spaces: tuple[Any, Any], obs: np.ndarray) -> None:
    w, n = (int(x) for x in row["W x n"].split("x"))
    spec, _, lat = row["policy"].partition("+")
    latency = float(lat.removesuffix("ms")) / 1e3 if lat else 0.0
    policy = compare.make_policy(spec, *spaces, latency)
    costs = tm.Costs(times, tm.policy_costs(policy, obs, [m * n for m in range(1, w + 1)]),
                     overheads[w])
    timeout = None if row["timeout"] == "full" else float(row["timeout"])
    part = tm.simulate(costs, w, n, timeout, recvs=max(200, 4000 // n))
    full = tm.simulate(costs, w, n, None, recvs=max(200, 4000 // n))
    row["model steps/s"] = part.steps_per_s
    row["model x full"] = part.steps_per_s / full.steps_per_s
    row["model workers/recv"] = part.workers_per_recv
    mean, gap = tm.straggler_gap(times, w, n)
    row["gap/mean %"], row["gap ms"] = 100 * gap / mean, 1e3 * gap


def scaling(results: list[compare.LoopResult]) -> list[dict[str, Any]]:
    """Steps/s at each worker count over the fewest workers, per repeat, then the median."""
    by: dict[tuple[Any, ...], dict[int, dict[int, float]]] = {}
    for r in results:
        key = (r.env, r.policy, r.policy_latency, r.envs_per_worker, r.timeout)
        by.setdefault(key, {}).setdefault(r.workers, {})[r.repeat] = r.steps_per_s
    rows = []
    for (env, policy, _, per, timeout), counts in by.items():
        base = counts[min(counts)]
        for w, reps in sorted(counts.items()):
            ratios = [reps[k] / base[k] for k in reps if k in base]
            rows.append({"env": env, "policy": policy, "n": per, "timeout": str(timeout),
                         "workers": w, "x fewest workers": float(np.median(ratios)),
                         "min": float(np.min(ratios)), "max": float(np.max(ratios))})
    return rows


# --- output --------------------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    import gymnasium
    import torch

    def cmd(*c: str) -> str:
        try:
            return subprocess.run(c, capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            return ""

    model = [ln.split(":", 1)[1].strip() for ln in cmd("lscpu").splitlines()
             if ln.startswith("Model name")]
    return {"cpu": model[0] if model else platform.processor(), "cores": os.cpu_count(),
            "load_avg": os.getloadavg(), "python": platform.python_version(),
            "numpy": np.__version__, "torch": torch.__version__,
            "gymnasium": gymnasium.__version__, "commit": cmd("git", "rev-parse", "HEAD"),
            "command": " ".join(["python -m experiments.timeout_comparison", *sys.argv[1:]])}


def plot(rows: list[dict[str, Any]], out: Path) -> list[str]:
    """throughput.png (steps/s by timeout, one line per config) and time_split.png."""
    plt = _pyplot()
    configs: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        configs.setdefault(f"{r['env']} {r['W x n']} {r['policy']}", []).append(r)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, rs in configs.items():
        labels = [str(r["timeout"]) for r in rs]
        ax.plot(labels, [r["x full"] for r in rs], marker="o", label=name)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set(xlabel="recv timeout (s); full = wait for all", ylabel="steps/s ÷ full batch",
           title="Partial against full batches (medians of per-repeat ratios)")
    ax.legend(fontsize=7)
    _save(plt, fig, out / "throughput.png")
    fig, ax = plt.subplots(figsize=(9, 4.5))
    names = [f"{r['env']} {r['W x n']} {r['policy']} {r['timeout']}" for r in rows]
    bottom = np.zeros(len(rows))
    for part in ("wait %", "policy %", "other %"):
        values = np.array([r[part] for r in rows])
        ax.bar(range(len(rows)), values, bottom=bottom, label=part.removesuffix(" %"))
        bottom += values
    ax.set_xticks(range(len(rows)), names, rotation=60, ha="right", fontsize=6)
    ax.set(ylabel="% of wall time in the parent", title="Where the parent's time went")
    ax.legend()
    _save(plt, fig, out / "time_split.png")
    return ["throughput.png", "time_split.png"]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_crossover(rows: list[dict[str, Any]], out: Path) -> list[str]:
    """crossover.png: partial ÷ full against the per-call policy latency, measured and model."""
    plt = _pyplot()
    lines: dict[str, list[tuple[float, dict[str, Any]]]] = {}
    for r in rows:
        if r["timeout"] != "full":
            spec, _, lat = r["policy"].partition("+")
            ms = float(lat.removesuffix("ms")) if lat else 0.0
            lines.setdefault(f"{r['env']} {r['W x n']} {spec} timeout={r['timeout']}",
                             []).append((ms, r))
    if not lines or max(len(v) for v in lines.values()) < 2:
        return []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, points in lines.items():
        points.sort(key=lambda p: p[0])
        xs = [p[0] for p in points]
        ax.plot(xs, [p[1]["x full"] for p in points], marker="o", label=f"{name} measured")
        if "model x full" in points[0][1]:
            ax.plot(xs, [p[1]["model x full"] for p in points], ls="--", marker="x",
                    label=f"{name} model")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set(xlabel="fixed policy latency per call (ms)", ylabel="partial steps/s ÷ full",
           title="When partial batches pay: step-time spread against per-call cost")
    ax.legend(fontsize=7)
    _save(plt, fig, out / "crossover.png")
    return ["crossover.png"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    grid = grid_of(args)
    compare.set_torch_threads(args.torch_threads, grid.policies)
    results = compare.run_sweep(grid, args.progress)
    rows = compare.summarize(results)
    if args.model:
        predict(grid, rows)
    print(compare.format_table(rows))
    scale_rows = scaling(results) if len(grid.workers) > 1 else []
    if scale_rows:
        print(compare.format_table(scale_rows))
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = {"environment": environment(), "args": dataclasses.asdict(args),
              "grid": dataclasses.asdict(grid), "summary": rows, "scaling": scale_rows,
              "results": [dataclasses.asdict(r) for r in results]}
    report["plots"] = plot(rows, out) + plot_crossover(rows, out)
    (out / "results.json").write_text(json.dumps(report, indent=2))
    print(f"wrote {out / 'results.json'} and {', '.join(report['plots'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
