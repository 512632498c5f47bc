"""Errors raised only by the meta-RL package; each is a ``VecSampleError`` too."""

from __future__ import annotations

from vecsample.errors import ConfigError, VecSampleError


class TaskEnvError(ConfigError):
    """An env used for meta-RL has no ``sample_tasks`` / ``reset_task`` (it is not a task env)."""


class EpisodesError(VecSampleError, ValueError):
    """``BatchEpisodes`` was read before it held what was asked (no steps, no advantages)."""


class BaselineFitError(VecSampleError, RuntimeError):
    """The linear baseline's normal equations stayed singular at every regularisation tried."""
