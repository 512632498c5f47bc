"""What each optional part of vecsample needs, and the one check that says which extra to install.

The core (``import vecsample``) needs numpy, gymnasium, cloudpickle and msgpack. Everything else
comes with an extra of ``pyproject.toml``; a module that needs one calls :func:`require` before it
imports the package, so a missing package is one :class:`~vecsample.errors.MissingExtraError`
that names the extra, never a bare ``ModuleNotFoundError`` from deep inside.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from vecsample.errors import MissingExtraError

#: The extra that installs each optional package (the keys of pyproject.toml's extras).
EXTRA_OF: dict[str, str] = {
    "torch": "train",
    "tqdm": "cli",
    "mujoco": "mujoco",
    "metaworld": "metaworld",
    "ray": "ray",
    "stable_baselines3": "sb3",
    "matplotlib": "plot",
    "ale_py": "bench",  # vecsample bench's ALE rows (ALE/Pong-v5)
}


def require(package: str, *, feature: str, extra: str = "") -> ModuleType:
    """Imports ``package`` for ``feature``, or raises ``MissingExtraError`` naming the extra.

    ``extra`` defaults to the package's own (``EXTRA_OF``); a feature whose extra installs more
    (``vecsample compare`` needs the ``cli`` extra's torch too) names its own.
    """
    extra = extra or EXTRA_OF[package]
    try:
        return importlib.import_module(package)
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] != package:
            raise  # the package is there, but something it imports is not: its own error
        raise MissingExtraError(feature=feature, package=package, extra=extra) from error


#: Over a mujoco 4 install, installing metaworld (which pins mujoco 3.3.0) leaves mujoco 4's
#: ``mujoco-core`` and ``mujoco-studio`` behind, and ``import mujoco`` then fails on
#: ``libmujoco.so.4.0.0``; uninstalling all three first puts one consistent mujoco back.
METAWORLD_FIX = ('pip uninstall -y mujoco mujoco-core mujoco-studio && '
                 'pip install "vecsample[metaworld]"')

#: The mujoco major version that metaworld 3.1.1 runs on (its ``reset_mocap_welds`` fails on
#: mujoco 4's ``eq_data`` shape).
METAWORLD_MUJOCO_MAJOR = "3"


def require_metaworld(feature: str) -> ModuleType:
    """Imports ``metaworld`` on a mujoco it runs on, or raises ``MissingExtraError`` with the fix.

    Catches what a mixed install raises, not only a missing package: the ``OSError`` of mujoco 4's
    plugins left behind, and a mujoco of the wrong major version.
    """
    try:
        mujoco = importlib.import_module("mujoco")
        metaworld = importlib.import_module("metaworld")
    except (ImportError, OSError) as error:
        raise MissingExtraError(
            feature=feature, package="metaworld", extra="metaworld", fix=METAWORLD_FIX,
            reason=f"importing mujoco and metaworld failed ({type(error).__name__}: {error})",
        ) from error
    version = str(getattr(mujoco, "__version__", "unknown"))
    if version.split(".")[0] != METAWORLD_MUJOCO_MAJOR:
        raise MissingExtraError(
            feature=feature, package="metaworld", extra="metaworld", fix=METAWORLD_FIX,
            reason=f"metaworld 3.1.1 runs on mujoco {METAWORLD_MUJOCO_MAJOR}.x (it pins 3.3.0), "
            f"and mujoco {version} is installed",
        )
    return metaworld
