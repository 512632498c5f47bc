"""PPO (clipped surrogate, GAE) on vecsample, in one file (docs/ppo.md).

The envs run in vecsample worker processes (``vecsample.VectorEnv``, same-step autoreset). The
rollout (``vecsample.train.Rollout``) samples with a copy of the agent on the device chosen by
measurement (``--device auto``), synced once per rollout, and the update trains on the device
chosen for training. Truncated episodes are bootstrapped from the value of their final
observation.

    python examples/ppo.py                                # CartPole-v1, stops once solved
    python examples/ppo.py --preset mujoco --env-id HalfCheetah-v5 --total-timesteps 300000

``--preset mujoco`` swaps in CleanRL's MuJoCo settings (PRESETS below) as the defaults; flags
given on the command line still override them, and ``--preset mujoco --help`` shows them.

Outputs go to ``runs/<run name>/``: ``episodes.csv`` (global step, return, length),
``summary.json`` (steps to solve, wall time, placement, per-phase stats) and ``curve.png``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
import tyro
from torch import nn
from torch.distributions import Categorical, Normal

from vecsample import AutoresetMode, VectorEnv
from vecsample.train.profile import ProgressBar, format_stats, phase_totals, stats_delta
from vecsample.train.rollout import Rollout, RolloutBatch


@dataclass
class Args:
    """Every knob of a run; each field is also a command-line flag (``--num-envs 8``)."""

    env_id: str = "CartPole-v1"
    """any gymnasium id with a Box observation space"""
    preset: Literal["classic", "mujoco"] = "classic"
    """the defaults: classic (CartPole, these) or mujoco (CleanRL's MuJoCo settings)"""
    total_timesteps: int = 500_000
    """env steps over all envs"""
    seed: int = 1
    """seeds torch, numpy and the envs (through SeedSequence)"""
    num_envs: int = 8
    """parallel envs"""
    num_workers: int = 2
    """worker processes (this machine has 2 cores)"""
    num_steps: int = 128
    """steps per env per rollout (T)"""
    timeout: float | None = None
    """None: full batches; seconds: partial batches (step_recv)"""
    device: str = "auto"
    """where to sample: auto measures, and also picks the training device"""
    torch_threads: int = 1
    """intra-op threads of the trainer process (see train())"""
    learning_rate: float = 2.5e-4
    """Adam step size"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 over the run"""
    gamma: float = 0.99
    """discount"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    num_minibatches: int = 4
    """minibatches per epoch"""
    update_epochs: int = 4
    """passes over each rollout"""
    norm_adv: bool = True
    """normalise advantages per minibatch"""
    clip_coef: float = 0.2
    """PPO ratio clip"""
    clip_vloss: bool = True
    """clip the value loss too"""
    ent_coef: float = 0.01
    """entropy bonus"""
    vf_coef: float = 0.5
    """value loss weight"""
    max_grad_norm: float = 0.5
    """gradient clipping"""
    target_kl: float | None = None
    """stop the epochs early past this approximate KL; None: never"""
    normalize: bool = False
    """observation and reward normalisation wrappers (on for mujoco)"""
    solved_return: float | None = 475.0
    """stop once the last solved-window episodes average this; None: run every step"""
    solved_window: int = 100
    """episodes in that average (gymnasium's definition of solved)"""
    run_name: str | None = None
    """the run's folder under out-dir; None: <env-id>__seed<seed>"""
    out_dir: str = "runs"
    """where episodes.csv, summary.json and curve.png go"""
    profile: bool = False
    """print where the time went at the end"""
    progress: bool = True
    """the live tqdm bar (hidden anyway when stderr is not a terminal)"""


#: The defaults of each ``--preset``: mujoco is CleanRL's MuJoCo settings.
PRESETS: dict[str, Args] = {
    "classic": Args(),
    "mujoco": Args(
        preset="mujoco",
        env_id="HalfCheetah-v5",
        total_timesteps=1_000_000,
        num_envs=4,
        num_steps=512,
        learning_rate=3e-4,
        num_minibatches=32,
        update_epochs=10,
        ent_coef=0.0,
        normalize=True,
        solved_return=None,
    ),
}


HELP = ("-h", "--help")


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line): the preset's defaults, then the flags.

    A first pass reads ``--preset`` (help aside); the second parses every flag over that
    preset, so flags given override it and ``--help`` shows its values as the defaults.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    first = tyro.cli(Args, description=__doc__, args=[a for a in argv if a not in HELP])
    return tyro.cli(Args, description=__doc__, args=argv, default=PRESETS[first.preset])


# --- envs (module level, so the worker processes can unpickle the factories) -------------------


def make_env(env_id: str, normalize: bool, gamma: float) -> gym.Env[Any, Any]:
    """One env with its wrappers, built inside a worker. Returns are recorded before any
    normalisation, so the logged returns are the env's own."""
    env = gym.make(env_id)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    if isinstance(env.action_space, gym.spaces.Box):
        env = gym.wrappers.ClipAction(env)
    if normalize:
        env = gym.wrappers.NormalizeObservation(env)
        env = gym.wrappers.TransformObservation(
            env, lambda o: np.clip(o, -10, 10), env.observation_space
        )
        env = gym.wrappers.NormalizeReward(env, gamma=gamma)
        env = gym.wrappers.TransformReward(env, lambda r: float(np.clip(r, -10, 10)))
    return env


class EnvFactory:
    """A picklable ``make_env`` call (a lambda would not survive forkserver)."""

    def __init__(self, env_id: str, normalize: bool, gamma: float) -> None:
        self.env_id, self.normalize, self.gamma = env_id, normalize, gamma

    def __call__(self) -> gym.Env[Any, Any]:
        return make_env(self.env_id, self.normalize, self.gamma)


# --- the agent -----------------------------------------------------------------------------------


def dense(n_in: int, n_out: int, gain: float = math.sqrt(2)) -> nn.Linear:
    """A linear layer with orthogonal weights of the given gain and zero bias."""
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def mlp(n_in: int, n_out: int, out_gain: float) -> nn.Sequential:
    return nn.Sequential(
        dense(n_in, 64), nn.Tanh(), dense(64, 64), nn.Tanh(), dense(64, n_out, out_gain)
    )


class Agent(nn.Module):
    """Separate actor and critic MLPs (64-64, tanh). Categorical or diagonal-Gaussian actions."""

    def __init__(self, obs_dim: int, action_space: gym.Space[Any]) -> None:
        super().__init__()
        self.continuous = isinstance(action_space, gym.spaces.Box)
        n_out = int(np.prod(action_space.shape)) if self.continuous else int(action_space.n)
        self.critic = mlp(obs_dim, 1, 1.0)
        self.actor = mlp(obs_dim, n_out, 0.01)
        self.log_std = nn.Parameter(torch.zeros(n_out)) if self.continuous else None

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Actor head and value: what the placement probe times."""
        return self.actor(obs), self.critic(obs).squeeze(-1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def dist(self, obs: torch.Tensor) -> torch.distributions.Distribution:
        head = self.actor(obs)
        if self.log_std is None:
            return Categorical(logits=head)
        return Normal(head, self.log_std.expand_as(head).exp())

    def _log_prob(self, d: torch.distributions.Distribution, actions: torch.Tensor) -> torch.Tensor:
        lp = d.log_prob(actions)
        return lp.sum(-1) if self.continuous else lp

    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Used by the rollout: sampled actions, their log-probabilities and the values."""
        d = self.dist(obs)
        actions = d.sample()
        return {"actions": actions, "logprob": self._log_prob(d, actions), "value": self.value(obs)}

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        d = self.dist(obs)
        entropy = d.entropy()
        entropy = entropy.sum(-1) if self.continuous else entropy
        return self._log_prob(d, actions), entropy, self.value(obs)


def act(agent: nn.Module, obs: torch.Tensor) -> dict[str, torch.Tensor]:
    assert isinstance(agent, Agent)
    return agent.act(obs)


# --- the update ----------------------------------------------------------------------------------


def advantages(
    agent: Agent, b: RolloutBatch, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over (T, N). An episode that ended at t is cut there; a truncated one is
    bootstrapped from the value of its final observation, a terminated one from 0."""
    values, T = b.extras["value"], b.rewards.shape[0]
    done = b.terminated | b.truncated
    with torch.no_grad():
        next_value = agent.value(b.next_obs)
        end_value = torch.zeros_like(values)
        bootstrap = b.truncated & ~b.terminated & b.has_final_obs
        if bootstrap.any():
            end_value[bootstrap] = agent.value(b.final_obs[bootstrap])
    adv = torch.zeros_like(values)
    running = torch.zeros_like(next_value)
    for t in reversed(range(T)):
        following = next_value if t == T - 1 else values[t + 1]
        following = torch.where(done[t], end_value[t], following)
        delta = b.rewards[t] + gamma * following - values[t]
        running = delta + gamma * lam * (~done[t]).float() * running
        adv[t] = running
    return adv, adv + values


def update(
    agent: Agent, optimizer: torch.optim.Optimizer, b: RolloutBatch, args: Args
) -> dict[str, float]:
    """``update_epochs`` passes of clipped PPO over the rollout, in shuffled minibatches."""
    adv, returns = advantages(agent, b, args.gamma, args.gae_lambda)
    rows = b.rewards.numel()
    obs = b.obs.reshape(rows, *b.obs.shape[2:])
    actions = b.actions.reshape(rows, *b.actions.shape[2:])
    old_logprob, old_value = b.extras["logprob"].reshape(rows), b.extras["value"].reshape(rows)
    adv, returns = adv.reshape(rows), returns.reshape(rows)
    size = rows // args.num_minibatches
    info: dict[str, float] = {}
    for _ in range(args.update_epochs):
        order = torch.randperm(rows, device=obs.device)
        for start in range(0, rows, size):
            mb = order[start : start + size]
            info = _minibatch_step(
                agent,
                optimizer,
                args,
                obs[mb],
                actions[mb],
                old_logprob[mb],
                old_value[mb],
                adv[mb],
                returns[mb],
            )
        if args.target_kl is not None and info["approx_kl"] > args.target_kl:
            break
    return info


def _minibatch_step(
    agent: Agent,
    optimizer: torch.optim.Optimizer,
    args: Args,
    obs: torch.Tensor,
    actions: torch.Tensor,
    old_logprob: torch.Tensor,
    old_value: torch.Tensor,
    adv: torch.Tensor,
    returns: torch.Tensor,
) -> dict[str, float]:
    logprob, entropy, value = agent.evaluate(obs, actions)
    log_ratio = logprob - old_logprob
    ratio = log_ratio.exp()
    if args.norm_adv:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    policy_loss = torch.max(
        -adv * ratio, -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
    ).mean()
    if args.clip_vloss:
        clipped = old_value + (value - old_value).clamp(-args.clip_coef, args.clip_coef)
        value_loss = 0.5 * torch.max((value - returns) ** 2, (clipped - returns) ** 2).mean()
    else:
        value_loss = 0.5 * ((value - returns) ** 2).mean()
    loss = policy_loss - args.ent_coef * entropy.mean() + args.vf_coef * value_loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
    optimizer.step()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean().item()
    return {
        "policy_loss": policy_loss.item(),
        "value_loss": value_loss.item(),
        "approx_kl": approx_kl,
    }


# --- the run -------------------------------------------------------------------------------------


def train(args: Args) -> dict[str, Any]:
    """Runs PPO and writes episodes.csv, summary.json and curve.png; returns the summary."""
    # One intra-op thread by default: the networks are tiny, and the worker processes need the
    # other core. With 2 threads on a busy 2-core machine, OpenMP's spinning threads made one
    # 64-64 forward 13x slower (1.45 ms against 0.11 ms, measured here; see docs/lab/placement.md).
    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    run_dir = Path(args.out_dir) / (args.run_name or f"{args.env_id}__seed{args.seed}")
    run_dir.mkdir(parents=True, exist_ok=True)
    factory = EnvFactory(args.env_id, args.normalize, args.gamma)
    envs = VectorEnv(
        [factory] * args.num_envs, args.num_workers, autoreset_mode=AutoresetMode.SAME_STEP
    )
    try:
        return _train(args, envs, run_dir)
    finally:
        envs.close()


def _train(args: Args, envs: VectorEnv, run_dir: Path) -> dict[str, Any]:
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    agent = Agent(obs_dim, envs.single_action_space)
    batch_rows = args.num_envs * args.num_steps
    # device="auto" times this agent on each device (the workers are already running), then
    # moves the agent to the training device it chose: build the optimizer after this line.
    rollout = Rollout(
        envs,
        agent,
        args.num_steps,
        act=act,
        device=args.device,
        timeout=args.timeout,
        seed=args.seed,
        minibatch_size=batch_rows // args.num_minibatches,
        updates_per_rollout=args.update_epochs * args.num_minibatches,
    )
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    sampler, timer = envs.sampler, rollout.timer
    num_updates = max(1, args.total_timesteps // batch_rows)
    recent: deque[float] = deque(maxlen=args.solved_window)
    solved_at: int | None = None
    before, start = sampler.stats(), time.perf_counter()  # profile the loop, not the start-up
    bar = ProgressBar(
        timer,
        total=num_updates * batch_rows,
        desc=args.env_id,
        disable=None if args.progress else True,
        totals=lambda: phase_totals(sampler.stats()),
        extra=lambda: {"ret": f"{np.mean(recent):.1f}" if recent else "-"},
    )
    seen = 0
    with bar, open(run_dir / "episodes.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["global_step", "return", "length", "wall_s"])
        for iteration in range(1, num_updates + 1):
            if args.anneal_lr:
                optimizer.param_groups[0]["lr"] = args.learning_rate * (
                    1 - (iteration - 1) / num_updates
                )
            batch = rollout.collect()
            with timer.phase("train"):
                info = update(agent, optimizer, batch.to(rollout.train_device), args)
            for ep in rollout.episodes[seen:]:
                recent.append(ep.ret)
                writer.writerow(
                    [ep.step, f"{ep.ret:.3f}", ep.length, f"{time.perf_counter() - start:.2f}"]
                )
            seen = len(rollout.episodes)
            f.flush()  # a long run's curve can be read while it runs
            bar.update(batch_rows)
            solved = (
                args.solved_return is not None
                and len(recent) == recent.maxlen
                and np.mean(recent) >= args.solved_return
            )
            if solved:
                solved_at = rollout.global_step
                break
    wall = time.perf_counter() - start
    stats = stats_delta(before, sampler.stats())
    summary = {
        "args": dataclasses.asdict(args),
        "env_steps": rollout.global_step,
        "episodes": len(rollout.episodes),
        "solved_at_step": solved_at,
        "final_mean_return": float(np.mean(recent)) if recent else None,
        "wall_s": wall,
        "steps_per_s": rollout.global_step / wall,
        "placement": {
            "rollout": rollout.placement.rollout_device,
            "train": rollout.placement.train_device,
            "reason": rollout.placement.reason,
        },
        "weight_syncs": rollout.sync_count,
        "last_update": info,
        "stats": stats,
        "torch": torch.__version__,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    plot_curve(run_dir / "episodes.csv", run_dir / "curve.png", args)
    print(
        f"{args.env_id}: {rollout.global_step} steps in {wall:.1f} s "
        f"({summary['steps_per_s']:.0f} steps/s), mean return of the last {len(recent)} episodes "
        f"{summary['final_mean_return']}, solved at step {solved_at}; "
        f"sampled on {rollout.rollout_device}, trained on {rollout.train_device}"
    )
    print(f"wrote {run_dir}/episodes.csv, summary.json, curve.png")
    if args.profile:
        print(format_stats(stats, title="profile", workers=sampler.num_workers))
    return summary


def plot_curve(csv_path: Path, png_path: Path, args: Args) -> None:
    """Episode returns against env steps, with a moving average over `solved_window` episodes."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server
    import matplotlib.pyplot as plt

    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    steps = np.array([int(r["global_step"]) for r in rows])
    returns = np.array([float(r["return"]) for r in rows])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, returns, ".", markersize=2, alpha=0.3, label="episode return")
    if len(returns) >= 1:
        k = min(args.solved_window, len(returns))
        avg = np.convolve(returns, np.ones(k) / k, mode="valid")
        ax.plot(steps[k - 1 :], avg, label=f"mean of last {k} episodes")
    if args.solved_return is not None:
        ax.axhline(
            args.solved_return,
            color="gray",
            linestyle="--",
            label=f"solved ({args.solved_return:g})",
        )
    ax.set_xlabel("env steps")
    ax.set_ylabel("return")
    ax.set_title(f"PPO on vecsample: {args.env_id} (seed {args.seed})")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    train(parse_args())
