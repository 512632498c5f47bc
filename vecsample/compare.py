"""``vecsample compare``: full against partial batches, side by side, in one run.

The sampling loop of the design card: send to every worker, ``step_recv(timeout)``, run the
policy once on whatever came back, send those workers again. ``timeout=None`` is the full batch;
a small float is the partial batch. Reports steps/s, workers per recv and policy calls per 1000
steps, and checks that every step sent was received.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from vecsample.errors import ConfigError
from vecsample.sampler import EnvMaker, VecSampler
from vecsample.testing import SlowEnv
from vecsample.worker import EnvFn

Policy = Callable[[np.ndarray], np.ndarray]


@dataclass
class LoopResult:
    """What one run of the sampling loop measured."""

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


def sampling_loop(sampler: VecSampler, timeout: float | None, seconds: float, policy: Policy,
                  seed: int = 0, max_steps: int | None = None) -> LoopResult:
    """Runs the partial/full loop for ``seconds`` (or ``max_steps``), then drains every worker."""
    obs, _ = sampler.reset(seed=seed)
    b = sampler.envs_per_worker
    first = policy(np.asarray(obs))
    for w in range(sampler.num_workers):
        sampler.step_send(w, first[w * b:(w + 1) * b])
    sent, received, recvs, calls, policy_s = sampler.num_workers * b, 0, 0, 1, 0.0
    before = sampler.stats()
    start = time.perf_counter()
    limit = float("inf") if max_steps is None else max_steps
    while time.perf_counter() - start < seconds and received < limit:
        results = sampler.step_recv(timeout)
        recvs += 1
        received += b * len(results)
        t0 = time.perf_counter()
        actions = policy(np.concatenate([np.asarray(r.obs) for r in results]))
        calls += 1
        policy_s += time.perf_counter() - t0
        for i, r in enumerate(results):
            sampler.step_send(r.worker, actions[i * b:(i + 1) * b])  # type: ignore[arg-type]
            sent += b
    while received < sent:  # drain: nothing sent is left unreceived
        results = sampler.step_recv(None)
        recvs += 1
        received += b * len(results)
    seconds = time.perf_counter() - start
    after = sampler.stats()
    return LoopResult(
        env="", timeout=timeout, workers=sampler.num_workers, envs_per_worker=b,
        steps=received, seconds=seconds, steps_per_s=received / seconds,
        workers_per_recv=(after["workers_received"] - before["workers_received"]) / recvs,
        policy_calls_per_1000_steps=1000.0 * calls / received,
        wait_s=after["wait_s"] - before["wait_s"], policy_s=policy_s,
        env_step_s=after["env_step_s"] - before["env_step_s"],
        steps_sent=sent, steps_received=received,
    )


def random_policy(n_actions: int, seed: int = 0) -> Policy:
    """Uniform discrete actions: a policy whose cost does not matter."""
    rng = np.random.default_rng(seed)
    return lambda obs: rng.integers(0, n_actions, size=len(obs))


def env_factories(name: str, count: int, step_time: float) -> list[EnvFn]:
    """CartPole-like gymnasium ids, or ``straggler``: SlowEnv with a heavy-tailed step time."""
    if name == "straggler":
        return [functools.partial(SlowEnv, env_index=i, step_time=step_time, tail="heavy")
                for i in range(count)]
    return [EnvMaker(name)] * count


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1", "straggler"],
                        help="gymnasium ids (discrete actions) or 'straggler'")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--envs-per-worker", type=int, default=16)
    parser.add_argument("--timeouts", nargs="+", default=["none", "0.0005"],
                        help="'none' for full batches, seconds for partial batches")
    parser.add_argument("--seconds", type=float, default=2.0, help="duration of one measurement")
    parser.add_argument("--straggler-step-time", type=float, default=2e-4)
    parser.add_argument("--repeats", type=int, default=3, help="the table shows the median")
    parser.add_argument("--json", type=str, default=None, help="write all results here")


def _timeouts(values: Sequence[str]) -> list[float | None]:
    try:
        return [None if v.lower() == "none" else float(v) for v in values]
    except ValueError as exc:
        raise ConfigError(f"--timeouts takes 'none' or seconds, got {list(values)}") from exc


def _measure(args: argparse.Namespace, env: str, timeout: float | None) -> list[LoopResult]:
    count = args.workers * args.envs_per_worker
    fns = env_factories(env, count, args.straggler_step_time)
    out = []
    with VecSampler(fns, num_workers=args.workers, infos=False) as sampler:
        n_actions = int(getattr(sampler.single_action_space, "n", 2))
        for repeat in range(args.repeats):
            policy = random_policy(n_actions, repeat)
            result = sampling_loop(sampler, timeout, args.seconds, policy)
            result.env = env
            out.append(result)
    return out


def _row(results: list[LoopResult]) -> dict[str, Any]:
    median = results[int(np.argsort([r.steps_per_s for r in results])[len(results) // 2])]
    return {
        "env": median.env, "timeout": "full" if median.timeout is None else median.timeout,
        "steps/s": median.steps_per_s, "workers/recv": median.workers_per_recv,
        "policy calls/1k steps": median.policy_calls_per_1000_steps,
    }


def format_table(rows: list[dict[str, Any]]) -> str:
    """A plain text table; floats with 4 significant digits."""
    cols = list(rows[0])
    cells = [[f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(x.ljust(w) for x, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    timeouts = _timeouts(args.timeouts)
    rows, everything = [], []
    for env in args.envs:
        for timeout in timeouts:
            results = _measure(args, env, timeout)
            everything += [asdict(r) for r in results]
            rows.append(_row(results))
            print(f"measured {env} timeout={timeout}", flush=True)  # noqa: T201 - CLI output
    print(format_table(rows))  # noqa: T201 - CLI output
    if args.json:
        with open(args.json, "w") as f:
            json.dump(everything, f, indent=2)
    return 0
