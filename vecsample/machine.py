"""What this process may use of the machine, read where an automatic choice needs it.

The records (options.py and its siblings) only hold what a user passes and gets; reading the
machine is this module's job. ``layout`` (the spin), ``autoplace`` (the placement), the adapters'
default worker counts, ``vecsample bench`` and the experiments count the same cores.
"""

from __future__ import annotations

import os

from vecsample.errors import ConfigError

try:
    import resource
except ImportError:  # not a Unix: no file-descriptor limit to read
    resource = None  # type: ignore[assignment]

#: File descriptors the parent holds per worker of the step API: its end of the worker's pipe,
#: the worker process's pidfd, and, while a worker starts, both ends of its new pipe.
FDS_PER_SLOT = 3
#: What else the parent keeps open beside the workers' (the doorbell pipe, the shared memory,
#: a forkserver's socket) and what the rest of the program may hold.
FDS_SPARE = 64


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask; all of them off Linux): what the
    automatic choices count (the spin, the adapters' worker counts)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def ensure_fds(slots: int) -> None:
    """Makes room for the file descriptors of ``slots`` workers (``FDS_PER_SLOT`` each) beside
    those open now. Where the soft limit is too low, it is raised up to the hard limit, which a
    process may do for itself: Linux's usual soft limit, 1024, stops a sampler near 330 workers
    with EMFILE half way through its start, and the hard limit is there for such programs.
    Where even the hard limit is too low: a ConfigError naming both and the fix, before any
    worker starts."""
    if resource is None:
        return
    open_now = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0
    need = open_now + FDS_PER_SLOT * slots + FDS_SPARE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise ConfigError(
            name="num_workers", expected=f"a number whose pipes and process handles fit in "
            f"this process's file-descriptor limit ({hard}, the hard limit of RLIMIT_NOFILE; "
            f"{open_now} are open now, {FDS_PER_SLOT} more a worker)", got=slots,
            fix=f"raise the limit to at least {need} (`ulimit -Hn {need}` as root, or "
            f"limits.conf), or use fewer workers")
    # The process's own fd limit: raised to what its workers need, never above the hard one.
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


__all__ = ["FDS_PER_SLOT", "FDS_SPARE", "ensure_fds", "usable_cores"]
