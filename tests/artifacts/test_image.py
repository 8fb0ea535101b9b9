from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from PIL import Image

from image_project.artifacts.image import (
    caption_layout,
    caption_text,
    decode_checked,
    load_caption_font,
    overlay_caption,
    save_captioned_frame,
    save_captioned_jpeg,
)
from image_project.errors import ImageProjectError

BASE_COLOUR = (200, 160, 90)


def _solid(width: int = 480, height: int = 320, mode: str = "RGB") -> Image.Image:
    return Image.new("RGB", (width, height), BASE_COLOUR).convert(mode)


def _rgb(image: Image.Image, xy: tuple[int, int]) -> tuple[int, ...]:
    """A pixel of an RGB image (``getpixel`` is typed for every mode: a float, None, ...)."""
    pixel = image.getpixel(xy)
    assert isinstance(pixel, tuple)
    return pixel


def _png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def test_caption_text_format() -> None:
    assert caption_text(7, "Quiet Harbor") == "#007 - Quiet Harbor"
    assert caption_text(42, "Turquoise Citadel") == "#042 - Turquoise Citadel"
    assert caption_text(1234, "Big Number") == "#1234 - Big Number"


def test_overlay_changes_bottom_pixels_only_and_keeps_size() -> None:
    source = _solid()
    out = overlay_caption(source, caption_text(7, "Quiet Harbor"))
    assert out.size == source.size
    assert out.mode == "RGB"
    width, height = out.size
    top = [out.getpixel((x, y)) for y in range(0, height // 2, 7) for x in range(0, width, 7)]
    assert set(top) == {BASE_COLOUR}
    bottom_row = [out.getpixel((x, height - 1)) for x in range(width)]
    assert all(pixel != BASE_COLOUR for pixel in bottom_row)  # the translucent strip
    strip = [_rgb(out, (x, y)) for y in range(height - 18, height) for x in range(width)]
    assert any(sum(p) > sum(BASE_COLOUR) for p in strip)  # white text is brighter than base
    assert source.getpixel((0, height - 1)) == BASE_COLOUR  # the input is not modified


@pytest.mark.parametrize("mode", ["RGBA", "P", "L"])
def test_overlay_accepts_other_modes(mode: str) -> None:
    out = overlay_caption(_solid(mode=mode), "#001 - Any Mode")
    assert out.mode == "RGB"
    assert out.size == (480, 320)


def test_overlay_on_tiny_image_with_long_caption_keeps_size() -> None:
    out = overlay_caption(_solid(60, 12), caption_text(999, "A Very Long Title Indeed"))
    assert out.size == (60, 12)


def test_bad_explicit_font_path_raises_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "no-such-font.ttf"
    with pytest.raises(ImageProjectError, match=re.escape(str(bad))):
        load_caption_font(20, bad)
    garbage = tmp_path / "garbage.ttf"
    garbage.write_bytes(b"not a font")
    with pytest.raises(ImageProjectError, match=re.escape(str(garbage))):
        overlay_caption(_solid(), "#001 - Bad Font", font_path=garbage)


def test_default_font_loads_at_requested_size() -> None:
    font = load_caption_font(24)
    assert font.getbbox("Hg")[3] > 10


def test_save_captioned_jpeg_writes_jpeg_of_same_size(tmp_path: Path) -> None:
    target = tmp_path / "images" / "gen_image.jpg"
    size = save_captioned_jpeg(_png_bytes(_solid(300, 200)), target, "#003 - Quiet Harbor")
    assert size == (300, 200)
    with Image.open(target) as saved:
        assert saved.format == "JPEG"
        assert saved.size == (300, 200)
    assert sorted(p.name for p in target.parent.iterdir()) == ["gen_image.jpg"]


def test_save_captioned_jpeg_rejects_undecodable_bytes(tmp_path: Path) -> None:
    target = tmp_path / "bad.jpg"
    with pytest.raises(ImageProjectError, match="decode"):
        save_captioned_jpeg(b"definitely not an image", target, "#001 - Nope")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- layout at any size

SIZES = [
    (1536, 1024),
    (1024, 1536),
    (1024, 1792),
    (3840, 1280),
    (200, 600),
    (120, 400),
    (96, 288),
    (64, 64),
    (60, 12),
    (16, 16),
]
CAPTIONS = [
    caption_text(4, "Achievable Share Keeps"),
    caption_text(123, "Turquoise Citadel Beneath Winter Lanterns"),
    caption_text(1, "Supercalifragilisticexpialidocious"),
]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("text", CAPTIONS)
def test_every_caption_line_lies_inside_the_strip_and_the_image(
    size: tuple[int, int], text: str
) -> None:
    width, height = size
    layout = caption_layout(size, text)
    assert 0 <= layout.strip_top < height
    assert layout.lines and len(layout.lines) == len(layout.boxes)
    for left, top, right, bottom in layout.boxes:
        assert 0 <= left <= right <= width, (layout, size)
        assert layout.strip_top <= top <= bottom <= height, (layout, size)
    # The strip takes at most half the image (or the 18 px minimum on a tiny one).
    assert height - layout.strip_top <= max(height // 2, min(18, height))


@pytest.mark.parametrize("size", [(1024, 1536), (200, 600), (120, 400), (96, 288), (64, 64)])
def test_portrait_and_small_images_show_the_whole_caption(size: tuple[int, int]) -> None:
    text = CAPTIONS[0]
    layout = caption_layout(size, text)
    assert " ".join(layout.lines) == text  # wrapped if need be, never cut
    assert "\u2026" not in "".join(layout.lines)


def test_a_landscape_caption_stays_one_line_at_the_usual_size() -> None:
    layout = caption_layout((1536, 1024), CAPTIONS[0])
    assert layout.lines == (CAPTIONS[0],)
    assert layout.font_size == round(0.028 * 1024)


def test_what_cannot_fit_ends_in_an_ellipsis() -> None:
    assert caption_layout((16, 16), CAPTIONS[0]).lines[-1].endswith("\u2026")
    long_word = caption_layout((64, 64), CAPTIONS[2])
    assert any(line.endswith("\u2026") for line in long_word.lines)


@pytest.mark.parametrize("size", [(120, 400), (64, 64), (1024, 1536)])
def test_the_drawn_caption_changes_only_the_strip(size: tuple[int, int]) -> None:
    source = _solid(*size)
    out = overlay_caption(source, CAPTIONS[1])
    layout = caption_layout(size, CAPTIONS[1])
    width, _ = size
    above = [out.getpixel((x, y)) for y in range(layout.strip_top) for x in range(0, width, 3)]
    assert set(above) == {BASE_COLOUR}


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P"])
def test_a_frame_decoded_in_the_image_phase_saves_the_same_jpeg_as_the_bytes(
    tmp_path: Path, mode: str
) -> None:
    """The app decodes the image once, when it checks it (decode_checked), and the records
    phase captions those pixels (save_captioned_frame): the file is byte for byte the one
    save_captioned_jpeg writes from the bytes."""
    data = _png_bytes(_solid(300, 200, mode))
    from_bytes, from_frame = tmp_path / "a.jpg", tmp_path / "b.jpg"
    assert save_captioned_jpeg(data, from_bytes, "#007 - Same Bytes") == (300, 200)
    frame = decode_checked(data)
    assert save_captioned_frame(frame, from_frame, "#007 - Same Bytes") == (300, 200)
    assert from_bytes.read_bytes() == from_frame.read_bytes()


def test_decode_checked_rejects_a_truncated_image() -> None:
    data = _png_bytes(_solid(300, 200))
    with pytest.raises(ImageProjectError, match="not a readable image"):
        decode_checked(data[: len(data) // 2])
