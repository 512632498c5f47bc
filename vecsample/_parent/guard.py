"""``CallGuard``: who may call a sampler: the process that made it, one thread at a time.

Processes: a sampler's workers, pipes and shared memory belong to the process that started
them. A child forked from it (a DataLoader worker, a forking server) that called the parent's
sampler would step the parent's workers behind its back, so its call gets
``ForkedSamplerError`` at once.

Threads: a sampler serves one thread at a time (docs/semantics.md, "Threads and processes").
The thread inside a call, or with steps pending (sent, not yet received), holds it; a call from
another thread then gets ``ConcurrentUseError`` at once, naming the holder, instead of taking
that thread's results (a full batch returns every pending step, whoever sent it) and leaving
it to wait for its deadline. Once the holder is out of its calls with nothing pending (or has
ended), another thread takes the sampler over with its next call, so a sampler made in one
thread and driven by another works; when the main thread takes over a sampler made in another,
it installs the signal handlers that only it can (``signals.adopt``). ``close()`` is not
guarded: any thread may call it at any time (a trainer stops a sampler that way on shutdown),
and the call it cuts short raises ``ClosedError``.

The holder's own calls, the hot path, pay one ``claim`` per call: a thread-id read, a compare
and two attribute stores, nothing per env and no system call. Everything else (another thread,
a forked child, a call inside a call) takes ``_enter``.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable

from vecsample import errors
from vecsample._parent import signals

#: ``CallGuard.idle`` in a forked child: no thread id, so every call there takes ``_enter``.
FORKED = -1
_guards: weakref.WeakSet[CallGuard] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for guard in list(_guards):
        guard.idle = FORKED


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class CallGuard:
    """The process and the thread that may call one sampler now.

    A call claims the sampler with ``restore = guard.claim(name)`` and gives it back with
    ``guard.idle = restore`` in a ``finally``: a store, not a call, so that a send's last call
    stays ``signals.commit()``. The claim reads ``idle`` and stores over it with no call in
    between: CPython switches threads and runs signal handlers only at calls and backward jumps,
    so two threads never both claim, and no KeyboardInterrupt lands between a claim and the
    ``try`` that gives it back.
    """

    __slots__ = ("__weakref__", "holder", "holder_thread", "idle", "owner", "pending", "what")

    def __init__(self, what: str, pending: Callable[[], list[int]]) -> None:
        self.what = what
        #: The process that made the sampler.
        self.owner = os.getpid()
        #: The thread that holds the sampler: its last caller (at first, the one that made it).
        self.holder_thread = threading.current_thread()
        self.holder = threading.get_ident()
        #: The holder's thread id while no call is inside; None while one is (FORKED in a
        #: forked child).
        self.idle: int | None = self.holder
        #: The workers with a step pending (sent, not yet received).
        self.pending = pending
        _guards.add(self)

    def claim(self, call: str) -> int | None:
        """Claims the sampler for this thread's ``call``; what ``idle`` must be given back."""
        me = threading.get_ident()
        if self.idle == me:  # the holder, between its calls: the hot path
            self.idle = None
            return me
        return self._enter(call, me)

    def _enter(self, call: str, me: int) -> int | None:
        if self.owner != os.getpid():
            raise errors.ForkedSamplerError(call=call, pid=os.getpid(), owner=self.owner,
                                            what=self.what)
        idle = self.idle
        if idle is None:  # a call is inside: this thread's own (a call within a call), or not
            if self.holder == me:
                return None
            raise self._refused(call, self.holder_thread.name, "is inside a call")
        self.idle = None  # claimed from the holder, which is out of its calls
        try:
            thread = threading.current_thread()
            pending = self.pending()
            if pending and self.holder_thread.is_alive():
                raise self._refused(call, self.holder_thread.name, f"has the steps of workers "
                                    f"{pending} pending (sent, not yet received)")
        except BaseException:
            self.idle = idle  # given back as it was
            raise
        self.holder_thread, self.holder = thread, me  # taken over
        signals.adopt()  # the main thread's first call to a sampler made elsewhere: its handlers
        return me

    def _refused(self, call: str, holder: str, doing: str) -> errors.ConcurrentUseError:
        return errors.ConcurrentUseError(call=call, thread=threading.current_thread().name,
                                         holder=holder, doing=doing, what=self.what)


__all__ = ["CallGuard"]
