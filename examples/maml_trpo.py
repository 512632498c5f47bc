"""MAML-TRPO (Finn et al. 2017) in one file on vecsample's MultiTaskSampler (docs/maml.md).

The 2DNavigation results of docs/lab/maml.md come from this script.

Per meta-batch: sample tasks; ``sample_async`` gives futures for the train episodes (before
adaptation) and the valid episodes (after one first-order inner step); the outer TRPO step
awaits them while the workers still sample, adapts with second-order MAML, and takes a
trust-region step on the valid surrogate loss (conjugate gradient + backtracking line search).
Writes ``returns.json`` (pre- and post-adaptation return per meta-batch), ``returns.png``,
``policy.th`` and ``config.json`` (pytorch-maml-rl's spelling) into ``--output-dir``.

Run: ``python examples/maml_trpo.py --config 2d-navigation --num-batches 50``
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import tyro
from torch.distributions import Categorical, Distribution, Independent, Normal
from torch.distributions.kl import kl_divergence
from torch.nn.utils import parameters_to_vector, vector_to_parameters
from tqdm import trange

import vecsample.envs  # noqa: F401  (registers the task envs)
from vecsample.maml import (
    BatchEpisodes,
    LinearFeatureBaseline,
    MetaConfig,
    MultiTaskSampler,
    Policy,
    get_input_size,
    get_policy_for_env,
    load_config,
    reinforce_loss,
    weighted_mean,
)


@dataclass
class Args:
    config: str = "2d-navigation"
    """a shipped config name (vecsample.maml.CONFIGS) or a JSON/YAML file"""
    num_batches: int = 0
    """meta-batches (outer updates); 0 keeps the config's num-batches"""
    meta_batch_size: int = 0
    """tasks per meta-batch; 0 keeps the config's"""
    fast_batch_size: int = 0
    """episodes per task; 0 keeps the config's"""
    num_workers: int = 2
    """vecsample worker processes"""
    seed: int = 1
    """seeds the policy init, the tasks, the envs and the action noise"""
    output_dir: str = "runs/maml_trpo"
    """where returns.json, returns.png, policy.th and config.json go"""
    device: str = "cpu"
    """torch device of the outer loop and of the episodes"""
    torch_threads: int = 1
    """intra-op threads of the outer loop; 1 leaves the cores to the workers"""
    batch_envs: bool = True
    """sample the batch-native MuJoCo task envs where the env has one (MultiTaskSampler's)"""


# --- MAML-TRPO -----------------------------------------------------------------------------


def detach(pi: Distribution) -> Distribution:
    """The same distribution with its parameters detached (the 'old' policy of TRPO)."""
    if isinstance(pi, Independent):
        return Independent(detach(pi.base_dist), pi.reinterpreted_batch_ndims)
    if isinstance(pi, Normal):
        return Normal(pi.loc.detach(), pi.scale.detach())
    if isinstance(pi, Categorical):
        return Categorical(logits=pi.logits.detach())
    raise TypeError(f"Expected Normal, Independent or Categorical, got {type(pi).__name__}.")


def adapt(
    policy: Policy, train: Sequence[BatchEpisodes], fast_lr: float, first_order: bool
) -> OrderedDict[str, torch.Tensor] | None:
    """Inner loop: one gradient step per train batch, from the policy's own parameters."""
    params: OrderedDict[str, torch.Tensor] | None = None
    for episodes in train:
        loss = reinforce_loss(policy, episodes, params=params)
        params = policy.update_params(loss, params, step_size=fast_lr, first_order=first_order)
    return params


def surrogate(
    policy: Policy,
    train: Sequence[BatchEpisodes],
    valid: BatchEpisodes,
    cfg: MetaConfig,
    old_pi: Distribution | None = None,
) -> tuple[torch.Tensor, torch.Tensor, Distribution]:
    """The valid batch's importance-weighted loss and KL after adaptation, for one task."""
    first_order = cfg.first_order or old_pi is not None  # the line search needs no Hessian
    params = adapt(policy, train, cfg.fast_lr, first_order)  # the inner step needs gradients
    with torch.set_grad_enabled(old_pi is None):
        pi = policy(valid.observations, params=params)
        old_pi = detach(pi) if old_pi is None else old_pi
        ratio = torch.exp(pi.log_prob(valid.actions) - old_pi.log_prob(valid.actions))
        loss = -weighted_mean(ratio * valid.advantages, lengths=valid.lengths).mean()
        kl = weighted_mean(kl_divergence(pi, old_pi), lengths=valid.lengths).mean()
    return loss, kl, old_pi


def conjugate_gradient(
    product: Callable[[torch.Tensor], torch.Tensor], b: torch.Tensor, iters: int
) -> torch.Tensor:
    """Solves ``A x = b`` for symmetric positive definite ``A`` given ``x -> A x``."""
    x = torch.zeros_like(b)
    r, p = b.clone(), b.clone()
    rr = r @ r
    for _ in range(iters):
        ap = product(p)
        alpha = rr / (p @ ap)
        x += alpha * p
        r -= alpha * ap
        rr_next = r @ r
        if rr_next < 1e-10:
            break
        p = r + (rr_next / rr) * p
        rr = rr_next
    return x


def fisher_product(
    policy: Policy, kl: torch.Tensor, damping: float
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``v -> (H + damping I) v`` with ``H`` the Hessian of ``kl`` in the policy's parameters."""
    grads = torch.autograd.grad(kl, list(policy.parameters()), create_graph=True)
    flat = parameters_to_vector(grads)

    def product(v: torch.Tensor) -> torch.Tensor:
        hv = torch.autograd.grad(flat @ v, list(policy.parameters()), retain_graph=True)
        return parameters_to_vector(hv).detach() + damping * v

    return product


def trpo_step(
    policy: Policy,
    loop: asyncio.AbstractEventLoop,
    futures: tuple[list[list[Any]], list[Any]],
    cfg: MetaConfig,
) -> dict[str, float]:
    """One outer update; awaits the sampler's futures, task by task, while it samples."""
    train_futures, valid_futures = futures
    per_task = list(zip(zip(*train_futures, strict=True), valid_futures, strict=True))

    async def first_pass() -> list[tuple[torch.Tensor, torch.Tensor, Distribution]]:
        async def one(train_f: Sequence[Any], valid_f: Any) -> Any:
            train = [await f for f in train_f]  # adapt as soon as this task's train batch is in
            return surrogate(policy, train, await valid_f, cfg)

        return list(await asyncio.gather(*(one(t, v) for t, v in per_task)))

    results = loop.run_until_complete(first_pass())
    episodes = [([f.result() for f in t], v.result()) for t, v in per_task]
    old_pis = [old_pi for _, _, old_pi in results]
    old_loss = torch.stack([loss for loss, _, _ in results]).mean()
    old_kl = torch.stack([kl for _, kl, _ in results]).mean()

    grads = parameters_to_vector(
        torch.autograd.grad(old_loss, list(policy.parameters()), retain_graph=True)
    )
    product = fisher_product(policy, old_kl, cfg.cg_damping)
    direction = conjugate_gradient(product, grads, cfg.cg_iters)
    shs = 0.5 * (direction @ product(direction))
    step = direction / torch.sqrt(shs / cfg.max_kl)
    return line_search(policy, episodes, old_pis, old_loss.item(), step, cfg)


def line_search(
    policy: Policy,
    episodes: list[tuple[list[BatchEpisodes], BatchEpisodes]],
    old_pis: list[Distribution],
    old_loss: float,
    step: torch.Tensor,
    cfg: MetaConfig,
) -> dict[str, float]:
    """Backtracks until the loss improves within the trust region, else keeps the old weights."""
    old_params = parameters_to_vector(policy.parameters()).detach()
    size = 1.0
    for _ in range(cfg.ls_max_steps):
        vector_to_parameters(old_params - size * step, policy.parameters())
        losses, kls = zip(
            *[
                surrogate(policy, t, v, cfg, old_pi)[:2]
                for (t, v), old_pi in zip(episodes, old_pis, strict=True)
            ],
            strict=True,
        )
        loss, kl = torch.stack(losses).mean().item(), torch.stack(kls).mean().item()
        if loss < old_loss and kl < cfg.max_kl:
            return {"loss_before": old_loss, "loss_after": loss, "kl_after": kl, "step": size}
        size *= cfg.ls_backtrack_ratio
    vector_to_parameters(old_params, policy.parameters())
    return {"loss_before": old_loss, "loss_after": old_loss, "kl_after": 0.0, "step": 0.0}


# --- the run ---------------------------------------------------------------------------------


def mean_return(batches: Sequence[BatchEpisodes]) -> float:
    """Mean undiscounted episode return over every task's batch."""
    return float(np.mean([b.rewards.sum(dim=0).mean().item() for b in batches]))


def configure(args: Args) -> MetaConfig:
    cfg = load_config(args.config)
    overrides = {
        "num_batches": args.num_batches,
        "meta_batch_size": args.meta_batch_size,
        "fast_batch_size": args.fast_batch_size,
    }
    return dataclasses.replace(cfg, **{k: v for k, v in overrides.items() if v})


def plot(history: list[dict[str, float]], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on CI machines
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    batches = [h["batch"] for h in history]
    ax.plot(batches, [h["pre_return"] for h in history], label="before adaptation (train)")
    ax.plot(batches, [h["post_return"] for h in history], label="after 1 step (valid)")
    ax.set(xlabel="meta-batch", ylabel="mean episode return", title=title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(args: Args) -> list[dict[str, float]]:
    cfg = configure(args)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.torch_threads)
    env = gym.make(cfg.env_name, **cfg.env_kwargs)
    policy = get_policy_for_env(env, cfg.hidden_sizes, cfg.nonlinearity).to(args.device)
    baseline = LinearFeatureBaseline(get_input_size(env))
    sampler = MultiTaskSampler(
        cfg.env_name, cfg.env_kwargs, cfg.fast_batch_size, policy, baseline, env=env,
        seed=args.seed, num_workers=args.num_workers, batch_envs=args.batch_envs,
    )  # fmt: skip
    loop = asyncio.get_event_loop()  # the loop the sampler's futures live on
    history: list[dict[str, float]] = []
    with sampler:
        for batch in trange(cfg.num_batches, desc=cfg.env_name):
            start = time.perf_counter()
            tasks = sampler.sample_tasks(cfg.meta_batch_size)
            futures = sampler.sample_async(
                tasks, num_steps=cfg.num_steps, fast_lr=cfg.fast_lr, gamma=cfg.gamma,
                gae_lambda=cfg.gae_lambda, device=args.device,
            )  # fmt: skip
            logs = trpo_step(policy, loop, futures, cfg)
            train, valid = sampler.sample_wait(futures)
            history.append({
                "batch": batch, "pre_return": mean_return(train[0]),
                "post_return": mean_return(valid), "seconds": time.perf_counter() - start, **logs,
            })  # fmt: skip
    torch.save(policy.state_dict(), out / "policy.th")
    (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
    record = {"args": dataclasses.asdict(args), "config": cfg.to_dict(),
              "batch_id": sampler.batch_id, "batches": history}
    (out / "returns.json").write_text(json.dumps(record, indent=2))
    plot(history, f"MAML-TRPO on {cfg.env_name}", out / "returns.png")
    return history


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line)."""
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    runs = main(parse_args())
    last = runs[-1]
    print(f"last meta-batch: pre {last['pre_return']:.2f}  post {last['post_return']:.2f}")
