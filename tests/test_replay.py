"""Recording and replaying partial batches (vecsample/_parent/replay.py, docs/semantics.md).

The runs use StragglerEnv with ``seed=None``: its step times come from the OS's entropy, so the
arrival order, and with it which workers each ``step_recv(timeout)`` returns, changes from run
to run. The policy mixes the whole batch into every action (as a policy with batch statistics or
a shared recurrent state would), so a different arrival order changes the envs' data, not only
how it is grouped. A trajectory is compared as bytes: bit for bit, -0.0 is not 0.0.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from helpers import kill_and_wait, posix_only, run_script

from vecsample import VecSampler, errors
from vecsample._wire.replay_log import MAGIC, VERSION, LogReader, Tag
from vecsample.testing import CountingEnv, StragglerEnv, fns

WORKERS, PER_WORKER = 4, 2
NUM_ENVS = WORKERS * PER_WORKER


def straggler_fns(**kwargs: Any) -> list[Callable[[], Any]]:
    return fns(StragglerEnv, NUM_ENVS, step_time=0.0005, seed=None, length=9, info=True,
               **kwargs)


def policy(batch: np.ndarray) -> np.ndarray:
    """Depends on every observation of the batch: the arrival order changes the actions."""
    return (np.arange(len(batch)) + int(batch.sum())) % 4


def fingerprint(results: list[Any]) -> tuple[Any, ...]:
    """One recv as bytes: the workers in order, every array's bytes, the infos' repr."""
    return tuple(
        (r.worker, r.obs.tobytes(), r.rewards.tobytes(), r.terminated.tobytes(),
         r.truncated.tobytes(), r.final_obs.tobytes(), r.has_final_obs.tobytes(),
         r.restarted.tobytes(), repr(sorted(r.infos.items())),
         repr(sorted(r.reset_infos.items())))
        for r in results)


def send(s: VecSampler, results: list[Any]) -> None:
    actions = policy(np.concatenate([r.obs for r in results]))
    for i, r in enumerate(results):
        s.step_send(r.worker, actions[i * PER_WORKER:(i + 1) * PER_WORKER])


def partial_run(s: VecSampler, recvs: int = 80,
                between: Callable[[int], None] | None = None) -> list[tuple[Any, ...]]:
    """reset, send to all, then ``recvs`` partial batches (``between(i)`` after recv i), then
    a drain; every recv's fingerprint."""
    obs, _ = s.reset()
    actions = policy(np.asarray(obs))
    for w in range(WORKERS):
        s.step_send(w, actions[w * PER_WORKER:(w + 1) * PER_WORKER])
    trajectory = []
    for i in range(recvs):
        results = s.step_recv(0.0001, copy=True)
        trajectory.append(fingerprint(results))
        if between is not None:
            between(i)
        send(s, results)
    trajectory.append(fingerprint(s.step_recv(None, copy=True)))
    return trajectory


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "run.vsreplay"


def test_a_replayed_straggler_run_is_bit_identical_and_a_free_run_is_not(make_sampler, log):
    kwargs = {"num_workers": WORKERS, "seed": 7, "deadline": 30}
    s = make_sampler(straggler_fns(), record=log, **kwargs)
    recorded = partial_run(s)
    s.close()  # the log is complete once the recording sampler is closed
    first = partial_run(make_sampler(straggler_fns(), replay=log, **kwargs))
    second = partial_run(make_sampler(straggler_fns(), replay=log, **kwargs))
    free = partial_run(make_sampler(straggler_fns(), **kwargs))
    assert first == recorded
    assert second == recorded
    # The test could fail: without replay the timing changes what the envs see.
    assert free != recorded
    assert any(len(recv) < WORKERS for recv in recorded[:-1]), "no partial batch was recorded"


def test_the_log_is_a_few_bytes_per_recv(make_sampler, log):
    s = make_sampler(straggler_fns(), record=log, num_workers=WORKERS, seed=7)
    trajectory = partial_run(s, recvs=200)
    s.close()
    sends = sum(len(recv) for recv in trajectory[:-1]) + WORKERS
    body = log.stat().st_size - len(MAGIC) - 6 - _header_size(log)
    # [SEND, w] is 3 bytes; [RECV, [w...]] is 3 + one byte per worker; a reset a few more.
    assert body <= 3 * sends + sum(3 + len(recv) for recv in trajectory) + 64


def _header_size(path: Path) -> int:
    return int(struct.unpack("<I", path.read_bytes()[len(MAGIC) + 2:len(MAGIC) + 6])[0])


def test_full_batches_resets_and_commands_replay_too(make_sampler, log):
    def run(**kwargs: Any) -> list[Any]:
        s = make_sampler(fns(CountingEnv, 4, info=True), num_workers=2, seed=1, **kwargs)
        out = [s.reset(seed=5)[0].tobytes()]
        s.set_attr("length", 3)
        out += [s.step(np.ones(4, dtype=np.int64)).obs.tobytes() for _ in range(5)]
        # options whose repr holds a memory address, different in every run
        out.append(s.reset(options={"opaque": Opaque()},
                           mask=np.array([True, False, True, False]))[0].tobytes())
        s.close()
        return out

    assert run(replay=_recorded(run, log)) == run()


class Opaque:
    """An object with the default repr: ``<... Opaque object at 0x...>``."""


def _recorded(run: Callable[..., Any], log: Path) -> Path:
    run(record=log)
    return log


# --- divergence ----------------------------------------------------------------------------------


def _record_simple(make_sampler: Callable[..., VecSampler], log: Path) -> None:
    s = make_sampler(fns(CountingEnv, 4), num_workers=2, seed=1, record=log)
    s.reset()
    s.step_send(0, np.ones(2, dtype=np.int64))
    s.step_send(1, np.ones(2, dtype=np.int64))
    s.step_recv(None)
    s.close()


def test_a_different_send_sequence_raises_at_the_first_divergent_call_and_after(
        make_sampler, log):
    _record_simple(make_sampler, log)
    s = make_sampler(fns(CountingEnv, 4), num_workers=2, seed=1, replay=log)
    s.reset()
    with pytest.raises(errors.ReplayDivergedError) as info:
        s.step_send(1, np.ones(2, dtype=np.int64))  # the record sent worker 0 first
    assert info.value.call == 2
    assert "step_send(0" in info.value.expected and "step_send(1" in info.value.got
    assert "call #2" in str(info.value)
    with pytest.raises(errors.ReplayDivergedError, match="replay stopped"):
        s.step_send(0, np.ones(2, dtype=np.int64))  # it never goes on


@pytest.mark.parametrize("change", [
    {"num_workers": 4}, {"seed": 2}, {"autoreset_mode": "NextStep"}, {"env_length": 5},
])
def test_a_different_sampler_or_env_is_refused_at_construction(make_sampler, log, change):
    _record_simple(make_sampler, log)
    kwargs: dict[str, Any] = {"num_workers": 2, "seed": 1, **change}
    length = kwargs.pop("env_length", 10)
    with pytest.raises(errors.ReplayDivergedError) as info:
        make_sampler(fns(CountingEnv, 4, length=length), replay=log, **kwargs)
    assert info.value.call == 0


def test_a_different_reset_seed_or_a_longer_program_diverges(make_sampler, log):
    _record_simple(make_sampler, log)
    s = make_sampler(fns(CountingEnv, 4), num_workers=2, seed=1, replay=log)
    with pytest.raises(errors.ReplayDivergedError, match=r"reset\(seed=None.*reset\(seed=3"):
        s.reset(seed=3)
    t = make_sampler(fns(CountingEnv, 4), num_workers=2, seed=1, replay=log)
    t.reset()
    t.step_send(0, np.ones(2, dtype=np.int64))
    t.step_send(1, np.ones(2, dtype=np.int64))
    t.step_recv(None)
    with pytest.raises(errors.ReplayDivergedError, match="log ends after 4 records"):
        t.step(np.ones(4, dtype=np.int64))


# --- the log file --------------------------------------------------------------------------------


def test_a_log_cut_anywhere_reads_up_to_its_last_complete_record(make_sampler, log, tmp_path):
    _record_simple(make_sampler, log)
    data = log.read_bytes()
    full = _records(log)
    assert [r[0] for r in full] == [Tag.RESET, Tag.SEND, Tag.SEND, Tag.RECV]
    start = len(MAGIC) + 6 + _header_size(log)
    for cut in range(start, len(data) + 1):
        part = tmp_path / "cut"
        part.write_bytes(data[:cut])
        got = _records(part)
        assert got == full[:len(got)]
        assert cut < len(data) or got == full


def _records(path: Path) -> list[list[Any]]:
    reader = LogReader(path)
    out = []
    while (record := reader.next()) is not None:
        out.append(record)
    reader.close()
    return out


def test_a_crashed_recording_replays_up_to_its_end_then_says_so(make_sampler, log):
    _record_simple(make_sampler, log)
    log.write_bytes(log.read_bytes()[:-2])  # the last record (the recv) cut short
    s = make_sampler(fns(CountingEnv, 4), num_workers=2, seed=1, replay=log)
    s.reset()
    s.step_send(0, np.ones(2, dtype=np.int64))
    s.step_send(1, np.ones(2, dtype=np.int64))
    with pytest.raises(errors.ReplayDivergedError, match=r"after 3 records \(then 3 bytes"):
        s.step_recv(None)


@pytest.mark.parametrize("damage", ["not a log", "version", "record", "missing"])
def test_a_damaged_log_is_a_typed_error(make_sampler, log, damage):
    _record_simple(make_sampler, log)
    data = bytearray(log.read_bytes())
    if damage == "not a log":
        data[:3] = b"XYZ"
    elif damage == "version":
        data[len(MAGIC)] = 99
    elif damage == "record":
        data[len(MAGIC) + 6 + _header_size(log)] = 0xC1  # a byte msgpack never uses
    log.write_bytes(bytes(data))
    path = log.with_name("nowhere") if damage == "missing" else log
    with pytest.raises(errors.ReplayLogError, match=str(path)):
        s = make_sampler(fns(CountingEnv, 4), num_workers=2, seed=1, replay=path)
        s.reset()


#: Records a log cannot hold.
CRAFTED = {
    "an unknown command": [6, 1, b"\x00" * 8],  # issue 42 item 8: ValueError out of Command(1)
    "a command that is never recorded": [6, 7, None],
    "a command by name": [6, "reset_task", None],
    "a digest that is not bytes": [6, 4, "digest"],
    "a digest of another size": [6, 4, b"\x00" * 3],
    "an unknown kind": [42, 0],
    "a kind that is not an int": ["SEND", 0],
    "a kind that is a bool": [True, 0],
    "too many fields": [1, 0, 0],
    "too few fields": [7, 0],
    "a worker that is a bool": [1, True],
    "a negative worker": [1, -1],
    "a worker that is a str": [1, "0"],
    "workers that are not a list": [3, 0],
    "a worker listed twice": [3, [0, 0]],
    "a worker in the list that is not an int": [3, [0, 1.0]],
    "hung workers that are not a list": [4, [0], "DeadlineExceededError", 1],
    "an error type that is not a str": [4, [0], 3, []],
    "a restart reason that is not a str": [7, 0, 5],
    "a seed that is a float": [5, 1.5, None, None],
    "a record that is a map": {"kind": 1, "worker": 0},
    "a record that is an int": 1,
    "an empty record": [],
}


@pytest.mark.parametrize("at", [1, 3], ids=["for step_send", "for step_recv"])
@pytest.mark.parametrize("record", list(CRAFTED.values()), ids=list(CRAFTED))
def test_a_crafted_record_is_a_replay_log_error_naming_it(make_sampler, log, record, at):
    """Issue 42, item 8: ``[6, 1, <bytes>]`` raised ``ValueError: 1 is not a valid Command``
    (replay described the record it diverged from); read by step_recv, ``[3, 0]`` and
    ``[3, [0, 0]]`` raised a TypeError, and a call after a corrupt record an IndexError. A
    record of the wrong kind, arity or field types is a ReplayLogError naming the record and
    what a record of its kind holds, and the replay stops there: the next call says so too.
    Nothing in a log is ever unpickled. The crafted record stands in for record ``at`` of the
    run reset, step_send(0), step_send(1), step_recv()."""
    _record_simple(make_sampler, log)
    records = _records(log)
    records[at] = record
    start = len(MAGIC) + 6 + _header_size(log)
    log.write_bytes(log.read_bytes()[:start] + b"".join(msgpack.packb(r) for r in records))
    s = make_sampler(fns(CountingEnv, 4), num_workers=2, seed=1, replay=log, deadline=5)
    s.reset()
    with pytest.raises(errors.ReplayLogError, match=rf"record {at} \(byte \d+\) is not a "
                       r"valid record: .*\(.*(expected|record is \[).*\); record the run again"):
        s.step_send(0, np.ones(2, dtype=np.int64))
        s.step_send(1, np.ones(2, dtype=np.int64))
        s.step_recv(None)
    with pytest.raises(errors.ReplayError, match="replay stopped earlier: replay log"):
        s.step_send(0, np.ones(2, dtype=np.int64))


def test_a_crafted_header_without_the_env_is_a_typed_error(make_sampler, log):
    """A header map that lacks what a recorded run writes diverges at construction, typed (the
    message read the missing "env" with a KeyError)."""
    body = msgpack.packb({"num_envs": 2})
    log.write_bytes(struct.pack("<8sHI", MAGIC, VERSION, len(body)) + body)
    with pytest.raises(errors.ReplayDivergedError, match=r"num_envs=2 .*env not named"):
        make_sampler(fns(CountingEnv, 4), num_workers=2, seed=1, replay=log)


def test_record_and_replay_together_or_an_unwritable_path_are_config_errors(make_sampler, log):
    with pytest.raises(errors.ConfigError, match="one of them"):
        make_sampler(fns(CountingEnv, 2), record=log, replay=log)
    with pytest.raises(errors.ConfigError, match="record"):
        make_sampler(fns(CountingEnv, 2), record=log / "no" / "such" / "dir")


# --- restarts ------------------------------------------------------------------------------------


@posix_only
def test_a_restart_is_replayed_truncated_and_reseeded(make_sampler, log):
    kwargs = {"num_workers": WORKERS, "seed": 7, "deadline": 30, "restart": True}
    s = make_sampler(straggler_fns(), record=log, **kwargs)

    def kill(i: int) -> None:
        if i == 20:  # a death no replay would see by itself
            kill_and_wait(s.worker_pids()[2])

    recorded = partial_run(s, between=kill)
    assert [w for w, _ in s.restart_log] == [2]
    s.close()
    t = make_sampler(straggler_fns(), replay=log, **kwargs)
    replayed = partial_run(t)
    assert replayed == recorded
    assert t.restart_log == s.restart_log
    restarted = [rec for recv in recorded for rec in recv if rec[7] != bytes(PER_WORKER)]
    assert len(restarted) == 1 and restarted[0][0] == 2  # flagged once, on worker 2


# --- vecsample compare --replay-check ------------------------------------------------------------


def test_compare_replay_check_reports_a_match_and_a_free_run_that_differs(capsys):
    from vecsample.__main__ import main

    argv = ["compare", "--replay-check", "--envs", "straggler", "--policies", "random",
            "--workers", "4", "--envs-per-worker", "2", "--timeouts", "none", "0.0001",
            "--iterations", "30", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "timeout 0.1 ms" in out and "replay:   match: every recv bit-identical" in out


def test_the_replay_check_report_names_the_first_mismatch():
    from vecsample.tools.replay_check import Check, first_difference, report

    check = Check("straggler", 2, 2, 0.001, "random", 0.001, 10, 0)
    a, b = [b"x", b"y", b"z"], [b"x", b"y", b"q"]
    assert first_difference(a, b) == 2 and first_difference(a, a) is None
    assert first_difference(a, a[:2]) == 2
    text = report(check, a, b, a, 100)
    assert "MISMATCH: first at recv 2 of 3" in text and "free run: identical" in text


def test_vector_env_passes_record_and_replay_through(make_vector_env, log):
    from vecsample.testing import SlowEnv

    def run(**kwargs: Any) -> list[bytes]:
        env = make_vector_env(fns(SlowEnv, 4, info=True), 2, **kwargs)
        out = [env.reset(seed=3)[0].tobytes()]
        for _ in range(12):
            obs, rewards, _, _, infos = env.step(np.array([1, 2, 3, 0]))
            out.append(obs.tobytes() + rewards.tobytes() + repr(sorted(infos)).encode())
        env.close()
        return out

    assert run(replay=_recorded(run, log)) == run()
    with pytest.raises(errors.ReplayDivergedError, match="call #1"):
        make_vector_env(fns(SlowEnv, 4, info=True), 2, replay=log).reset(seed=4)


def test_a_recorded_deadline_is_raised_again_with_the_same_results(make_sampler, log):
    from vecsample.testing import SlowEnv

    def run(**kwargs: Any) -> list[Any]:
        env_fns = [functools.partial(SlowEnv, env_index=i, step_time=0.4 if i >= 2 else 0.0)
                   for i in range(4)]
        s = make_sampler(env_fns, num_workers=2, seed=1, **kwargs)
        s.reset()
        s.step_send(0, np.ones(2, dtype=np.int64))
        s.step_send(1, np.ones(2, dtype=np.int64))
        with pytest.raises(errors.DeadlineExceededError) as info:
            s.step_recv(None, deadline=0.1)
        out = [info.value.hung_workers, fingerprint(info.value.results)]
        out.append(fingerprint(s.step_recv(None, copy=True)))
        s.close()
        return out

    recorded = run(record=log)
    assert recorded[0] == [1] and [r[0] for r in recorded[1]] == [0]
    assert run(replay=log) == recorded


def test_an_unseeded_run_is_refused_plainly_and_numpy_seeds_are_seeds(make_sampler, log):
    s = make_sampler(fns(CountingEnv, 2), num_workers=1, record=log)
    s.reset()
    s.reset(seed=np.int64(4))
    s.close()
    t = make_sampler(fns(CountingEnv, 2), num_workers=1, replay=log)
    with pytest.raises(errors.ReplayUnsupportedError, match="without a seed"):
        t.reset()
    u = make_sampler(fns(CountingEnv, 2), num_workers=1, record=log)
    u.reset(seed=np.int64(4))
    u.close()
    make_sampler(fns(CountingEnv, 2), num_workers=1, replay=log).reset(seed=4)


def test_the_overhead_experiment_runs_on_a_tiny_budget():
    proc = run_script("replay_overhead", "--seconds", "0.05", "--repeats", "1")
    assert proc.returncode == 0, proc.stderr
    assert "| partial + record |" in proc.stdout and "bytes per recv" in proc.stdout
