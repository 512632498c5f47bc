"""What a user passes as the envs, made into what a sampler steps.

A sampler steps one env per row, each built in its worker by a factory (``env_fns``, or
``num_envs`` makers of a registered env id), or one batch-native vector env per worker for its
whole block (``HostedVector``). ``Envs.of`` checks what was given and returns either, with the
number of envs; ``env_factories`` is the factories-only form that the Ray backend, the SB3
adapter and the tools use, so that every constructor refuses bad input with the same words.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, load_env_creator

from vecsample.errors import ConfigError
from vecsample.hosted import HostedVector
from vecsample.options import check_int
from vecsample.types import EnvFn


@dataclass(frozen=True)
class EnvMaker:
    """A picklable factory for ``gym.make(env_id, **kwargs)``."""

    env_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> gym.Env[Any, Any]:
        if self.env_id not in gym.registry and importlib.util.find_spec("vecsample.envs"):
            importlib.import_module("vecsample.envs")  # registers the meta-RL task envs
        return gym.make(self.env_id, **self.kwargs)


@dataclass(frozen=True)
class Envs:
    """The envs of one sampler: a factory per env (``fns``), or a hosted vector env that each
    worker builds for its block (``hosted``, then ``fns`` is empty); ``count`` of them."""

    fns: tuple[EnvFn, ...]
    count: int
    hosted: HostedVector | None = None

    @classmethod
    def of(cls, env_fns: Sequence[EnvFn] | str | HostedVector, num_envs: int | None = None,
           env_kwargs: dict[str, Any] | None = None) -> Envs:
        """The envs that ``env_fns`` (factories, an env id or a HostedVector) and
        ``num_envs`` name, checked."""
        if isinstance(env_fns, HostedVector):
            if env_kwargs:
                raise ConfigError("env_kwargs is only used with an env id; pass a "
                                  "HostedVector's keyword arguments as HostedVector(..., "
                                  "env_kwargs={...}).")
            return cls((), _hosted_count(env_fns, num_envs), env_fns)
        fns = env_factories(env_fns, num_envs, env_kwargs)
        return cls(tuple(fns), len(fns))


def _hosted_count(hosted: HostedVector, num_envs: int | None) -> int:
    if None not in (num_envs, hosted.num_envs) and num_envs != hosted.num_envs:
        raise ConfigError(f"num_envs={num_envs} but HostedVector(num_envs={hosted.num_envs}); "
                          f"give it once.")
    return check_int(hosted.num_envs if num_envs is None else num_envs, "num_envs",
                     fix="with a HostedVector pass num_envs=<int>")


def env_factories(env_fns: Sequence[EnvFn] | str, num_envs: int | None,
                  env_kwargs: dict[str, Any] | None) -> list[EnvFn]:
    """One factory per env: ``env_fns`` as given, or ``num_envs`` makers of an env id."""
    if isinstance(env_fns, HostedVector):
        raise ConfigError(name="env_fns", expected="env factories or an env id", got=env_fns,
                          fix="a HostedVector is stepped by VecSampler and VectorEnv; pass "
                          "factories here")
    if isinstance(env_fns, str):
        count = check_int(num_envs, "num_envs", fix=f"with an env id ({env_fns!r}) pass "
                          "num_envs=<int>")
        return [EnvMaker(env_fns, dict(env_kwargs or {}))] * count
    if env_kwargs:
        raise ConfigError("env_kwargs is only used with an env id; bind kwargs in env_fns.")
    fns = list(env_fns)
    if not fns:
        raise ConfigError("env_fns is empty; pass at least one env factory.")
    bad = [i for i, fn in enumerate(fns) if not callable(fn)]
    if bad:
        raise ConfigError(
            name=f"env_fns[{bad[0]}]", expected="a callable that returns an env", got=fns[bad[0]],
            fix="pass factories such as functools.partial(gym.make, 'CartPole-v1'), not env "
            "instances",
        )
    if num_envs is not None and num_envs != len(fns):
        raise ConfigError(f"num_envs={num_envs} but {len(fns)} env_fns were given.")
    return fns


def env_registrations(env_fns: Sequence[EnvFn], hosted: HostedVector | None,
                      ) -> tuple[EnvSpec, ...]:
    """The parent's gymnasium registrations of the env ids that ``env_fns`` (or ``hosted``)
    name, for a spawn or forkserver worker to register those it lacks before it builds: an
    env registered under the main script's ``if __name__ == "__main__":``, which such a worker
    does not run. The ids are read from an ``EnvMaker``, ``functools.partial(gymnasium.make,
    id)`` and a hosted env's id (a closure does not say which id it makes). An entry point in
    the main script ("__main__:Env") travels as the object itself; a registration that cannot
    be pickled is left out (the worker may have it; if not, its error says so)."""
    ids = dict.fromkeys(env_id for env_id in map(_env_id, env_fns) if env_id is not None)
    if hosted is not None and isinstance(hosted.make, str):
        ids[hosted.make] = None
    found = []
    for env_id in ids:
        spec = gym.registry.get(env_id)
        if spec is None:
            continue
        spec = _main_objects(spec)
        try:
            cloudpickle.dumps(spec)
        except Exception:  # left out: see the docstring
            continue
        found.append(spec)
    return tuple(found)


def _env_id(fn: EnvFn) -> str | None:
    """The env id ``fn`` makes, where it says so."""
    if isinstance(fn, EnvMaker):
        return fn.env_id
    if isinstance(fn, functools.partial) and fn.func is gym.make:
        made = fn.args[0] if fn.args else fn.keywords.get("id")
        return made if isinstance(made, str) else None
    return None


def _main_objects(spec: EnvSpec) -> EnvSpec:
    """``spec`` with its entry points in the main script ("__main__:Env") as the objects, which
    cloudpickle carries by value: a worker's main module lacks what its guard defines."""
    changes: dict[str, Any] = {}
    for name in ("entry_point", "vector_entry_point"):
        point = getattr(spec, name)
        if isinstance(point, str) and point.startswith("__main__:"):
            with contextlib.suppress(Exception):  # not there: the worker's own error says so
                changes[name] = load_env_creator(point)
    return dataclasses.replace(spec, **changes) if changes else spec


__all__ = ["EnvMaker", "Envs", "env_factories", "env_registrations"]
