"""Errors raised only by the training integrations; each is a ``VecSampleError`` too."""

from __future__ import annotations

from vecsample.errors import ConfigError


class PlacementError(ConfigError):
    """A device cannot be used as asked (unknown name, no CUDA, policies that do not match).

    A ``ConfigError`` (so a ``ValueError``): bad input, which the command line prints as one
    line."""
