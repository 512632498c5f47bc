"""How workers start: the start method, a main script's ``__main__`` guard, picklable factories.

* ``context="auto"`` (the default) picks ``fork`` on Linux while the parent runs no other
  Python thread and holds no CUDA context, as gymnasium's AsyncVectorEnv does by default, and
  ``forkserver`` otherwise. Fork starts fastest, needs nothing to be pickled and never
  re-imports the main script; forkserver is the safe choice once threads exist, since forking
  them can deadlock a child on a lock another thread held. (Native pools such as OpenBLAS's
  are fork-safe; envs that run torch's OpenMP code in the workers should pass
  ``context="forkserver"``.)
* ``spawn`` and ``forkserver`` start a worker by re-importing the main script. A script that
  builds a sampler at its top level, outside ``if __name__ == "__main__":``, would build one
  again in every worker: that is caught in the parent, before any process starts, as a short
  ``MainGuardError`` naming the line and the fix.
* Factories travel through cloudpickle (which gymnasium already depends on), so lambdas,
  closures and bound methods work under every start method, as with AsyncVectorEnv.
* Such a worker also lacks the envs the main script registers under its guard: it is given
  the parent's registrations of the env ids the factories name
  (``factories.env_registrations``) and registers those it lacks before it builds
  (docs/gymnasium.md).
"""

from __future__ import annotations

import ast
import functools
import multiprocessing as mp
import os
import sys
import threading
import warnings
from pathlib import Path
from types import FrameType
from typing import Any

from vecsample.errors import MainGuardError

#: The vecsample package's directory, as the code's file names spell it (with and without
#: symlinks resolved): a warning points at the first frame outside it, the user's line.
_PACKAGE_DIRS = tuple({str(path) + os.sep for path in (Path(__file__).parents[1],
                                                       Path(__file__).resolve().parents[1])})
_warned: set[str] = set()  # warnings given once per process


def resolve_context(requested: str) -> str:
    """The start method to use: ``requested`` (``Options.context``, checked there), or for
    ``"auto"`` fork when it is safe."""
    methods = mp.get_all_start_methods()
    if requested == "auto":
        if "fork" in methods and sys.platform.startswith("linux") and _single_threaded():
            return "fork"
        return "forkserver" if "forkserver" in methods else "spawn"
    if requested == "fork" and not _single_threaded():
        # Forking a multi-threaded parent can deadlock the child on a lock held by another
        # thread; allowed because it is fast and often fine, but the user should know, once.
        warn_once("fork-threads", "context='fork' with other threads running in the parent "
                  "can deadlock workers; prefer context='auto' or 'forkserver'.")
    return requested


def _single_threaded() -> bool:
    """No other Python thread, and no CUDA context (a fork would copy it, unusable)."""
    torch = sys.modules.get("torch")
    cuda = torch is not None and bool(torch.cuda.is_initialized())
    return threading.active_count() == 1 and not cuda


def check_main_guard(context: str) -> None:
    """Raises MainGuardError if ``context`` re-imports a main script that is building a sampler
    at its top level, outside ``if __name__ == "__main__":``."""
    if context == "fork":
        return
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or not str(path).endswith(".py"):
        return  # interactive, -c, or a frozen entry point: nothing is re-imported by path
    line = _main_line(sys._getframe(), main.__dict__)
    if line is not None and not _guarded(str(path), line):
        raise MainGuardError(script=str(path), line=line, context=context)


def _main_line(frame: FrameType | None, main_globals: dict[str, Any]) -> int | None:
    """The line the main script's top level is executing, if it is on the stack."""
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is main_globals:
            return frame.f_lineno
        frame = frame.f_back
    return None


@functools.lru_cache(maxsize=16)
def _guard_ranges(path: str) -> tuple[tuple[int, int], ...]:
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return ((0, sys.maxsize),)  # unreadable: assume guarded rather than refuse to start
    return tuple((node.lineno, node.end_lineno or node.lineno) for node in tree.body
                 if isinstance(node, ast.If) and _is_main_test(node.test))


def _is_main_test(test: ast.expr) -> bool:
    """``__name__ == "__main__"``, either way round."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)):
        return False
    names = {ast.unparse(test.left), ast.unparse(test.comparators[0])}
    return names in ({"__name__", "'__main__'"}, {"__name__", '"__main__"'})


def _guarded(path: str, line: int) -> bool:
    return any(lo <= line <= hi for lo, hi in _guard_ranges(path))


def warn_once(key: str, message: str, category: type[Warning] = RuntimeWarning) -> None:
    """A warning (a RuntimeWarning unless ``category`` says) pointing at the user's line (the
    first frame outside vecsample), given at most once per process for each ``key``."""
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(message, category, stacklevel=_user_stacklevel())


def _user_stacklevel() -> int:
    """warnings.warn's stacklevel for the first caller outside the vecsample package (every
    frame of vecsample is skipped: _parent's, the sampler's, the adapters'...)."""
    frame, level = sys._getframe(1), 1  # 1: the caller of _user_stacklevel (warn_once)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIRS):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level
