"""What this process may use of the machine, read where an automatic choice needs it.

The records (options.py and its siblings) only hold what a user passes and gets; reading the
machine is this module's job. ``layout`` (the spin), ``autoplace`` (the placement), the adapters'
default worker counts, ``vecsample bench`` and the experiments count the same cores.
"""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask; all of them off Linux): what the
    automatic choices count (the spin, the adapters' worker counts)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


__all__ = ["usable_cores"]
