"""``pipeline=True``: each worker process serves its block as two halves, two workers of the step
API. The halves must behave exactly as two one-half workers would (same data, same env ids, same
commands), while sharing one process: its death loses both, and nothing else is lost (deaths and
restarts with pipelining: tests/test_restart.py)."""

from __future__ import annotations

import numpy as np
import psutil
import pytest
from helpers import assert_same

from vecsample import VecSampler, errors
from vecsample.testing import CountingEnv, fns
from vecsample.tools.compare import sampling_loop
from vecsample.tools.policies import Policy

ENVS = 8

MODES = ["SameStep", "NextStep", "Disabled"]


def _schedule(rng: np.random.Generator, workers: int, rounds: int) -> list[list[int]]:
    """Which workers each round sends to: a random nonempty subset of them."""
    return [sorted(rng.choice(workers, size=rng.integers(1, workers + 1), replace=False))
            for _ in range(rounds)]


def _run(sampler: VecSampler, schedule: list[list[int]], seed: int) -> list[tuple]:
    """Resets, then per round sends to its workers and receives them all (full, by worker);
    returns everything received, in order, with the envs' own ``t`` read back by ``call``."""
    obs, infos = sampler.reset(seed=seed)
    out: list[tuple] = [("reset", obs.copy(), tuple(dict(i) for i in infos))]
    for k, workers in enumerate(schedule):
        for w in workers:
            ids = sampler.worker_env_ids(w)
            sampler.step_send(w, np.full(len(ids), k % 3, dtype=np.int64))
        got = sorted(sampler.step_recv(timeout=None), key=lambda r: r.worker)
        assert [r.worker for r in got] == workers
        out += [(r.worker, list(r.env_ids), r.obs.copy(), r.rewards.copy(), r.terminated.copy(),
                 r.truncated.copy(), dict(r.infos)) for r in got]
    out.append(("t", sampler.call("t")))
    return out


@pytest.mark.parametrize("mode", MODES)
def test_the_halves_give_what_two_workers_give(make_sampler, mode):
    # 2 processes x 2 halves against 4 plain workers: the same blocks, so the same data.
    schedule = _schedule(np.random.default_rng(MODES.index(mode)), 4, 30)
    kwargs = {"autoreset_mode": mode, "context": "fork", "deadline": 10}
    piped = make_sampler(fns(CountingEnv, ENVS, length=3), num_workers=2, pipeline=True,
                         **kwargs)
    plain = make_sampler(fns(CountingEnv, ENVS, length=3), num_workers=4, **kwargs)
    assert piped.num_slots == plain.num_slots == plain.num_workers == 4
    assert piped.num_workers == 2 and piped.options.num_workers == 2
    assert [piped.worker_env_ids(w) for w in range(4)] == [plain.worker_env_ids(w)
                                                          for w in range(4)]
    got, expected = _run(piped, schedule, seed=5), _run(plain, schedule, seed=5)
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert_same(a, b, f"item {i}")


def test_each_process_serves_two_halves(make_sampler):
    s = make_sampler(fns(CountingEnv, ENVS), num_workers=2, pipeline=True)
    pids = s.worker_pids()
    assert pids[0] == pids[1] != pids[2] == pids[3]
    children = {p.pid for p in psutil.Process().children(recursive=True) if p.pid in pids}
    assert children == set(pids) and len(children) == 2


def test_a_half_is_received_while_the_other_is_not_sent(make_sampler):
    s = make_sampler(fns(CountingEnv, ENVS, length=100), num_workers=2, pipeline=True,
                     deadline=10)
    s.reset(seed=0)
    for _ in range(3):
        s.step_send(1, np.ones(2, dtype=np.int64))
        (result,) = s.step_recv(timeout=None)
        assert result.worker == 1 and list(result.env_ids) == [2, 3]
    t = s.call("t")
    assert t == [0, 0, 3, 3, 0, 0, 0, 0]  # the other half and the other process never moved


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"num_workers": 3, "uneven_split": True}, "divisible by 2 \\* num_workers"),
    ({"num_workers": 4}, "divisible by 2 \\* num_workers = 8"),
    ({"num_workers": 2, "pipeline": 1}, "pipeline must be True or False"),
])
def test_what_pipelining_cannot_do_is_refused(kwargs, match):
    options = {"pipeline": True, **kwargs}
    with pytest.raises(errors.ConfigError, match=match):
        VecSampler(fns(CountingEnv, 12 if options["num_workers"] != 4 else 4), **options)


def test_the_pipelined_loop_loses_and_repeats_nothing(make_sampler):
    # The loop a throughput user runs: receive any ready half, act on it, send it back.
    s = make_sampler(fns(CountingEnv, ENVS, length=10**9), num_workers=2, pipeline=True,
                     deadline=10)
    policy: Policy = lambda obs: np.ones(len(obs), dtype=np.int64)  # noqa: E731
    result = sampling_loop(s, 0.0, seconds=0.5, policy=policy)
    assert result.steps_sent == result.steps_received > 0
    t = np.array(s.call("t"))
    per_half = t.reshape(4, 2)
    assert (per_half[:, 0] == per_half[:, 1]).all()  # a half's envs step together
    assert per_half.sum() == result.steps_received  # every step sent was taken exactly once
