"""Fake envs for vecsample's tests and for yours, and ``SamplerContract``, the conformance suite
that checks what docs/semantics.md promises for your env.

``fakes``: counting, slow, raising, hanging and dying envs, ``fns(cls, n, **kwargs)`` to build
``n`` of them, and the sleep-env scenario. ``contract``: ``SamplerContract``, a mixin for
``unittest.TestCase`` (docs/semantics.md, "Checking your env: SamplerContract"), and the serial
references it compares a sampler against. Both are re-exported here.
"""

from vecsample.testing.contract import EnvSource, SamplerContract
from vecsample.testing.fakes import (
    CloseRecordingEnv,
    CountingEnv,
    DyingEnv,
    FixedActionPolicy,
    HangingEnv,
    RaisingEnv,
    SleepEnv,
    SlowEnv,
    SpaceEnv,
    StragglerEnv,
    fns,
    sleep_fns,
)

__all__ = [
    "CloseRecordingEnv",
    "CountingEnv",
    "DyingEnv",
    "EnvSource",
    "FixedActionPolicy",
    "HangingEnv",
    "RaisingEnv",
    "SamplerContract",
    "SleepEnv",
    "SlowEnv",
    "SpaceEnv",
    "StragglerEnv",
    "fns",
    "sleep_fns",
]
