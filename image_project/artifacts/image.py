"""The captioned image: ``#NNN - Title`` on a translucent strip along the bottom edge.

Layout (sizes relative to the image, so captions look alike at any resolution):

* strip height ``max(4% of H, 18 px)``, grown to fit the text plus vertical padding;
  padding ``x = max(2% of W, 10)``, ``y = max(20% of the strip, 4)``;
* font size ``max(2.8% of H, 14)``, shrunk 2 px at a time (not below 10) until the text fits
  between the side paddings;
* strip black at alpha 110; text white at alpha 230, centred, with a 1 px black alpha-160
  shadow; both alpha-composited, the result converted to RGB, the size unchanged.

The font is an explicit file when configured (it must load), else DejaVu Sans when it can
be found, else Pillow's built-in font.
"""

from __future__ import annotations

import functools
import io
import os
import sys
from pathlib import Path
from typing import TypeAlias

from PIL import Image, ImageDraw, ImageFont, UnidentifiedImageError

from image_project.artifacts.atomic import atomic_write_bytes
from image_project.errors import ImageProjectError, preview

__all__ = [
    "CaptionFont",
    "caption_text",
    "check_image",
    "load_caption_font",
    "overlay_caption",
    "save_captioned_jpeg",
]

CaptionFont: TypeAlias = ImageFont.FreeTypeFont | ImageFont.ImageFont

_STRIP_FILL = (0, 0, 0, 110)
_TEXT_FILL = (255, 255, 255, 230)
_SHADOW_FILL = (0, 0, 0, 160)
_MIN_FONT_SIZE = 10
_FONT_NAMES = ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf")


def caption_text(seq: int, title: str) -> str:
    """``#NNN - Title``: ``seq`` zero-padded to three digits (more digits print as they are)."""
    return f"#{seq:03d} - {title.strip()}"


def _font_dirs() -> list[Path]:
    import PIL

    dirs = [Path(PIL.__file__).resolve().parent, Path(PIL.__file__).resolve().parent / "fonts"]
    if sys.platform == "win32":
        dirs.append(Path(os.environ.get("WINDIR", r"C:\Windows")) / "Fonts")
    elif sys.platform == "darwin":
        dirs += [Path("/Library/Fonts"), Path.home() / "Library" / "Fonts"]
    else:
        dirs += [
            Path("/usr/share/fonts/truetype/dejavu"),
            Path("/usr/share/fonts/dejavu"),
            Path("/usr/share/fonts/TTF"),
            Path("/usr/share/fonts/dejavu-sans-fonts"),
            Path("/usr/local/share/fonts"),
            Path.home() / ".local" / "share" / "fonts",
            Path("/usr/share/fonts"),
        ]
    return dirs


@functools.cache
def _default_font_file() -> str | None:
    """The first DejaVu Sans file that loads, searched once per process."""
    candidates = [d / name for d in _font_dirs() for name in _FONT_NAMES]
    if sys.platform == "win32":
        candidates += [d / n for d in _font_dirs() for n in ("segoeui.ttf", "arial.ttf")]
    for candidate in candidates:
        if candidate.is_file():
            try:
                ImageFont.truetype(str(candidate), 12)
            except OSError:
                continue
            return str(candidate)
    for name in _FONT_NAMES:  # Pillow's own search of the platform font directories
        try:
            font = ImageFont.truetype(name, 12)
        except OSError:
            continue
        return str(font.path) if isinstance(font.path, str) else name
    return None


def load_caption_font(size: int, font_path: Path | None = None) -> CaptionFont:
    """The caption font at ``size`` px.

    An explicit ``font_path`` that cannot be loaded raises
    :class:`~image_project.errors.ImageProjectError` naming it. Without one: DejaVu Sans if
    found in Pillow's package directory or the usual system font directories, else Pillow's
    built-in font (scalable from Pillow 10.1).
    """
    if font_path is not None:
        try:
            return ImageFont.truetype(str(font_path), size)
        except (OSError, ValueError) as exc:
            raise ImageProjectError(
                f"Failed to load caption font {font_path} (image.caption_font_path): {exc}"
            ) from exc
    found = _default_font_file()
    if found is not None:
        try:
            return ImageFont.truetype(found, size)
        except OSError:
            pass
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1: the fixed-size bitmap font
        return ImageFont.load_default()


def _text_box(draw: ImageDraw.ImageDraw, text: str, font: CaptionFont) -> tuple[int, int, int, int]:
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    return int(left), int(top), int(right), int(bottom)


def overlay_caption(image: Image.Image, text: str, *, font_path: Path | None = None) -> Image.Image:
    """A copy of ``image`` (RGB, same size) with ``text`` on a bottom strip."""
    width, height = image.size
    base = image.convert("RGBA")
    strip_h = max(round(0.04 * height), 18)
    pad_x = max(round(0.02 * width), 10)
    pad_y = max(round(0.2 * strip_h), 4)
    size = max(round(0.028 * height), 14)

    measure = ImageDraw.Draw(Image.new("RGBA", (1, 1)))
    font = load_caption_font(size, font_path)
    box = _text_box(measure, text, font)
    while box[2] - box[0] > width - 2 * pad_x and size > _MIN_FONT_SIZE:
        size = max(_MIN_FONT_SIZE, size - 2)
        font = load_caption_font(size, font_path)
        box = _text_box(measure, text, font)
    text_w, text_h = box[2] - box[0], box[3] - box[1]
    strip_h = min(max(strip_h, text_h + 2 * pad_y), height)
    strip_top = height - strip_h

    strip = Image.new("RGBA", base.size, (0, 0, 0, 0))
    ImageDraw.Draw(strip).rectangle((0, strip_top, width, height), fill=_STRIP_FILL)
    base = Image.alpha_composite(base, strip)

    x = (width - text_w) // 2 - box[0]
    y = strip_top + (strip_h - text_h) // 2 - box[1]
    layer = Image.new("RGBA", base.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    draw.text((x + 1, y + 1), text, font=font, fill=_SHADOW_FILL)
    draw.text((x, y), text, font=font, fill=_TEXT_FILL)
    return Image.alpha_composite(base, layer).convert("RGB")


def _why_undecodable(exc: Exception) -> str:
    """Why Pillow could not decode some bytes, without its ``<_io.BytesIO object at 0x…>``."""
    if isinstance(exc, UnidentifiedImageError):
        return "not in any image format Pillow reads"
    return f"{type(exc).__name__}: {exc}"


def _describe(data: bytes) -> str:
    return f"{len(data):,} bytes, starting {preview(bytes(data[:16]))}"


def check_image(data: bytes) -> tuple[int, int]:
    """Decode ``data`` completely (any format Pillow reads), as saving it will; returns its
    ``(width, height)``. Bytes that are not a whole image (not an image at all, truncated, a
    bad checksum, a decompression bomb) raise :class:`~image_project.errors.ImageProjectError`
    saying why."""
    try:
        with Image.open(io.BytesIO(data)) as probe:
            probe.verify()  # the container: chunk order and checksums
        with Image.open(io.BytesIO(data)) as image:
            image.load()  # the pixels: a truncated or corrupt stream fails here
            width, height = image.size
    except Exception as exc:  # Pillow raises many types for bad input (SyntaxError, EOFError...)
        raise ImageProjectError(
            f"not a readable image ({_describe(data)}): {_why_undecodable(exc)}"
        ) from exc
    return width, height


def save_captioned_jpeg(
    image_bytes: bytes,
    path: str | os.PathLike[str],
    caption: str,
    *,
    font_path: Path | None = None,
    quality: int = 95,
) -> tuple[int, int]:
    """Decode ``image_bytes`` (any format Pillow reads), caption it, save a JPEG atomically.

    Returns ``(width, height)``, the same as the decoded image. Bytes that are not an image
    raise :class:`~image_project.errors.ImageProjectError`; nothing is written then.
    """
    if not caption.strip():
        raise ValueError("caption must be a non-empty string")
    try:
        with Image.open(io.BytesIO(image_bytes)) as decoded:
            frame = decoded.convert("RGBA")
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise ImageProjectError(
            f"Cannot decode the image data for {os.fspath(path)} "
            f"({_describe(image_bytes)}): {_why_undecodable(exc)}"
        ) from exc
    captioned = overlay_caption(frame, caption, font_path=font_path)
    buffer = io.BytesIO()
    captioned.save(buffer, format="JPEG", quality=quality)
    atomic_write_bytes(path, buffer.getvalue())
    return captioned.size
