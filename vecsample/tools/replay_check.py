"""``vecsample compare --replay-check``: record one partial-batch run, replay it, compare.

The run is the loop of ``vecsample compare`` (send to every worker, ``step_recv(timeout)``, act
on what came back, send those workers again) on the first of ``--envs``, ``--workers``,
``--envs-per-worker`` and ``--policies``, with the first float of ``--timeouts``, for
``--iterations`` steps per env (100 by default; a count, not a duration, so the replayed
program makes the same calls). It runs three times: recorded, replayed from the log, and free
(neither), and digests every recv: the workers in order, then every byte of their
observations, rewards, flags and infos. The report says whether the replay matched bit for bit,
or where it first differed, and whether the free run differed (with a partial batch it should:
that is what replay is for). docs/semantics.md, "Reproducing an asynchronous run".
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vecsample.sampler import VecSampler
from vecsample.tools.policies import Policy, make_policy
from vecsample.tools.workloads import env_factories, parse_timeouts

#: Steps per env when --iterations is not given.
DEFAULT_ITERATIONS = 100


@dataclass
class Check:
    """What --replay-check runs: one layout, one policy, one timeout, a number of steps."""

    env: str
    workers: int
    envs_per_worker: int
    timeout: float
    policy: str
    step_time: float
    steps_per_env: int
    seed: int

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Check:
        timeouts = [t for t in parse_timeouts(args.timeouts) if t is not None] or [0.0005]
        return cls(args.envs[0], args.workers[0], args.envs_per_worker[0], timeouts[0],
                   args.policies[0], args.step_time, args.iterations or DEFAULT_ITERATIONS,
                   args.seed)


def digest_recv(results: Sequence[Any]) -> bytes:
    """One recv as 16 bytes: the workers in order and every byte of what they returned."""
    h = hashlib.blake2b(digest_size=16)
    for r in results:
        h.update(repr((r.worker, sorted(r.infos.items()), sorted(r.reset_infos.items()))).encode())
        for field in (r.obs, r.rewards, r.terminated, r.truncated, r.final_obs,
                      r.has_final_obs, r.restarted):
            h.update(np.ascontiguousarray(field).tobytes())
    return h.digest()


def sampled(check: Check, **log: Any) -> list[bytes]:
    """One run of the loop (``log``: ``record=`` or ``replay=``): a digest per recv."""
    fns = env_factories(check.env, check.workers * check.envs_per_worker, check.step_time)
    with VecSampler(fns, num_workers=check.workers, seed=check.seed, **log) as s:
        policy = make_policy(check.policy, s.single_observation_space, s.single_action_space,
                             seed=check.seed)
        obs, _ = s.reset()
        _send(s, range(s.num_slots), policy, np.asarray(obs))
        digests, received, limit = [], 0, check.steps_per_env * s.num_envs
        while received < limit:
            results = s.step_recv(check.timeout)
            digests.append(digest_recv(results))
            received += s.envs_per_slot * len(results)
            obs = np.concatenate([np.asarray(r.obs) for r in results])
            _send(s, [r.worker for r in results if r.worker is not None], policy, obs)
        digests.append(digest_recv(s.step_recv(None)))  # the drain: every step sent comes back
    return digests


def _send(s: VecSampler, workers: Sequence[int], policy: Policy, obs: np.ndarray) -> None:
    actions = policy(obs)
    b = s.envs_per_slot
    for i, w in enumerate(workers):
        s.step_send(w, actions[i * b:(i + 1) * b])


def first_difference(a: Sequence[bytes], b: Sequence[bytes]) -> int | None:
    """The index of the first recv that differs (or where one run is longer), None if equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def report(check: Check, recorded: list[bytes], replayed: list[bytes], free: list[bytes],
           log_bytes: int) -> str:
    """The lines ``--replay-check`` prints."""
    where = first_difference(recorded, replayed)
    loose = first_difference(recorded, free)
    return "\n".join([
        f"replay check: {check.env}, {check.workers} workers × {check.envs_per_worker} envs, "
        f"policy {check.policy}, timeout {check.timeout * 1e3:g} ms, "
        f"{check.steps_per_env} steps per env, seed {check.seed}",
        f"  recorded: {len(recorded)} recvs, log {log_bytes} bytes "
        f"({log_bytes / max(1, len(recorded)):.1f} bytes per recv, header included)",
        "  replay:   " + ("match: every recv bit-identical" if where is None else
                          f"MISMATCH: first at recv {where} of {len(recorded)}"),
        "  free run: " + ("identical to the recording (the timing gave the same arrival "
                          "order; a partial batch usually does not)" if loose is None else
                          f"differs from recv {loose} on, as partial batches do without replay"),
    ])


def run(args: argparse.Namespace) -> int:
    check = Check.from_args(args)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.vsreplay")
        recorded = sampled(check, record=path)
        replayed = sampled(check, replay=path)
        size = os.path.getsize(path)
    free = sampled(check)
    print(report(check, recorded, replayed, free, size))  # noqa: T201 - CLI output
    return 0 if first_difference(recorded, replayed) is None else 1
