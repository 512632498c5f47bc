"""SB3's own vec-env tests, run against ``vecsample.sb3.VecEnv`` in place of ``SubprocVecEnv``.

At test time this downloads the sdist of the installed stable-baselines3 version from PyPI,
extracts ``tests/test_vec_envs.py`` (with any helper module of SB3's tests it imports, and SB3's
pytest configuration), rewrites only its import of ``SubprocVecEnv`` into
``from vecsample.sb3 import VecEnv as SubprocVecEnv`` (so every test that builds a
SubprocVecEnv, with whatever arguments, builds ours), runs it in a subprocess with
``--junitxml``, and fails unless every test passes or is skipped by SB3's own conditions, but
those in ``ALLOWED`` (none today: see docs/sb3.md). A download failure is a failure, not a skip.

The rewriting and reading helpers are plain functions, tested on synthetic input at the end.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE = "tests/test_vec_envs.py"
REPLACEMENT = "from vecsample.sb3 import VecEnv as SubprocVecEnv"
#: Tests allowed to fail, by junit name ("test_x[params]"), each with its reason. Empty: every
#: test of the suite passes against vecsample.sb3.VecEnv.
ALLOWED: dict[str, str] = {}

pytestmark = pytest.mark.slow


# --- helpers --------------------------------------------------------------------------------------


def rewrite_import(source: str) -> str:
    """``source`` with its one ``from stable_baselines3... import ..., SubprocVecEnv, ...``
    turned into the same import without it plus ``REPLACEMENT``; nothing else changes."""
    tree = ast.parse(source)
    hits = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom | ast.Import)
            and any(alias.name.split(".")[-1] == "SubprocVecEnv" for alias in node.names)]
    if len(hits) != 1 or not isinstance(hits[0], ast.ImportFrom):
        raise AssertionError(f"expected one `from ... import SubprocVecEnv`, found {len(hits)}:"
                             f" {[ast.unparse(h) for h in hits]}; the suite changed, adapt this.")
    node = hits[0]
    if any(a.name == "SubprocVecEnv" and a.asname for a in node.names) or node.col_offset:
        raise AssertionError(f"unexpected form {ast.unparse(node)!r}; adapt rewrite_import.")
    others = [a for a in node.names if a.name != "SubprocVecEnv"]
    lines = source.splitlines(keepends=True)
    kept = ast.unparse(ast.ImportFrom(node.module, others, node.level)) + "\n" if others else ""
    assert node.end_lineno is not None
    new = kept + REPLACEMENT + "\n"
    return "".join(lines[: node.lineno - 1]) + new + "".join(lines[node.end_lineno:])


def local_helpers(source: str, available: set[str]) -> set[str]:
    """The modules of SB3's tests folder (``available``, names without .py) that ``source``
    imports: they must be extracted next to it."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        for name in names:
            parts = name.split(".")
            head = parts[1] if parts[0] == "tests" and len(parts) > 1 else parts[0]
            if head in available:
                found.add(head)
    return found


def junit_outcomes(xml_text: str) -> dict[str, str]:
    """``{test name: "passed" | "failed" | "skipped"}`` from a junit xml report."""
    outcomes = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            outcome = "failed"
        elif "skipped" in tags:
            outcome = "skipped"
        else:
            outcome = "passed"
        outcomes[case.get("name", "?")] = outcome
    return outcomes


def skip_reasons(xml_text: str) -> dict[str, str]:
    return {case.get("name", "?"): skipped.get("message", "")
            for case in ET.fromstring(xml_text).iter("testcase")
            for skipped in case.iter("skipped")}


def verdict(outcomes: dict[str, str], allowed: dict[str, str]) -> list[str]:
    """What is wrong: failed tests not allowed, allowed tests that no longer fail, no tests."""
    problems = [f"{name} failed" for name, o in outcomes.items()
                if o == "failed" and name not in allowed]
    problems += [f"{name} is allowed to fail ({why}) but {outcomes.get(name, 'did not run')}; "
                 f"drop it from ALLOWED" for name, why in allowed.items()
                 if outcomes.get(name) != "failed"]
    if not outcomes:
        problems.append("no test ran")
    return problems


def download_sdist(dest: Path, sb3_version: str) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--disable-pip-version-check", "-d", str(dest), f"stable-baselines3=={sb3_version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    found = sorted(dest.glob("stable_baselines3-*.tar.gz"))
    if proc.returncode != 0 or not found:
        pytest.fail(f"could not download the stable-baselines3=={sb3_version} sdist from PyPI "
                    f"(`{' '.join(cmd)}` exited {proc.returncode}); this test needs network "
                    f"access to PyPI.\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return found[0]


def extract_suite(sdist: Path, dest: Path) -> Path:
    """Writes the rewritten suite, its helpers and SB3's pytest config into ``dest``."""
    with tarfile.open(sdist) as tar:
        members = {Path(m.name).relative_to(Path(m.name).parts[0]).as_posix(): m
                   for m in tar.getmembers() if m.isfile() and len(Path(m.name).parts) > 1}

        def read(name: str) -> str:
            handle = tar.extractfile(members[name])
            assert handle is not None
            return handle.read().decode()

        assert SUITE in members, f"{sdist.name} has no {SUITE}: {sorted(members)[:40]}"
        source = read(SUITE)
        tests = {Path(n).stem for n in members if n.startswith("tests/") and n.endswith(".py")}
        for helper in local_helpers(source, tests) | ({"conftest"} & tests):
            (dest / f"{helper}.py").write_text(read(f"tests/{helper}.py"))
        if "pyproject.toml" in members:  # SB3's pytest settings (warning filters, markers)
            (dest / "pyproject.toml").write_text(read("pyproject.toml"))
    target = dest / Path(SUITE).name
    target.write_text(rewrite_import(source))
    return target


# --- the suite ------------------------------------------------------------------------------------


@pytest.mark.timeout(1500)
def test_sb3_vec_env_suite_passes_with_vecsample_in_place_of_subprocvecenv(tmp_path: Path):
    sb3_version = version("stable-baselines3")
    work = tmp_path / "suite"
    work.mkdir()
    suite = extract_suite(download_sdist(tmp_path, sb3_version), work)
    report = tmp_path / "report.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(work)])}
    # SB3's config and rootdir, no cache files left behind; a hung test fails after 300 s
    # instead of stalling the run.
    cmd = [sys.executable, "-m", "pytest", str(suite), f"--junitxml={report}", "-q",
           "-p", "no:cacheprovider", f"--rootdir={work}", "--timeout=300"]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=1400)
    assert report.exists(), f"pytest wrote no report (exit {proc.returncode}):\n" \
        f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    xml_text = report.read_text()
    outcomes = junit_outcomes(xml_text)
    counts = {o: sum(v == o for v in outcomes.values()) for o in ("passed", "failed", "skipped")}
    print(f"stable-baselines3 {sb3_version} {SUITE}: {counts}; skipped: {skip_reasons(xml_text)}")
    problems = verdict(outcomes, ALLOWED)
    assert not problems, "\n".join(problems) + f"\n{proc.stdout[-6000:]}"
    assert proc.returncode == (0 if counts["failed"] == 0 else 1), proc.stdout[-4000:]


# --- the helpers can fail -------------------------------------------------------------------------


SUITE_HEAD = (
    "import os\n"
    "from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecNormalize\n"
    "VEC = [DummyVecEnv, SubprocVecEnv]\n"
)


def test_rewrite_import_replaces_only_the_import():
    out = rewrite_import(SUITE_HEAD)
    assert out == ("import os\n"
                   "from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize\n"
                   f"{REPLACEMENT}\n"
                   "VEC = [DummyVecEnv, SubprocVecEnv]\n")
    multiline = "from a.b import (\n    X,\n    SubprocVecEnv,\n)\nuse(SubprocVecEnv)\n"
    assert rewrite_import(multiline) == f"from a.b import X\n{REPLACEMENT}\nuse(SubprocVecEnv)\n"
    alone = "from a.b import SubprocVecEnv\n"
    assert rewrite_import(alone) == f"{REPLACEMENT}\n"


def test_rewrite_import_refuses_what_it_cannot_rewrite_faithfully():
    for source in ("import os\n",  # none
                   SUITE_HEAD + "from x import SubprocVecEnv\n",  # two
                   "from a import SubprocVecEnv as S\n",  # renamed
                   "def f():\n    from a import SubprocVecEnv\n"):  # not at top level
        with pytest.raises(AssertionError):
            rewrite_import(source)


def test_local_helpers_finds_imported_test_modules_only():
    source = "import numpy\nfrom helpers import x\nimport tests.utils\nfrom os import path\n"
    assert local_helpers(source, {"helpers", "utils", "test_other"}) == {"helpers", "utils"}
    assert local_helpers(source, set()) == set()


def test_junit_outcomes_and_verdict():
    xml_text = ("<testsuites><testsuite>"
                "<testcase name='a'/>"
                "<testcase name='b'><failure message='x'/></testcase>"
                "<testcase name='c'><skipped message='No X-Server'/></testcase>"
                "<testcase name='d'><error message='setup'/></testcase>"
                "</testsuite></testsuites>")
    outcomes = junit_outcomes(xml_text)
    assert outcomes == {"a": "passed", "b": "failed", "c": "skipped", "d": "failed"}
    assert skip_reasons(xml_text) == {"c": "No X-Server"}
    assert verdict(outcomes, {}) == ["b failed", "d failed"]
    assert verdict(outcomes, {"b": "why", "d": "why"}) == []
    assert verdict(outcomes, {"a": "why", "b": "why", "d": "why"}) == [
        "a is allowed to fail (why) but passed; drop it from ALLOWED"]
    assert verdict({}, {}) == ["no test ran"]


def test_download_failure_is_a_failure_not_a_skip(tmp_path: Path):
    with pytest.raises(pytest.fail.Exception, match="could not download"):
        download_sdist(tmp_path, "0.0.1.dev999")
