"""The errors of the batch-native MuJoCo envs; each formats its own message (expected, got, fix)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from vecsample.errors import ConfigError


class BatchEnvError(ConfigError):
    """A batch-native MuJoCo env was asked for something it does not do."""


class UnknownKeywordError(BatchEnvError, TypeError):
    """A constructor keyword that the env's gymnasium v5 counterpart does not take either (a
    ``TypeError`` too, as gymnasium's own constructor raises)."""

    def __init__(self, *, env: str, keyword: str, accepted: Iterable[str]) -> None:
        names = ", ".join(sorted(accepted))
        super().__init__(f"{env} got an unexpected keyword {keyword!r}; expected one of: "
                         f"{names}; pass only keywords that the gymnasium v5 env takes.")
        self.env = env
        self.keyword = keyword


class RefusedKeywordError(BatchEnvError):
    """A keyword of the gymnasium v5 env that the batch env cannot honour (rendering)."""

    def __init__(self, *, env: str, keyword: str, got: Any, reason: str, fix: str) -> None:
        super().__init__(f"{env}: {keyword}={got!r} is not supported: {reason}; {fix}.")
        self.env = env
        self.keyword = keyword
        self.got = got


class BatchActionError(BatchEnvError):
    """Actions of the wrong shape for the batch."""

    def __init__(self, *, env: str, expected: tuple[int, ...], got: tuple[int, ...]) -> None:
        super().__init__(f"{env}.step expected actions of shape {expected} (num_envs, "
                         f"action size), got {got}; pass one action row per env.")
        self.expected_shape = expected
        self.got_shape = got


class TaskCountError(BatchEnvError):
    """``reset_task(tasks)`` with another number of tasks than envs."""

    def __init__(self, *, env: str, expected: int, got: int) -> None:
        super().__init__(f"{env}.reset_task expected one task per env ({expected}), got "
                         f"{got}; pass a sequence of {expected} tasks, in row order.")
        self.expected_count = expected
        self.got_count = got


class SeedCountError(BatchEnvError):
    """``reset(seed=[...])`` with another number of seeds than envs."""

    def __init__(self, *, env: str, expected: int, got: int) -> None:
        super().__init__(f"{env}.reset(seed=...) expected one seed per env ({expected}), got "
                         f"{got}; pass an int, None or a list of {expected} seeds.")
        self.expected_count = expected
        self.got_count = got
