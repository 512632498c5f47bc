"""gymnasium's own vector tests pass against ``vecsample.VectorEnv``, except an explicit allowlist.

``../shared/conformance/run-gymnasium.sh`` (next to the repository, in CI too) copies gymnasium's
four vector test files and makes every test build ``vecsample.VectorEnv`` where it builds
``AsyncVectorEnv``, with the same arguments. The run must pass every test except those in
``ALLOWLIST``, each with its reason; docs/gymnasium.md shows the same list (a test checks it). An
allowlisted test that starts to pass fails the run too, so the list only shrinks.

The checker (``problems``) is a plain function of the junit report, tested on synthetic reports.
"""

from __future__ import annotations

import os
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT.parent / "shared" / "conformance" / "run-gymnasium.sh"
DOC = ROOT / "docs" / "gymnasium.md"

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
    if not SCRIPT.is_file():
        pytest.fail(f"gymnasium's conformance suite is expected at {SCRIPT} (the shared/ folder "
                    f"next to the repository, as CI has it); put it there to run this test.")
    report = tmp_path / "gymnasium.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}  # this checkout
    run = subprocess.run(["bash", str(SCRIPT), f"--junitxml={report}", "-q", "--tb=short"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=800)
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
