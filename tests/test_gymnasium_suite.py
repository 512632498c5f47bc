"""gymnasium's own vector tests pass against ``vecsample.VectorEnv``, except an explicit allowlist.

gymnasium's four vector test files (and the helpers they import) are not part of vecsample, and
gymnasium's sdist does not carry them: they come from a Gymnasium checkout, found by
``locate``. ``VECSAMPLE_GYMNASIUM_TESTS`` names it (a Gymnasium checkout, or a conformance folder
laid out as CI's ``../shared/conformance``, with the checkout's ``tests/`` under ``gymnasium/``);
unset, the conformance folder next to the repository is used if it is there, and the suite test
is skipped, with a reason saying how to run it, if it is not. A folder that is named must hold
the tests: ``.ci/run`` names CI's, so in CI a missing suite fails instead of skipping.

The test copies the checkout's ``tests/`` to a temporary folder, turns the one import of
``AsyncVectorEnv`` in each file into ``from vecsample import VectorEnv as AsyncVectorEnv`` (so every
test builds ``vecsample.VectorEnv`` with the arguments it gives ``AsyncVectorEnv``) and runs
pytest there. The run must pass every test except those in ``ALLOWLIST``, each with its reason;
docs/gymnasium.md shows the same list (a test checks it). An allowlisted test that starts to
pass fails the run too, so the list only shrinks.

The locator, the rewrite and the checker (``problems``, a plain function of the junit report)
are tested on synthetic folders, sources and reports.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "gymnasium.md"

#: Names the folder that holds gymnasium's vector tests; set, it must hold them.
SUITE_VAR = "VECSAMPLE_GYMNASIUM_TESTS"
#: Where CI keeps them when the variable is unset: the conformance folder beside the checkout.
BESIDE = ROOT.parent / "shared" / "conformance"
#: The Gymnasium commit whose tests ALLOWLIST was written against (gymnasium 1.4.0 installed).
GYMNASIUM_COMMIT = "3f0476a8c"
FILES = ("test_vector_env.py", "test_autoreset_mode.py", "test_vector_env_info.py",
         "test_async_vector_env.py")
REPLACEMENT = "from vecsample import VectorEnv as AsyncVectorEnv"
CLONE = (f"clone https://github.com/Farama-Foundation/Gymnasium, check out {GYMNASIUM_COMMIT} "
         f"and set {SUITE_VAR} to the clone's folder")


class SuiteNotFoundError(Exception):
    """gymnasium's vector tests are not where they were looked for. ``named``: the folder was
    asked for by SUITE_VAR (the test fails) rather than only looked for (the test skips)."""

    def __init__(self, folder: Path, named: bool) -> None:
        self.folder, self.named = folder, named
        if named:
            got = "a folder without them" if folder.is_dir() else "no such folder"
            message = (f"{SUITE_VAR}={folder} names no folder of gymnasium's vector tests: "
                       f"expected tests/vector/ (a Gymnasium checkout) or gymnasium/tests/vector/"
                       f" (a conformance folder) in it holding {', '.join(FILES)}; got {got}. "
                       f"To fix it, {CLONE}, or unset {SUITE_VAR} to skip this test.")
        else:
            message = (f"gymnasium's vector tests are not part of vecsample, {SUITE_VAR} is "
                       f"unset and CI's copy ({folder}) is absent; to run this test, {CLONE}.")
        super().__init__(message)


def suite_tests(folder: Path) -> Path | None:
    """The ``tests`` folder under ``folder`` (a Gymnasium checkout) or under
    ``folder/gymnasium`` (a conformance folder) that holds every file of FILES, else None."""
    for tests in (folder / "tests", folder / "gymnasium" / "tests"):
        if all((tests / "vector" / name).is_file() for name in FILES):
            return tests
    return None


def locate(environ: Mapping[str, str], beside: Path) -> Path:
    """The tests folder to run: the one ``environ[SUITE_VAR]`` names, else ``beside``'s.
    Raises SuiteNotFoundError, ``named`` telling a folder that was asked for (the test fails)
    from one that was only looked for (the test skips)."""
    named = environ.get(SUITE_VAR, "")
    folder = Path(named).expanduser().resolve() if named else beside
    found = suite_tests(folder)
    if found is None:
        raise SuiteNotFoundError(folder, named=bool(named))
    return found


def suite_or_skip(environ: Mapping[str, str], beside: Path) -> Path:
    """``locate``'s folder; skips the calling test where no folder was named and none is beside,
    and raises SuiteNotFoundError (a failure) where the named folder lacks the tests."""
    try:
        return locate(environ, beside)
    except SuiteNotFoundError as error:
        if error.named:
            raise
        pytest.skip(str(error))


def rewrite_import(source: str) -> str:
    """``source`` with ``AsyncVectorEnv`` taken out of its ``from gymnasium.vector import ...``
    line and imported from vecsample under that name; nothing else changes."""
    pattern = re.compile(r"^from gymnasium\.vector import (.*)$", re.M)

    def fix(match: re.Match[str]) -> str:
        names = [n.strip() for n in match.group(1).split(",")]
        if "AsyncVectorEnv" not in names:
            return match.group(0)
        rest = ", ".join(n for n in names if n != "AsyncVectorEnv")
        return (f"from gymnasium.vector import {rest}\n" if rest else "") + REPLACEMENT

    new = pattern.sub(fix, source)
    if new.count(REPLACEMENT) != 1:
        raise AssertionError(f"expected one `from gymnasium.vector import ..., AsyncVectorEnv` "
                             f"line, got {new.count(REPLACEMENT)}: the tests changed, adapt "
                             f"rewrite_import to them")
    return new


def prepare(tests: Path, work: Path) -> None:
    """A copy of ``tests`` as ``work/tests``, FILES rewritten to build vecsample's VectorEnv."""
    shutil.copytree(tests, work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    for name in FILES:
        path = work / "tests" / "vector" / name
        path.write_text(rewrite_import(path.read_text()))


#: Marks a reason that goes away once the core changes it names land.
PENDING = "pending core work"
_CHECK = ("the intended action check: vecsample checks actions against the action space before "
          "sending them (check_actions=False turns it off)")

#: Test id (``file::test[params]``) -> why it fails against vecsample. Only the intended action
#: check, or core work still pending, may be a reason.
ALLOWLIST: dict[str, str] = {
    "test_vector_env.py::test_final_obs_info[Async with shared memory]":
        f"{_CHECK}; the test steps a Discrete(4) env with action 4, outside the space.",
    "test_vector_env.py::test_final_obs_info[Async without shared memory]":
        f"{_CHECK}; the test steps a Discrete(4) env with action 4, outside the space.",
    "test_async_vector_env.py::test_custom_space_async_vector_env":
        f"{_CHECK}; the test's CustomSpace.contains raises TypeError for the string actions it "
        "sends.",
    "test_async_vector_env.py::test_step_timeout_async_vector_env[True]":
        "the intended action check, which also conforms actions to the action space's dtype: "
        "the env receives np.float32 (its Box's dtype) where AsyncVectorEnv passes the caller's "
        "np.float64 through, and the test's env calls time.sleep(action), which refuses "
        "np.float32 (check_actions=False does not change the dtype).",
    "test_async_vector_env.py::test_step_timeout_async_vector_env[False]":
        "the intended action check, which also conforms actions to the action space's dtype: "
        "the env receives np.float32 (its Box's dtype) where AsyncVectorEnv passes the caller's "
        "np.float64 through, and the test's env calls time.sleep(action), which refuses "
        "np.float32 (check_actions=False does not change the dtype).",
    "test_async_vector_env.py::test_async_vector_subenv_error":
        f"{_CHECK}; the test steps Box(0, 1, (1,)) envs with [0, 1, 2] (shape (3,), not (3, 1), "
        f"and 2 is out of bounds).",
}

#: A test may skip only for gymnasium's own reason: a space of dynamic shape in shared memory.
ALLOWED_SKIP = "dynamic shape"


def problems(junit_xml: str, allowlist: dict[str, str]) -> list[str]:
    """Everything wrong with a run: a failure not allowlisted, an allowlisted test that passed
    or is gone, a skip for another reason than ``ALLOWED_SKIP``, or a run with no tests."""
    found, seen = [], set()
    cases = list(ET.fromstring(junit_xml).iter("testcase"))
    for case in cases:
        test_id = f"{case.get('classname', '').rpartition('.')[2]}.py::{case.get('name')}"
        seen.add(test_id)
        failed = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped")
        if failed and test_id not in allowlist:
            found.append(f"{test_id} failed and is not in the allowlist")
        elif not failed and test_id in allowlist:
            found.append(f"{test_id} is allowlisted but did not fail: remove it from ALLOWLIST "
                         f"and docs/gymnasium.md")
        elif skipped is not None and ALLOWED_SKIP not in (skipped.get("message") or ""):
            found.append(f"{test_id} was skipped: {skipped.get('message')}")
    found += [f"{t} is allowlisted but did not run" for t in sorted(set(allowlist) - seen)]
    if not cases:
        found.append("the report lists no test at all")
    return found


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_gymnasium_vector_suite_passes_except_the_allowlist(tmp_path):
    tests = suite_or_skip(os.environ, BESIDE)
    prepare(tests, tmp_path / "suite")
    report = tmp_path / "gymnasium.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}  # this checkout
    cmd = [sys.executable, "-m", "pytest", *(f"tests/vector/{name}" for name in FILES),
           f"--junitxml={report}", "-q", "--tb=short", "-p", "no:cacheprovider", "-o",
           "addopts=", f"--rootdir={tmp_path / 'suite'}"]
    run = subprocess.run(cmd, cwd=tmp_path / "suite", env=env, capture_output=True, text=True,
                         timeout=800)
    output = (run.stdout + run.stderr)[-6000:]
    assert run.returncode in (0, 1) and report.is_file(), f"the suite did not run:\n{output}"
    found = problems(report.read_text(), ALLOWLIST)
    assert not found, "\n".join(found) + f"\n\nend of the run's output:\n{output}"


def test_docs_show_the_same_allowlist():
    text = DOC.read_text()
    assert text.count("<!-- allowlist -->") == 1 and text.count("<!-- /allowlist -->") == 1, \
        "docs/gymnasium.md must hold its allowlist table between <!-- allowlist --> markers"
    table = text.split("<!-- allowlist -->")[1].split("<!-- /allowlist -->")[0]
    rows = re.findall(r"^\| `([^`]+)` \| (.+) \|$", table, flags=re.M)
    assert {test_id for test_id, _ in rows} == set(ALLOWLIST), \
        "docs/gymnasium.md's allowlist table must list exactly ALLOWLIST's test ids"
    for test_id, reason in rows:
        assert (PENDING in reason) == (PENDING in ALLOWLIST[test_id]), \
            f"{test_id}: the docs and ALLOWLIST disagree on whether it is {PENDING!r}"


def test_every_reason_is_the_action_check_or_pending_core_work():
    for test_id, reason in ALLOWLIST.items():
        assert "intended action check" in reason or PENDING in reason, test_id


# --- the checker, on synthetic reports -----------------------------------------------------------


def _report(*cases: str) -> str:
    return f"<testsuites><testsuite>{''.join(cases)}</testsuite></testsuites>"


def _case(name: str, body: str = "") -> str:
    return f'<testcase classname="tests.vector.test_x" name="{name}">{body}</testcase>'


def test_checker_accepts_passes_allowlisted_failures_and_dynamic_shape_skips():
    xml = _report(_case("test_a"), _case("test_b", '<failure message="boom"/>'),
                  _case("test_c", '<skipped message="Skipping space with dynamic shape"/>'))
    assert problems(xml, {"test_x.py::test_b": "why"}) == []


@pytest.mark.parametrize(("xml", "allowlist", "expected"), [
    (_report(_case("test_b", '<failure message="boom"/>')), {}, "not in the allowlist"),
    (_report(_case("test_b", '<error message="setup"/>')), {}, "not in the allowlist"),
    (_report(_case("test_b")), {"test_x.py::test_b": "why"}, "did not fail"),
    (_report(_case("test_a")), {"test_x.py::test_gone": "why"}, "did not run"),
    (_report(_case("test_a", '<skipped message="no pygame"/>')), {}, "was skipped: no pygame"),
    (_report(), {}, "no test at all"),
])
def test_checker_reports_what_is_wrong(xml, allowlist, expected):
    found = problems(xml, allowlist)
    assert len(found) == 1 and expected in found[0], found


# --- finding the suite and rewriting it, on synthetic folders and sources -------------------------


def _suite(folder: Path, *, leave_out: str = "") -> Path:
    """A fake tests folder at ``folder``: FILES under vector/, but ``leave_out``."""
    (folder / "vector").mkdir(parents=True)
    for name in FILES:
        if name != leave_out:
            (folder / "vector" / name).write_text("from gymnasium.vector import AsyncVectorEnv\n")
    return folder


def _decision(environ: Mapping[str, str], beside: Path) -> Path | str:
    """``suite_or_skip``'s outcome as a value, so that a skip cannot pass for a pass: the
    folder, ``skip: <reason>`` or ``fail: <message>``."""
    try:
        return suite_or_skip(environ, beside)
    except pytest.skip.Exception as skipped:
        return f"skip: {skipped}"
    except SuiteNotFoundError as error:
        return f"fail: {error}"


def test_without_a_named_or_neighbouring_suite_the_test_skips_saying_how_to_run_it(tmp_path):
    beside = tmp_path / "shared" / "conformance"
    decided = _decision({}, beside)
    assert isinstance(decided, str) and decided.startswith("skip: "), decided
    assert f"to run this test, {CLONE}." in decided and f"CI's copy ({beside})" in decided
    assert GYMNASIUM_COMMIT in CLONE and SUITE_VAR in CLONE


@pytest.mark.parametrize("leave_out", ["", "test_autoreset_mode.py"])
def test_a_named_folder_without_the_suite_fails_instead_of_skipping(tmp_path, leave_out):
    named = tmp_path / "Gymnasium"
    if leave_out:
        _suite(named / "tests", leave_out=leave_out)
    beside = _suite(tmp_path / "conformance" / "gymnasium" / "tests").parents[1]  # not used
    decided = _decision({SUITE_VAR: str(named)}, beside)
    assert isinstance(decided, str) and decided.startswith(f"fail: {SUITE_VAR}={named} "), decided
    assert ("got a folder without them" if leave_out else "got no such folder") in decided
    assert f"To fix it, {CLONE}, or unset {SUITE_VAR} to skip this test." in decided


def test_the_named_checkout_wins_over_the_neighbouring_conformance_folder(tmp_path):
    checkout = _suite(tmp_path / "Gymnasium" / "tests").parent
    conformance = _suite(tmp_path / "shared" / "conformance" / "gymnasium" / "tests").parents[1]
    assert _decision({SUITE_VAR: str(checkout)}, conformance) == checkout / "tests"
    assert _decision({SUITE_VAR: str(conformance)}, tmp_path) == conformance / "gymnasium" / "tests"
    assert _decision({}, conformance) == conformance / "gymnasium" / "tests"
    assert _decision({SUITE_VAR: ""}, conformance) == conformance / "gymnasium" / "tests"


def test_prepare_rewrites_only_the_async_import_of_every_file(tmp_path):
    tests = _suite(tmp_path / "Gymnasium" / "tests")
    (tests / "vector" / FILES[0]).write_text(
        "import gymnasium\nfrom gymnasium.vector import AsyncVectorEnv, SyncVectorEnv\n"
        "from gymnasium.vector import AutoresetMode\nx = AsyncVectorEnv\n")
    prepare(tests, tmp_path / "work")
    assert (tmp_path / "work" / "tests" / "vector" / FILES[0]).read_text() == (
        "import gymnasium\nfrom gymnasium.vector import SyncVectorEnv\n"
        f"{REPLACEMENT}\nfrom gymnasium.vector import AutoresetMode\nx = AsyncVectorEnv\n")
    for name in FILES[1:]:
        assert (tmp_path / "work" / "tests" / "vector" / name).read_text() == REPLACEMENT + "\n"
    assert (tests / "vector" / FILES[1]).read_text().startswith("from gymnasium.vector import")


def test_a_file_without_the_async_import_is_refused():
    with pytest.raises(AssertionError, match="got 0"):
        rewrite_import("from gymnasium.vector import SyncVectorEnv\n")
