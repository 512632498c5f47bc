"""examples/ holds the files users copy: they use only vecsample's public imports, no sys.path hack.

Public: ``vecsample`` and its public packages (``errors``, ``sb3``, ``train``, ``ray``, ``maml``,
``envs``, ``tools``, ``testing``), never a private module (a path part or a name that starts
with ``_``) or a core module that is not part of the API. A sibling example may be imported (run
as ``python examples/x.py``, its folder is on sys.path). The scripts' flags and smoke runs are
in tests/test_flags.py, test_ppo.py and test_maml_experiments.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
PUBLIC = ("vecsample", "vecsample.errors", "vecsample.sb3", "vecsample.train", "vecsample.ray",
          "vecsample.maml", "vecsample.envs", "vecsample.tools", "vecsample.testing")


def _is_public(module: str) -> bool:
    parts = module.split(".")
    if any(part.startswith("_") for part in parts):
        return False
    # vecsample itself and its public packages, with their submodules (vecsample.train.rollout)
    return module in PUBLIC or any(module.startswith(p + ".") for p in PUBLIC[2:])


def private_uses(source: str) -> list[str]:
    """Every import of a non-public vecsample module or name, and every sys.path change."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] == "vecsample":
                if not _is_public(node.module):
                    found.append(f"line {node.lineno}: from {node.module}")
                found += [f"line {node.lineno}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_")]
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.append(f"line {node.lineno}: relative import")
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names
                      if a.name.startswith("vecsample") and not _is_public(a.name)]
        elif isinstance(node, ast.Attribute) and node.attr == "path" and \
                isinstance(node.value, ast.Name) and node.value.id == "sys":
            found.append(f"line {node.lineno}: sys.path")
    return found


def test_there_are_the_examples_users_copy():
    names = {p.stem for p in EXAMPLES}
    assert {"ppo", "ppo_ray", "maml_trpo", "maml_trpo_metaworld"} <= names, names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_an_example_uses_only_public_imports(path: Path):
    assert private_uses(path.read_text()) == []


def test_the_checker_finds_private_imports_and_path_hacks():
    source = "\n".join([
        "import sys",
        "from vecsample import VecSampler",          # public
        "from vecsample.train.rollout import Rollout",  # public package's module
        "from vecsample._parent.pool import WorkerPool",
        "from vecsample.config import SamplerConfig",
        "from vecsample.maml import _private",
        "import vecsample._worker.main",
        "sys.path.insert(0, '.')",
        "from maml_trpo import trpo_step",             # a sibling example
    ])
    assert private_uses(source) == [
        "line 4: from vecsample._parent.pool",
        "line 5: from vecsample.config",
        "line 6: vecsample.maml._private",
        "line 7: import vecsample._worker.main",
        "line 8: sys.path",
    ]
