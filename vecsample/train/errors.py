"""Errors raised only by the training integrations; each is a ``VecSampleError`` too."""

from __future__ import annotations

from vecsample.errors import VecSampleError


class PlacementError(VecSampleError, ValueError):
    """A device cannot be used as asked (unknown name, no CUDA, policies that do not match)."""
