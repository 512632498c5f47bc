"""The workers that the trainer's own process serves (``Options.env_placement``): stand-ins for
their process and their pipe, so that the pool, the command RPC, the restart policy and shutdown
treat them as they treat a worker process.

A worker served here is the worker's own code (``ServedInParent``, reached through the entry
point ``_wire/spec.py: IN_PARENT``): the same block, the same side of the step handshake (it
writes its rows and its ``DONE`` word in the same shared memory), the same replies. What
differs is who runs it and when:

* its **step** runs when the parent's wait for steps begins (``SharingChannel`` in
  ``stepping.py``), while the worker processes step theirs;
* a **command** runs as the parent sends it (``ParentPipe.send_bytes``), and its reply waits
  in the pipe's queue, with one byte on a real pipe per reply, so that the ``poll()`` that
  waits for replies and deaths (``WorkerPool.gather``) sees it;
* its "process" (``ParentProcess``) is this one: it has this process's pid, it cannot die on
  its own, so its death fd never fires; ``terminate`` and ``kill`` close its envs, which is
  all that stopping it can do. An env that hangs here cannot be killed, and one that crashes
  the process takes the trainer with it (docs/reliability.md, "The parent's share").
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # type names only: the pool hands the entry point and the specs in
    from vecsample._wire.spec import EntryPoint, InParent, WorkerSpec


class WorkerProcess(Protocol):
    """What the pool does with the process that serves a worker: a ``multiprocessing``
    process, or ``ParentProcess``."""

    @property
    def pid(self) -> int | None: ...

    @property
    def exitcode(self) -> int | None: ...

    def is_alive(self) -> bool: ...

    def join(self, timeout: float | None = None) -> None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...

    def close(self) -> None: ...


class ParentPipe:
    """The parent's end of the pipe of a worker served in this process (a ``PipeEnd``).
    ``send_bytes`` hands the message to the worker at once; the worker's replies queue here
    (``reply``), each announced by one byte on a real pipe: ``fileno()`` polls readable while
    a reply waits."""

    def __init__(self) -> None:
        #: The worker it talks to (set once the worker is made).
        self.served: InParent | None = None
        self._replies: deque[bytes] = deque()
        self._read_fd, self._write_fd = os.pipe()
        # Never blocks the process that both writes and reads it: one byte per reply, and a
        # command gets one reply, read before the next command is sent.
        os.set_blocking(self._write_fd, False)
        self._closed = False

    def reply(self, message: bytes) -> None:
        """The worker's end: a reply to the parent."""
        self._replies.append(message)
        with contextlib.suppress(BlockingIOError):
            os.write(self._write_fd, b"\0")

    def send_bytes(self, buf: bytes) -> None:
        """Hands ``buf`` to the worker (a command runs before this returns). OSError once the
        pipe or the worker is closed, as a dead worker's pipe raises."""
        if self._closed or self.served is None:
            raise BrokenPipeError("the pipe of a worker served in this process is closed")
        self.served.deliver(bytes(buf))

    def recv_bytes(self) -> bytes:
        """The oldest reply. EOFError when none waits (a worker that closed replies no more)."""
        if not self._replies:
            raise EOFError
        with contextlib.suppress(BlockingIOError):
            os.read(self._read_fd, 1)
        return self._replies.popleft()

    def poll(self, timeout: float | None = 0.0) -> bool:
        """Whether a reply waits (at once: a reply is queued before the call that makes it
        returns, so there is nothing to wait for)."""
        return bool(self._replies)

    def fileno(self) -> int:
        return self._read_fd

    def close(self) -> None:
        """Closes the pipe's fds (not the worker: ``ParentProcess`` stops it). Idempotent."""
        if not self._closed:
            self._closed = True
            os.close(self._read_fd)
            os.close(self._write_fd)


class ParentProcess:
    """The "process" of workers served in this one (a ``WorkerProcess``): this process's pid;
    alive until its workers are closed (CLOSE, or ``terminate``, which closes them: stopping
    it can do no more); a death fd that never fires."""

    name = "vecsample-in-parent"

    def __init__(self, served: Sequence[InParent]) -> None:
        self._served = list(served)
        self.pid: int | None = os.getpid()
        # A pipe never written: the death fd of a process that cannot die apart from this one.
        self.death_fd, self._never = os.pipe()
        self._open = True

    @property
    def exitcode(self) -> int | None:
        return None if self.is_alive() else 0

    def start(self) -> None:
        """Builds every worker's block, here and now; each replies READY or its error."""
        for served in self._served:
            served.build()

    def is_alive(self) -> bool:
        return any(not served.closed for served in self._served)

    def join(self, timeout: float | None = None) -> None:
        """Nothing to wait for: its workers close when they are told to, in the call."""

    def terminate(self) -> None:
        """Closes every worker's envs (waiting for a step or command under way in another
        thread): all that stopping a process that is this one can do."""
        for served in self._served:
            served.close()

    def kill(self) -> None:
        self.terminate()

    def close(self) -> None:
        """Gives back the death fd's pipe. Idempotent."""
        if self._open:
            self._open = False
            os.close(self.death_fd)
            os.close(self._never)


def serve_here(entry: EntryPoint, specs: Sequence[WorkerSpec],
               ) -> tuple[ParentProcess, list[ParentPipe], list[InParent]]:
    """Workers ``specs`` served by this process: each built here, now (a Ctrl-C during the
    build closes what was built, then is raised); their stand-in process, their pipes."""
    pipes = [ParentPipe() for _ in specs]
    served: list[InParent] = [entry(spec, pipe.reply) for spec, pipe in zip(specs, pipes,
                                                                             strict=True)]
    for pipe, worker in zip(pipes, served, strict=True):
        pipe.served = worker
    proc = ParentProcess(served)
    try:
        proc.start()
    except BaseException:
        proc.terminate()
        proc.close()
        for pipe in pipes:
            pipe.close()
        raise
    return proc, pipes, served


__all__ = ["ParentPipe", "ParentProcess", "WorkerProcess", "serve_here"]
