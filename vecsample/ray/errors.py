"""Errors raised only by the Ray backend; each is a ``VecSampleError`` too.

Each says what was expected, what came, and how to fix it. A failure inside an actor (an env,
the policy) reaches the driver as its own error, wrapped by Ray so that it is also a
``RayTaskError``; ``RaySampler.recv`` counts the chunk as lost and raises it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vecsample.errors import ClosedError, ConfigError, RemoteTraceback, VecSampleError


class ActorsLostError(VecSampleError, RuntimeError):
    """Every Ray actor of a RaySampler is gone for good: Ray said that it cannot come back (it
    died more often than ``actor_restarts`` allows, or was killed with ``no_restart``).

    ``lost``: why each actor was lost, by actor id. ``results``: the chunks taken in the same
    ``recv``. Every later call raises it again (a new instance, the same message).
    """

    def __init__(self, *, lost: Mapping[int, str], actor_restarts: int,
                 results: Sequence[Any] = ()) -> None:
        why = "; ".join(f"actor {i}: {reason}" for i, reason in sorted(lost.items()))
        super().__init__(
            f"every Ray actor of this RaySampler is gone for good, so no chunk can come ({why}). "
            f"Ray restarts a dead actor up to actor_restarts={actor_restarts} times; check the "
            f"actors' logs (`ray logs`) and the nodes' memory, then close() this sampler and "
            f"create a new one."
        )
        self.lost = dict(lost)
        self.actor_restarts = actor_restarts
        self.results: list[Any] = list(results)


class RayShutdownError(ClosedError):
    """``ray.shutdown()`` ran (or Ray was started anew) while this RaySampler was open: its
    actors went with the Ray instance they lived in. Also a ``ClosedError``."""

    def __init__(self) -> None:
        super().__init__(
            "Ray was shut down (ray.shutdown()) while this RaySampler was open, and its actors "
            "went with it; expected the Ray instance the sampler started in. close() it (that is "
            "a no-op now), call ray.init() and create a new RaySampler.", what="RaySampler")


class WeightsError(ConfigError):
    """``RaySampler.set_weights`` got weights that do not fit the actors' policy (its
    ``weights_spec()``): a name missing or unknown, a shape or a dtype that differs. Raised
    before the weights leave the driver: the version does not change."""


class PolicyError(VecSampleError, RuntimeError):
    """The policy of a Ray actor failed in ``call`` (``"act"`` or ``"set_weights"``), or
    returned extras that do not fit; its traceback is the cause (``remote_traceback``)."""

    def __init__(self, *, call: str, exc_type: str, message: str, fix: str,
                 remote_traceback: str = "") -> None:
        what = f"{exc_type}: {message}" if exc_type else message
        super().__init__(f"the actor's policy failed in {call}(): {what}; {fix}.")
        self.call = call
        self.exc_type = exc_type
        self.remote_traceback = remote_traceback
        if remote_traceback:
            self.__cause__ = RemoteTraceback(remote_traceback)


class ChunkError(VecSampleError, RuntimeError):
    """A request failed in Ray itself, not in the env or the policy (the cause is Ray's error):
    the chunk of actor ``actor_id`` is lost and counted; the next requests go on."""

    def __init__(self, *, actor_id: int, cause: str) -> None:
        super().__init__(
            f"a chunk of Ray actor {actor_id} failed in Ray: {cause}; expected a chunk or an "
            f"env's or policy's error. The chunk is lost (stats()['chunks_lost']) and the next "
            f"requests go on; check `ray status` and the actors' logs if it recurs."
        )
        self.actor_id = actor_id
