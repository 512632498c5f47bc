"""The workloads the tools sample: env names (gymnasium ids or synthetic SlowEnvs) and timeouts.

Shared by ``vecsample compare``, its ``--replay-check`` and the timeout model, so that none of
them imports another for its arguments.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from vecsample.errors import ConfigError
from vecsample.factories import EnvMaker
from vecsample.testing import SlowEnv
from vecsample.types import EnvFn

#: Synthetic env names: SlowEnv with each step-time tail (see vecsample.testing).
SYNTHETIC_ENVS = {"sleep": "none", "uniform": "uniform", "straggler": "heavy"}


def env_factories(name: str, count: int, step_time: float) -> list[EnvFn]:
    """Gymnasium ids, or ``sleep`` / ``uniform`` / ``straggler``: SlowEnv with that tail."""
    if name in SYNTHETIC_ENVS:
        return [functools.partial(SlowEnv, env_index=i, step_time=step_time,
                                  tail=SYNTHETIC_ENVS[name]) for i in range(count)]
    return [EnvMaker(name)] * count


def parse_timeouts(values: Sequence[str]) -> list[float | None]:
    try:
        return [None if v.lower() == "none" else float(v) for v in values]
    except ValueError as exc:
        raise ConfigError(f"--timeouts takes 'none' or seconds, got {list(values)}") from exc
