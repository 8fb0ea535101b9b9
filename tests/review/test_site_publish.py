"""Nothing published by accident: the review site copies only image files the
project wrote — under the configured image folder, of an image type, decodable by Pillow —
and shows anything else as "image not available" with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from image_project.cli import command as cli
from image_project.review.site import build_site
from image_project.review.views import page_name
from tests.support.records import run


def jpeg(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 24), "teal").save(path, format="JPEG")
    return str(path)


def test_imported_transcripts_cannot_publish_other_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    images = tmp_path / "output" / "images"
    good = jpeg(images / "good_image.jpg")
    fake = images / "fake_image.jpg"  # in the folder, an image's name, not an image
    fake.write_text("secret text, not a JPEG\n", encoding="utf-8")
    note = images / "notes.txt"
    note.write_text("secret notes\n", encoding="utf-8")
    outside = jpeg(tmp_path / "private" / "holiday.jpg")  # a real image, out of the folder
    escape = str(images / ".." / ".." / "private" / "holiday.jpg")
    planted = {
        1: good,
        2: str(fake),
        3: str(note),
        4: "/etc/passwd",
        5: outside,
        6: escape,
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    for n, image_path in planted.items():
        record = run(n, scoring=False, image_path=image_path, title=f"Run {n}")
        (logs / f"{record.generation_id}_transcript.json").write_text(
            record.model_dump_json(), encoding="utf-8"
        )
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    assert cli.main(["runs", "import", str(logs), "--store", store], env={}) == 0
    site = tmp_path / "site"
    code = cli.main(
        [
            "review",
            "--store",
            store,
            "--out",
            str(site),
            "--set",
            f"image.generation_path={images}",
        ],
        env={},
    )
    out, err = capsys.readouterr()
    assert code == 0, out + err

    copied = sorted(p.name for p in (site / "images").iterdir())
    assert copied == [f"{page_name('run001')}.jpg"]
    assert (site / "images" / copied[0]).read_bytes() == Path(good).read_bytes()
    published = b"".join(p.read_bytes() for p in site.rglob("*") if p.is_file())
    assert b"root:" not in published and b"secret" not in published
    pages = {n: (site / "runs" / f"run{n:03d}.html").read_text(encoding="utf-8") for n in planted}
    assert "image not available" not in pages[1]
    assert "not an image Pillow can read" in pages[2]
    assert "not an image file type (.txt)" in pages[3]
    for n in (4, 5, 6):
        assert "image not available (not under the image folder" in pages[n], n
    gallery = (site / "index.html").read_text(encoding="utf-8")
    assert gallery.count("image not available") == 5


def test_without_folders_the_type_checks_still_apply(tmp_path: Path) -> None:
    records = [
        run(1, scoring=False, image_path=jpeg(tmp_path / "a.jpg")),
        run(2, scoring=False, image_path="/etc/passwd"),
    ]
    root = build_site(records, tmp_path / "site").parent
    assert sorted(p.name for p in (root / "images").iterdir()) == [f"{page_name('run001')}.jpg"]
    assert "not an image file type" in (root / "runs" / "run002.html").read_text(encoding="utf-8")
