"""The README stays short; every relative link of README.md and docs/*.md points to a file
that exists (its target resolved from the page that holds it) and, when it names an
``#anchor`` in a Markdown page, to a heading of that page; and every test a page names (a
file, a file's test, a test's or a test module's name) exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# [text](target) and ![alt](target); the target ends at whitespace or the closing bracket.
_LINK = re.compile(r"!?\[[^\]\n]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`[^`\n]*`")
_HEADING = re.compile(r"^#{1,6}[ \t]+(?P<text>.+?)[ \t]*#*[ \t]*$", re.MULTILINE)


def relative_links(text: str) -> list[str]:
    """The relative link targets of Markdown ``text`` (code blocks and spans left out),
    each with its ``#anchor`` if it has one; a link to an anchor of the same page is
    ``#anchor``."""
    text = _CODE.sub("", _FENCE.sub("", text))
    return [
        m.group("target")
        for m in _LINK.finditer(text)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", m.group("target"))  # https:, mailto:
    ]


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of Markdown ``text`` (fenced blocks left out):
    the heading's text lower-cased, code marks and every character but letters, digits,
    ``_``, ``-`` and spaces dropped, spaces made ``-``; a repeated anchor gets ``-1``,
    ``-2``, ..."""
    seen: dict[str, int] = {}
    out = set()
    for m in _HEADING.finditer(_FENCE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", m.group("text").strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` whose file does not exist, or whose ``#anchor`` is no
    heading of the Markdown page it names."""
    broken = []
    for target in relative_links(page.read_text(encoding="utf-8")):
        path, _, anchor = target.partition("#")
        file = page.parent / path if path else page
        if not file.exists() or (
            anchor
            and file.suffix == ".md"
            and anchor not in anchors(file.read_text(encoding="utf-8"))
        ):
            broken.append(target)
    return broken


def test_the_readme_has_at_most_300_lines() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move a topic to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_points_to_a_file_that_exists(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_check_sees_a_broken_link_and_skips_code_and_urls(tmp_path: Path) -> None:
    """Control: a link to a missing file is reported, one in code or to a URL is not."""
    (tmp_path / "there.md").write_text("# Part\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Top\n[ok](there.md#part) ![img](missing.png) [web](https://example.org/x) [here](#top)\n"
        "`[code](gone.md)`\n```\n[fenced](gone.md)\n```\n[gone](sub/gone.md)\n",
        encoding="utf-8",
    )
    assert broken_links(page) == ["missing.png", "sub/gone.md"]


def test_the_link_check_sees_an_anchor_that_is_no_heading(tmp_path: Path) -> None:
    """Control: an anchor of another page or of the same one must be one of its headings'
    anchors as GitHub spells them; a ``#`` line in a fenced block is no heading."""
    (tmp_path / "there.md").write_text(
        "# Rounds (multi-round selection)\n## Built-in rubrics (`rubrics.py`)\n## Notes\n"
        "## Notes\n```bash\n# not a heading\n```\n",
        encoding="utf-8",
    )
    page = tmp_path / "page.md"
    page.write_text(
        "## Isolation (FR7)\n"
        "[a](there.md#rounds-multi-round-selection) [b](there.md#built-in-rubrics-rubricspy)\n"
        "[c](there.md#notes-1) [d](#isolation-fr7) [e](there.md#not-a-heading)\n"
        "[f](there.md#rounds) [g](#isolation)\n",
        encoding="utf-8",
    )
    assert broken_links(page) == ["there.md#not-a-heading", "there.md#rounds", "#isolation"]


_TEST_PATH = re.compile(r"\btests/[\w/]+\.py(?:::(?P<name>\w+))?")
_TEST_NAME = re.compile(r"`(?P<name>test_\w+)(?P<module>\.py)?")


def defined_tests(root: Path) -> dict[str, set[str]]:
    """``{test file (relative to root): the test functions and classes it defines}``."""
    defined = re.compile(r"^\s*(?:async\s+)?def (test_\w+)|^class (Test\w+)", re.MULTILINE)
    return {
        path.relative_to(root).as_posix(): {
            a or b for a, b in defined.findall(path.read_text(encoding="utf-8"))
        }
        for path in (root / "tests").rglob("*.py")
    }


def missing_tests(text: str, names: dict[str, set[str]]) -> list[str]:
    """The tests ``text`` names that do not exist: a ``tests/...py`` file, a
    ``tests/...py::test_name`` in its file, a backticked ``test_name`` in any test file, a
    backticked ``test_module.py`` anywhere under ``tests/``."""
    anywhere = set().union(*names.values())
    modules = {path.rsplit("/", 1)[-1] for path in names}
    found = []
    for m in _TEST_PATH.finditer(text):
        path, name = m.group(0).split("::")[0], m.group("name")
        if path not in names or (name and name not in names[path]):
            found.append(m.group(0))
    for m in _TEST_NAME.finditer(text):
        name = m.group("name")
        if (name + ".py" not in modules) if m.group("module") else (name not in anywhere):
            found.append(name + (m.group("module") or ""))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_test_a_page_names_exists(page: Path) -> None:
    assert missing_tests(page.read_text(encoding="utf-8"), defined_tests(REPO)) == []


def test_the_test_name_check_sees_a_missing_file_function_and_name() -> None:
    """Control: each kind of reference to a test that is not there is reported."""
    names = {"tests/test_a.py": {"test_one"}}
    text = (
        "`tests/test_a.py::test_one`, `tests/test_a.py`, `test_one`, `test_a.py`; "
        "`tests/test_b.py`, `tests/test_a.py::test_two`, `test_three`, `test_c.py`"
    )
    assert missing_tests(text, names) == [
        "tests/test_b.py",
        "tests/test_a.py::test_two",
        "test_three",
        "test_c.py",
    ]
