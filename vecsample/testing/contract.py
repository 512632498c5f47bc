"""``SamplerContract``, the conformance suite that checks what docs/semantics.md promises for
your env, with the serial references it compares a sampler against.

A mixin in the spirit of dm_env's ``EnvironmentTestMixin``: subclass it with
``unittest.TestCase``, say how to make your env, and run it with ``python -m unittest`` or
pytest (docs/semantics.md, "Checking your env: SamplerContract"). It needs neither pytest nor
any other test package.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import signal
import time
import unittest
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space, iterate

from vecsample import errors
from vecsample._wire.spaces import index_tree
from vecsample.factories import EnvMaker
from vecsample.hosted import HostedVector, block_seed
from vecsample.options import Options
from vecsample.results import StepResult
from vecsample.sampler import VecSampler
from vecsample.seeding import env_seeds, restart_seed
from vecsample.types import AutoresetMode

#: What ``SamplerContract.make_env`` returns: one env's factory (called once per env), a
#: registered env id, or a ``HostedVector`` (one batch-native vector env per worker).
EnvSource = Callable[[], gym.Env[Any, Any]] | str | HostedVector

#: The layouts every check runs under: one block per worker, and two halves per worker.
_LAYOUTS = {"plain": False, "pipelined": True}


class SamplerContract:
    """What docs/semantics.md promises, checked for your env: subclass it with ``make_env``.

    dm_env's conformance idea for samplers. Each ``test_*`` method checks one promise, under
    both layouts (one block per worker, and ``pipeline=True``) and, where the promise is not
    about one mode, under every autoreset mode of ``autoreset_modes``: one subtest each. The
    contract builds and closes its samplers itself (a failed check closes them too)::

        class TestMyEnv(SamplerContract, unittest.TestCase):   # unittest, and pytest
            def make_env(self, autoreset_mode):
                return functools.partial(MyEnv, max_steps=8)

    ``make_env(autoreset_mode)`` returns one env's factory, an env id or a ``HostedVector``. A
    single env works in every mode; a hosted env must be built in the mode it is given
    (``HostedVector(id, "sync")`` builds itself in the sampler's; a batch env takes it as a
    keyword), or ``autoreset_modes`` must list only the modes it has. Episodes must end within
    ``steps`` steps (a time limit does it): the checks of the autoreset modes need an end.
    Where ``deterministic`` (the env's data depends only on its seeds and actions), every
    result is compared with a serial reference: each worker's envs stepped in this process with
    the same seeds and actions (the env's factory once per env, or the hosted env built for the
    block).
    """

    #: The envs of every sampler built; a multiple of ``2 * num_workers`` (pipelining halves).
    num_envs: int = 4
    num_workers: int = 2
    #: Full batches per run, and steps per worker in the partial-batch check.
    steps: int = 16
    seed: int = 0
    #: The autoreset modes the env can be built in.
    autoreset_modes: tuple[AutoresetMode, ...] = tuple(AutoresetMode)
    #: Whether the env's data depends only on its seeds and actions (then the serial reference
    #: checks every value; otherwise only what holds for any data).
    deterministic: bool = True
    #: The samplers' ``deadline``: a lost step fails a check within it, never hangs it.
    deadline: float = 60.0
    #: More options for every sampler the contract builds (the layout, the mode, the seed,
    #: ``restart`` and ``deadline`` stay the contract's): ``Options(env_placement="share")``
    #: checks the promises with the last block stepped in this process.
    options: Options | None = None

    def make_env(self, autoreset_mode: AutoresetMode) -> EnvSource:
        """Your env, built for ``autoreset_mode``; override it."""
        raise errors.ConfigError(
            name=f"{type(self).__name__}.make_env", expected="defined by the subclass",
            got="SamplerContract.make_env", fix="define make_env(self, autoreset_mode) "
            "returning your env's factory, its id or a HostedVector built in that mode")

    # --- the checks: one test method per promise -------------------------------------------------

    def test_full_batch_equals_the_serial_reference(self) -> None:
        """``step(actions)`` returns what each worker's envs return stepped here, row by row
        (under Disabled the ended envs are reset by mask after each step, on both sides)."""
        self._skip_unless_deterministic()
        self._each_case(self._full_batch, self._modes())

    def test_partial_batches_lose_and_duplicate_nothing(self) -> None:
        """``step_recv(timeout=0)`` rounds: every send returns once, in order, with its data."""
        self._each_case(self._partial_batches, self._modes())

    def test_a_killed_worker_restarts_flagged_and_the_loop_goes_on(self) -> None:
        """With ``restart=True`` a worker SIGKILLed with a step in flight comes back reset,
        ``restarted`` and truncated (reward 0, no final obs), re-seeded from its envs' streams,
        and the next steps are ordinary ones."""
        _kill_signal()  # skips where there is none
        self._each_case(self._restart, self._modes())

    def test_same_step_returns_the_final_observation(self) -> None:
        """SameStep: the ending step returns the new episode's first obs, the last one in
        ``final_obs``, and ``has_final_obs`` is set exactly where an episode ended."""
        self._each_case(self._same_step, self._modes(AutoresetMode.SAME_STEP))

    def test_next_step_resets_on_the_step_after_the_end(self) -> None:
        """NextStep: the step after an end resets that env: reward 0, both flags False."""
        self._each_case(self._next_step, self._modes(AutoresetMode.NEXT_STEP))

    def test_disabled_freezes_ended_envs_until_reset(self) -> None:
        """Disabled: an ended env stays frozen (obs and flags kept, reward 0) until
        ``reset(mask=...)`` names it; a hosted env that does not freeze its rows has a step of
        that block refused instead, while the other blocks step on."""
        self._each_case(self._disabled, self._modes(AutoresetMode.DISABLED))

    def test_the_same_seed_repeats_the_run(self) -> None:
        """Two samplers with the same seed and actions return the same data."""
        self._skip_unless_deterministic()
        self._each_case(self._repeat, self._modes()[:1])

    def test_close_leaves_no_process(self) -> None:
        """``close()`` ends every worker process."""
        self._each_case(self._close, self._modes()[:1])

    # --- what each check does, in one layout and mode --------------------------------------------

    def _full_batch(self, pipeline: bool, mode: AutoresetMode) -> None:
        with self._lockstep(pipeline, mode) as run:
            run.reset()
            for _ in range(self.steps):
                run.reset_ended(run.step())

    def _partial_batches(self, pipeline: bool, mode: AutoresetMode) -> None:
        with self._lockstep(pipeline, mode) as run:
            run.reset()
            for w in run.workers:
                run.send(w)
            while run.in_flight():
                for result in run.sampler.step_recv(timeout=0.0):
                    w = run.receive(result)
                    if run.sent[w] < self.steps and not run.refused(result):
                        run.send(w)

    def _restart(self, pipeline: bool, mode: AutoresetMode) -> None:
        with self._lockstep(pipeline, mode, restart=True) as run:
            run.reset()
            run.round()
            pids = run.sampler.worker_pids()
            killable = [pid for pid in pids if pid != os.getpid()]  # not a block served here
            if not killable:
                raise unittest.SkipTest("every block steps in this process "
                                        "(env_placement='parent'): no worker process to kill")
            run.may_restart = {w for w, pid in enumerate(pids) if pid == killable[-1]}
            run.round(before_recv=lambda: _kill(killable[-1]))
            if run.restarted != run.may_restart:  # a step done before the kill is delivered
                run.round()  # first; the restart comes with the next one
            _expect(run.restarted == run.may_restart, f"workers {sorted(run.may_restart)} of "
                    f"the killed process were not all restarted: {sorted(run.restarted)}")
            run.may_restart = set()
            run.round()  # and the loop goes on
            log = run.sampler.restart_log
            _expect(len(log) == 1 and log[0][0] in run.restarted,
                    f"restart_log must name the killed process once, got {log}")

    def _same_step(self, pipeline: bool, mode: AutoresetMode) -> None:
        def final_obs_where_ended(result: StepResult) -> None:
            np.testing.assert_array_equal(
                result.has_final_obs, result.terminated | result.truncated,
                err_msg="SameStep: has_final_obs must be set exactly where an episode ended")

        with self._lockstep(pipeline, mode) as run:
            run.reset()
            self._until_an_end(run, mode, final_obs_where_ended)

    def _next_step(self, pipeline: bool, mode: AutoresetMode) -> None:
        with self._lockstep(pipeline, mode) as run:
            run.reset()
            ended = self._until_an_end(run, mode)
            after = run.step()
            where = "NextStep: the step after an end resets the env"
            np.testing.assert_array_equal(after.rewards[ended], 0.0, err_msg=f"{where}: reward")
            _expect(not (after.terminated | after.truncated)[ended].any(),
                    f"{where}: terminated and truncated must be False")

    def _disabled(self, pipeline: bool, mode: AutoresetMode) -> None:
        with self._lockstep(pipeline, mode) as run:
            run.reset()
            ended = self._until_an_end(run, mode)
            if _freezes(run.sampler):
                kept = run.sampler.batch(copy=True)
                for _ in range(2):
                    _expect_frozen(run.step(), kept, ended)
            else:
                run.step_live_blocks(ended)
            run.reset_ended(run.sampler.batch())
            run.step()  # the ended envs step again: compared with the reference

    def _repeat(self, pipeline: bool, mode: AutoresetMode) -> None:
        def trajectory() -> list[Any]:
            with self._lockstep(pipeline, mode, reference=False) as run:
                out: list[Any] = [copy.deepcopy(run.reset())]
                for _ in range(self.steps):
                    r = run.step(copy=True)
                    out += [r.obs, r.rewards, r.terminated, r.truncated, r.final_obs]
                    run.reset_ended(r)
                return out

        first, second = trajectory(), trajectory()
        for k, (a, b) in enumerate(zip(first, second, strict=True)):
            _same(b, a, f"item {k} of two runs with seed {self.seed}")

    def _close(self, pipeline: bool, mode: AutoresetMode) -> None:
        with self._lockstep(pipeline, mode, reference=False) as run:
            run.reset()
            run.step()
            layout = run.sampler.layout
            here = len(layout.parent_slots) // layout.slots_per_process  # served by this one
            pids = set(run.sampler.worker_pids()) - {os.getpid()}
            _expect(len(pids) == self.num_workers - here, f"expected {self.num_workers - here} "
                    f"worker processes, got pids {sorted(pids)}")
            run.sampler.close()
            left = _running(pids, within=5.0)
            _expect(not left, f"close() left worker processes running: {left}")

    # --- the plumbing -----------------------------------------------------------------------------

    def _until_an_end(self, run: _Lockstep, mode: AutoresetMode,
                      each: Callable[[StepResult], None] | None = None) -> np.ndarray:
        """Full batches until an episode ends; the envs that ended (a copy)."""
        for _ in range(self.steps):
            result = run.step()
            if each is not None:
                each(result)
            ended: np.ndarray = result.terminated | result.truncated
            if ended.any():
                return ended
        raise errors.ConfigError(
            name=f"{type(self).__name__}.steps",
            expected=f"enough steps for an episode to end (none did under {mode.value})",
            got=self.steps, fix="raise steps, or give the env a shorter time limit in make_env "
            "(gymnasium's max_episode_steps)")

    def _modes(self, only: AutoresetMode | None = None) -> list[AutoresetMode]:
        """The modes a check runs in: ``autoreset_modes``, or ``only`` (skipped if left out)."""
        modes = [AutoresetMode(m) for m in self.autoreset_modes]
        if only is None:
            return modes
        if only not in modes:
            raise unittest.SkipTest(f"{type(self).__name__}.autoreset_modes leaves out "
                                    f"{only.value}")
        return [only]

    def _skip_unless_deterministic(self) -> None:
        if not self.deterministic:
            raise unittest.SkipTest("the env is not deterministic given its seed "
                                    "(deterministic = False): no reference to compare with")

    def _each_case(self, check: Callable[[bool, AutoresetMode], None],
                   modes: list[AutoresetMode]) -> None:
        """``check`` in each layout and mode, as subtests where the runner has them."""
        self._check_settings()
        for mode in modes:  # a make_env that returns no env fails once, not in every case
            self._source(mode)
        subtest: Callable[..., Any] = getattr(self, "subTest", _no_subtest)
        for mode in modes:
            for layout, pipeline in _LAYOUTS.items():
                with subtest(layout=layout, autoreset_mode=mode.value):
                    check(pipeline, mode)

    def _check_settings(self) -> None:
        name = type(self).__name__
        if self.num_workers < 1 or self.num_envs % (2 * self.num_workers):
            raise errors.ConfigError(
                name=f"{name}.num_envs", got=self.num_envs,
                expected=f"a multiple of 2 * num_workers = {2 * self.num_workers}",
                fix="every check also runs with pipeline=True, which halves each block")
        if self.steps < 2 or not self.autoreset_modes:
            raise errors.ConfigError(
                name=f"{name}.steps and .autoreset_modes", expected="steps >= 2 and at least "
                "one mode", got=(self.steps, self.autoreset_modes), fix="set both")

    @contextlib.contextmanager
    def _lockstep(self, pipeline: bool, mode: AutoresetMode, *, restart: bool = False,
                  reference: bool = True) -> Iterator[_Lockstep]:
        """A sampler of the env and, where deterministic, its serial reference; both closed on
        the way out, whatever happens."""
        source = self._source(mode)
        with contextlib.ExitStack() as stack:
            sampler = stack.enter_context(self._sampler(source, pipeline, mode, restart))
            make = _reference_of(source, mode) if reference and self.deterministic else None
            run = _Lockstep(sampler, make, self.seed)
            stack.callback(run.close)
            yield run

    def _source(self, mode: AutoresetMode) -> EnvSource:
        source = self.make_env(mode)
        if not (isinstance(source, (str, HostedVector)) or callable(source)):
            raise errors.ConfigError(
                name=f"{type(self).__name__}.make_env({mode.value!r})", got=source,
                expected="an env factory, an env id or a HostedVector",
                fix="return functools.partial(MyEnv, ...), 'MyEnv-v0' or HostedVector(...)")
        return source

    def _sampler(self, source: EnvSource, pipeline: bool, mode: AutoresetMode,
                 restart: bool) -> VecSampler:
        envs = source if isinstance(source, (str, HostedVector)) else [source] * self.num_envs
        try:
            return VecSampler(envs, num_envs=self.num_envs, options=self.options,
                              num_workers=self.num_workers, pipeline=pipeline,
                              autoreset_mode=mode, seed=self.seed, restart=restart,
                              deadline=self.deadline)
        except errors.AutoresetMismatchError as exc:
            raise errors.ConfigError(
                name=f"{type(self).__name__}.make_env({mode.value!r})", got=exc.env_mode,
                expected=f"an env that autoresets in {mode.value!r}",
                fix=f"build the hosted env in the mode make_env is given, or list only "
                f"{exc.env_mode!r} in autoreset_modes") from exc


class _Lockstep:
    """A sampler and, per worker of its step API, the serial reference of that worker's envs
    (none: no data is compared), sent the same actions: the k-th send to worker w gets
    ``actions[w][k]``, drawn from the action space seeded per worker, however the sends are
    scheduled. Every result is checked as it is received."""

    def __init__(self, sampler: VecSampler, make: Callable[[int], _Reference] | None,
                 seed: int) -> None:
        self.sampler, self.make, self.mode = sampler, make, sampler.autoreset_mode
        self.workers = range(sampler.num_slots)
        self.blocks = [sampler.worker_env_ids(w) for w in self.workers]
        self.seeds = env_seeds(seed, sampler.num_envs)
        self.spaces = [batch_space(sampler.single_action_space, len(b)) for b in self.blocks]
        for w, space in enumerate(self.spaces):
            space.seed(int(np.random.SeedSequence((seed, w)).generate_state(1)[0]))
        self.actions: list[list[Any]] = [[] for _ in self.workers]
        self.sent, self.received = [0] * len(self.blocks), [0] * len(self.blocks)
        self.refs: list[_Reference] = []
        #: The workers that may return a restart now, and those that did.
        self.may_restart: set[int] = set()
        self.restarted: set[int] = set()

    def close(self) -> None:
        for ref in self.refs:
            ref.close()

    def reset(self) -> Any:
        """``reset()`` of the sampler (its constructor's seed) and of every reference."""
        obs, _ = self.sampler.reset()
        if self.make is None:
            return obs
        for w, block in enumerate(self.blocks):
            self.refs.append(self.make(len(block)))  # one at a time: close() sees each
            rows = self.refs[w].reset(self.seeds[block.start:block.stop])
            _same_rows(obs, block.start, rows, range(len(block)), f"reset of worker {w}")
        return obs

    def reset_ended(self, result: StepResult) -> None:
        """Disabled: ``reset(mask=...)`` of the envs that ended (not restarted) in ``result``
        (every env's), and the same rows of the references."""
        mask = (result.terminated | result.truncated) & ~result.restarted
        if self.mode is not AutoresetMode.DISABLED or not mask.any():
            return
        obs, _ = self.sampler.reset(mask=mask)
        for w, block in enumerate(self.blocks if self.refs else ()):
            rows = mask[block.start:block.stop]
            if rows.any():
                want = self.refs[w].reset([None] * len(block), rows)
                _same_rows(obs, block.start, want, np.flatnonzero(rows), f"reset(mask) of {w}")

    def step(self, copy: bool = False) -> StepResult:
        """One full batch through ``step()``, each worker's rows checked."""
        actions = _concat([self._next_actions(w) for w in self.workers])
        result = self.sampler.step(actions, copy=copy)
        for w, block in enumerate(self.blocks):
            self.received[w] += 1
            self._check(w, result, block.start)
        return result

    def round(self, before_recv: Callable[[], None] | None = None) -> None:
        """``step_send`` to every worker, then ``step_recv(None)``: one result each."""
        for w in self.workers:
            self.send(w)
        if before_recv is not None:
            before_recv()
        results = self.sampler.step_recv(None)
        got = sorted(r.worker for r in results if r.worker is not None)
        _expect(got == list(self.workers), f"a full recv returned workers {got}")
        for r in results:
            self.receive(r)
        self.reset_ended(self.sampler.batch())

    def send(self, w: int) -> None:
        self.sampler.step_send(w, self._next_actions(w))

    def receive(self, result: StepResult) -> int:
        """Checks a result of ``step_recv``; its worker."""
        w = result.worker
        _expect(w is not None and self.received[w] < self.sent[w],
                f"step_recv returned worker {w}, which has no step in flight: "
                f"sent {self.sent}, received {self.received}")
        assert w is not None  # for the type checker: _expect raised otherwise
        _expect(result.env_ids == self.blocks[w], f"worker {w}'s result names env ids "
                f"{result.env_ids}, expected {self.blocks[w]}")
        self.received[w] += 1
        self._check(w, result, 0)
        return w

    def in_flight(self) -> bool:
        return self.sent != self.received

    def refused(self, result: StepResult) -> bool:
        """Whether a step of ``result``'s block would be refused: Disabled, an ended env, and
        a hosted env that does not freeze it."""
        ended = (result.terminated | result.truncated) & ~result.restarted
        return (self.mode is AutoresetMode.DISABLED and not _freezes(self.sampler)
                and bool(ended.any()))

    def step_live_blocks(self, ended: np.ndarray) -> None:
        """Disabled, a hosted env that does not freeze: a step of a block with an ended env is
        refused before it is posted (HostedEnvError); the other blocks step on."""
        try:
            self.sampler.step(_concat([self._draw(w, self.sent[w]) for w in self.workers]))
        except errors.HostedEnvError:
            pass
        else:
            raise AssertionError("Disabled: a step of a block with an ended env of a hosted "
                                 "env that does not freeze it must raise HostedEnvError")
        live = [w for w, b in enumerate(self.blocks) if not ended[b.start:b.stop].any()]
        for w in live:
            self.send(w)
        for r in self.sampler.step_recv(None) if live else []:
            self.receive(r)

    def _next_actions(self, w: int) -> Any:
        self.sent[w] += 1
        return self._draw(w, self.sent[w] - 1)

    def _draw(self, w: int, k: int) -> Any:
        while len(self.actions[w]) <= k:
            self.actions[w].append(self.spaces[w].sample())
        return self.actions[w][k]

    def _check(self, w: int, result: StepResult, lo: int) -> None:
        """Worker ``w``'s rows of ``result`` (from row ``lo``) against its reference's step with
        the same actions, or against what a restart returns."""
        rows = slice(lo, lo + len(self.blocks[w]))
        if result.restarted[rows].any():
            self._check_restart(w, result, rows)
        elif self.refs:
            want = self.refs[w].step(self.actions[w][self.received[w] - 1])
            _same_step(result, rows, want, self.mode, f"step {self.received[w]} of worker {w}")

    def _check_restart(self, w: int, result: StepResult, rows: slice) -> None:
        where = f"the restart of worker {w}"
        _expect(w in self.may_restart and w not in self.restarted,
                f"worker {w} returned a restart that no fault explains")
        self.restarted.add(w)
        _expect(bool(result.restarted[rows].all() and result.truncated[rows].all()),
                f"{where}: every env of the worker must be restarted and truncated")
        _expect(not (result.terminated[rows].any() or result.has_final_obs[rows].any()),
                f"{where}: no env may be terminated or have a final obs")
        np.testing.assert_array_equal(result.rewards[rows], 0.0, err_msg=f"{where}: rewards")
        ids = self.blocks[w]
        reasons = [result.infos.get(i, {}).get("restart_reason") for i in ids]
        _expect(None not in reasons, f"{where}: infos[env]['restart_reason'] missing: {reasons}")
        if self.refs and self.make is not None:  # re-made, reset with the first restart's
            self.refs[w].close()  # seeds of its envs' own streams
            self.refs[w] = self.make(len(ids))
            want = self.refs[w].reset([restart_seed(s, 1) for s in self.seeds[ids.start:ids.stop]])
            _same_rows(result.obs, rows.start, want, range(len(ids)), where)


# --- the serial reference: one worker's envs, stepped in this process ----------------------------


@dataclass
class _Expected:
    """One block's step as the serial reference gives it, row by row."""

    obs: list[Any]
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    #: SameStep: the last obs of each env that ended at this step (None for the others).
    final_obs: list[Any]

    @classmethod
    def blank(cls, n: int) -> _Expected:
        return cls([None] * n, np.zeros(n), np.zeros(n, bool), np.zeros(n, bool), [None] * n)


class _Reference:
    """A block of ``count`` envs stepped here, one call at a time, in ``mode``: what the
    sampler must return for that block. Under Disabled an env that ended is frozen (its obs and
    flags kept, reward 0) until ``reset`` names it (docs/semantics.md's table)."""

    def __init__(self, mode: AutoresetMode, count: int) -> None:
        self.mode, self.count = mode, count
        self.last = _Expected.blank(count)

    def ended(self) -> np.ndarray:
        ended: np.ndarray = self.last.terminated | self.last.truncated
        return ended

    def reset(self, seeds: Sequence[int | None], mask: np.ndarray | None = None) -> list[Any]:
        """Resets every env (those of ``mask``) with ``seeds``; the obs of every row."""
        rows = np.ones(self.count, bool) if mask is None else mask
        obs = self._reset(seeds, rows)
        for i in np.flatnonzero(rows):
            self.last.obs[i] = copy.deepcopy(obs[i])
            self.last.terminated[i] = self.last.truncated[i] = False
        return list(self.last.obs)

    def step(self, actions: Any) -> _Expected:
        frozen = self.ended() if self.mode is AutoresetMode.DISABLED else np.zeros(self.count,
                                                                                   bool)
        got = self._step(actions, frozen)
        got.obs = [copy.deepcopy(o) for o in got.obs]
        for i in np.flatnonzero(frozen):
            got.obs[i], got.rewards[i] = self.last.obs[i], 0.0
            got.terminated[i], got.truncated[i] = self.last.terminated[i], self.last.truncated[i]
        self.last = _Expected(list(got.obs), got.rewards, got.terminated.copy(),
                              got.truncated.copy(), [None] * self.count)
        return got

    def _reset(self, seeds: Sequence[int | None], rows: np.ndarray) -> list[Any]:
        raise NotImplementedError

    def _step(self, actions: Any, frozen: np.ndarray) -> _Expected:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _SingleEnvs(_Reference):
    """An env block: one env per row, autoreset here as the table in docs/semantics.md says."""

    def __init__(self, make: Callable[[], gym.Env[Any, Any]], mode: AutoresetMode,
                 count: int) -> None:
        super().__init__(mode, count)
        self.envs = [make() for _ in range(count)]

    def _reset(self, seeds: Sequence[int | None], rows: np.ndarray) -> list[Any]:
        return [env.reset(seed=seeds[i])[0] if rows[i] else None
                for i, env in enumerate(self.envs)]

    def _step(self, actions: Any, frozen: np.ndarray) -> _Expected:
        out, ended = _Expected.blank(self.count), self.ended()
        for i, env in enumerate(self.envs):
            if frozen[i]:
                continue
            if self.mode is AutoresetMode.NEXT_STEP and ended[i]:
                out.obs[i] = env.reset()[0]  # reward 0, flags False
                continue
            obs, out.rewards[i], out.terminated[i], out.truncated[i], _ = env.step(
                index_tree(actions, i))
            if self.mode is AutoresetMode.SAME_STEP and (out.terminated[i] or out.truncated[i]):
                out.final_obs[i], obs = copy.deepcopy(obs), env.reset()[0]
            out.obs[i] = obs
        return out

    def close(self) -> None:
        for env in self.envs:
            env.close()


class _HostedEnv(_Reference):
    """A hosted block: the hosted vector env, built for the block and seeded as a worker
    seeds it (``hosted.block_seed``); it autoresets itself."""

    def __init__(self, hosted: HostedVector, mode: AutoresetMode, count: int) -> None:
        super().__init__(mode, count)
        self.env = hosted.build(count, mode)

    def _reset(self, seeds: Sequence[int | None], rows: np.ndarray) -> list[Any]:
        options = None if rows.all() else {"reset_mask": rows}
        seed: Any = block_seed(self.env, seeds)  # VectorEnv annotates only int seeds
        obs, _ = self.env.reset(seed=seed, options=options)
        return list(iterate(self.env.observation_space, obs))

    def _step(self, actions: Any, frozen: np.ndarray) -> _Expected:
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        out = _Expected(list(iterate(self.env.observation_space, obs)), np.array(rewards),
                        np.array(terminated), np.array(truncated), [None] * self.count)
        for i in np.flatnonzero(infos.get("_final_obs", np.zeros(self.count, bool))):
            out.final_obs[i] = copy.deepcopy(infos["final_obs"][i])
        return out

    def close(self) -> None:
        self.env.close()


def _reference_of(source: EnvSource, mode: AutoresetMode) -> Callable[[int], _Reference]:
    """Builds the serial reference of a block of ``n`` envs of ``source``."""
    if isinstance(source, HostedVector):
        return functools.partial(_HostedEnv, source, mode)
    make = EnvMaker(source) if isinstance(source, str) else source
    return functools.partial(_SingleEnvs, make, mode)


# --- comparisons and processes -------------------------------------------------------------------


def _expect(condition: bool, message: str) -> None:
    """``assert``, kept under ``python -O`` and read the same by every runner."""
    if not condition:
        raise AssertionError(message)


def _same(got: Any, want: Any, where: str) -> None:
    """Equal values, nested dicts and tuples of arrays included."""
    if isinstance(want, dict):
        _expect(isinstance(got, dict) and got.keys() == want.keys(), f"{where}: keys differ")
        for key in want:
            _same(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, tuple):
        _expect(isinstance(got, tuple) and len(got) == len(want), f"{where}: lengths differ")
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            _same(a, b, f"{where}[{i}]")
    else:
        np.testing.assert_array_equal(got, want, err_msg=where)


def _concat(parts: list[Any]) -> Any:
    """The batches ``parts`` one after another (nested dicts and tuples of arrays)."""
    if isinstance(parts[0], dict):
        return {key: _concat([p[key] for p in parts]) for key in parts[0]}
    if isinstance(parts[0], tuple):
        return tuple(_concat([p[i] for p in parts]) for i in range(len(parts[0])))
    return np.concatenate(parts)


def _same_rows(batch: Any, lo: int, want: list[Any], rows: Iterable[int], where: str) -> None:
    """Rows ``lo + i`` of ``batch`` equal ``want[i]`` for each ``i`` of ``rows``."""
    for i in rows:
        _same(index_tree(batch, lo + int(i)), want[int(i)], f"{where}: obs of row {lo + int(i)}")


def _same_step(got: StepResult, rows: slice, want: _Expected, mode: AutoresetMode,
               where: str) -> None:
    """``got``'s ``rows`` equal the reference's step ``want``."""
    for name in ("rewards", "terminated", "truncated"):
        np.testing.assert_array_equal(getattr(got, name)[rows], getattr(want, name),
                                      err_msg=f"{where}: {name}")
    _same_rows(got.obs, rows.start, want.obs, range(len(want.obs)), where)
    if mode is AutoresetMode.SAME_STEP:
        ended = [f is not None for f in want.final_obs]
        np.testing.assert_array_equal(got.has_final_obs[rows], ended,
                                      err_msg=f"{where}: has_final_obs")
        _same_rows(got.final_obs, rows.start, want.final_obs, np.flatnonzero(ended),
                   f"{where}: final")


def _expect_frozen(result: StepResult, kept: StepResult, ended: np.ndarray) -> None:
    """Disabled: the envs of ``ended`` show what they showed when they ended, reward 0."""
    where = "Disabled: an ended env stays frozen until reset(mask=...)"
    np.testing.assert_array_equal(result.rewards[ended], 0.0, err_msg=f"{where}: reward")
    for name in ("terminated", "truncated"):
        np.testing.assert_array_equal(getattr(result, name)[ended], getattr(kept, name)[ended],
                                      err_msg=f"{where}: {name}")
    rows = np.flatnonzero(ended)
    kept_rows = [index_tree(kept.obs, int(i)) for i in range(len(ended))]
    _same_rows(result.obs, 0, kept_rows, rows, where)


def _freezes(sampler: VecSampler) -> bool:
    """Whether the sampler's ended envs stay frozen under Disabled: single envs do, a hosted
    env if it says so (``freezes_ended_envs``)."""
    probe = sampler.layout.probe
    return probe is None or probe.freezes


def _no_subtest(**params: Any) -> contextlib.AbstractContextManager[None]:
    """Outside ``unittest.TestCase`` (a plain pytest class) a case is not a subtest."""
    return contextlib.nullcontext()


def _kill_signal() -> int:
    sig = getattr(signal, "SIGKILL", None)
    if sig is None:
        raise unittest.SkipTest("the restart check kills a worker with SIGKILL (POSIX)")
    return int(sig)


def _kill(pid: int) -> None:
    """SIGKILLs ``pid`` and waits until it is dead, as a crash would leave it."""
    os.kill(pid, _kill_signal())
    left = _running({pid}, within=5.0)
    _expect(not left, f"worker process {pid} did not die within 5 s of SIGKILL")


def _running(pids: set[int], within: float) -> list[int]:
    """Those of ``pids`` still running after up to ``within`` seconds (a zombie is not)."""
    end = time.monotonic() + within
    while True:
        alive = sorted(p for p in pids if _alive(p))
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now holds the pid
        return False
    try:  # Linux: a zombie (dead, not yet reaped by its parent) runs nothing
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return True
