"""Per-env seeds from ``numpy.random.SeedSequence``.

Env ``j`` always gets child ``j`` of ``SeedSequence(seed)``, however the envs are split among
workers, so 1×8, 2×4 and 8×1 workers see bit-identical streams. Children of a SeedSequence are
statistically independent, unlike ``seed + j``, where runs seeded 0 and 1 share most env streams.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from vecsample.errors import ConfigError

SeedArg = int | Sequence[int | None] | None


def check_seed(seed: object, name: str = "seed") -> int:
    """Returns ``seed`` as an int, or raises ConfigError saying what a seed must be."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or int(seed) < 0:
        raise ConfigError(f"{name} must be a non-negative int or None, got {seed!r}.")
    return int(seed)


def env_seeds(seed: int | None, num_envs: int) -> list[int | None]:
    """One independent 64-bit seed per env, or ``None`` for every env when ``seed`` is None."""
    if seed is None:
        return [None] * num_envs
    children = np.random.SeedSequence(check_seed(seed)).spawn(num_envs)
    return [int(child.generate_state(1, dtype=np.uint64)[0]) for child in children]


def resolve_seeds(seed: SeedArg, num_envs: int) -> list[int | None]:
    """An int goes through SeedSequence; a sequence gives each env its own seed, as is."""
    if seed is None or isinstance(seed, numbers.Integral):
        return env_seeds(None if seed is None else int(seed), num_envs)
    if not isinstance(seed, Sequence):
        raise ConfigError(f"seed must be None, an int or a list of seeds, got {seed!r}.")
    seeds = list(seed)
    if len(seeds) != num_envs:
        raise ConfigError(
            f"a list of seeds must have one entry per env: expected {num_envs}, got {len(seeds)}."
        )
    return [None if s is None else check_seed(s, f"seed[{i}]") for i, s in enumerate(seeds)]


def restart_seed(env_seed: int | None, restart: int) -> int | None:
    """The seed of an env's re-made copy after its worker's ``restart``-th restart (1, 2, ...).

    It is child ``restart`` of the env's own stream, ``SeedSequence(env_seed)``: reproducible,
    independent of the env's first episode, and of every other env's stream.
    """
    if env_seed is None:
        return None
    child = np.random.SeedSequence(env_seed, spawn_key=(restart,))
    return int(child.generate_state(1, dtype=np.uint64)[0])
