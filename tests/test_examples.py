"""Who may use vecsample's private names: the package's own code, within its own package.

examples/ holds the files users copy and experiments/ the measurements behind docs/: both use
only vecsample's public names, no sys.path hack. Public is every module and name whose path has
no part starting with ``_`` (``_parent``, ``_wire`` and ``_worker`` are the core's private
packages); a private attribute (``sampler._buffers``, ``Module._Class``) is not reached into
either. A sibling script may be imported (run as ``python examples/x.py``, its folder is on
sys.path). The subpackages outside the core (``tools``, ``train``, ``ray``, ``maml``, ``envs``)
import no private name of another package. The scripts' flags and smoke runs are in
tests/test_flags.py, test_ppo.py and test_maml_experiments.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
EXPERIMENTS = sorted((ROOT / "experiments").glob("*.py"))
#: The packages outside the core: each imports no private name of another package.
OUTSIDE_THE_CORE = ("tools", "train", "ray", "maml", "envs")


def _is_public(module: str) -> bool:
    return not any(part.startswith("_") for part in module.split("."))


def _private_attribute(node: ast.AST) -> bool:
    """``x._name`` (not a dunder), where ``x`` is not ``self`` or ``cls``."""
    if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
        return False
    if node.attr.startswith("__") and node.attr.endswith("__"):
        return False
    return not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))


def private_uses(source: str) -> list[str]:
    """Every import of a private vecsample module or name, every private attribute reached
    into, and every sys.path change."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if _private_attribute(node):
            found.append(f"line {node.lineno}: .{node.attr}")  # type: ignore[attr-defined]
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


@pytest.mark.parametrize("path", EXAMPLES + EXPERIMENTS,
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_examples_and_experiments_use_only_public_names(path: Path):
    assert private_uses(path.read_text()) == []


def test_there_are_the_experiments_behind_the_docs():
    names = {p.stem for p in EXPERIMENTS}
    assert {"handshake_floor", "parent_scaling", "step_timeline", "vector_env_parts"} <= names


def foreign_private_imports(source: str, package: str) -> list[str]:
    """Imports in a module of ``vecsample.<package>`` of a private module or name of another
    vecsample package (its own private names are its own business)."""
    own = f"vecsample.{package}"
    found = []
    for node in ast.walk(ast.parse(source)):
        modules: list[tuple[str, list[str]]] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [(node.module, [a.name for a in node.names])]
        elif isinstance(node, ast.Import):
            modules = [(a.name, []) for a in node.names]
        for module, names in modules:
            if module.split(".")[0] != "vecsample" or module == own or \
                    module.startswith(own + "."):
                continue
            if not _is_public(module):
                found.append(f"line {node.lineno}: {module}")
            found += [f"line {node.lineno}: {module}.{n}" for n in names if n.startswith("_")]
    return found


@pytest.mark.parametrize("package", OUTSIDE_THE_CORE)
def test_subpackages_outside_the_core_import_no_private_name_of_another(package: str):
    paths = sorted((ROOT / "vecsample" / package).rglob("*.py"))
    assert paths, package
    found = [f"{p.relative_to(ROOT)}: {hit}" for p in paths
             for hit in foreign_private_imports(p.read_text(), package)]
    assert found == []


def test_the_foreign_import_checker_can_fail():
    source = "\n".join([
        "from vecsample._wire.spaces import leaves",       # another package's private module
        "from vecsample.maml._internal import x",          # its own: allowed
        "from vecsample.sampler import _probe_spaces",     # a private name of the core
        "import vecsample._parent.pool",
        "from vecsample.options import check_int",         # public
    ])
    assert foreign_private_imports(source, "maml") == [
        "line 1: vecsample._wire.spaces", "line 3: vecsample.sampler._probe_spaces",
        "line 4: vecsample._parent.pool"]


def test_the_checker_finds_private_imports_and_path_hacks():
    source = "\n".join([
        "import sys",
        "from vecsample import VecSampler",          # public
        "from vecsample.train.rollout import Rollout",  # public package's module
        "from vecsample._parent.pool import WorkerPool",
        "steps = sampler._buffers.stats()",             # a private attribute
        "from vecsample.maml import _private",
        "import vecsample._worker.main",
        "sys.path.insert(0, '.')",
        "from maml_trpo import trpo_step",             # a sibling example
        "self._count = type(self).__name__",           # its own attribute, a dunder: fine
    ])
    assert sorted(private_uses(source)) == [
        "line 4: from vecsample._parent.pool",
        "line 5: ._buffers",
        "line 6: vecsample.maml._private",
        "line 7: import vecsample._worker.main",
        "line 8: sys.path",
    ]
