"""SIGTERM closes every open sampler cleanly; SIGINT stays Python's KeyboardInterrupt.

SIGINT: Python raises KeyboardInterrupt in the main thread, between any two bytecodes. The few
steps that must happen together (read a reply off a pipe and record it; send a command and
mark the worker busy) run inside ``critical()``: while Python's own SIGINT handler is in place,
vecsample's replaces it with one that, inside such a section, only notes the interrupt, and the
section's end raises it. So a caught KeyboardInterrupt never leaves a half-read pipe or a
state that disagrees with the worker. The section of ``step_send`` and ``send_all`` runs from
their post to their return and ends in ``commit()``: an interrupt noted once the step is posted
is held, the call returns normally, and the next call raises it before it does anything. So a
send that raises KeyboardInterrupt has posted nothing (issue 23; docs/semantics.md). Workers
ignore SIGINT (they get it too on Ctrl-C), and ``with`` blocks or the finalizer close the
sampler as the exception unwinds. A trainer that catches KeyboardInterrupt to save a checkpoint
keeps a working sampler. A SIGINT handled while a finalizer runs (a ``weakref.finalize``
callback or a ``__del__``, which the garbage collector may start anywhere) is delivered again
once it is over: Python drops what a finalizer raises, so raised there it would be lost. A
SIGINT handler of the user's own is never replaced.

Only the main thread runs Python signal handlers, so only its sections count: a section of
another thread (a sampler stepped there) never holds a SIGINT, nor raises one in that thread.
``signal.signal`` works only in the main thread, so a sampler made in another thread gets the
handlers at the main thread's first call to it (``adopt``, from ``CallGuard``'s take-over): its
sends keep their promise there too. A section that a KeyboardInterrupt left at its end (raised
by Python's own handler or the user's, which do not hold it) is forgotten when vecsample's is
installed: the main thread is then at the start of a call, in no section, and a section left
open would hold every later SIGINT for good, in every sampler.

SIGTERM: its default action kills the process with no cleanup. When the handler is still the
default, the first sampler installs one that closes every open sampler (workers exit through
CLOSE, closing their envs), restores the default action and sends SIGTERM to the process again,
so it ends exactly as an uncaught SIGTERM would (exit status -15), not through ``sys.exit``
raised at an arbitrary point of the interrupted code. A handler the user installed is never
replaced; it then owns closing the samplers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import weakref
from collections.abc import Callable
from threading import get_ident
from types import FrameType
from typing import Protocol

#: Seconds each worker gets to exit on SIGTERM before it is terminated.
SIGTERM_CLOSE_TIMEOUT = 1.0


class Closable(Protocol):
    def close(self, timeout: float = ...) -> None: ...


_open: weakref.WeakSet[Closable] = weakref.WeakSet()
_installed_in: int | None = None  # the pid that installed the handler (fork copies the flag)


def register(sampler: Closable) -> None:
    """Tracks ``sampler`` until it is closed, installing the signal handlers (``adopt``)."""
    _open.add(sampler)
    adopt()


def adopt() -> None:
    """Installs vecsample's SIGTERM and SIGINT handlers where Python's defaults are in place,
    from the main thread only (elsewhere it does nothing): at a sampler's construction, and at
    the main thread's first call to a sampler made in another thread."""
    if get_ident() != _main.ident:
        return  # signal.signal works only in the main thread
    _install()
    _install_sigint()


class _MainThread:
    """The main thread's sections: how deep it is in them, and whether a SIGINT that came
    inside them is held for their end. The only thread whose sections count (module
    docstring)."""

    __slots__ = ("depth", "ident", "pending")

    def __init__(self, ident: int | None) -> None:
        self.ident = ident
        self.depth = 0
        self.pending = False


_main = _MainThread(threading.main_thread().ident)


def _after_fork_in_child() -> None:
    """The thread that forked is the child's main thread, and in no section of its own."""
    _main.ident, _main.depth, _main.pending = get_ident(), 0, False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Section:
    """Sections that a SIGINT must not cut in two; the interrupt is raised at their end."""

    __slots__ = ()

    def __enter__(self) -> None:
        enter()

    def __exit__(self, kind: object, value: object, tb: object) -> None:
        leave()


#: ``with critical:`` defers a SIGINT to the end of the block (see the module docstring).
critical = Section()


def enter() -> None:
    """``critical.__enter__`` for the hot path (with ``try: ... finally: leave()``): a third
    of the cost of a ``with`` block, which a step pays three times."""
    if get_ident() == _main.ident:
        _main.depth += 1


def leave() -> None:
    """End of a section: raises the SIGINT noted inside it, as Python's own KeyboardInterrupt."""
    if get_ident() == _main.ident:
        _main.depth -= 1
        if _main.pending and _main.depth == 0:
            _main.pending = False
            signal.default_int_handler(signal.SIGINT, None)


def commit() -> None:
    """End of a section whose effect has happened (a step posted): a SIGINT noted in it is held,
    not raised, so that the call returns normally, as a call that did its work. The next call
    raises it (``raise_held``) before it does anything; a SIGINT outside any section raises at
    once and takes the held one with it. It must be the caller's last call: CPython runs signal
    handlers at calls and backward jumps, so none runs between it and the caller's return."""
    if get_ident() == _main.ident:
        _main.depth -= 1


def raise_held() -> None:
    """At the start of a call: raises the SIGINT that ``commit`` held, if any (as Python's own
    KeyboardInterrupt), so that it comes out of a call that has done nothing yet."""
    if _main.pending and _main.depth == 0 and get_ident() == _main.ident:
        _main.pending = False
        signal.default_int_handler(signal.SIGINT, None)


class undoable:
    """A section whose effect ``undo`` takes back if a SIGINT comes before its end: the
    interrupt is then raised, as Python's own KeyboardInterrupt, once the undo is done; so is
    any exception raised inside. One that comes after the section is raised in the caller's
    code, which then holds what the section did (``StepChannel.deliver``: the results)."""

    __slots__ = ("undo",)

    def __init__(self, undo: Callable[[], None]) -> None:
        self.undo = undo

    def __enter__(self) -> None:
        enter()

    def __exit__(self, kind: object, value: object, tb: object) -> None:
        if get_ident() != _main.ident:  # no SIGINT is ever held for another thread
            if kind is not None:
                self.undo()
            return
        if kind is not None or _main.pending:
            self.undo()
            leave()  # raises the SIGINT noted before the end (or during the undo)
            return
        _main.depth -= 1  # the last statement: no SIGINT lands between it and the caller


def _install_sigint() -> None:
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
        # Called at a call's start: no section is open. One a KeyboardInterrupt left at its
        # end while this handler was not in place is forgotten (the module docstring).
        _main.depth = 0


#: The code of ``weakref.finalize.__call__``: a frame running it is a finalizer.
_FINALIZER_CODE = weakref.finalize.__call__.__code__
#: Seconds before a SIGINT that came during a finalizer is delivered again.
REDELIVER_AFTER = 0.002


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    if _main.depth > 0:
        _main.pending = True  # raised when the section ends
        return
    if _in_finalizer(frame):
        # Python prints and drops any exception a finalizer raises: raised here, the
        # KeyboardInterrupt would be lost. Delivered again once the finalizer is over.
        _redeliver(signum)
        return
    _main.pending = False  # one held by ``commit`` is raised with this one
    signal.default_int_handler(signum, frame)  # Python's own, as if no handler were set


def _in_finalizer(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside a weakref finalizer or a ``__del__`` (the garbage
    collector's, vecsample's shared memory regions' or anyone's), where a raise is dropped."""
    while frame is not None:
        if frame.f_code is _FINALIZER_CODE or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _redeliver(signum: int) -> None:
    """Sends ``signum`` to this process again shortly, from a helper thread: the main thread
    handles it at its next bytecode outside the finalizer (or defers it once more)."""
    timer = threading.Timer(REDELIVER_AFTER, signal.raise_signal, (signum,))
    timer.daemon = True  # never holds the interpreter's exit
    with contextlib.suppress(RuntimeError):  # no new thread at interpreter shutdown
        timer.start()


def unregister(sampler: Closable) -> None:
    _open.discard(sampler)


def installed() -> bool:
    """Whether this process's SIGTERM handler is vecsample's."""
    return _installed_in == os.getpid() and signal.getsignal(signal.SIGTERM) is _on_sigterm


def _install() -> None:
    global _installed_in
    if installed():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return  # the user's handler (or SIG_IGN) wins
    signal.signal(signal.SIGTERM, _on_sigterm)
    _installed_in = os.getpid()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    if _installed_in == os.getpid():
        for sampler in list(_open):
            sampler.close(timeout=SIGTERM_CLOSE_TIMEOUT)
    # Die of the signal itself, as with no handler: kill() to ourselves delivers it before it
    # returns, so the interrupted code never resumes with half-closed samplers.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
