"""vecsample.flags: the experiment scripts' flags from a dataclass of defaults."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from vecsample.flags import parse_flags


@dataclass
class Args:
    env_id: str = "CartPole-v1"
    num_envs: int = 8
    seconds: float = 0.5
    json: str | None = None


def test_defaults_and_kebab_case_flags_typed_like_their_defaults():
    assert parse_flags(Args, "doc", []) == Args()
    got = parse_flags(Args, "doc", ["--num-envs", "16", "--seconds", "2", "--json", "o.json"])
    assert got == Args(num_envs=16, seconds=2.0, json="o.json")
    assert isinstance(got.seconds, float) and isinstance(got.num_envs, int)


def test_bad_values_and_unknown_flags_exit_with_usage(capsys):
    for argv in (["--num-envs", "many"], ["--num_envs", "3"], ["--workers", "2"]):
        with pytest.raises(SystemExit) as info:
            parse_flags(Args, "doc", argv)
        assert info.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_help_shows_the_first_line_of_the_docstring(capsys):
    with pytest.raises(SystemExit):
        parse_flags(Args, "First line.\n\nMore.", ["--help"])
    out = capsys.readouterr().out
    assert "First line." in out and "More." not in out and "--env-id" in out
