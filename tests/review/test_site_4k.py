"""The review site and a run's 4K image, without a browser: the file is copied into the
site beside the image and linked from the run page and the gallery; a 4K file that is gone
is said, not linked."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from image_project.record.run import RunRecord
from image_project.record.upscale import UpscaleRecord
from image_project.review.site import build_site
from image_project.review.views import page_name
from tests.support.records import run


def with_4k(tmp_path: Path, n: int, *, present: bool) -> RunRecord:
    image = tmp_path / "out" / f"run{n}.jpg"
    big = tmp_path / "out" / f"run{n}_image_4k.jpg"
    image.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 24), "teal").save(image, format="JPEG")
    if present:
        Image.new("RGB", (64, 48), "teal").save(big, format="JPEG")
    upscale = UpscaleRecord(
        path=str(big),
        bytes=1234,
        size="64x48",
        source_size="32x24",
        method="lanczos_resize",
    )
    return run(n, scoring=False, image_path=str(image), title=f"Run {n}").model_copy(
        update={"upscale": upscale}
    )


def test_the_4k_image_is_copied_shown_and_linked(tmp_path: Path) -> None:
    records = [with_4k(tmp_path, 2, present=True), with_4k(tmp_path, 1, present=False)]
    root = build_site(records, tmp_path / "site").parent
    shown = page_name("run002")
    copied = root / "images" / f"{shown}.4k.jpg"
    assert copied.read_bytes() == (tmp_path / "out" / "run2_image_4k.jpg").read_bytes()
    page = (root / "runs" / f"{shown}.html").read_text(encoding="utf-8")
    assert f'<a class="download" href="../images/{shown}.4k.jpg">64x48 JPEG</a>' in page
    assert "(lanczos_resize from 32x24, 1,234 bytes)" in page
    gallery = (root / "index.html").read_text(encoding="utf-8")
    assert f'href="images/{shown}.4k.jpg">4K (64x48)</a>' in gallery

    gone = (root / "runs" / f"{page_name('run001')}.html").read_text(encoding="utf-8")
    assert "image file not found: " in gone and "run1_image_4k.jpg" in gone
    assert '_4k.jpg"' not in gone  # nothing links to a file that is not there
    assert not (root / "images" / f"{page_name('run001')}_4k.jpg").exists()
