"""The docs name tests as evidence; every name must still be a test, so a test renamed or moved
to another file fails here until the docs follow.

In docs/*.md, the lab notebook's docs/lab/*.md and README.md: a path ``tests/test_x.py`` must
exist; ``test_x.py::test_y`` must be a test that tests/test_x.py defines; a bare ``test_y`` in
backticks must be a test some file of tests/ defines (``test_y*`` or ``test_y...``: some test's
name starts so). The upstream suites we run are not ours: gymnasium's tests named in the
allowlist of tests/test_gymnasium_suite.py and SB3's file (``SUITE`` of tests/test_sb3_suite.py)
are known; docs/sb3.md lists SB3's own tests by bare name, so that page's bare names are not
checked.

Links between these pages must land too: a link ``[x](page.md#anchor)`` (or ``(#anchor)`` within
a page), or ``docs/page.md#anchor`` (``docs/lab/page.md#anchor``) in the docstrings and
comments of the code, the scripts and the tests, needs the page and a heading whose anchor, as
GitHub makes it, is ``anchor``; so a heading renamed fails here until every link to it follows.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "lab").glob("*.md")),
        ROOT / "README.md"]
DOC_IDS = [str(p.relative_to(ROOT)) for p in DOCS]

PATH = re.compile(r"\btests/(test_\w+\.py)")
QUALIFIED = re.compile(r"(?<!\w)(test_\w+\.py)::(test_\w+)")
BARE = re.compile(r"`(test_\w+)(?!\w|\.py)(\*|\.\.\.)?")
DEF = re.compile(r"^\s*def (test_\w+)\(", re.MULTILINE)
UPSTREAM = re.compile(r"^\s+\"(test_\w+\.py::test_\w+)", re.MULTILINE)
SB3_SUITE = re.compile(r"^SUITE = \"tests/(test_\w+\.py)\"", re.MULTILINE)
#: Pages that name an upstream suite's tests by bare name.
BARE_UNCHECKED = {"docs/sb3.md"}


def defined_tests(folder: Path) -> dict[str, set[str]]:
    """``{file name: the test functions it defines}`` for every tests/test_*.py."""
    return {p.name: set(DEF.findall(p.read_text())) for p in folder.glob("test_*.py")}


def upstream_tests(folder: Path) -> set[str]:
    """gymnasium's own tests that docs/gymnasium.md names (the suite's ALLOWLIST keys), and the
    file of SB3's tests that docs/sb3.md names."""
    gymnasium = UPSTREAM.findall((folder / "test_gymnasium_suite.py").read_text())
    return {*gymnasium, *SB3_SUITE.findall((folder / "test_sb3_suite.py").read_text())}


def dangling(text: str, tests: dict[str, set[str]], upstream: set[str],
             bare: bool = True) -> list[str]:
    """Every reference in ``text`` to a test file or test that ``tests`` does not hold."""
    every = set().union(*tests.values())
    found = [f"tests/{name}" for name in PATH.findall(text)
             if name not in tests and name not in upstream]
    for file, name in QUALIFIED.findall(text):
        if f"{file}::{name}" not in upstream and name not in tests.get(file, ()):
            found.append(f"{file}::{name}")
    for name, prefix in BARE.findall(text) if bare else ():
        ok = any(t.startswith(name) for t in every) if prefix else name in every
        if not ok:
            found.append(name + prefix)
    return found


FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^#{1,6} +(.+?) *#* *$", re.MULTILINE)
HTML_ANCHOR = re.compile(r"<a (?:id|name)=\"([^\"]+)\"")
LINK = re.compile(r"\]\((?P<page>[^()#\s]*\.md)?#(?P<anchor>[^()\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of ``markdown`` (code blocks left out): lower case,
    punctuation dropped, each space a hyphen; a repeated anchor gets ``-1``, ``-2``... With
    them, the ids of explicit ``<a id="...">`` anchors."""
    seen: Counter[str] = Counter()
    text = FENCE.sub("", markdown)
    found = set(HTML_ANCHOR.findall(text))
    for heading in HEADING.findall(text):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return found


def broken_links(doc: Path, text: str) -> list[str]:
    """Every ``page.md#anchor`` link of ``text`` (in ``doc``) whose page or anchor is missing."""
    found = []
    for match in LINK.finditer(FENCE.sub("", text)):
        target = (doc.parent / match["page"]).resolve() if match["page"] else doc
        if not target.is_file() or match["anchor"] not in anchors(target.read_text()):
            found.append(f"{match['page'] or ''}#{match['anchor']}")
    return found


@pytest.mark.parametrize("doc", DOCS, ids=DOC_IDS)
def test_every_link_to_a_heading_lands(doc):
    found = broken_links(doc, doc.read_text())
    assert not found, f"{doc.name} links to headings that do not exist: {found}"


CODE_LINK = re.compile(r"\b(docs/(?:lab/)?\w+\.md)#([\w-]+)")


def test_every_heading_the_code_names_exists():
    """``docs/page.md#anchor`` in a docstring or comment of the package, the scripts, the
    examples or the tests (this file's own examples aside) must land as a link would."""
    sources = [p for folder in ("vecsample", "experiments", "examples", "tests")
               for p in sorted((ROOT / folder).rglob("*.py")) if p != Path(__file__).resolve()]
    found = [f"{p.relative_to(ROOT)}: {page}#{anchor}" for p in sources
             for page, anchor in CODE_LINK.findall(p.read_text())
             if not (ROOT / page).is_file() or anchor not in anchors((ROOT / page).read_text())]
    assert not found, f"these name headings that do not exist: {found}"


def test_a_link_to_a_renamed_heading_is_caught(tmp_path):
    (tmp_path / "b.md").write_text("# B\n\n## Results (issue 18)\n\n```\n# not a heading\n```\n")
    page = tmp_path / "a.md"
    text = ("## U × E: the `step`'s cost\n## Twice\n## Twice\n<a id=\"short\"></a>\n"
            "[ok](b.md#results-issue-18) [ok](#u--e-the-steps-cost) [ok](#twice-1) [ok](#short) "
            "[gone](b.md#results) [code](b.md#not-a-heading) [no page](c.md#b) [here](#nope)")
    page.write_text(text)
    assert broken_links(page, text) == ["b.md#results", "b.md#not-a-heading", "c.md#b", "#nope"]


@pytest.mark.parametrize("doc", DOCS, ids=DOC_IDS)
def test_every_test_the_docs_name_exists(doc):
    tests, upstream = defined_tests(ROOT / "tests"), upstream_tests(ROOT / "tests")
    # tests/test_contract.py runs SamplerContract's test methods by subclassing it.
    contract = ROOT / "vecsample/testing/contract.py"
    tests["test_contract.py"] |= set(DEF.findall(contract.read_text()))
    bare = str(doc.relative_to(ROOT)) not in BARE_UNCHECKED
    found = dangling(doc.read_text(), tests, upstream, bare=bare)
    assert not found, f"{doc.name} names tests that do not exist: {found}"


def test_a_dangling_name_is_caught():
    tests = {"test_a.py": {"test_one", "test_two_things"}, "test_b.py": {"test_three"}}
    upstream = {"test_vector_env.py::test_final_obs_info"}
    good = ("`test_a.py::test_one`, `test_three[x]`, `test_two_*`, `test_two...`, tests/test_b.py"
            ", `test_vector_env.py::test_final_obs_info[Async]`, `test_a.py`")
    assert dangling(good, tests, upstream) == []
    bad = ("`test_a.py::test_three`, `test_c.py::test_one`, `test_four`, `test_five_*`, "
           "tests/test_c.py")
    assert dangling(bad, tests, upstream) == ["tests/test_c.py", "test_a.py::test_three",
                                              "test_c.py::test_one", "test_four", "test_five_*"]
