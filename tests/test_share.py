"""Blocks stepped in the trainer's own process: ``Options.env_placement`` (docs/semantics.md,
"Where the envs are stepped"; docs/reliability.md, "The parent's share").

"share" steps the last worker's block in this process while the worker processes step theirs;
"parent" steps every block here, with no worker process. The blocks, the step API and the data
are those of "workers" (every block in a process of its own): each test below runs the same
loop under a placement and under "workers" and compares them, or checks one guarantee that a
block in this process keeps (restarts, commands, close, Ctrl-C, the deadline for the worker
processes). "auto" times a block and chooses: its rule is checked with injected timings.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import batch_space
from helpers import assert_same, kill_and_wait, ones, posix_only

from vecsample import AutoresetMode, HostedVector, VecSampler, errors
from vecsample._parent import autoplace, startup
from vecsample._parent.local import LocalChannel, SharingChannel
from vecsample._parent.stepping import StepChannel
from vecsample.testing import CountingEnv, HangingEnv, RaisingEnv, SlowEnv, SpaceEnv, fns

PLACED = ["share", "parent"]
MODES = list(AutoresetMode)


@pytest.fixture
def make_sampler(make_sampler: Callable[..., VecSampler]) -> Callable[..., VecSampler]:
    """conftest's, with a 10 s deadline unless a test gives its own: a step lost by a bug
    fails the test in seconds."""

    def make(*args: Any, **kwargs: Any) -> VecSampler:
        kwargs.setdefault("deadline", 10.0)
        return make_sampler(*args, **kwargs)

    return make


class TaskEnv(CountingEnv):
    """A CountingEnv with a task (``reset_task``) that it reports as the observation's last
    entry after a reset, and a ``pid`` attribute: where it lives."""

    task: float = -1.0

    def reset_task(self, task: float) -> None:
        self.task = float(task)

    @property
    def pid(self) -> int:
        return os.getpid()

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        obs[3] = self.task
        return obs, info


class SigintEnv(CountingEnv):
    """Sends SIGINT to its own process during its step ``at_step`` (a Ctrl-C that lands
    while the parent steps its block), then finishes the step."""

    def __init__(self, env_index: int = 0, at_step: int = 3, **kwargs: Any) -> None:
        super().__init__(env_index=env_index, **kwargs)
        self.at_step = at_step

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.t + 1 == self.at_step:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # the handler runs (and notes it) while the step is still going
        return super().step(action)


class InterruptingEnv(CountingEnv):
    """Its step ``at_step`` is cut by a KeyboardInterrupt that vecsample's handler cannot
    hold: raised by the env itself (``how="raise"``), or by a SIGINT handler of the user's own
    (``how="handler"``, installed by the test), as a Ctrl-C lands mid-step."""

    def __init__(self, env_index: int = 0, at_step: int = 3, how: str = "raise",
                 **kwargs: Any) -> None:
        super().__init__(env_index=env_index, **kwargs)
        self.at_step, self.how = at_step, how

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.t + 1 == self.at_step:
            if self.how == "raise":
                raise KeyboardInterrupt
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the user's handler raises here, mid-step
        return super().step(action)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


class CloseDuringStepEnv(SlowEnv):
    """Notes in ``marker`` whether its ``close()`` came while a step was under way."""

    def __init__(self, env_index: int = 0, marker: str = "", step_time: float = 0.3) -> None:
        super().__init__(env_index=env_index, step_time=step_time)
        self.marker, self.stepping = marker, False

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.stepping = True
        try:
            return super().step(action)
        finally:
            self.stepping = False

    def close(self) -> None:
        when = "during a step" if self.stepping else "between steps"
        with open(self.marker, "a") as f:
            f.write(f"{self.env_index} {os.getpid()} {when}\n")


@pytest.fixture(autouse=True)
def _no_gc() -> Any:
    """No garbage collection during a test: an fd that an earlier test's garbage holds is
    neither freed nor reused under a test that counts fds (test_lifetime.py does the same)."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def _fds() -> dict[int, str]:
    """This process's open fds, and what each one is."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own fd, closed by now
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return found


def _children() -> set[int]:
    """This process's live children (zombies, dead and not yet reaped, left out)."""
    found = set()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if child.status() != psutil.STATUS_ZOMBIE:
                found.add(child.pid)
    return found


def _plain(infos: Any) -> dict[int, dict[str, Any]]:
    return {env: {k: np.asarray(v) for k, v in info.items()} for env, info in infos.items()}


def _tuples(x: Any) -> Any:
    """Lists as tuples, all the way down (what ``assert_same`` compares)."""
    if isinstance(x, list | tuple):
        return tuple(_tuples(v) for v in x)
    if isinstance(x, dict):
        return {k: _tuples(v) for k, v in x.items()}
    return x


def _full_run(make_sampler: Callable[..., VecSampler], placement: str, mode: AutoresetMode,
              steps: int = 14, **kwargs: Any) -> list[Any]:
    """``steps`` full batches of random actions (Disabled: ended envs reset by mask)."""
    s = make_sampler(fns(CountingEnv, 6, length=4, info=True), num_workers=3, seed=0,
                     autoreset_mode=mode, env_placement=placement, **kwargs)
    obs, infos = s.reset()
    out: list[Any] = [obs.copy(), infos]
    rng = np.random.default_rng(1)
    for _ in range(steps):
        r = s.step(rng.integers(0, 4, 6), copy=True)
        out += [r.obs, r.rewards, r.terminated, r.truncated, r.has_final_obs, r.restarted,
                _plain(r.infos), _plain(r.reset_infos)]
        if mode is AutoresetMode.SAME_STEP:
            out.append(r.final_obs[r.has_final_obs])
        ended = r.terminated | r.truncated
        if mode is AutoresetMode.DISABLED and ended.any():
            out.append(s.reset(mask=ended)[0].copy())
    return out


def _partial_run(s: VecSampler, sends: int = 12) -> dict[int, list[Any]]:
    """Every worker sent ``sends`` steps through ``step_recv(timeout=0)`` rounds, actions
    drawn per worker; what each worker returned, in order."""
    s.reset()
    rngs = {w: np.random.default_rng(w) for w in range(s.num_slots)}
    got: dict[int, list[Any]] = {w: [] for w in range(s.num_slots)}

    def send(w: int) -> None:
        s.step_send(w, rngs[w].integers(0, 4, len(s.worker_env_ids(w))))

    for w in range(s.num_slots):
        send(w)
    while True:
        try:
            results = s.step_recv(timeout=0.0, copy=True)
        except errors.NoPendingError:
            return got
        for r in results:
            assert r.worker is not None and r.env_ids == s.worker_env_ids(r.worker)
            got[r.worker].append((r.obs, r.rewards, r.terminated, r.truncated,
                                  _plain(r.infos)))
            if len(got[r.worker]) < sends:
                send(r.worker)


# --- the same data wherever the blocks step ------------------------------------------------------


@pytest.mark.parametrize("mode", MODES, ids=[m.value for m in MODES])
@pytest.mark.parametrize("placement", PLACED)
def test_full_batches_equal_the_workers_placement(make_sampler, placement, mode):
    assert_same(_tuples(_full_run(make_sampler, placement, mode)),
                _tuples(_full_run(make_sampler, "workers", mode)), f"{placement} against workers")


@pytest.mark.parametrize("pipeline", [False, True], ids=["plain", "pipelined"])
@pytest.mark.parametrize("placement", PLACED)
def test_partial_batches_equal_the_workers_placement(make_sampler, placement, pipeline):
    def run(where: str) -> dict[int, list[Any]]:
        return _partial_run(make_sampler(fns(CountingEnv, 8, length=5, info=True),
                                         num_workers=2, seed=3, pipeline=pipeline,
                                         env_placement=where))

    here, there = run(placement), run("workers")
    assert all(len(v) == 12 for v in here.values()), {w: len(v) for w, v in here.items()}
    assert_same(_tuples(here), _tuples(there), f"{placement} against workers")


@pytest.mark.parametrize("placement", PLACED)
def test_a_hosted_vector_env_steps_the_same_in_this_process(make_sampler, placement):
    def run(where: str) -> list[Any]:
        s = make_sampler(HostedVector("CartPole-v1", "sync"), num_envs=8, num_workers=2,
                         seed=0, autoreset_mode="NextStep", env_placement=where)
        out: list[Any] = [s.reset()[0].copy()]
        rng = np.random.default_rng(0)
        for _ in range(40):
            r = s.step(rng.integers(0, 2, 8), copy=True)
            out += [r.obs, r.rewards, r.terminated, r.truncated, _plain(r.reset_infos)]
        return out

    assert_same(_tuples(run(placement)), _tuples(run("workers")),
                f"hosted, {placement} against workers")


def test_pickled_observations_and_actions_travel_the_same_in_this_process(make_sampler):
    """Spaces with no fixed shape (Text) travel pickled, for a block here too: the actions
    after the post, the observations with the step's reply."""
    obs_space = spaces.Dict({"tag": spaces.Text(4), "x": spaces.Box(-1, 1, (2,))})
    act_space = spaces.Dict({"say": spaces.Text(3), "d": spaces.Discrete(4)})

    def run(where: str) -> list[Any]:
        env_fns = [functools.partial(SpaceEnv, obs_space, act_space, i) for i in range(4)]
        s = make_sampler(env_fns, num_workers=2, seed=0, env_placement=where)
        out: list[Any] = [s.reset()[0]["tag"].tolist()]
        batch = batch_space(act_space, 4)
        batch.seed(0)
        for _ in range(10):
            r = s.step(batch.sample(), copy=True)
            out += [r.obs["tag"].tolist(), r.obs["x"], r.rewards, r.terminated]
        return out

    assert_same(_tuples(run("share")), _tuples(run("workers")), "pickled lanes")


def test_a_recorded_run_replays_whatever_the_placement(make_sampler, tmp_path: Path):
    """The placement is a tuning option: a run recorded with a share replays bit for bit, with
    a share or with every block in a worker process (the worker indices are the same)."""
    log = tmp_path / "run.vsreplay"
    kwargs = {"num_workers": 3, "seed": 5, "deadline": 30}
    env_fns = fns(SlowEnv, 6, step_time=2e-4, tail="heavy", seed=None, info=True, length=7)
    recording = make_sampler(env_fns, record=log, env_placement="share", **kwargs)
    recorded = _partial_run(recording)
    recording.close()  # the log is complete once its sampler is closed
    for where in ("share", "workers"):
        s = make_sampler(env_fns, replay=log, env_placement=where, **kwargs)
        assert_same(_tuples(_partial_run(s)), _tuples(recorded), f"replayed with {where}")
        s.close()


# --- the parent's block: commands, errors, restarts ----------------------------------------------


def test_commands_reach_the_envs_stepped_in_this_process(make_sampler):
    s = make_sampler(fns(TaskEnv, 4), num_workers=2, env_placement="share")
    pids = s.get_attr("pid")
    assert pids[2:] == [os.getpid()] * 2 and os.getpid() not in pids[:2], pids
    assert s.worker_pids()[1] == os.getpid()
    s.reset_task([10.0, 11.0, 12.0, 13.0])
    s.set_attr("length", [5, 6, 7, 8])
    assert s.get_attr("length") == [5, 6, 7, 8]
    assert s.call("process_info")[3]["pid"] == os.getpid()
    obs, _ = s.reset(seed=0)
    np.testing.assert_array_equal(obs[:, 3], [10.0, 11.0, 12.0, 13.0])  # the tasks, here too
    obs, _ = s.reset(mask=np.array([False, False, False, True]))
    assert obs[3, 2] == 1 and obs[0, 2] == 0  # only env 3 began a second episode


@pytest.mark.parametrize("placement", PLACED)
def test_an_env_that_raises_here_is_a_worker_error_with_its_traceback(make_sampler, placement):
    """Without restart, as from a worker process: WorkerError naming the worker, the env and
    STEP, the remote traceback chained; the other workers' results come with it."""
    s = make_sampler(fns(RaisingEnv, 4, at_step=2, bad_index=3), num_workers=2,
                     env_placement=placement)
    s.reset()
    s.step(ones(4))
    with pytest.raises(errors.WorkerError) as info:
        s.step(ones(4))
    error = info.value
    assert (error.worker, error.env, error.command) == (1, 3, "STEP")
    assert "injected failure in step 2 of env 3" in error.remote_traceback
    assert [r.worker for r in error.results] == [0]
    with pytest.raises(errors.WorkerLostError):
        s.step(ones(4))


@pytest.mark.parametrize("placement", PLACED)
def test_an_env_that_raises_here_is_rebuilt_in_place_flagged(make_sampler, placement):
    """With restart: the block is rebuilt here (new envs, reset with their restart seeds),
    its rows flagged restarted and truncated; the other block's data is untouched, and the
    next step is an ordinary one."""
    s = make_sampler(fns(RaisingEnv, 4, at_step=3, bad_index=3), num_workers=2, seed=0,
                     restart=True, env_placement=placement)
    s.reset()
    for _ in range(2):
        s.step(ones(4))
    r = s.step(ones(4))
    assert r.restarted.tolist() == [False, False, True, True]
    assert r.truncated.tolist() == [False, False, True, True]
    assert r.rewards.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert r.obs[:2, 1].tolist() == [3, 3] and r.obs[2:, 1].tolist() == [0, 0]
    assert "raised in env 3" in r.infos[3]["restart_reason"]
    assert [w for w, _ in s.restart_log] == [1]
    assert s.get_attr("episode") == [0, 0, 0, 0]  # new envs, reset once
    after = s.step(ones(4))
    assert not after.restarted.any() and after.obs[:, 1].tolist() == [4, 4, 1, 1]


def test_a_pipelined_share_restarts_both_halves_as_a_process_does(make_sampler):
    """pipeline=True: this process serves the last process's two halves. An env that raises
    in one restarts both, counted once; the other half's step had run, so its result stands
    and its restart comes with its next step (docs/semantics.md, "Pipelining")."""
    s = make_sampler(fns(RaisingEnv, 8, at_step=2, bad_index=7), num_workers=2, seed=0,
                     pipeline=True, restart=True, env_placement="share")
    assert s.worker_pids()[2:] == [os.getpid()] * 2
    s.reset()
    s.step(ones(8))
    r = s.step(ones(8))
    assert r.restarted.tolist() == [False] * 6 + [True] * 2
    assert r.obs[4:6, 1].tolist() == [2, 2]  # half 2's step stands, with its data
    assert [w for w, _ in s.restart_log] == [3]
    after = s.step(ones(8))
    assert after.restarted.tolist() == [False] * 4 + [True] * 2 + [False] * 2
    assert after.obs[:4, 1].tolist() == [3] * 4 and after.obs[6:, 1].tolist() == [1, 1]


def test_a_reset_that_raises_here_is_typed_and_the_others_answer(make_sampler):
    s = make_sampler(fns(RaisingEnv, 4, where="reset", bad_index=3), num_workers=2,
                     env_placement="share")
    with pytest.raises(errors.WorkerError) as info:
        s.reset()
    assert (info.value.worker, info.value.env, info.value.command) == (1, 3, "RESET")
    assert list(info.value.replies) == [0]  # worker 0 answered; its reply was read


# --- what a block in this process keeps ----------------------------------------------------------


@posix_only
def test_a_killed_worker_process_still_restarts_beside_a_share(make_sampler):
    s = make_sampler(fns(CountingEnv, 4, length=100), num_workers=2, restart=True,
                     env_placement="share")
    s.reset()
    s.step(ones(4))
    kill_and_wait(s.worker_pids()[0])
    r = s.step(ones(4))
    assert r.restarted.tolist() == [True, True, False, False]
    assert r.obs[2:, 1].tolist() == [2, 2]  # the block stepped here went on
    assert "died" in s.restart_log[0][1]


def test_the_deadline_still_bounds_a_hung_worker_process(make_sampler):
    s = make_sampler(fns(HangingEnv, 4, at_step=2, bad_index=0), num_workers=2, deadline=1.0,
                     env_placement="share")
    s.reset()
    s.step(ones(4))
    started = time.monotonic()
    with pytest.raises(errors.DeadlineExceededError) as info:
        s.step(ones(4))
    assert time.monotonic() - started < 5
    assert info.value.hung_workers == [0]
    assert [r.worker for r in info.value.results] == [1]  # the share's step, read


def test_the_deadline_cannot_cut_a_step_of_this_process_short(make_sampler):
    """What a share gives up: the parent's block runs to its end (docs/reliability.md)."""
    s = make_sampler(fns(SlowEnv, 2, step_time=0.4), num_workers=2, env_placement="share")
    s.reset()
    started = time.monotonic()
    s.step_send(1, ones(1))
    (r,) = s.step_recv(deadline=0.05)
    assert time.monotonic() - started >= 0.4 and r.worker == 1


@pytest.mark.parametrize("placement", PLACED)
def test_close_leaves_no_process_or_fd_and_closes_the_envs_here(make_sampler, placement,
                                                                tmp_path: Path):
    marker = tmp_path / "closed"
    env_fns = [lambda i=i: CloseDuringStepEnv(i, str(marker), step_time=0.0) for i in range(4)]
    make_sampler(fns(CountingEnv, 2), num_workers=2).close()  # the long-lived helpers, started
    before, children = _fds(), _children()
    s = make_sampler(env_fns, num_workers=2, restart=True, env_placement=placement)
    s.reset()
    s.step(ones(4))
    assert len(_children() - children) == (1 if placement == "share" else 0)
    s.close()
    assert _fds() == before
    assert _children() - children == set()
    # One line per env closed ("index pid when"); the first, env 0 that the parent built to
    # read the spaces. The envs of the blocks stepped here were closed here, by close().
    closed = [line.split(" ", 2) for line in marker.read_text().splitlines()[1:]]
    here = {2, 3} if placement == "share" else {0, 1, 2, 3}
    assert sorted(int(i) for i, _, _ in closed) == [0, 1, 2, 3], closed
    assert all(when == "between steps" for _, _, when in closed), closed
    assert {int(i) for i, pid, _ in closed if int(pid) == os.getpid()} == here, closed


def test_close_from_another_thread_waits_for_the_step_under_way_here(make_sampler,
                                                                      tmp_path: Path):
    """Envs are not thread-safe: a close() that comes while this process steps its block
    closes the envs once the step is over; the step_recv it cut short raises ClosedError."""
    marker = tmp_path / "closed"
    s = make_sampler([lambda: CloseDuringStepEnv(0, str(marker))], num_workers=1,
                     env_placement="parent")
    s.reset()
    s.step_send(0, ones(1))
    closer = threading.Timer(0.1, s.close)
    closer.start()
    try:
        with pytest.raises(errors.ClosedError):
            while True:
                s.step_recv()
                s.step_send(0, ones(1))
    finally:
        closer.join()
    assert marker.read_text().splitlines()[1:] == [f"0 {os.getpid()} between steps"]


@posix_only
@pytest.mark.parametrize("call", ["step", "step_recv"])
def test_a_ctrl_c_during_the_step_here_is_raised_after_it_and_loses_nothing(make_sampler,
                                                                            call):
    """The SIGINT lands inside the env's step in this process: the step runs to its end,
    then KeyboardInterrupt; the step is pending and the next step_recv returns it, once."""
    env_fns = fns(CountingEnv, 2, length=100)[:1] + fns(SigintEnv, 2, at_step=3)[1:]
    s = make_sampler(env_fns, num_workers=2, env_placement="share")
    s.reset()
    for _ in range(2):
        s.step(ones(2))
    with pytest.raises(KeyboardInterrupt):
        if call == "step":
            s.step(ones(2))
        else:
            s.send_all(ones(2))
            s.step_recv()
    got = s.batch(s.step_recv())
    assert got.obs[:, 1].tolist() == [3, 3]  # step 3 of each env, run once
    assert s.step(ones(2)).obs[:, 1].tolist() == [4, 4]
    with pytest.raises(errors.NoPendingError):
        s.step_recv()


@posix_only
@pytest.mark.parametrize("placement", PLACED)
@pytest.mark.parametrize("how", ["raise", "handler"])
@pytest.mark.parametrize("restart", [False, True])
def test_an_interrupt_that_escapes_a_step_here_ends_it_failed_and_the_next_call_knows(
        make_sampler, placement, how, restart):
    """A KeyboardInterrupt vecsample cannot hold (an env's own, or a SIGINT handler of the
    user's) cuts a block's step in this process: it is raised at once, the block is failed
    (its step ended half taken), and the next step_recv says so at once: a WorkerError
    naming the interrupt, or with restart the block rebuilt, flagged. The other block's step
    is returned, once. (The next call waited out the deadline for it: issue 42 item 4.)"""
    previous = signal.signal(signal.SIGINT, _raise_interrupt) if how == "handler" else None
    try:
        env_fns = fns(CountingEnv, 4, length=100)[:2] + fns(InterruptingEnv, 4, at_step=3,
                                                              how=how)[2:]
        s = make_sampler(env_fns, num_workers=2, env_placement=placement, deadline=20.0,
                         restart=restart)
        s.reset()
        for _ in range(2):
            s.step(ones(4))
        with pytest.raises(KeyboardInterrupt):
            s.step(ones(4))
        start = time.monotonic()
        if restart:
            got = s.batch(s.step_recv(None))
            assert got.restarted.tolist() == [False, False, True, True]
            assert got.obs[:2, 1].tolist() == [3, 3]  # the other block's step, once
            assert "KeyboardInterrupt" in got.infos[2]["restart_reason"]
            assert s.step(ones(4)).obs[:, 1].tolist() == [4, 4, 1, 1]
        else:
            with pytest.raises(errors.WorkerError) as info:
                s.step_recv(None)
            assert info.value.exc_type == "KeyboardInterrupt" and info.value.worker == 1
            assert [r.obs[0, 1] for r in info.value.results] == [3]
        assert time.monotonic() - start < 2.0
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


@posix_only
def test_a_storm_of_sigints_in_a_partial_batch_loop_loses_and_duplicates_nothing(
        make_sampler):
    """test_interrupts' loop with the last block stepped here: SIGINTs every 0.5-10 ms,
    caught, the loop goes on; every step sent is received once."""
    from test_interrupts import InfoSlowEnv, _interrupt_loop

    env_fns = [lambda i=i: InfoSlowEnv(env_index=i, step_time=2e-4, tail="uniform",
                                       spread=1.0) for i in range(6)]
    s = make_sampler(env_fns, num_workers=3, deadline=10, env_placement="share")
    s.reset()
    sent, _, interrupts = _interrupt_loop(s, 3.0, seed=1)
    while True:
        try:
            s.step_recv(None)
        except errors.NoPendingError:
            break
    assert interrupts > 10
    assert s.stats()["workers_received"] == sum(sent.values())
    state = s.handshake_state()
    np.testing.assert_array_equal(state.finished, state.posted)
    assert s.stats()["share_s"] > 0


# --- "auto", the choice; bad values --------------------------------------------------------------


def test_auto_chooses_from_what_it_measures_and_says_so(make_sampler, monkeypatch):
    monkeypatch.setattr(startup, "_warned", set())
    timed: list[Any] = []

    def fake_timer(block_s: float, cores: int) -> None:
        monkeypatch.setattr(autoplace, "usable_cores", lambda: cores)
        monkeypatch.setattr(autoplace, "time_block",
                            lambda envs, *rest: timed.append(len(envs)) or block_s)

    cases = [(1e-6, 2, "parent"), (0.01, 2, "share"), (0.01, 16, "workers")]
    for block_s, cores, expected in cases:
        fake_timer(block_s, cores)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            s = make_sampler(fns(CountingEnv, 4), num_workers=2, env_placement="auto")
        assert s.layout.placement == expected, s.layout.placement_reason
        notices = [w for w in seen if issubclass(w.category, errors.PlacementNotice)]
        assert len(notices) == 1 and f"chose {expected!r}" in str(notices[0].message)
        assert notices[0].filename.endswith("conftest.py")  # the user's line: make_sampler's
        assert f"{block_s * 1e6:.0f} µs" in s.layout.placement_reason
        s.reset()
        assert s.step(ones(4)).rewards.tolist() == [1.0] * 4
    assert timed == [2, 2, 2]  # one block (the first worker's) timed each time


def test_auto_times_a_real_block_once_per_choice(make_vector_env, monkeypatch):
    """VectorEnv(..., env_placement="auto"), as the README's line for small jobs: it runs,
    and says its choice once per process."""
    from vecsample import EnvMaker

    monkeypatch.setattr(startup, "_warned", set())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        envs = [make_vector_env([EnvMaker("CartPole-v1")] * 4, env_placement="auto")
                for _ in range(2)]
    layout = envs[0].sampler.layout
    assert layout.placement in ("workers", "share", "parent")
    assert "µs a step here" in layout.placement_reason
    said = [w for w in seen if issubclass(w.category, errors.PlacementNotice)]
    assert len(said) == (1 if envs[1].sampler.layout.placement == layout.placement
                         else 2)
    envs[0].reset(seed=0)
    assert envs[0].step(np.zeros(4, dtype=np.int64))[0].shape == (4, 4)


def test_auto_times_a_hosted_block_too(make_sampler):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", errors.PlacementNotice)
        s = make_sampler(HostedVector("CartPole-v1", "sync"), num_envs=8, num_workers=2,
                         autoreset_mode="NextStep", env_placement="auto")
    assert "a block of 4 envs took" in s.layout.placement_reason
    s.reset(seed=0)
    assert s.step(np.zeros(8, dtype=np.int64)).rewards.tolist() == [1.0] * 8


def test_auto_leaves_an_env_that_fails_here_to_the_workers(make_sampler, monkeypatch):
    """An env that raises while auto times it is left to worker processes, which report it
    typed when the run gets there."""
    monkeypatch.setattr(startup, "_warned", set())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        s = make_sampler(fns(RaisingEnv, 2, at_step=2), num_workers=2, env_placement="auto")
    assert s.layout.placement == "workers"
    assert "RuntimeError: injected failure in step 2" in s.layout.placement_reason
    assert any(issubclass(w.category, errors.PlacementNotice) for w in seen)
    s.reset()
    s.step(ones(2))
    with pytest.raises(errors.WorkerError, match="injected failure"):
        s.step(ones(2))


def test_a_block_that_cannot_be_built_here_is_a_typed_build_error(make_sampler):
    def broken() -> CountingEnv:
        raise RuntimeError("no env today")

    before = _fds()
    env_fns = [*fns(CountingEnv, 3), broken]
    with pytest.raises(errors.EnvFactoryError, match=r"worker 1 .*no env today"):
        make_sampler(env_fns, num_workers=2, env_placement="share",
                     observation_space=CountingEnv().observation_space,
                     action_space=CountingEnv().action_space)
    assert _fds() == before


def test_the_rule_of_auto():
    """A worker process must save more than the wait for it (with the margin); then the
    parent steps a block only where no core is left for it to wait on."""
    rt, b = autoplace.ROUND_TRIP_S, autoplace.BLOCK_S
    assert autoplace.choose(1e-6, 2, 2, 1)[0] == "parent"  # envs cheaper than the wait
    assert autoplace.choose(1.0, 1, 8, 4)[0] == "parent"  # one block: nothing at once
    assert autoplace.choose(10 * rt, 2, 2, 4)[0] == "share"
    assert autoplace.choose(10 * rt, 4, 2, 4)[0] == "share"
    assert autoplace.choose(10 * rt, 2, 4, 4)[0] == "workers"
    # the margin, 2 blocks on 2 cores: parent while 2 (x + b) <= (1 + m) (x + b + rt)
    m = autoplace.MARGIN
    at = (1 + m) * rt / (1 - m) - b
    assert at > 0
    assert autoplace.choose(at * 0.99, 2, 2, 1)[0] == "parent"
    assert autoplace.choose(at * 1.01, 2, 2, 1)[0] == "share"


@pytest.mark.parametrize("value", ["Share", "cloud", 1, None])
def test_a_bad_placement_is_refused_with_what_was_expected_and_the_fix(make_vector_env, value):
    from vecsample import EnvMaker

    with pytest.raises(errors.ConfigError) as info:
        make_vector_env([EnvMaker("CartPole-v1")] * 2, env_placement=value)
    message = str(info.value)
    assert message.startswith(f"env_placement must be one of ['workers', 'share', 'parent', "
                              f"'auto'], got {value!r}; ")
    assert "'parent' all of them here" in message


def test_vector_env_steps_one_block_in_the_parent_unless_told(make_vector_env):
    from vecsample import EnvMaker

    fns_ = [EnvMaker("CartPole-v1")] * 4
    assert make_vector_env(fns_, env_placement="parent").sampler.num_workers == 1
    assert make_vector_env(fns_, 2, env_placement="parent").sampler.num_workers == 2


def test_the_default_pays_nothing_for_the_share(make_sampler):
    """No block in this process: the plain channel (no step of the parent's in its wait),
    and send_all hands the core over as before where the sampler spins."""
    plain = make_sampler(fns(CountingEnv, 2), num_workers=2)
    shared = make_sampler(fns(CountingEnv, 2), num_workers=2, env_placement="share")
    assert type(plain._channel) is StepChannel and plain.layout.parent_slots == range(0)
    assert type(shared._channel) is SharingChannel and shared.layout.parent_slots == range(1, 2)
    assert plain._hand_over == (plain.layout.spin_s > 0) and not shared._hand_over
    assert "env_placement" not in repr(plain) and "env_placement='share'" in repr(shared)



def test_parent_runs_every_block_here_with_no_process_pipe_or_stand_in(make_sampler):
    """env_placement="parent" is a backend of its own: the local channel, the blocks built in
    this process and called directly, no worker process or pipe, nothing polled."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    s = make_sampler(fns(CountingEnv, 4, length=3), num_workers=2, env_placement="parent")
    assert type(s._channel) is LocalChannel
    assert not s._pool.procs and not s._pool.conns and sorted(s._pool.local) == [0, 1]
    assert s.worker_pids() == [os.getpid()] * 2
    s.reset()
    for t in range(1, 7):
        r = s.step(np.ones(4, dtype=np.int64))
        assert r.obs[:, 1].tolist() == [t % 3] * 4
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before, after - before  # no process was started for it


def test_auto_prices_a_step_with_the_costs_the_options_give(make_sampler, monkeypatch):
    """Options.placement_costs replaces the built-in prices: a round trip priced at nothing
    sends a block of real envs to the workers; one priced at a second keeps it here."""
    monkeypatch.setattr(startup, "_warned", set())
    monkeypatch.setattr(autoplace, "usable_cores", lambda: 4)
    monkeypatch.setattr(autoplace, "time_block", lambda *args: 1e-3)  # a 1 ms block
    cheap = make_sampler(fns(CountingEnv, 4), num_workers=2, env_placement="auto",
                         placement_costs=(0.0, 0.0))
    dear = make_sampler(fns(CountingEnv, 4), num_workers=2, env_placement="auto",
                        placement_costs=(0.9, 0.0))
    assert cheap.layout.placement == "workers" and dear.layout.placement == "parent"
    assert "900000 µs for the wait for a worker process" in dear.layout.placement_reason
    with pytest.raises(errors.ConfigError, match="placement_costs"):
        make_sampler(fns(CountingEnv, 4), num_workers=2, placement_costs=(-1, 0))


class LateKeyEnv(CountingEnv):
    """Gives the info key "late" from its first step in envs ``first`` and up, from the third
    step in the others: a key that the block stepped here proposes before any worker does."""

    def __init__(self, env: int, first: int) -> None:
        super().__init__(env_index=env, length=100)
        self.env, self.first = env, first

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        if self.env >= self.first or self.t >= 3:
            info = {**info, "late": float(self.env)}
        return obs, reward, terminated, truncated, info


def test_a_key_proposed_here_first_reaches_the_worker_processes_as_a_column(make_sampler):
    """A key that a block stepped here gives first gets a column, which the worker processes
    learn too: once every env gives it, no env's value travels pickled (a column the worker
    processes were never told of would leave theirs pickled for good)."""
    s = make_sampler([functools.partial(LateKeyEnv, i, 2) for i in range(4)], num_workers=2,
                     env_placement="share")
    s.reset(seed=0)
    for _ in range(6):
        result = s.step(ones(4))
    blocks, leftovers = result.infos.columnar()
    assert not leftovers, leftovers
    assert [c.key for _, columns in blocks for c, _, _ in columns] == ["late"]
    assert result.infos[0]["late"] == 0.0 and result.infos[3]["late"] == 3.0
