"""The scripts' flags: every script in examples/ and experiments/ parses its ``Args`` with tyro.

Each script is imported as a module and its own ``parse_args`` is called, so these tests go
through the same tyro call as ``python examples/<script>.py``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import get_args, get_type_hints

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Every script of examples/ and experiments/, by name (the names are unique across the two).
SCRIPTS = {p.stem: p for folder in ("examples", "experiments") for p in (ROOT / folder).glob("*.py")
           if not p.stem.startswith("_")}
NAMES = sorted(SCRIPTS)


def load(name: str) -> ModuleType:
    """examples/<name>.py or experiments/<name>.py as a module (registered, so tyro can read its
    source). Its folder goes on sys.path, as ``python examples/<name>.py`` puts it there: a
    script may import a sibling (maml_trpo_metaworld.py imports maml_trpo's outer loop)."""
    key = f"experiment_{name}_under_test"
    folder = str(SCRIPTS[name].parent)
    if folder not in sys.path:
        sys.path.append(folder)
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, SCRIPTS[name])
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module  # dataclasses and tyro look the module up by name
        spec.loader.exec_module(module)
    return sys.modules[key]


def help_entries(text: str) -> dict[str, str]:
    """``{flag: its help text, default left out}`` from tyro's ``--help`` output.

    With or without the box around the options (a terminal or not), an entry starts one or two
    spaces in with its flags (``--x INT`` or ``--flag, --no-flag``); its help follows after two
    spaces or on the lines below, which are indented further.
    """
    entries: list[tuple[list[str], list[str]]] = []
    for line in text.splitlines():
        body = line.removeprefix("│").removesuffix("│").rstrip()
        indent = len(body) - len(body.lstrip())
        if not body:
            continue  # older tyro puts a blank line between a long flag and its help
        if 0 < indent <= 2 and re.match(r"--?\w", body.lstrip()):
            invocation, *rest = re.split(r"\s{2,}", body.strip(), maxsplit=1)
            entries.append(([part.split()[0] for part in invocation.split(", ")], rest))
        elif indent > 2 and entries:
            entries[-1][1].append(body.strip())
        else:
            entries.append(([], []))  # anything else ends the entry
    found = {}
    for flags, parts in entries:
        words = " ".join(parts)
        found.update(dict.fromkeys(flags, re.sub(r"\s*\(default: .*\)$", "", words).strip()))
    return found


def help_of(name: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        load(name).parse_args([*argv, "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("name", NAMES)
def test_every_field_of_every_experiment_has_help(name, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one line per flag where it fits
    module = load(name)
    entries = help_entries(help_of(name, [], capsys))
    for field in dataclasses.fields(module.Args):
        flag = "--" + field.name.replace("_", "-")
        assert flag in entries, f"{name}: {flag} is not in --help ({sorted(entries)})"
        assert entries[flag], (
            f"{name}: {flag} has no help text; add a docstring under Args.{field.name}"
        )


@pytest.mark.parametrize("name", NAMES)
def test_every_experiment_parses_with_tyro_and_names_its_docs_page(name):
    module = load(name)
    assert dataclasses.is_dataclass(module.Args)
    assert module.parse_args([]) == module.Args()  # no flags, no preset: the Args defaults
    source = SCRIPTS[name].read_text()
    assert "import argparse" not in source and "vecsample.flags" not in source
    pages = re.findall(r"docs/(?:lab/)?[\w-]+\.md", module.__doc__.splitlines()[0])
    assert pages, f"{name}: line 1 of the docstring should name its docs/*.md page"
    assert all((ROOT / page).is_file() for page in pages), pages


def test_optional_floats_parse_as_floats():
    ppo, soak, tc = load("ppo"), load("soak"), load("timeout_comparison")
    args = ppo.parse_args(["--timeout", "0.1", "--target-kl", "0.02"])
    assert args.timeout == 0.1 and isinstance(args.timeout, float) and args.target_kl == 0.02
    assert ppo.parse_args(["--solved-return", "None"]).solved_return is None
    assert soak.parse_args(["--timeouts", "None", "0.0002"]).timeouts == [None, 0.0002]
    assert tc.parse_args(["--timeouts", "none", "None", "0.001"]).timeouts == [None, None, 0.001]
    assert tc.parse_args(["--iterations", "none"]).iterations is None


def test_booleans_are_flag_and_no_flag(capsys):
    ppo, tc = load("ppo"), load("timeout_comparison")
    assert ppo.parse_args([]).progress is True
    assert ppo.parse_args(["--no-progress"]).progress is False
    assert ppo.parse_args(["--no-progress", "--progress"]).progress is True
    args = ppo.parse_args(["--profile", "--no-anneal-lr", "--normalize"])
    assert args.profile and not args.anneal_lr and args.normalize
    assert tc.parse_args(["--model", "--no-progress"]).model is True
    with pytest.raises(SystemExit) as info:  # a value after a boolean flag is not taken
        ppo.parse_args(["--progress", "False"])
    assert info.value.code == 2
    assert "False" in capsys.readouterr().err


def test_bad_values_and_unknown_flags_exit_naming_the_flag(capsys):
    for argv, flag in ((["--num-envs", "many"], "--num-envs"), (["--workers", "2"], "--workers"),
                       (["--preset", "atari"], "--preset")):
        with pytest.raises(SystemExit) as info:
            load("ppo").parse_args(argv)
        assert info.value.code == 2
        assert flag in capsys.readouterr().err


def test_presets_are_defaults_that_flags_override(capsys, monkeypatch):
    tc, ppo = load("timeout_comparison"), load("ppo")
    assert set(get_args(tc.PresetName)) == set(tc.PRESETS)
    assert set(get_args(get_type_hints(ppo.Args)["preset"])) == set(ppo.PRESETS)
    for name, grid in tc.PRESETS.items():
        assert tc.grid_of(tc.parse_args(["--preset", name])) == grid
    args = tc.parse_args(["--preset", "p7", "--workers", "2", "4", "--scale", "0.5"])
    assert tc.grid_of(args).workers == [2, 4] and tc.grid_of(args).seconds == 2.0
    assert ppo.parse_args(["--preset", "mujoco"]) == ppo.PRESETS["mujoco"]
    monkeypatch.setenv("COLUMNS", "200")
    text = help_of("ppo", ["--preset", "mujoco"], capsys)
    assert "(default: HalfCheetah-v5)" in text and "(default: CartPole-v1)" not in text


def test_the_library_carries_no_flag_helper():
    assert importlib.util.find_spec("vecsample.flags") is None
