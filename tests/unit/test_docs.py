"""The documentation held to the code: every diagnosis code has its section in docs/diagnoses.md,
and every link the README makes into docs/ names a page and heading that exist (mkdocs build
--strict checks the links between the pages themselves, in CI)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from draconf.reporting.diagnoses import DIAGNOSES

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def headings(page: Path) -> list[str]:
    return [m.group(2).strip() for m in re.finditer(r"^(#{1,6}) (.+)$", page.read_text(), re.M)]


def slug(heading: str) -> str:
    """Python-Markdown's toc slug, as mkdocs makes anchors.

    >>> slug("The run's verdict")
    'the-runs-verdict'
    >>> slug("RBAC the suite needs")
    'rbac-the-suite-needs'
    """
    text = re.sub(r"`", "", heading)
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def test_every_diagnosis_code_has_a_section():
    sections = set(headings(DOCS / "diagnoses.md"))
    missing = [code for code in DIAGNOSES if code not in sections]
    assert not missing, f"add a '### code' section to docs/diagnoses.md for: {', '.join(missing)}"


def test_the_diagnoses_page_names_no_unknown_code():
    text = (DOCS / "diagnoses.md").read_text()
    unknown = [h for h in re.findall(r"^### (.+)$", text, re.M) if h not in DIAGNOSES]
    assert not unknown, f"sections for codes DIAGNOSES does not have: {', '.join(unknown)}"


README_LINKS = re.findall(r"\]\((docs/[^)#\s]+)(?:#([^)\s]+))?\)", (REPO / "README.md").read_text())


@pytest.mark.parametrize("target, anchor", README_LINKS, ids=[f"{t}#{a}" for t, a in README_LINKS])
def test_the_readme_links_into_the_docs_resolve(target, anchor):
    page = REPO / target
    assert page.is_file(), f"README links to {target}, which does not exist"
    if anchor:
        assert anchor in {slug(h) for h in headings(page)}, f"{target} has no heading #{anchor}"


def test_every_page_is_in_the_site_navigation():
    nav = (REPO / "mkdocs.yml").read_text()
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert [p for p in pages if p not in nav] == []
