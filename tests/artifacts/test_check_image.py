"""check_image: the image phase's check that the bytes a backend returned are a whole image,
with a message that says what they are (never Pillow's ``<_io.BytesIO object at 0x…>``)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from image_project.artifacts.image import check_image, save_captioned_jpeg
from image_project.errors import ImageProjectError


def encoded(fmt: str, size: tuple[int, int] = (48, 32)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 120, 40)).save(buffer, format=fmt)
    return buffer.getvalue()


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP"])
def test_a_whole_image_in_any_format_pillow_reads_passes(fmt: str) -> None:
    assert check_image(encoded(fmt)) == (48, 32)


PNG = encoded("PNG", (64, 64))


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "not in any image format Pillow reads"),
        (b"<html><body>502 Bad Gateway</body></html>", "not in any image format Pillow reads"),
        (b'{"error": "quota"}', "not in any image format Pillow reads"),
        (PNG[: len(PNG) - 20], "OSError: "),
        (PNG[:60], "OSError: "),
    ],
    ids=["empty", "html", "json", "png_without_its_end", "png_header_only"],
)
def test_bytes_that_are_not_a_whole_image_are_refused_saying_what_they_are(
    data: bytes, why: str
) -> None:
    with pytest.raises(ImageProjectError) as caught:
        check_image(data)
    message = str(caught.value)
    assert message.startswith(f"not a readable image ({len(data):,} bytes, starting "), message
    assert why in message
    assert "BytesIO" not in message and " at 0x" not in message


def test_saving_undecodable_bytes_says_what_they_are_too(tmp_path: Path) -> None:
    with pytest.raises(ImageProjectError) as caught:
        save_captioned_jpeg(b"<html>", tmp_path / "x.jpg", "#001 - X")
    message = str(caught.value)
    assert "not in any image format Pillow reads" in message and "BytesIO" not in message
