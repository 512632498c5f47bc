"""Command-line flags from a dataclass of scalar defaults, for the experiment scripts.

``field_name: int = 3`` becomes ``--field-name`` of type int with default 3; a field whose
default is None takes a str. Scripts with richer flags (presets, lists, booleans) build their
own parser (experiments/ppo.py, experiments/timeout_comparison.py).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def parse_flags(cls: type[T], doc: str | None, argv: Sequence[str] | None = None) -> T:
    """An instance of the dataclass ``cls`` from ``argv`` (default: ``sys.argv[1:]``).

    ``doc``: the script's docstring; its first line is the ``--help`` description.
    """
    defaults: Any = cls()
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    for field in dataclasses.fields(defaults):
        default = getattr(defaults, field.name)
        kind = str if default is None else type(default)
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=kind, default=default)
    return cls(**vars(parser.parse_args(argv)))
