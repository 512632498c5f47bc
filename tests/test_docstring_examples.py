"""The ``Example:`` sections of the public constructors' docstrings run, and say what they show.

Each listed object must have an ``Example:`` section with ``>>>`` lines; every example is run
with :mod:`doctest` and must print exactly what the docstring says.
"""

from __future__ import annotations

import doctest
import importlib
from dataclasses import dataclass
from typing import Any

import pytest

DOCUMENTED = [
    "vecsample.adapters.gymnasium.VectorEnv",
    "vecsample.adapters.gymnasium.make_vec",
    "vecsample.train.rollout.Rollout",
    "vecsample.sampler.VecSampler",
    "vecsample.options.Options",
    "vecsample.hosted.HostedVector",
]


@dataclass
class Outcome:
    """What running an object's docstring examples gave."""

    examples: int
    failed: int
    report: str
    has_section: bool


def _resolve(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def run_examples(obj: Any, name: str) -> Outcome:
    """Runs the examples of ``obj``'s own docstring (not its methods'), in a fresh namespace."""
    tests = doctest.DocTestFinder(recurse=False).find(obj, name, globs={})
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test, out=report.append)
    failed, attempted = runner.summarize(verbose=False)
    has_section = "Example:" in (obj.__doc__ or "") or "Examples:" in (obj.__doc__ or "")
    return Outcome(attempted, failed, "".join(report), has_section)


@pytest.mark.parametrize("dotted", DOCUMENTED)
def test_docstring_example_runs(dotted):
    outcome = run_examples(_resolve(dotted), dotted)
    assert outcome.has_section and outcome.examples > 0, (
        f"{dotted} has no runnable example: add an 'Example:' section with '>>> ' lines to its "
        "docstring"
    )
    assert outcome.failed == 0, f"{dotted}: {outcome.failed} example(s) failed:\n{outcome.report}"


# --- the check itself can fail -------------------------------------------------------------------


def _right() -> None:
    """Example:
    >>> 1 + 1
    2
    """


def _wrong() -> None:
    """Example:
    >>> 1 + 1
    3
    """


def _raising() -> None:
    """Example:
    >>> {}["missing"]
    """


def _missing() -> None:
    """No example here."""


def test_run_examples_reports_wrong_output_exceptions_and_missing_examples():
    right = run_examples(_right, "_right")
    assert (right.examples, right.failed, right.has_section) == (1, 0, True)
    wrong = run_examples(_wrong, "_wrong")
    assert (wrong.examples, wrong.failed) == (1, 1) and "Expected:\n    3" in wrong.report
    raising = run_examples(_raising, "_raising")
    assert raising.failed == 1 and "KeyError" in raising.report
    missing = run_examples(_missing, "_missing")
    assert (missing.examples, missing.has_section) == (0, False)
