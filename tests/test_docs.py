"""The README stays short, and every relative link of README.md and docs/*.md points to a
file that exists (its target resolved from the page that holds it) and, when it names an
``#anchor`` in a Markdown page, to a heading of that page."""

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
