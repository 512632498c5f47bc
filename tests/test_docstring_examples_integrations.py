"""The ``Example:`` in the docstring of each integration's main class runs as written (doctest).

MultiTaskSampler's example starts two worker processes; RaySampler's starts a local Ray with two
CPUs, samples one chunk and shuts Ray down (about ten seconds). A class whose docstring loses its
example, or whose example stops matching what the code prints, fails here.
"""

from __future__ import annotations

import doctest
import importlib
import time
from collections.abc import Iterator

import psutil
import pytest

#: The documented classes: (module, class name).
DOCUMENTED = [
    ("vecsample.maml.sampler", "MultiTaskSampler"),
    ("vecsample.ray.sampler", "RaySampler"),
    ("vecsample.sb3", "VecEnv"),
]


@pytest.fixture(autouse=True)
def no_leaked_workers() -> Iterator[None]:
    """Replaces conftest's check: Ray's processes end a moment after ``ray.shutdown()``, so
    this one waits for every child (but multiprocessing's helper servers) to be gone."""
    yield
    end = time.monotonic() + 15.0
    while (leaked := _children()) and time.monotonic() < end:
        time.sleep(0.2)
    assert not leaked, f"processes left behind: {[(p.pid, p.cmdline()) for p in leaked]}"


def _children() -> list[psutil.Process]:
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            helper = any(h in " ".join(proc.cmdline())
                         for h in ("forkserver", "resource_tracker"))
            if proc.status() != psutil.STATUS_ZOMBIE and not helper:
                found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


def _class_example(module_name: str, name: str) -> doctest.DocTest:
    """The doctest of the class's own docstring (not of its methods)."""
    module = importlib.import_module(module_name)
    cls = getattr(module, name)
    assert "Example:" in (cls.__doc__ or ""), f"{name}'s docstring has no Example: section"
    found = doctest.DocTestFinder(recurse=False).find(cls, name, module=module)
    tests = [t for t in found if t.examples]
    assert len(tests) == 1, f"{name}'s docstring has no >>> example"
    return tests[0]


@pytest.mark.parametrize(("module_name", "name"), DOCUMENTED)
def test_the_class_example_runs(module_name: str, name: str) -> None:
    if name == "RaySampler":
        ray = pytest.importorskip("ray")
        ray.shutdown()  # the example starts its own local Ray
    test = _class_example(module_name, name)
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    result = runner.run(test, out=report.append)
    assert result.attempted == len(test.examples) > 0
    assert result.failed == 0, "".join(report)
