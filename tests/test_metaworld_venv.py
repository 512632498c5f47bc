"""tests/test_metaworld.py in a venv of its own, where this Python has no metaworld.

metaworld 3.1.1 pins mujoco 3.3.0, and installing it over mujoco 4 breaks ``import mujoco`` for
the whole suite (pip leaves mujoco-core 4's plugins behind), so it is not in the ``test`` extra.
This test makes a venv on top of this Python's packages, installs the project's own
``metaworld`` extra there (mujoco 3.3.0 shadows 4 inside the venv only), and runs the Meta-World
tests in it: CI runs them without changing its own environment.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def metaworld_requirements() -> list[str]:
    """The ``metaworld`` extra, read from pyproject.toml (one source of truth for the pin)."""
    import tomllib  # Python 3.11+, as the CI's

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements: list[str] = project["optional-dependencies"]["metaworld"]
    return requirements


@pytest.mark.timeout(1500)
def test_the_metaworld_tests_pass_in_a_venv_with_the_extra(tmp_path):
    if importlib.util.find_spec("metaworld") is not None:
        pytest.skip("metaworld is installed here: tests/test_metaworld.py runs directly")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=True)
    python = str(env_dir / "bin" / "python")
    install = subprocess.run([python, "-m", "pip", "install", "--quiet",
                              *metaworld_requirements()], capture_output=True, text=True,
                             timeout=900)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    run = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                          "tests/test_metaworld.py"], capture_output=True, text=True,
                         timeout=1200, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    tail = run.stdout[-4000:] + run.stderr[-2000:]
    assert run.returncode == 0, tail
    assert " passed" in run.stdout and "skipped" not in run.stdout, tail
    assert sys.executable != python
