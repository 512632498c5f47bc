"""The public types a user's code names: what an env factory is, what a space is, and how an
ended env is reset. They sit here, outside the private ``_wire`` package, so that integrations
(and users) import them from a public module; the wire format imports them from here too."""

from __future__ import annotations

import os
from collections.abc import Callable
from enum import Enum
from typing import Any

import gymnasium as gym

#: What builds one env in a worker: called there, once per env (and again on a restart).
EnvFn = Callable[[], gym.Env[Any, Any]]
#: Any gymnasium space (its type parameter is the type of its samples).
Space = gym.Space[Any]
#: A file's path, as ``open`` takes it (``record=``, ``replay=``).
PathArg = str | os.PathLike[str]


class AutoresetMode(str, Enum):
    """How an env that ended is reset; the values match gymnasium's ``AutoresetMode``."""

    NEXT_STEP = "NextStep"  # the step after the end resets instead of stepping (gymnasium default)
    SAME_STEP = "SameStep"  # reset inside the ending step; final obs kept in shared memory
    DISABLED = "Disabled"  # never reset; an ended env is frozen until reset() names it


__all__ = ["AutoresetMode", "EnvFn", "PathArg", "Space"]
