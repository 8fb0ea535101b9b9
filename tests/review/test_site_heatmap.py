"""The run page's heatmap spans each table's own range of scores: its lowest score is the
lightest blue and its highest the darkest, so 63 and 97 in one table are as far apart as
the colours go (on a fixed 0..100 scale they were a few shades apart); the page says which
scores the ends stand for. A table whose scores are all equal is the middle blue; a
missing score stays grey."""

from __future__ import annotations

import re
from pathlib import Path

from image_project.review.site import build_site
from image_project.review.views import heat_style
from tests.support.records import judge, run

CELL = re.compile(r'<td(?: class="median")? style="([^"]*)">([^<]*)</td>')
LIGHTNESS = re.compile(r"hsl\(212, 70%, (\d+)%\)")


def lightness(style: str) -> int:
    found = LIGHTNESS.search(style)
    assert found is not None, style
    return int(found.group(1))


def cells(page: Path) -> dict[str, str]:
    return {text: style for style, text in CELL.findall(page.read_text(encoding="utf-8"))}


def test_the_heatmap_spans_the_tables_lowest_to_highest_score(tmp_path: Path) -> None:
    record = run(
        1,
        [judge("strict", {"A": 63, "B": 97, "C": 80}), judge("warm", {"A": 70, "B": 90, "C": 75})],
    )
    root = build_site([record], tmp_path / "site").parent
    page = root / "runs" / "run001.html"
    shown = cells(page)
    assert lightness(shown["63"]) == 96  # the lightest blue
    assert lightness(shown["97"]) == 36  # the darkest
    assert 36 < lightness(shown["90"]) < lightness(shown["80"]) < lightness(shown["70"]) < 96
    assert "#ffffff" in shown["97"] and "#111111" in shown["63"]  # legible on either end
    assert "Colours: lightest = 63, darkest = 97: this table" in page.read_text(encoding="utf-8")


def test_equal_scores_are_the_middle_blue_and_a_missing_score_grey() -> None:
    assert lightness(heat_style(71, (71.0, 71.0))) == 66
    assert heat_style(None, (63.0, 97.0)) == "background-color: #eeeeee; color: #888888"
    assert lightness(heat_style(40, (63.0, 97.0))) == 96  # outside the scale: its end
