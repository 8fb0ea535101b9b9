"""The review site's files, without a browser: every page type is written, every relative
link and image resolves inside the site, images are copied files (never inlined), text is
escaped, failed runs show their error, and the command reports where the site is."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from PIL import Image

from image_project.record.run import RunRecord
from image_project.review.site import build_site, review_command
from image_project.review.source import records_from_transcripts
from image_project.review.views import page_name
from tests.support.records import judge, run

LINK = re.compile(r'(?:href|src)="([^"]+)"')


def jpeg(path: Path, colour: str = "teal") -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 24), colour).save(path, format="JPEG")
    return str(path)


def sample(tmp_path: Path) -> list[RunRecord]:
    a = {"A": 80, "B": 20, "C": 50}
    return [
        run(
            3,
            [judge("strict", a), judge("warm", None, status="refused")],
            image_path=jpeg(tmp_path / "out" / "three.jpg"),
            concepts=["<script>alert(1)</script>", "harbor"],
            title="Harbor & <Light>",
        ),
        run(2, [judge("strict", a)], failed=True),
        run(1, scoring=False, image_path=str(tmp_path / "out" / "gone.jpg"), title="Gone"),
    ]


def test_every_page_is_written_and_every_link_resolves(tmp_path: Path) -> None:
    records = sample(tmp_path)
    index = build_site(records, tmp_path / "site")
    root = index.parent
    pages = [index, root / "panel.html", *(root / "runs").glob("*.html")]
    assert len(pages) == 5
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert "data:image" not in html and "http://" not in html and "https://" not in html
        for link in LINK.findall(html):
            if link == "data:,":  # the empty favicon
                continue
            assert (page.parent / link).resolve().is_file(), (page.name, link)
    copied = root / "images" / f"{page_name('run003')}.jpg"
    assert copied.read_bytes() == Path(records[0].image_path or "").read_bytes()
    plots = sorted(p.name for p in (root / "plots").glob("*.png"))
    assert plots == [
        "position_bias.png",
        "rank_agreement.png",
        "score_distributions.png",
        "status_counts.png",
    ]
    for plot in plots:
        with Image.open(root / "plots" / plot) as image:
            assert image.format == "PNG" and image.width > 100


def test_text_is_escaped_and_errors_and_missing_images_are_shown(tmp_path: Path) -> None:
    root = build_site(sample(tmp_path), tmp_path / "site").parent
    gallery = (root / "index.html").read_text(encoding="utf-8")
    assert "<script>" not in gallery and "&lt;script&gt;alert(1)&lt;/script&gt;" in gallery
    assert "Harbor &amp; &lt;Light&gt;" in gallery
    assert "failed: ServerError in scoring" in gallery
    assert "image file not found: " in gallery
    failed = (root / "runs" / "run002.html").read_text(encoding="utf-8")
    assert "ServerError: judge died" in failed and "Run failed" in failed
    scored = (root / "runs" / "run003.html").read_text(encoding="utf-8")
    assert scored.count('<td class="status-refused">refused</td>') == 1
    assert "refused from warm" in scored
    # strict scored all three cards; warm refused: its column is grey "-" for each card.
    assert scored.count("background-color: #eeeeee") == 3 + 3  # warm cells + no medians


def test_rebuilding_reuses_copied_images_and_reports_progress(tmp_path: Path) -> None:
    records = sample(tmp_path)
    lines: list[str] = []
    build_site(records, tmp_path / "site", progress=lines.append)
    assert [line.split(":")[0] for line in lines] == [
        "image 1/3",
        "image 2/3",
        "image 3/3",
        "page 1/3",
        "page 2/3",
        "page 3/3",
        "plot 1/4",
        "plot 2/4",
        "plot 3/4",
        "plot 4/4",
    ]
    copied = tmp_path / "site" / "images" / "run003.jpg"
    before = copied.stat().st_mtime_ns
    build_site(records, tmp_path / "site")
    assert copied.stat().st_mtime_ns == before


def test_relative_image_paths_resolve_against_the_image_base(tmp_path: Path) -> None:
    jpeg(tmp_path / "work" / "output" / "x.jpg")
    record = run(1, scoring=False, image_path="output/x.jpg")
    root = build_site([record], tmp_path / "site", image_base=tmp_path / "work").parent
    assert (root / "images" / "run001.jpg").is_file()
    assert 'src="images/run001.jpg"' in (root / "index.html").read_text(encoding="utf-8")


def test_review_command_takes_the_last_n_and_says_where(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    records = sample(tmp_path)
    assert review_command(records, tmp_path / "site", 2, out=out, err=err) == 0
    assert f"Review site: {(tmp_path / 'site' / 'index.html').resolve()}" in out.getvalue()
    assert "Writing the review site of 2 runs" in err.getvalue()
    assert sorted(p.name for p in (tmp_path / "site" / "runs").glob("*.html")) == [
        "run002.html",
        "run003.html",
    ]
    assert review_command([], tmp_path / "empty", None, out=out, err=err) == 1
    assert "No runs to review." in out.getvalue()
    with pytest.raises(ValueError, match="--last: got 0, must be an int >= 1"):
        review_command(records, tmp_path / "site", 0, out=out, err=err)


def test_records_from_transcripts_are_newest_first(tmp_path: Path) -> None:
    paths = []
    for n in (2, 5, 1):
        path = tmp_path / f"{n}_transcript.json"
        path.write_text(run(n, scoring=False).model_dump_json(), encoding="utf-8")
        paths.append(path)
    assert [r.generation_id for r in records_from_transcripts(paths)] == [
        "run005",
        "run002",
        "run001",
    ]
