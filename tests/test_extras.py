"""A module whose extra is missing raises one MissingExtraError that names the extra to install.

Each case runs in a fresh interpreter where the optional package is made unimportable
(``sys.modules[name] = None``: ``import name`` then raises ModuleNotFoundError, as when it is not
installed), imports or uses one vecsample module, and prints the error it got. The wheel test
(tests/test_wheel.py) checks the same in a venv where the packages really are absent.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = textwrap.dedent("""
    import json, sys
    for name in {blocked!r}:
        sys.modules[name] = None
    {setup}
    try:
        {action}
    except ImportError as error:
        from vecsample.errors import MissingExtraError
        print(json.dumps({{"type": type(error).__name__, "message": str(error),
                          "typed": isinstance(error, MissingExtraError),
                          "extra": getattr(error, "extra", None)}}))
    else:
        print(json.dumps({{"type": None}}))
""")


def import_error(action: str, blocked: tuple[str, ...] = (), setup: str = "") -> dict[str, str]:
    """The ImportError that ``action`` raised in a fresh interpreter, as a dict."""
    code = PROBE.format(blocked=blocked, setup=setup, action=action)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


CASES = [
    # (what the user does, the package that is missing, the extra the error must name)
    ("import vecsample; vecsample.sb3.VecEnv", "stable_baselines3", "sb3"),
    ("import vecsample; vecsample.train", "torch", "train"),
    ("import vecsample.train", "torch", "train"),
    ("import vecsample.maml", "torch", "maml"),
    ("from vecsample.maml import MultiTaskSampler", "torch", "maml"),
    ("import vecsample.tools.probe", "torch", "cli"),
    ("from vecsample.tools.policies import mlp; mlp(4, (8,), 2)", "torch", "cli"),
    ("import vecsample.ray", "ray", "ray"),
    ("import vecsample.sb3", "stable_baselines3", "sb3"),
    ("import vecsample.envs, gymnasium; gymnasium.make('HalfCheetahVel-v5')", "mujoco", "mujoco"),
    ("import vecsample.envs, gymnasium; gymnasium.make('MetaWorld-v3', benchmark='ML10')",
     "metaworld", "metaworld"),
]


@pytest.mark.parametrize(("action", "package", "extra"), CASES,
                         ids=[f"{p}:{a[:40]}" for a, p, _ in CASES])
def test_a_missing_package_is_one_typed_error_naming_the_extra(action, package, extra):
    error = import_error(action, blocked=(package,))
    assert error["type"] == "MissingExtraError", error
    assert error["typed"] and error["extra"] == extra
    assert f'pip install "vecsample[{extra}]"' in error["message"]
    assert package in error["message"]


def test_the_core_imports_with_every_optional_package_missing():
    blocked = ("torch", "tqdm", "mujoco", "metaworld", "ray", "stable_baselines3", "matplotlib")
    error = import_error("import vecsample, vecsample.envs, vecsample.errors, vecsample.testing",
                         blocked=blocked)
    assert error == {"type": None}


def test_a_broken_dependency_of_an_installed_package_is_not_called_a_missing_extra():
    """torch there but one of its own imports missing is torch's error, not 'install the extra'."""
    setup = ("import importlib.abc, importlib.machinery\n"
             "class Broken(importlib.abc.MetaPathFinder):\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             "        if name == 'torch':\n"
             "            raise ModuleNotFoundError('No module named sympy', name='sympy')\n"
             "sys.meta_path.insert(0, Broken())")
    error = import_error("import vecsample.train", setup=setup)
    assert error["type"] == "ModuleNotFoundError" and not error["typed"], error


def test_compare_without_the_cli_extra_exits_2_naming_it():
    code = ("import sys; sys.modules['tqdm'] = None\n"
            "from vecsample.__main__ import main\n"
            "sys.exit(main(['compare', '--envs', 'CartPole-v1', '--seconds', '0.05',"
            " '--repeats', '1']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert 'pip install "vecsample[cli]"' in proc.stderr
    assert "Traceback" not in proc.stderr


MIXED_MUJOCO = {
    # mujoco 4's plugins left behind by installing metaworld's mujoco 3.3.0 over mujoco 4
    "plugins": ("import importlib.abc\n"
                "class Leftover(importlib.abc.MetaPathFinder):\n"
                "    def find_spec(self, name, path=None, target=None):\n"
                "        if name == 'mujoco':\n"
                "            raise OSError('libmujoco.so.4.0.0: cannot open shared object file')\n"
                "sys.meta_path.insert(0, Leftover())"),
    # metaworld importable, but on mujoco 4 (installed with --no-deps, say)
    "mujoco 4": ("import types\n"
                 "sys.modules['mujoco'] = types.SimpleNamespace(__version__='4.0.0')\n"
                 "sys.modules['metaworld'] = types.SimpleNamespace(env_dict=None)"),
}


@pytest.mark.parametrize("case", sorted(MIXED_MUJOCO))
def test_metaworld_over_mujoco_4_names_the_command_that_fixes_it(case):
    from vecsample.extras import METAWORLD_FIX

    error = import_error("import vecsample.envs.metaworld", setup=MIXED_MUJOCO[case])
    assert error["type"] == "MissingExtraError", error
    assert METAWORLD_FIX in error["message"]
    assert ("libmujoco.so.4.0.0" if case == "plugins" else "mujoco 4.0.0") in error["message"]


def test_a_subpackage_loads_on_first_use_after_a_plain_import():
    """The README's one-line change, ``vecsample.sb3.VecEnv(env_fns)`` after ``import
    vecsample``, finds the subpackage; an unknown name is still an AttributeError."""
    code = ("import sys, vecsample; assert 'vecsample.sb3' not in sys.modules; "
            "print(vecsample.sb3.VecEnv.__name__, vecsample.envs.__name__); "
            "getattr(vecsample, 'no_such_name', None) is None or sys.exit(3)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["VecEnv", "vecsample.envs"]
