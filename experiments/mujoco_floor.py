"""Batch MuJoCo envs against their physics floor (docs/lab/mujoco_batch.md#the-physics-floor).

For every gymnasium MuJoCo v5 env with a batch form (``vecsample.envs.mujoco_batch.ENVS``), in
one process, on one core, three loops step the same envs with the same seeds and actions:

* ``floor``: ``frame_skip`` × ``mj_step`` on one ``MjData``. Each of gymnasium's envs replays,
  one after the other, the physics of its episodes in the gymnasium loop below
  (``data.ctrl[:] = action; mujoco.mj_step(model, data, frame_skip)``), its resets untimed:
  the physics gymnasium computed, with one Python call per step and nothing else.
* ``rr``: the same physics, round-robin: at each step every env's ``MjData`` in turn, as a batch
  env steps them (its resets, untimed, subtracted). ``rr`` against ``floor`` is what stepping
  many ``MjData`` instead of one costs the physics itself (each is colder in the caches).
* ``batch``: the batch env with ``num_threads=1``, as ``gymnasium.make_vec`` builds it, in
  SameStep (a gym loop resets an env inside the step that ended it), infos on, the registered
  time limit.
* ``gym``: ``gymnasium.make(id)`` envs stepped round-robin in a plain loop, each reset at its
  episode's end.

The batch env equals gymnasium's envs bit for bit, so ``batch`` and ``gym`` step the same
physics (the script checks that their last observations are equal: ``same``), and ``floor``
and ``rr`` replay it. Each round runs the four in turn (the order rotated), each from the same
seeded reset; the medians over the rounds give µs per env step, and the ratios are the medians
of each round's ratios. ``× floor`` = floor time / batch time (1.0: the batch env costs nothing
beside its physics); ``× rr`` = rr time / batch time (what the batch env costs beside the
physics of its many ``MjData``); ``× gym`` = gym time / batch time, the batch env's speed per
core over gymnasium's.

Run: ``python experiments/mujoco_floor.py --rounds 5 --json docs/lab/results/mujoco_floor.json``
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import gymnasium as gym
import mujoco
import numpy as np
import tyro

import vecsample.envs  # registers the batch ids
from vecsample.envs.mujoco_batch import ENVS
from vecsample.tools.bench import meta

LOOPS = ("floor", "rr", "batch", "gym")


@dataclass
class Args:
    envs: tuple[str, ...] = ()
    """gymnasium ids (default: every gymnasium MuJoCo env with a batch form)"""
    num_envs: tuple[int, ...] = (32, 128)
    """envs stepped by each loop (one table row per count)"""
    env_steps: int = 20000
    """env steps of each loop in each round (the batch steps env_steps // num_envs times)"""
    rounds: int = 3
    """rounds; each runs the three loops once, and the median is reported"""
    seed: int = 0
    """env i is seeded seed + i, every round; the actions come from this seed too"""
    clock: Literal["wall", "cpu"] = "wall"
    """wall: time.perf_counter; cpu: this process's CPU time (less sensitive to other processes
    on shared cores, blind to the time they take from it)"""
    json: str = ""
    """optional path for the results"""


def gymnasium_ids() -> list[str]:
    """The ids of ``ENVS`` that are gymnasium's own MuJoCo envs (not vecsample's task envs)."""
    return [s.gym_id for s in ENVS
            if str(gym.spec(s.gym_id).entry_point).startswith("gymnasium.envs.mujoco")]


def floor_loop(envs: list[Any], actions: np.ndarray, seed: int, ends: list[list[int]],
               clock: Callable[[], float]) -> float:
    """Seconds of ``frame_skip`` × ``mj_step`` over the episodes of ``ends`` (the steps at
    which each env's episodes ended in the gym loop), each env on its own ``MjData``."""
    total = 0.0
    for i, env in enumerate(envs):
        env.reset(seed=seed + i)
        model, data = env.unwrapped.model, env.unwrapped.data
        ctrl, skip, rows = data.ctrl, env.unwrapped.frame_skip, list(actions[:, i])
        start = 0
        for end in [*ends[i], len(rows) - 1]:
            begin = clock()
            for action in rows[start:end + 1]:
                ctrl[:] = action
                mujoco.mj_step(model, data, skip)
            total += clock() - begin
            if end in ends[i]:
                env.reset()
            start = end + 1
    return total


def round_robin_loop(envs: list[Any], actions: np.ndarray, seed: int, ends: list[list[int]],
                     clock: Callable[[], float]) -> float:
    """Seconds of ``frame_skip`` × ``mj_step`` over the same episodes, every env's ``MjData``
    in turn at each step (the resets' time subtracted)."""
    steppers = []
    for i, env in enumerate(envs):
        env.reset(seed=seed + i)
        model, data = env.unwrapped.model, env.unwrapped.data
        steppers.append((model, data, data.ctrl, env.unwrapped.frame_skip, set(ends[i]), env))
    resets = 0.0
    begin = clock()
    for t, row in enumerate(actions):
        for action, (model, data, ctrl, skip, episode_ends, env) in zip(row, steppers, strict=True):
            ctrl[:] = action
            mujoco.mj_step(model, data, skip)
            if t in episode_ends:
                start = clock()
                env.reset()
                resets += clock() - start
    return clock() - begin - resets


def gym_loop(envs: list[Any], actions: np.ndarray, seed: int,
             clock: Callable[[], float]) -> tuple[float, np.ndarray, list[list[int]]]:
    """Seconds of gymnasium's envs stepped round-robin, their last observations and the steps
    at which each env's episodes ended."""
    last = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    ends: list[list[int]] = [[] for _ in envs]
    begin = clock()
    for t, row in enumerate(actions):
        for i, env in enumerate(envs):
            last[i], _, terminated, truncated, _ = env.step(row[i])
            if terminated or truncated:
                last[i] = env.reset()[0]
                ends[i].append(t)
    return clock() - begin, np.stack(last), ends


def batch_loop(env: gym.vector.VectorEnv, actions: np.ndarray, seed: int,
               clock: Callable[[], float]) -> tuple[float, np.ndarray]:
    """Seconds of the batch env over ``actions`` and its last observations."""
    obs, _ = env.reset(seed=seed)
    begin = clock()
    for row in actions:
        obs = env.step(row)[0]
    return clock() - begin, obs


def rounds(gym_id: str, num_envs: int, args: Args) -> dict[str, Any]:
    """µs per env step of each loop, every round, for ``num_envs`` envs of ``gym_id``."""
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    batch_id = vecsample.envs.BATCH_IDS[gym_id]
    batch = gym.make_vec(batch_id, num_envs, vectorization_mode="vector_entry_point",
                         num_threads=1, autoreset_mode="SameStep")
    singles = [gym.make(gym_id) for _ in range(num_envs)]
    space = singles[0].action_space
    steps = max(1, args.env_steps // num_envs)
    actions = np.random.default_rng(args.seed).uniform(
        space.low, space.high, (steps, num_envs, *space.shape)).astype(space.dtype)
    times: dict[str, list[float]] = {name: [] for name in LOOPS}
    same = True
    try:
        for r in range(args.rounds):
            for name in LOOPS[r % 4:] + LOOPS[:r % 4]:  # rotated: none always runs first
                if name == "batch":
                    seconds, batch_obs = batch_loop(batch, actions, args.seed, clock)
                elif name == "gym":
                    seconds, gym_obs, ends = gym_loop(singles, actions, args.seed, clock)
                else:  # the floors replay the gym loop's episodes: the first round runs it first
                    ends = ends if r else gym_loop(singles, actions, args.seed, clock)[2]
                    replay = floor_loop if name == "floor" else round_robin_loop
                    seconds = replay(singles, actions, args.seed, ends, clock)
                times[name].append(1e6 * seconds / (steps * num_envs))
            same &= bool(np.array_equal(batch_obs, gym_obs))
    finally:
        batch.close()
        for env in singles:
            env.close()
    return summary(gym_id, num_envs, steps, times, same)


def summary(gym_id: str, num_envs: int, steps: int, times: dict[str, list[float]],
            same: bool) -> dict[str, Any]:
    """One row: each loop's median µs per env step (and every round's), and the median over the
    rounds of each round's ratio to the batch env (the loops of one round run seconds apart, the
    rounds minutes apart: on shared cores the rounds differ more than the loops of one)."""
    def ratio(name: str) -> float:  # each round's own ratio: its loops ran minutes apart
        return statistics.median(a / b for a, b in zip(times[name], times["batch"], strict=True))

    return {"env": gym_id, "num_envs": num_envs, "batch_steps": steps, "same": same,
            **{f"{name}_us": statistics.median(times[name]) for name in LOOPS},
            **{f"{name}_us_rounds": times[name] for name in LOOPS},
            "x_floor": ratio("floor"), "x_rr": ratio("rr"), "x_gym": ratio("gym"),
            "loadavg": list(os.getloadavg())}


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a plain-text table."""
    head = (f"{'env':<27}{'envs':>5}{'floor µs':>10}{'rr µs':>8}{'batch µs':>10}{'gym µs':>10}"
            f"{'× floor':>9}{'× rr':>7}{'× gym':>8}{'same':>6}{'load':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['env']:<27}{r['num_envs']:>5}{r['floor_us']:>10.2f}{r['rr_us']:>8.2f}"
                     f"{r['batch_us']:>10.2f}{r['gym_us']:>10.2f}{r['x_floor']:>9.3f}"
                     f"{r['x_rr']:>7.3f}{r['x_gym']:>8.2f}{'yes' if r['same'] else 'NO':>6}"
                     f"{r['loadavg'][0]:>6.1f}")
    return "\n".join(lines)


def main(args: Args, argv: Sequence[str] = ()) -> dict[str, Any]:
    rows = [rounds(gym_id, n, args) for gym_id in (args.envs or gymnasium_ids())
            for n in args.num_envs]
    result = {"meta": {**meta(), "command": " ".join(["python experiments/mujoco_floor.py",
                                                      *argv])},
              "args": asdict(args), "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Args from ``argv`` (default: the command line)."""
    return tyro.cli(Args, description=__doc__, args=argv)


if __name__ == "__main__":
    argv = sys.argv[1:]
    result = main(parse_args(argv), argv)
    m = result["meta"]
    print(f"{m['cpu']}, {m['cores']} cores; python {m['python']}, "
          + ", ".join(f"{k} {m['versions'].get(k)}" for k in ("numpy", "gymnasium", "mujoco"))
          + f"; commit {m['commit']}; clock {result['args']['clock']}; medians of "
          f"{result['args']['rounds']} rounds")
    print(table(result["rows"]))
