"""Errors raised only by the Ray backend; each is a ``VecSampleError`` too."""

from __future__ import annotations

from vecsample.errors import VecSampleError


class ActorsLostError(VecSampleError, RuntimeError):
    """Every Ray actor of a RaySampler died more often than ``actor_restarts`` allows."""
