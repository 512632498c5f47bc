"""Recording the arrival order of partial batches, and replaying it bit for bit.

``VecSampler(..., record=path)`` appends one small record per call that decides what the envs
see (replay_log.py): every ``step_send`` (the worker), every ``step_recv`` (the workers it
returned, in order), every ``reset`` (the seed, digests of the options and the mask), every
other command (its kind, a digest of its payload) and every restart (the worker and why).

``VecSampler(..., replay=path)`` runs the same program again: each ``step_recv`` waits (within
the sampler's deadline) for exactly the recorded workers and returns them in the recorded order,
whatever their timing and its ``timeout``; a worker that finished but is not in the record stays
pending for a later call. A restart in the record is made again (the worker respawned, its envs
re-seeded from the same streams and flagged). Each env's seeds do not depend on the timing
(seeding.py), so the observations, rewards, flags and infos are the recorded ones, bit for bit,
given the same policy. The first call that differs from the log raises ``ReplayDivergedError``
naming it, and every later call raises it again: a replay never goes on silently.
See docs/semantics.md, "Reproducing an asynchronous run".

The sampler calls one hook per call on its ``log``, a ``CallLog``: ``NO_LOG`` (nothing
recorded, each hook a plain return), a ``Recorder`` or a ``Replayer``. They observe the sends
and the receives; for ``step_recv`` the replayer also sets the schedule (``schedule``: which
workers to wait for, and the restarts to make first; ``arrange``: their recorded order).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np

from vecsample import errors
from vecsample._parent.layout import Layout
from vecsample._wire.protocol import Command
from vecsample._wire.replay_log import (
    ADDRESS,
    VERSION,
    LogReader,
    LogWriter,
    Tag,
    describe,
    digest,
    seed_field,
)
from vecsample.factories import EnvMaker
from vecsample.options import Options
from vecsample.results import StepResult
from vecsample.types import PathArg

if TYPE_CHECKING:  # passed in by the sampler, which builds them: no import at run time
    from vecsample._parent.restart import Restarts

#: How often (seconds) a recording reaches the file while it runs; it always does on close().
FLUSH_EVERY = 1.0

#: What a step_recv waits for: the workers, the partial batch's ``timeout``, and the results of
#: the restarts made before the wait (a replay makes the recorded ones again).
Schedule = tuple[list[int], float | None, list[StepResult]]


#: The header fields that must match between the recorded sampler and the replaying one: the
#: envs, and every option that is not marked ``TUNING`` (options.py says which are).
IDENTITY = ("num_envs", "env_digest", *Options().identity())


def header(layout: Layout) -> dict[str, Any]:
    """What identifies a run: its envs, the options that decide what it samples, the format."""
    names = ([_describe(layout.hosted)] * layout.num_envs if layout.hosted is not None
             else [_describe(fn) for fn in layout.env_fns])
    return {"version": VERSION, "num_envs": layout.num_envs, "env": names[0],
            "env_digest": digest("\n".join(names)), **layout.options.identity()}


def _describe(fn: object) -> str:
    """A factory as text that is the same in every run (no memory addresses)."""
    if isinstance(fn, EnvMaker):
        return f"{fn.env_id} {sorted(fn.kwargs.items())!r}"
    return ADDRESS.sub("", repr(fn))


class CallLog:
    """The sampler's hooks, one per call: what a log of the calls observes (and, for step_recv,
    decides). This base class keeps no log: each hook returns at once (``NO_LOG``); a
    ``Recorder`` writes one, a ``Replayer`` follows one."""

    def send(self, w: int) -> None:
        """``step_send(w)``, before anything is sent."""

    def send_all(self) -> None:
        """``send_all`` (and ``step``), before anything is sent."""

    def schedule(self, pending: list[int], timeout: float | None, copy: bool) -> Schedule:
        """``step_recv``, before its wait: what it waits for (replay chooses it itself)."""
        return pending, timeout, []

    def arrange(self, results: list[StepResult]) -> list[StepResult]:
        """``step_recv``'s results once its failure policy settled them, in the order to return."""
        return results

    def failed(self, exc: BaseException) -> None:
        """``step_recv`` raised ``exc``; the results it carries were handed over."""

    def delivered(self, results: list[StepResult]) -> list[StepResult]:
        """``step_recv``'s results, once handed over."""
        return results

    def reset(self, seed: object, options: object, mask: np.ndarray | None) -> None:
        """``reset``, before the workers get it."""

    def command(self, command: Command, payload: object) -> None:
        """``reset_task``, ``call``, ``get_attr``, ``set_attr``, before the workers get it."""

    def close(self) -> None:
        """The sampler closes: the log is flushed and closed."""


NO_LOG = CallLog()


def open_log(record: PathArg | None, replay: PathArg | None, layout: Layout,
             restart_log: list[tuple[int, str]], restarts: Restarts | None) -> CallLog:
    """The sampler's log: a Recorder, a Replayer, or NO_LOG (``Options`` refuses both paths
    at once). A replay of a run with restarts makes them again through ``restarts`` (None
    without restarts: the header check has made sure that the log has none then)."""
    if record is not None:
        return Recorder(record, layout, restart_log)
    if replay is not None:
        return Replayer(replay, layout, restart_log, restarts)
    return NO_LOG


class Recorder(CallLog):
    """Appends a record per call; restarts are written after the call in which they happened."""

    def __init__(self, path: PathArg, layout: Layout,
                 restart_log: list[tuple[int, str]]) -> None:
        self._writer = LogWriter(path, header(layout))
        self._restart_log = restart_log
        self._seen = len(restart_log)
        self._record = self._writer.record
        # The hot records, packed once: [SEND, w] for each worker, [SEND_ALL].
        self._send = [_packed(Tag.SEND, w) for w in range(layout.num_slots)]
        self._send_all = _packed(Tag.SEND_ALL)
        # [RECV, [w...]] as bytes: the array's head for each length, then one byte per worker,
        # while msgpack writes a list under 16 entries of ints under 128 that way.
        self._recv_head = ([bytes((0x92, Tag.RECV, 0x90 | n))
                            for n in range(layout.num_slots + 1)]
                           if layout.num_slots < 16 else [])
        self._write = self._writer.write
        self._flush_at = time.monotonic() + FLUSH_EVERY

    def _restarts(self) -> None:
        if len(self._restart_log) > self._seen:
            for w, reason in self._restart_log[self._seen:]:
                self._record(Tag.RESTART, w, reason)
            self._seen = len(self._restart_log)
            self._writer.flush()  # rare, and what a crash report needs most

    def send(self, w: int) -> None:
        if len(self._restart_log) > self._seen:
            self._restarts()
        self._write(self._send[w])

    def send_all(self) -> None:
        if len(self._restart_log) > self._seen:
            self._restarts()
        self._write(self._send_all)

    def failed(self, exc: BaseException) -> None:
        if not isinstance(exc, errors.VecSampleError):
            return  # an interrupt: the results stay for the next recv, which records them
        self._restarts()
        handed = [r.worker for r in getattr(exc, "results", ())]
        hung = getattr(exc, "hung_workers", [])
        self._record(Tag.RECV_ERROR, handed, type(exc).__name__, list(hung))
        self._writer.flush()

    def delivered(self, results: list[StepResult]) -> list[StepResult]:
        if len(self._restart_log) > self._seen:
            self._restarts()
        workers = [r.worker for r in results]
        if self._recv_head:  # packed by hand: msgpack's fixarray of fixints
            self._write(self._recv_head[len(workers)] + bytes(workers))  # type: ignore[arg-type]
        else:
            self._record(Tag.RECV, workers)
        now = time.monotonic()
        if now >= self._flush_at:  # a killed run loses at most the last FLUSH_EVERY seconds
            self._flush_at = now + FLUSH_EVERY
            self._writer.flush()
        return results

    def reset(self, seed: object, options: object, mask: np.ndarray | None) -> None:
        self._restarts()
        self._record(Tag.RESET, seed_field(seed), digest(options), digest(mask))

    def command(self, command: Command, payload: object) -> None:
        self._restarts()
        self._record(Tag.COMMAND, int(command), digest(payload))

    def close(self) -> None:
        self._restarts()
        self._writer.close()


def _packed(tag: Tag, *fields: int) -> bytes:
    data: bytes = msgpack.packb([int(tag), *fields])
    return data


class Replayer(CallLog):
    """Checks each call against the log and makes step_recv return the recorded workers."""

    def __init__(self, path: PathArg, layout: Layout, restart_log: list[tuple[int, str]],
                 restarts: Restarts | None) -> None:
        self._reader = LogReader(path)
        self.path = self._reader.path
        self._layout = layout
        self._restart_log = restart_log
        self._restarts = restarts
        self._seen = len(restart_log)  # restarts of this run accounted for
        #: The step_recv under way: its record, and the error it is to raise again.
        self._record: list[Any] = []
        self._recorded: errors.DeadlineExceededError | None = None
        #: The index of the current call (0: the construction), and why replay stopped.
        self.call = 0
        self.stopped: errors.ReplayError | None = None
        self._seeded = layout.options.seed is not None  # once true, every env has a seeded stream
        self._check_header(header(layout))

    def _check_header(self, ours: dict[str, Any]) -> None:
        theirs = self._reader.header
        for key in IDENTITY:
            if theirs.get(key) != ours[key]:
                self._reader.close()
                what = f"a VecSampler with {key}={{!r}} (env {{}})"
                raise errors.ReplayDivergedError(
                    path=self.path, call=0,
                    expected=what.format(theirs.get(key), theirs.get("env", "not named")),
                    got=what.format(ours[key], ours["env"]),
                    fix=f"build the sampler as the recorded run did (the same envs and "
                        f"{', '.join(IDENTITY[2:])})")

    # --- the log, one call at a time -------------------------------------------------------------

    def _diverged(self, expected: list[Any] | None, got: str) -> errors.ReplayDivergedError:
        self.stopped = errors.ReplayDivergedError(
            path=self.path, call=self.call, expected=describe(expected, self._reader.end),
            got=got)
        return self.stopped

    def _begin(self) -> None:
        """A new call: raises if replay stopped, checks restarts made since the last call."""
        if self.stopped is not None:
            raise errors.ReplayDivergedError(
                path=self.path, call=self.call + 1, expected="nothing more (replay stopped)",
                got="another call", fix=f"replay stopped earlier: {self.stopped}")
        self.call += 1
        self._match_restarts()

    def _match_restarts(self) -> None:
        """Every restart this run made since the last check must be the log's next record."""
        for w, reason in self._restart_log[self._seen:]:
            self._seen += 1
            record = self._next()
            if record is None or record[0] != Tag.RESTART or record[1] != w:
                raise self._diverged(record, f"a restart of worker {w} ({reason})")

    def _next(self) -> list[Any] | None:
        """The log's next record (checked by the reader: ``replay_log.FIELDS``); a corrupt one
        stops the replay, so that every later call says so too."""
        try:
            return self._reader.next()
        except errors.ReplayLogError as exc:
            self.stopped = exc
            raise

    def _expect(self, tag: Tag, *fields: object, got: str) -> list[Any]:
        self._begin()
        record = self._next()
        if record is None or record[0] != tag or (fields and tuple(record[1:]) != fields):
            raise self._diverged(record, got)
        return record

    def send(self, w: int) -> None:
        self._expect(Tag.SEND, w, got=f"step_send({w}, ...)")

    def send_all(self) -> None:
        self._expect(Tag.SEND_ALL, got="send_all(...) (or step(...))")

    def reset(self, seed: object, options: object, mask: np.ndarray | None) -> None:
        fields = (seed_field(seed), digest(options), digest(mask))
        self._expect(Tag.RESET, *fields, got=f"reset(seed={fields[0]!r}, ...) with "
                     f"{'the same' if fields[1:] == (None, None) else 'other'} options/mask")
        self._seeded = self._seeded or seed is not None
        if not self._seeded:  # unseeded envs make other data in every run
            self.stopped = errors.ReplayUnsupportedError(
                path=self.path, call=self.call, what="the recorded run reset its envs without "
                "a seed (seed=None in VecSampler and in reset), so what they returned cannot "
                "be made again", fix="pass seed= to VecSampler (or to the first reset) and "
                "record the run again")
            raise self.stopped

    def command(self, command: Command, payload: object) -> None:
        self._expect(Tag.COMMAND, int(command), digest(payload),
                     got=f"{command.name.lower()}(...) (or another payload)")

    def close(self) -> None:
        self._reader.close()

    # --- step_recv -------------------------------------------------------------------------------

    def schedule(self, pending: list[int], timeout: float | None, copy: bool) -> Schedule:
        """The recorded workers, waited for as a full batch, after the recorded restarts."""
        self._begin()
        forced, self._record = self._recorded_recv(pending)
        try:
            made = [r for w, reason in forced
                    for r in self._force(w, reason, copy)]  # with a lost other half
        except BaseException as exc:
            self.failed(exc)
            raise
        self._seen += len(forced)
        done = {r.worker for r in made}
        return [w for w in self._record[1] if w not in done], None, made

    def arrange(self, results: list[StepResult]) -> list[StepResult]:
        """The results in the recorded order; the recorded deadline raised again with them."""
        self._match_restarts()  # a restart the recorded run did not have diverges here
        got = {r.worker: r for r in results}
        ordered = [got[w] for w in self._record[1]]
        if self._record[0] == Tag.RECV_ERROR:
            self._recorded = errors.DeadlineExceededError(
                hung_workers=list(self._record[3]), deadline=self._layout.options.deadline,
                results=ordered)
            raise self._recorded
        return ordered

    def failed(self, exc: BaseException) -> None:
        """The log moved on and the call did not: replay stops here (unless it is the recorded
        error, raised again)."""
        if exc is not self._recorded and self.stopped is None:
            self.stopped = errors.ReplayDivergedError(
                path=self.path, call=self.call, expected=describe(self._record),
                got=f"step_recv() raising {type(exc).__name__}: {exc}")

    def _force(self, w: int, reason: str, copy: bool) -> list[StepResult]:
        """A recorded restart of worker ``w``, made again."""
        # The header check compares ``restart``: a log with restarts replays only with them.
        assert self._restarts is not None, "a log with restarts replayed without restart=True"
        return self._restarts.force(w, reason, copy)

    def _recorded_recv(self, pending: list[int]) -> tuple[list[tuple[int, str]], list[Any]]:
        """The restarts recorded in this step_recv, then its RECV record, checked."""
        forced: list[tuple[int, str]] = []
        record = self._next()
        while record is not None and record[0] == Tag.RESTART:
            forced.append((record[1], record[2]))
            record = self._next()
        got = f"step_recv() with workers {pending} pending"
        if record is None or record[0] not in (Tag.RECV, Tag.RECV_ERROR):
            raise self._diverged(record, got)
        expected = set(record[1]) | {w for w, _ in forced}
        if not expected <= set(pending):
            raise self._diverged(record, got)
        if record[0] == Tag.RECV_ERROR and record[2] != "DeadlineExceededError":
            self.stopped = errors.ReplayUnsupportedError(
                path=self.path, call=self.call, what=f"the recorded step_recv() raised "
                f"{record[2]} (a worker died or raised with restart off)", fix="replay stops "
                "here; record with restart=True to make such failures replayable")
            raise self.stopped
        return forced, record


def stopped(log: CallLog) -> errors.ReplayError | None:
    """Why a replay stopped (None: it has not, or ``log`` does not replay)."""
    return log.stopped if isinstance(log, Replayer) else None


__all__ = ["NO_LOG", "CallLog", "Recorder", "Replayer", "open_log", "stopped"]
