"""``Deadline``: the bounds of one synchronous call, and the arithmetic of its waits."""

from __future__ import annotations

import time
from dataclasses import dataclass

from vecsample.options import check_seconds


@dataclass(frozen=True)
class Deadline:
    """The bounds of one synchronous call (reset, call, ...): each wait inside it lasts at most
    ``per_wait`` seconds (the sampler's ``deadline``), and none goes past ``end`` (a time on the
    monotonic clock, set by the call's own ``timeout``), restarts and their rebuilds included."""

    per_wait: float | None
    end: float | None = None
    #: The call's own bound in seconds, named by the error once ``end`` has passed.
    timeout: float | None = None

    @classmethod
    def within(cls, seconds: float | None) -> Deadline:
        """A call that must be over ``seconds`` from now (None: never)."""
        end = None if seconds is None else time.monotonic() + seconds
        return cls(seconds, end, seconds)

    @classmethod
    def of_call(cls, seconds: float | None, per_wait: float | None) -> Deadline:
        """A synchronous call's bounds: its own ``deadline=`` (``seconds``, checked) bounds the
        whole call, restarts included; None leaves each wait bounded by ``per_wait`` (the
        sampler's ``deadline``) and a restart's rebuild by ``startup_deadline``."""
        if seconds is None:
            return cls(per_wait)
        return cls.within(check_seconds(seconds, "deadline"))

    def per(self, seconds: float | None) -> Deadline:
        """The same call's end, with waits of ``seconds`` (a rebuild's startup_deadline)."""
        return Deadline(seconds, self.end, self.timeout)

    def since(self, started: float) -> Deadline:
        """The same bounds for a call that began waiting at ``started`` (monotonic clock):
        its waits together end ``per_wait`` after it (a second wait in the same call gets what
        the first left, not a fresh ``per_wait``)."""
        if self.per_wait is None:
            return self
        end = started + self.per_wait
        if self.end is not None and self.end <= end:
            return self
        return Deadline(self.per_wait, end, self.per_wait)

    def wait_end(self) -> float | None:
        """When a wait that starts now must end: after ``per_wait``, or at ``end`` if sooner."""
        now_plus = None if self.per_wait is None else time.monotonic() + self.per_wait
        ends = [t for t in (now_plus, self.end) if t is not None]
        return min(ends) if ends else None

    def exceeded(self) -> float | None:
        """The bound a wait that ran out hit: the call's ``timeout`` once ``end`` has passed,
        ``per_wait`` before."""
        if self.end is not None and time.monotonic() >= self.end:
            return self.timeout
        return self.per_wait


__all__ = ["Deadline"]
