"""Per-env seeds from ``numpy.random.SeedSequence``: the one seed derivation of the package.

Env ``j`` always gets child ``j`` of ``SeedSequence(seed)``, however the envs are split among
workers, so 1×8, 2×4 and 8×1 workers see bit-identical streams. Children of a SeedSequence are
statistically independent, unlike ``seed + j``, where runs seeded 0 and 1 share most env streams.

Every seed the package derives is ``child_seed(root, index, dtype)``: env seeds (64-bit), the
seed of a restarted env's copy, the Ray backend's per-actor seeds and the meta-RL sampler's
stream of seeds (32-bit, as they always were, so a seed repeats the runs it gave before).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from vecsample.errors import ConfigError
from vecsample.options import check_seed

SeedArg = int | Sequence[int | None] | None
#: The integer types a derived seed can be drawn as.
SeedDtype = type[np.uint32] | type[np.uint64]


def child_seed(seed: int, index: int, dtype: SeedDtype = np.uint64) -> int:
    """Child ``index`` of ``SeedSequence(seed)`` as one ``dtype`` integer.

    The same number as ``SeedSequence(seed).spawn(index + 1)[index]`` would give, without
    spawning the children before it: a stream of seeds needs only its root and a counter.
    """
    child = np.random.SeedSequence(check_seed(seed), spawn_key=(index,))
    return int(child.generate_state(1, dtype=dtype)[0])


def child_seeds(seed: int, count: int, dtype: SeedDtype = np.uint64) -> list[int]:
    """Children ``0 .. count - 1`` of ``SeedSequence(seed)``, one ``dtype`` integer each."""
    return [child_seed(seed, i, dtype) for i in range(count)]


class SeedStream:
    """Seeds drawn one at a time from one root: the n-th ``draw()`` is ``child_seed(seed, n)``.

    For an object that needs seeds as it goes (a sampler rebuilt mid-run, one generator per
    worker), reproducibly. An unseeded stream (``seed=None``) draws None every time.
    """

    def __init__(self, seed: int | None, dtype: SeedDtype = np.uint64) -> None:
        self.seed = None if seed is None else check_seed(seed)
        self.dtype = dtype
        self.drawn = 0

    def draw(self) -> int | None:
        """The next seed of the stream, or None when unseeded (which draws nothing)."""
        if self.seed is None:
            return None
        self.drawn += 1
        return child_seed(self.seed, self.drawn - 1, self.dtype)


def env_seeds(seed: int | None, num_envs: int) -> list[int | None]:
    """One independent 64-bit seed per env, or ``None`` for every env when ``seed`` is None."""
    if seed is None:
        return [None] * num_envs
    return list(child_seeds(seed, num_envs))


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
    return None if env_seed is None else child_seed(env_seed, restart)


class EnvSeeds:
    """A sampler's seeds for its envs: the constructor's seed for the first ``reset()``, a new
    seed for every ``reset(seed)``, and each env's stream for the copies a restart re-makes."""

    def __init__(self, seed: int | None, num_envs: int) -> None:
        self.num_envs = num_envs
        #: Each env's own seed stream (``reset(seed=...)`` replaces it).
        self.streams = env_seeds(seed, num_envs)
        self._first: list[int | None] = list(self.streams)  # used by the first reset

    def for_reset(self, seed: SeedArg) -> list[int | None]:
        """The seeds of a ``reset(seed)``: None gives the constructor's seed once, then none;
        a new seed also becomes the streams that later restarts draw from."""
        if seed is None:
            seeds, self._first = self._first, [None] * self.num_envs
            return seeds
        seeds = resolve_seeds(seed, self.num_envs)
        self._first = [None] * self.num_envs
        self.streams = list(seeds)
        return seeds

    def for_restart(self, lo: int, hi: int, restart: int) -> list[int | None]:
        """Every env's seed for a re-made copy of the envs ``[lo, hi)`` after their process's
        ``restart``-th restart: ``restart_seed`` of their streams, None for the other envs."""
        return [None] * lo + [restart_seed(s, restart) for s in self.streams[lo:hi]]
