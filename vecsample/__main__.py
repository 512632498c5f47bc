"""The ``vecsample`` command line: one subcommand per module, imported only when chosen.

Each subcommand module defines ``add_arguments(parser)`` and ``run(args) -> int``; registering a
new one is one line in ``SUBCOMMANDS``. Importing lazily keeps ``vecsample --help`` fast and keeps
torch out of commands that do not need it.

Bad input is one line on stderr and exit status 2, not a traceback: an argument argparse cannot
parse, a ``ConfigError`` a subcommand raises before it measures anything (a count below 1, a
device that is not there), or a missing extra.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from vecsample.errors import ConfigError, MissingExtraError

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "compare": ("vecsample.tools.compare", "full against partial batches (the main job)"),
    "bench": ("vecsample.tools.bench",
              "steps/s against the bare loop, gymnasium, SB3 and EnvPool"),
    "probe": ("vecsample.tools.probe",
              "CPU against GPU time for small policies; where to place them"),
}


class BadInputError(Exception):
    """What argparse would print before exiting, raised instead, so that ``main`` returns 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BadInputError(f"{message} (see '{self.prog} --help')")


def _usage() -> str:
    lines = ["usage: vecsample <command> [options]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    lines += ["", "Run 'vecsample <command> --help' for the options of a command."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(_usage() + "\n")
        return 0 if args else 2
    name = args[0]
    if name not in SUBCOMMANDS:
        sys.stderr.write(f"vecsample: unknown command {name!r}\n\n{_usage()}\n")
        return 2
    module_name, help_ = SUBCOMMANDS[name]
    try:
        module = importlib.import_module(module_name)
        parser = _Parser(prog=f"vecsample {name}", description=help_)
        module.add_arguments(parser)
        return int(module.run(parser.parse_args(args[1:])))
    except (BadInputError, ConfigError, MissingExtraError) as error:  # one line, no traceback
        sys.stderr.write(f"vecsample {name}: {error}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
