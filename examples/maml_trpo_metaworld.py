"""MAML-TRPO on Meta-World+ ML1 / ML10 through vecsample's MultiTaskSampler (docs/maml.md).

The outer loop is examples/maml_trpo.py's (imported: ``trpo_step``, ``configure``); this file
adds what Meta-World needs: the success rate per task before and after adaptation (the metric
Meta-World's papers quote: an episode succeeds if ``info["success"]`` was reached at any step),
a per-task paired difference, and an evaluation on the test split at the end.

Per meta-batch, ``metrics.csv`` gets one row: pre/post-adaptation success rate and return (means
over the tasks), the mean and standard error over the tasks of each task's post - pre success,
and the seconds. Test-split rows (the policy adapted on held-out goals or classes, no outer
step) have ``split=test``. Also ``metrics.json`` (with the per-task values), ``metrics.png``,
``policy.th`` and ``config.json``.

Run: ``python examples/maml_trpo_metaworld.py --config metaworld-ml1-reach --num-batches 20``
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import tyro
from maml_trpo import configure, trpo_step
from tqdm import trange

import vecsample.envs  # noqa: F401  (registers MetaWorld-v3)
from vecsample.maml import (
    BatchEpisodes,
    LinearFeatureBaseline,
    MetaConfig,
    MultiTaskSampler,
    Policy,
    get_input_size,
    get_policy_for_env,
)


@dataclass
class Args:
    config: str = "metaworld-ml1-reach"
    """a shipped config (metaworld-ml1-reach, -push, -pick-place, metaworld-ml10, -ml45)"""
    num_batches: int = 0
    """meta-batches (outer updates); 0 keeps the config's"""
    meta_batch_size: int = 0
    """tasks per meta-batch; 0 keeps the config's"""
    fast_batch_size: int = 0
    """episodes per task; 0 keeps the config's"""
    max_path_length: int = 500
    """episode length (Meta-World's is 500); shorter for quick runs"""
    test_batches: int = 1
    """meta-batches on the test split after training (adaptation only, no outer step)"""
    num_workers: int = 2
    """vecsample worker processes"""
    seed: int = 1
    """seeds the policy init, the tasks, the envs and the action noise"""
    output_dir: str = "runs/maml_trpo_metaworld"
    """where metrics.csv, metrics.json, metrics.png, policy.th and config.json go"""
    torch_threads: int = 1
    """intra-op threads of the outer loop; 1 leaves the cores to the workers"""
    summarize: tuple[str, ...] = ()
    """instead of training: the table over these runs' output dirs (one per seed), and a plot
    of them in --output-dir"""
    last: int = 5
    """with --summarize: the table's late window, the last LAST train meta-batches of the
    shortest run"""


def task_success(episodes: BatchEpisodes) -> float:
    """The task's success rate: the fraction of its episodes that reached success."""
    return float(np.nanmean(episodes.logs["episode_success"]))


def task_return(episodes: BatchEpisodes) -> float:
    return float(episodes.rewards.sum(dim=0).mean().item())


def summarize(train: list[list[BatchEpisodes]], valid: list[BatchEpisodes]) -> dict[str, Any]:
    """Pre (first train round) and post (valid round) success and return, per task and mean."""
    pre = [task_success(e) for e in train[0]]
    post = [task_success(e) for e in valid]
    gain = np.subtract(post, pre)
    return {
        "pre_success": float(np.mean(pre)),
        "post_success": float(np.mean(post)),
        "gain_mean": float(gain.mean()),
        "gain_se": float(gain.std(ddof=1) / np.sqrt(len(gain))) if len(gain) > 1 else 0.0,
        "pre_return": float(np.mean([task_return(e) for e in train[0]])),
        "post_return": float(np.mean([task_return(e) for e in valid])),
        "pre_success_per_task": pre,
        "post_success_per_task": post,
    }


def make_sampler(cfg: MetaConfig, split: str, policy: Policy, args: Args) -> MultiTaskSampler:
    kwargs = {**cfg.env_kwargs, "split": split, "max_path_length": args.max_path_length}
    env = gym.make(cfg.env_name, **kwargs)
    baseline = LinearFeatureBaseline(get_input_size(env))
    return MultiTaskSampler(
        cfg.env_name, kwargs, cfg.fast_batch_size, policy, baseline, env=env,
        seed=args.seed + (0 if split == "train" else 10_000), num_workers=args.num_workers,
    )  # fmt: skip


def run_batches(
    sampler: MultiTaskSampler, policy: Policy, cfg: MetaConfig, count: int, split: str
) -> list[dict[str, Any]]:
    """``count`` meta-batches; an outer TRPO step after each on the train split only."""
    loop = asyncio.get_event_loop()  # the loop the sampler's futures live on
    rows = []
    for batch in trange(count, desc=f"{cfg.env_kwargs.get('env_name', cfg.env_kwargs)} {split}"):
        start = time.perf_counter()
        tasks = sampler.sample_tasks(cfg.meta_batch_size)
        futures = sampler.sample_async(
            tasks, num_steps=cfg.num_steps, fast_lr=cfg.fast_lr, gamma=cfg.gamma,
            gae_lambda=cfg.gae_lambda,
        )  # fmt: skip
        logs = trpo_step(policy, loop, futures, cfg) if split == "train" else {}
        train, valid = sampler.sample_wait(futures)
        row = {"batch": batch, "split": split, **summarize(train, valid)}
        row["task_classes"] = [t.env_name for t in tasks]
        rows.append({**row, "seconds": time.perf_counter() - start, **logs})
    return rows


CSV_FIELDS = ("batch", "split", "pre_success", "post_success", "gain_mean", "gain_se",
              "pre_return", "post_return", "seconds")  # fmt: skip


def write_outputs(rows: list[dict[str, Any]], cfg: MetaConfig, args: Args, out: Path) -> None:
    with open(out / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    record = {"args": dataclasses.asdict(args), "config": cfg.to_dict(), "batches": rows}
    (out / "metrics.json").write_text(json.dumps(record, indent=2))
    (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
    plot([r for r in rows if r["split"] == "train"], f"MAML-TRPO, {args.config}", out)


def plot(rows: list[dict[str, Any]], title: str, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on CI machines
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    batches = [r["batch"] for r in rows]
    for ax, metric in zip(axes, ("success", "return"), strict=True):
        ax.plot(batches, [r[f"pre_{metric}"] for r in rows], label="before adaptation")
        ax.plot(batches, [r[f"post_{metric}"] for r in rows], label="after 1 step")
        ax.set(xlabel="meta-batch", ylabel=f"mean {metric} over tasks", title=title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "metrics.png", dpi=100)
    plt.close(fig)


def main(args: Args) -> list[dict[str, Any]]:
    cfg = configure(args)  # type: ignore[arg-type]  # maml_trpo's Args fields, a superset here
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.torch_threads)
    env = gym.make(cfg.env_name, **cfg.env_kwargs)
    policy = get_policy_for_env(env, cfg.hidden_sizes, cfg.nonlinearity)
    env.close()
    with make_sampler(cfg, "train", policy, args) as sampler:
        rows = run_batches(sampler, policy, cfg, cfg.num_batches, "train")
    if args.test_batches:
        with make_sampler(cfg, "test", policy, args) as sampler:
            rows += run_batches(sampler, policy, cfg, args.test_batches, "test")
    torch.save(policy.state_dict(), out / "policy.th")
    write_outputs(rows, cfg, args, out)
    return rows


def summarize_runs(args: Args) -> list[str]:
    """Per run and over runs (mean ± standard error): success at meta-batch 0, over the late
    window, and on the test split, before and after adaptation."""
    runs = [json.loads((Path(d) / "metrics.json").read_text())["batches"] for d in args.summarize]
    length = min(len([r for r in run if r["split"] == "train"]) for run in runs)
    columns: dict[str, list[float]] = {}
    for run in runs:
        train = [r for r in run if r["split"] == "train"][:length]
        late = train[length - args.last :]
        test = [r for r in run if r["split"] == "test"]
        values = {
            "batch 0 pre": train[0]["pre_success"], "batch 0 post": train[0]["post_success"],
            f"last {args.last} pre": float(np.mean([r["pre_success"] for r in late])),
            f"last {args.last} post": float(np.mean([r["post_success"] for r in late])),
            "test pre": float(np.mean([r["pre_success"] for r in test])) if test else np.nan,
            "test post": float(np.mean([r["post_success"] for r in test])) if test else np.nan,
        }  # fmt: skip
        for key, value in values.items():
            columns.setdefault(key, []).append(value)
    lines = ["run | " + " | ".join(columns)]
    for i, d in enumerate(args.summarize):
        lines.append(f"{d} | " + " | ".join(f"{v[i]:.3f}" for v in columns.values()))
    se = {k: np.std(v, ddof=1) / np.sqrt(len(v)) if len(v) > 1 else 0.0 for k, v in columns.items()}
    lines.append("mean ± SE | " + " | ".join(f"{np.mean(v):.3f} ± {se[k]:.3f}"
                                             for k, v in columns.items()))  # fmt: skip
    plot_runs(runs, length, Path(args.output_dir))
    return lines


def plot_runs(runs: list[list[dict[str, Any]]], length: int, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on CI machines
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, color in (("pre_success", "tab:blue"), ("post_success", "tab:orange")):
        curves = np.array([[r[key] for r in run if r["split"] == "train"][:length] for run in runs])
        for curve in curves:
            ax.plot(curve, color=color, alpha=0.25)
        label = "before adaptation" if key == "pre_success" else "after 1 step"
        ax.plot(curves.mean(axis=0), color=color, label=f"{label} (mean of {len(runs)})")
    ax.set(xlabel="meta-batch", ylabel="success rate (mean over tasks)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "summary.png", dpi=100)
    plt.close(fig)


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line)."""
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    cli = parse_args()
    if cli.summarize:
        print("\n".join(summarize_runs(cli)))
        raise SystemExit(0)
    for r in main(cli):
        print(
            f"{r['split']} batch {r['batch']}: success pre {r['pre_success']:.3f} post "
            f"{r['post_success']:.3f} (paired gain {r['gain_mean']:+.3f} ± {r['gain_se']:.3f}); "
            f"return pre {r['pre_return']:.1f} post {r['post_return']:.1f}; {r['seconds']:.1f} s"
        )
