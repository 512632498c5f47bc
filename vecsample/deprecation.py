"""How vecsample retires a name: the old one keeps its meaning for one release and warns.

``renamed(where, old, old_value, new, new_value)`` resolves a keyword that was renamed (the old
name warns, both at once are refused); ``deprecated(what, use)`` warns for an attribute or a
method that is going. The warnings are ``DeprecationWarning``s pointing at the caller's line.
"""

from __future__ import annotations

import warnings
from typing import TypeVar

from vecsample.errors import ConfigError

T = TypeVar("T")


def renamed(where: str, old: str, old_value: T | None, new: str, new_value: T | None) -> T | None:
    """The value of a keyword given under its deprecated name ``old`` (warned) or under
    ``new``; both at once is a ConfigError."""
    if old_value is None:
        return new_value
    if new_value is not None:
        raise ConfigError(f"{where}: {old}= and {new}= were both given; they name the same "
                          f"setting: pass {new}= only ({old}= is its deprecated name).")
    deprecated(f"{where}'s {old}=", f"{new}=", stacklevel=4)
    return old_value


def deprecated(what: str, use: str, stacklevel: int = 3) -> None:
    """Warns that ``what`` is deprecated in favour of ``use`` (it goes in the next release)."""
    warnings.warn(f"{what} is deprecated: use {use} (it goes in the next release).",
                  DeprecationWarning, stacklevel=stacklevel)


__all__ = ["deprecated", "renamed"]
