"""The built wheel works on its own: `python -m build`, then fresh venvs with no checkout in sight.

One venv gets the wheel alone (the light core: no torch, tqdm or mujoco) and runs a CartPole
VecSampler and `vecsample compare --help` from it; another gets the wheel with the ``mujoco``
extra on mujoco 4, so the MuJoCo envs stay supported on the major the test venv does not run
(the ``test`` extra resolves mujoco 3.3.0, which metaworld pins). Both venvs are made without
system site packages and run from a temporary directory, so nothing of this checkout or of the
running venv can leak in. Needs PyPI for the dependencies (pip's cache serves repeats).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

from vecsample._wire.handshake import MACHINE

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

#: The environment every command here runs with: nothing that points back at this checkout or
#: at the venv the tests run in.
CLEAN_ENV = {k: v for k, v in os.environ.items()
             if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}


def run(args: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=CLEAN_ENV,
                          timeout=timeout)
    assert proc.returncode == 0, f"{args}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def tracked_files() -> list[str]:
    """The checkout's files as a fresh clone of it would have them (ignored files left out)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True, cwd=ROOT, check=True).stdout
    return [name for name in listed.splitlines() if (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An sdist and a wheel, the wheel built from the sdist (build's default).

    Built from a copy of the tracked files: the checkout's own ``vecsample.egg-info`` (left by
    ``pip install -e``) lists every file it once saw, and setuptools would put those in the sdist
    even if the package list lost them.
    """
    source = tmp_path_factory.mktemp("source")
    for name in tracked_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", str(out), str(source)], cwd=out)
    return out


def wheel_of(dist: Path) -> Path:
    (wheel,) = dist.glob("vecsample-*.whl")
    return wheel


def make_venv(where: Path, *requirements: str) -> Path:
    """A venv without system site packages, with ``requirements`` installed; its python."""
    venv.create(where, system_site_packages=False, with_pip=True, symlinks=True)
    python = where / "bin" / "python"
    run([str(python), "-m", "pip", "install", "--quiet", *requirements], cwd=where)
    return python


@pytest.fixture(scope="module")
def core_python(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_venv(tmp_path_factory.mktemp("core") / "venv", str(wheel_of(dist)))


def package_files() -> set[str]:
    """Every file of the vecsample package that git tracks: what the wheel must carry."""
    listed = subprocess.run(["git", "ls-files", "vecsample"], capture_output=True, text=True,
                            cwd=ROOT, check=True).stdout.split()
    return set(listed)


def test_the_sdist_and_the_wheel_carry_every_package_file(dist: Path):
    files = package_files()
    assert "vecsample/maml/configs.py" in files and "vecsample/envs/mujoco.py" in files
    in_wheel = set(zipfile.ZipFile(wheel_of(dist)).namelist())
    assert files <= in_wheel, sorted(files - in_wheel)
    (sdist,) = dist.glob("vecsample-*.tar.gz")
    with tarfile.open(sdist) as tar:
        in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert files <= in_sdist, sorted(files - in_sdist)


CORE_SCRIPT = textwrap.dedent("""
    import importlib.util, sys
    import numpy as np
    import vecsample

    assert "site-packages" in vecsample.__file__, vecsample.__file__  # the wheel, not a checkout
    missing = [m for m in ("torch", "tqdm", "mujoco") if importlib.util.find_spec(m) is None]
    print("absent:", *missing)
    if __name__ == "__main__":
        with vecsample.VecSampler("CartPole-v1", num_envs=4, num_workers=2, seed=0) as sampler:
            obs, _ = sampler.reset()
            for _ in range(50):
                result = sampler.step(np.zeros(4, dtype=np.int64))
            print("stepped", result.obs.shape, float(result.rewards.sum()))
            print("native handshake:", sampler.layout.native)
        try:
            import vecsample.train
        except vecsample.errors.MissingExtraError as error:
            print("extra:", error.extra)
""")


def run_script(python: Path, text: str, where: Path) -> str:
    """``text`` saved as a file in ``where`` and run there by ``python``; its stdout."""
    script = where / "script.py"
    script.write_text(text)
    return run([str(python), str(script)], cwd=where, timeout=300).stdout


def test_the_core_wheel_samples_cartpole_without_torch(core_python: Path, tmp_path: Path):
    out = run_script(core_python, CORE_SCRIPT, tmp_path)
    assert "absent: torch tqdm mujoco" in out, out
    assert "stepped (4, 4) 4.0" in out, out
    assert "extra: train" in out, out


@pytest.mark.skipif(not MACHINE.native, reason="the C handshake is built on x86-64 Linux only")
def test_the_wheel_carries_the_c_handshake_and_the_sampler_takes_it(dist: Path,
                                                                    core_python: Path,
                                                                    tmp_path: Path):
    names = zipfile.ZipFile(wheel_of(dist)).namelist()
    assert any(n.startswith("vecsample/_wire/_native.") and n.endswith(".so") for n in names)
    assert "native handshake: True" in run_script(core_python, CORE_SCRIPT, tmp_path)


def test_without_a_compiler_the_sdist_installs_with_the_python_handshake_and_says_so(
        dist: Path, tmp_path: Path):
    """No C compiler (``CC`` pointing at ``false``): the optional extension fails to build,
    the install does not, and a sampler says once, in one line, what runs instead."""
    (sdist,) = dist.glob("vecsample-*.tar.gz")
    where = tmp_path / "venv"
    venv.create(where, system_site_packages=False, with_pip=True, symlinks=True)
    python = where / "bin" / "python"
    proc = subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(sdist)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900,
                          env={**CLEAN_ENV, "CC": "false"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    script = tmp_path / "script.py"
    script.write_text(CORE_SCRIPT)
    ran = subprocess.run([str(python), str(script)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300, env=CLEAN_ENV)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "stepped (4, 4) 4.0" in ran.stdout and "native handshake: False" in ran.stdout
    said = [line for line in ran.stderr.splitlines() if "native handshake" in line]
    assert len(said) == 1 and "install a C compiler" in said[0], ran.stderr


def test_the_wheel_installs_the_vecsample_command(core_python: Path, tmp_path: Path):
    command = core_python.parent / "vecsample"
    out = run([str(command), "compare", "--help"], cwd=tmp_path, timeout=120).stdout
    assert "usage: vecsample compare" in out and "--envs" in out, out


MUJOCO_SCRIPT = textwrap.dedent("""
    import functools

    import gymnasium as gym
    import mujoco
    import numpy as np
    import vecsample
    import vecsample.envs  # registers the MuJoCo task envs

    print("mujoco", mujoco.__version__)
    if __name__ == "__main__":
        for env_id in ("HalfCheetah-v5", "HalfCheetahVel-v5"):
            with vecsample.VecSampler(env_id, num_envs=2, num_workers=2, seed=0) as sampler:
                obs, _ = sampler.reset()
                for _ in range(20):
                    result = sampler.step(np.zeros((2, 6), dtype=np.float32))
                assert np.isfinite(result.obs).all() and np.isfinite(result.rewards).all()
                print("stepped", env_id, result.obs.shape)
        # The batch-native envs equal gymnasium's on this major too (tests/test_mujoco_batch.py
        # runs the full comparison on the suite's mujoco).
        for batch_id, env_id in (("AntBatch-v5", "Ant-v5"),
                                 ("HalfCheetahVelBatch-v5", "HalfCheetahVel-v5")):
            ours = gym.make_vec(batch_id, 2, vectorization_mode="vector_entry_point",
                                max_episode_steps=8)
            theirs = gym.vector.SyncVectorEnv(  # NextStep: gymnasium's and the batch ids' default
                [functools.partial(gym.make, env_id, max_episode_steps=8)] * 2,
                autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
            same = np.array_equal(ours.reset(seed=3)[0], theirs.reset(seed=3)[0])
            theirs.action_space.seed(0)
            for _ in range(20):
                action = theirs.action_space.sample()
                a, b = ours.step(action), theirs.step(action)
                same = same and all(np.array_equal(x, y) for x, y in zip(a[:4], b[:4]))
            print("equal" if same else "different", batch_id)
""")


def test_the_wheel_steps_mujoco_envs_on_mujoco_4(dist: Path, tmp_path: Path):
    python = make_venv(tmp_path / "venv", f"{wheel_of(dist)}[mujoco]", "mujoco>=4,<5")
    out = run_script(python, MUJOCO_SCRIPT, tmp_path)
    assert "mujoco 4." in out, out
    assert "stepped HalfCheetah-v5 (2, 17)" in out, out
    assert "stepped HalfCheetahVel-v5 (2, 20)" in out, out
    assert "equal AntBatch-v5" in out and "equal HalfCheetahVelBatch-v5" in out, out
