"""The driver's books on its Ray actors (for ``RaySampler``, sampler.py): where each actor
stands, its requests in flight, and what became of every request.

Every request ends as exactly one of: a chunk received, a chunk lost (with its cause, in
``losses``), or still pending. So ``requests == chunks + chunks_lost + pending`` holds whatever
happened, and a chunk taken is handed to the caller, either returned or carried on the error
that a failed chunk of the same ``recv`` raises (``results``, as VecSampler's errors carry
theirs).

An actor's life, as Ray tells it (by the error type; ``ActorUnavailableError`` exists from Ray
2.11, and what follows was measured on Ray 2.60):

* ``UP``: requests are sent to it.
* ``RESTARTING``: a request to its current life failed with a ``RayActorError``: it died,
  counted once, however long Ray takes to rebuild it. No request is sent to it; a probe, its
  ``ready()``, asks when it is back. Ray answers a probe to an actor it is restarting with
  ``ActorUnavailableError`` (the probe is sent again), to one that cannot come back with
  ``ActorDiedError`` (retired), and once it is back with its node (up again; requests resume).
* ``GONE``: Ray said that it cannot come back. Its pending requests are lost; when every actor
  is gone, ``ActorsLostError`` names each and why, and every later call raises it again.

Requests sent to an earlier life fail later too; they are lost chunks, not more deaths (each
request remembers the life it was sent to). A chunk that Ray lost after it was made (its
node's object store went with the node) is lost as well. Anything else a request raises (an
env's or the policy's error, from the actor) is a lost chunk that ``recv`` raises.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, ObjectLostError, RayActorError

from vecsample import errors
from vecsample.ray.actor import ActorInfo, Chunk
from vecsample.ray.errors import ActorsLostError, ChunkError

__all__ = ["COUNTERS", "Fleet", "LostChunk", "Slot", "State"]

#: The totals of ``RaySampler.stats()`` counted as chunks come and go.
COUNTERS = ("requests", "chunks", "env_steps", "chunks_lost", "actor_deaths", "wait_s")
#: How many ``LostChunk`` records the books keep (the counters keep counting past them).
LOSSES_KEPT = 1000


class State(enum.Enum):
    UP = "up"
    RESTARTING = "restarting"
    GONE = "gone"


@dataclass(frozen=True)
class LostChunk:
    """A chunk requested and never received: whose it was, and why (one line)."""

    actor_id: int
    reason: str


@dataclass
class Slot:
    """The driver's view of one actor: its handle, its requests in flight (each with the life
    of the actor it was sent to), and where it stands."""

    actor_id: int
    handle: Any
    node_id: str = ""  # where it last ran: updated by its chunks and by its probe's answer
    pending: deque[tuple[Any, int]] = field(default_factory=deque)
    state: State = State.UP
    life: int = 0  # one more at each death
    probe: Any = None  # while RESTARTING: a ready() call, answered once the actor is back
    deaths: int = 0
    reason: str = ""  # why it is GONE


def reason(error: BaseException) -> str:
    """One line that says what went wrong: the error's type and its telling line."""
    cause = getattr(error, "cause", None) or error  # a RayTaskError's own error, if it has one
    lines = [line for line in str(cause).splitlines() if line.strip()] or [""]
    # Ray's actor errors end with the line that says why ("The actor is dead because ...").
    line = lines[-1] if isinstance(cause, RayActorError) else lines[0]
    return f"{type(cause).__name__}: {getattr(cause, 'reason', '') or line.strip()}"


def _carrying(error: BaseException, actor_id: int, chunks: list[Chunk]) -> BaseException:
    """``error`` as ``recv`` raises it: a vecsample error (an env's or the policy's, raised in
    the actor) as it came, anything else (Ray's) as a ChunkError; either carries ``actor_id``
    and the chunks taken in the same ``recv`` (``results``)."""
    if not isinstance(error, errors.VecSampleError):
        wrapped = ChunkError(actor_id=actor_id, cause=reason(error))
        wrapped.__cause__ = error
        error = wrapped
    carried: Any = error  # fields set after the fact: the error was made in the actor
    carried.results, carried.actor_id = list(chunks), actor_id
    remote = getattr(error, "remote_traceback", "")
    if remote and error.__cause__ is None:  # Ray's wrapper drops it: never lose the traceback
        error.__cause__ = errors.RemoteTraceback(remote)
    return error


class Fleet:
    """The slots of every actor, the counters, and the chunks taken but not yet handed over."""

    def __init__(self, handles: Iterable[Any], actor_restarts: int) -> None:
        self.slots = [Slot(i, handle) for i, handle in enumerate(handles)]
        self.actor_restarts = actor_restarts
        self.stats = dict.fromkeys(COUNTERS, 0.0)
        self.losses: deque[LostChunk] = deque(maxlen=LOSSES_KEPT)
        #: Taken in this recv (or in one a KeyboardInterrupt cut short): handed over next.
        self._held: list[Chunk] = []
        self._failed: list[tuple[int, BaseException]] = []
        self._gone: dict[int, str] | None = None  # every actor's reason, once all are gone

    # --- who is where --------------------------------------------------------------------------

    def live(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.state is not State.GONE]

    def up(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.state is State.UP]

    def restarting(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.state is State.RESTARTING]

    def pending(self) -> int:
        return sum(len(slot.pending) for slot in self.slots)

    def lost_error(self) -> ActorsLostError | None:
        """The error every call raises once all actors are gone (a new one each time)."""
        if self._gone is None:
            return None
        return ActorsLostError(lost=self._gone, actor_restarts=self.actor_restarts)

    # --- requests ------------------------------------------------------------------------------

    def fill(self, in_flight: int, request: Callable[[Slot], Any]) -> None:
        """Tops every actor that is up to ``in_flight`` requests; ``request(slot)`` sends one."""
        for slot in self.up():
            while len(slot.pending) < in_flight:
                slot.pending.append((request(slot), slot.life))
                self.stats["requests"] += 1

    def take(self, ready: Iterable[Any]) -> int:
        """Fetches the ready requests, oldest first per actor; how many came back as a chunk
        or as an error to raise (a loss to a death counts as neither)."""
        done, taken = set(ready), 0
        for slot in self.live():
            while slot.pending and slot.pending[0][0] in done:
                ref, life = slot.pending[0]
                try:
                    chunk = ray.get(ref)
                except Exception as exc:  # every way a request can fail ends as a lost chunk
                    slot.pending.popleft()
                    taken += self._failed_request(slot, life, exc)
                    continue
                slot.pending.popleft()
                self._received(slot, chunk)
                taken += 1
        return taken

    def _received(self, slot: Slot, chunk: Chunk) -> None:
        self._held.append(chunk)
        slot.node_id = chunk.node_id
        self.stats["chunks"] += 1
        self.stats["env_steps"] += chunk.env_steps

    def _failed_request(self, slot: Slot, life: int, exc: Exception) -> int:
        """Counts the lost chunk; 1 if ``recv`` must raise its error."""
        self._lose(slot, reason(exc))
        if isinstance(exc, RayActorError):
            if life == slot.life and slot.state is State.UP:
                self._died(slot)
            return 0
        if isinstance(exc, ObjectLostError):  # made, then lost with its node: not an error
            return 0
        self._failed.append((slot.actor_id, exc))
        return 1

    def _lose(self, slot: Slot, why: str, count: int = 1) -> None:
        self.stats["chunks_lost"] += count
        self.losses.extend([LostChunk(slot.actor_id, why)] * count)

    def _died(self, slot: Slot) -> None:
        slot.deaths += 1
        self.stats["actor_deaths"] += 1
        slot.life += 1
        slot.state = State.RESTARTING
        slot.probe = slot.handle.ready.remote()  # answered once Ray has rebuilt it

    # --- restarts ------------------------------------------------------------------------------

    def settle(self, ready: Iterable[Any]) -> None:
        """Reads the probes in ``ready``: an actor back is up again (on its new node), one still
        restarting is asked again, one that cannot come back is retired."""
        probes = {slot.probe: slot for slot in self.restarting()}
        for ref in ready:
            slot = probes[ref]
            try:
                info: ActorInfo = ray.get(ref)
            except ActorUnavailableError:  # Ray is still rebuilding it
                slot.probe = slot.handle.ready.remote()
                continue
            except Exception as exc:  # ActorDiedError: Ray says it cannot come back
                self._retire(slot, reason(exc))
                continue
            slot.state, slot.probe, slot.node_id = State.UP, None, info.node_id

    def _retire(self, slot: Slot, why: str) -> None:
        slot.state, slot.probe, slot.reason = State.GONE, None, why
        self._lose(slot, f"its actor is gone ({why})", len(slot.pending))
        slot.pending.clear()
        if not self.live():
            self._gone = {s.actor_id: s.reason for s in self.slots}
            raise ActorsLostError(lost=self._gone, actor_restarts=self.actor_restarts,
                                  results=self.release())

    # --- handing over --------------------------------------------------------------------------

    def release(self) -> list[Chunk]:
        """The chunks taken so far, which the caller now owns."""
        chunks, self._held = self._held, []
        return chunks

    def hand_over(self) -> list[Chunk]:
        """The chunks taken; if a request failed, its error instead, carrying them."""
        if not self._failed:
            return self.release()
        (actor_id, error), self._failed = self._failed[0], []
        raise _carrying(error, actor_id, self.release())

    def close(self) -> None:
        """Every request still pending is lost: nobody will read it."""
        for slot in self.slots:
            self._lose(slot, "the sampler was closed", len(slot.pending))
            slot.pending.clear()
            slot.state, slot.probe = State.GONE, None
