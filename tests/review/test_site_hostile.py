"""The review site survives any file it is pointed at: a decompression bomb, a JPEG header
over a text body, an image with too many pixels, a symbolic link planted in its images/
folder, a judge id that reads as mathtext. Each bad image is skipped with its reason (on
its run page and in the summary); everything else is published. The hostile files are made
here, by the tests."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image

from image_project.cli import command as cli
from image_project.record.run import RunRecord
from image_project.review.site import build_site
from image_project.review.views import page_name
from tests.support.records import judge, run


def jpeg(path: Path, size: tuple[int, int] = (32, 24)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, "teal").save(path, format="JPEG")
    return path


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def blank_png(path: Path, width: int, height: int) -> Path:
    """A valid 1-bit PNG of ``width`` x ``height`` black pixels, compressed row by row (a
    30000x30000 one is ~109 KB on disk and 112 MB decoded)."""
    row = b"\x00" * (1 + (width + 7) // 8)  # filter byte + packed pixels
    packer = zlib.compressobj(9)
    data = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", data)
        + _chunk(b"IEND", b"")
    )
    return path


def jpeg_header_over_text(path: Path) -> Path:
    """A real JPEG's headers (through its start-of-scan segment) followed by text: Pillow
    opens and ``verify()``s it, only decoding finds there is no image."""
    real = jpeg(path, (640, 480)).read_bytes()
    sos = real.index(b"\xff\xda")
    length = struct.unpack(">H", real[sos + 2 : sos + 4])[0]
    path.write_bytes(real[: sos + 2 + length] + b"secret text, not image data\n" * 40)
    return path


def review(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], records: list[RunRecord], *extra: str
) -> tuple[int, str, str]:
    """Import ``records`` into a store and run ``image-project review`` on it (images from
    ``tmp_path/output/images``): the exit code, stdout and stderr."""
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    for record in records:
        (logs / f"{record.generation_id}_transcript.json").write_text(
            record.model_dump_json(), encoding="utf-8"
        )
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    assert cli.main(["runs", "import", str(logs), "--store", store], env={}) == 0
    capsys.readouterr()
    images = tmp_path / "output" / "images"
    args = ["review", "--store", store, "--out", str(tmp_path / "site")]
    code = cli.main([*args, "--set", f"image.generation_path={images}", *extra], env={})
    out, err = capsys.readouterr()
    return code, out, err


def page(tmp_path: Path, n: int) -> str:
    return (tmp_path / "site" / "runs" / f"run{n:03d}.html").read_text(encoding="utf-8")


def test_bad_images_are_skipped_with_their_reasons_and_the_rest_is_published(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    images = tmp_path / "output" / "images"
    planted = {
        1: jpeg(images / "good_image.jpg"),
        2: blank_png(images / "bomb_image.png", 30_000, 30_000),
        3: jpeg_header_over_text(images / "text_image.jpg"),
        4: blank_png(images / "huge_image.png", 12_000, 12_000),  # 144 megapixels
    }
    assert planted[2].stat().st_size < 200_000
    records = [
        run(n, scoring=False, image_path=str(p), title=f"Run {n}") for n, p in planted.items()
    ]
    code, out, err = review(tmp_path, capsys, records)
    assert code == 0, out + err
    site = tmp_path / "site"
    assert sorted(p.name for p in (site / "images").iterdir()) == [f"{page_name('run001')}.jpg"]
    assert "image not available" not in page(tmp_path, 1)
    assert "declares too many pixels" in page(tmp_path, 2)
    assert "not an image Pillow can read" in page(tmp_path, 3)
    assert "144,000,000 pixels, more than review.max_image_pixels" in page(tmp_path, 4)
    assert b"secret" not in b"".join(p.read_bytes() for p in site.rglob("*") if p.is_file())
    assert "3 of 4 runs' images not published (run004, run003, run002)" in out
    for n in (2, 3, 4):
        assert f"image of run{n:03d} skipped:" in err


def test_the_pixel_bound_is_a_setting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    images = tmp_path / "output" / "images"
    records = [run(1, scoring=False, image_path=str(jpeg(images / "a_image.jpg")))]
    code, out, _ = review(tmp_path, capsys, records, "--set", "review.max_image_pixels=500")
    assert code == 0
    assert "768 pixels, more than review.max_image_pixels (500)" in page(tmp_path, 1)
    assert "1 of 1 runs' images not published (run001)" in out


def test_a_symlink_planted_in_the_images_folder_is_replaced_not_written_through(
    tmp_path: Path,
) -> None:
    good = jpeg(tmp_path / "output" / "images" / "good_image.jpg")
    victim = tmp_path / "victim.txt"
    victim.write_text("do not overwrite\n", encoding="utf-8")
    site = tmp_path / "site"
    (site / "images").mkdir(parents=True)
    planted = site / "images" / f"{page_name('run001')}.jpg"
    planted.symlink_to(victim)
    (site / "runs").mkdir()
    (site / "runs" / "run001.html").symlink_to(victim)
    build_site([run(1, scoring=False, image_path=str(good))], site)
    assert victim.read_text(encoding="utf-8") == "do not overwrite\n"
    assert not planted.is_symlink() and planted.read_bytes() == good.read_bytes()
    assert not (site / "runs" / "run001.html").is_symlink()


def test_judge_ids_that_read_as_mathtext_are_drawn_as_text(tmp_path: Path) -> None:
    ids = ["$x^$", r"cost $\frac{1}{0}$", "a$b$c"]  # invalid / valid mathtext, stray dollars
    records = [
        run(n, [judge(i, {"A": 80 - k, "B": 40 + k, "C": 60}) for k, i in enumerate(ids)])
        for n in (1, 2, 3)
    ]
    index = build_site(records, tmp_path / "site")
    plots = sorted(p.name for p in (tmp_path / "site" / "plots").iterdir())
    assert len(plots) == 4 and index.is_file()
    panel = (tmp_path / "site" / "panel.html").read_text(encoding="utf-8")
    assert "cost $\\frac{1}{0}$" in panel
