"""The captioned image: ``#NNN - Title`` on a translucent strip along the bottom edge.

Layout (sizes relative to the image, so captions look alike at any resolution;
:func:`caption_layout` computes it):

* strip height ``max(4% of H, 18 px)`` (at most H), grown to fit the text plus vertical
  padding; padding ``x = max(2% of W, 10)`` but at most W/8, ``y = max(20% of the strip, 4)``;
* font size ``max(2.8% of H, 14)``, shrunk 2 px at a time (not below 10; on an image under
  60 px tall not below H/6, at least 6) until the text fits on one line between the side
  paddings;
* a caption that still does not fit (a narrow portrait, a tiny image) is wrapped at word
  boundaries, shrinking 1 px at a time down to 6 px until the lines fit into half the image
  height; if even that fails, the last line that fits ends in an ellipsis (as does a single
  word too wide for the image). Every glyph stays inside the image;
* strip black at alpha 110; text white at alpha 230, centred, with a black alpha-160
  shadow offset by 1 px per 32 px of font size (at least 1 px: 1 px up to a 47 px font);
  both alpha-composited, the result converted to RGB, the size unchanged.

Because every size is a fraction of the image, the same caption on the same picture at
another resolution (the 4K image, :mod:`.upscale`) covers the same share of it and reads
the same.

The font is an explicit file when configured (it must load), else DejaVu Sans when it can
be found, else Pillow's built-in font.
"""

from __future__ import annotations

import functools
import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from PIL import Image, ImageDraw, ImageFont, UnidentifiedImageError

from image_project.artifacts.atomic import atomic_write_bytes
from image_project.errors import ImageProjectError, InputFileError, preview

CaptionFont: TypeAlias = ImageFont.FreeTypeFont | ImageFont.ImageFont

_STRIP_FILL = (0, 0, 0, 110)
_TEXT_FILL = (255, 255, 255, 230)
_SHADOW_FILL = (0, 0, 0, 160)
_MIN_FONT_SIZE = 10
_TINY_FONT_SIZE = 6
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
    :class:`~image_project.errors.InputFileError` naming the file once and the config key
    once. Without one: DejaVu Sans if found in Pillow's package directory or the usual system
    font directories, else Pillow's built-in font (scalable from Pillow 10.1).
    """
    if font_path is not None:
        try:
            return ImageFont.truetype(str(font_path), size)
        except (OSError, ValueError) as exc:
            reason = str(exc) if Path(font_path).exists() else "no such file"
            raise InputFileError(
                font_path,
                f"image.caption_font_path cannot be loaded as a TrueType/OpenType font ({reason})",
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


@dataclass(frozen=True)
class CaptionLayout:
    """Where the caption goes on a ``width`` x ``height`` image: the strip from ``strip_top``
    to the bottom edge, the font size, and each line with the box its ink covers
    (``left, top, right, bottom`` in image pixels). Every box lies inside the strip and
    between the side paddings, so no character is cut off."""

    font_size: int
    strip_top: int
    lines: tuple[str, ...]
    boxes: tuple[tuple[int, int, int, int], ...]
    origins: tuple[tuple[int, int], ...]

    @property
    def shadow(self) -> int:
        """The shadow's offset in pixels, right and down: it grows with the font."""
        return max(1, round(self.font_size / 32))


def _width(draw: ImageDraw.ImageDraw, text: str, font: CaptionFont) -> int:
    left, _, right, _ = _text_box(draw, text, font)
    return right - left


def _ellipsize(draw: ImageDraw.ImageDraw, text: str, font: CaptionFont, room: int) -> str:
    """``text``, cut at the end and marked with an ellipsis until it fits ``room`` pixels
    (empty when not even the ellipsis fits)."""
    if _width(draw, text, font) <= room:
        return text
    kept = text
    while kept and _width(draw, kept.rstrip() + "\u2026", font) > room:
        kept = kept[:-1]
    return kept.rstrip() + "\u2026" if kept.strip() else ""


def _wrap(draw: ImageDraw.ImageDraw, text: str, font: CaptionFont, room: int) -> list[str]:
    """Greedy word wrap to ``room`` pixels (a word wider than the room gets a line of its
    own, still too wide: the caller ellipsizes it)."""
    lines: list[str] = []
    for word in text.split():
        candidate = f"{lines[-1]} {word}" if lines else word
        if lines and _width(draw, candidate, font) <= room:
            lines[-1] = candidate
        else:
            lines.append(word)
    return lines


@dataclass(frozen=True)
class _Fit:
    font: CaptionFont
    size: int
    lines: tuple[str, ...]
    line_h: int


def _line_height(draw: ImageDraw.ImageDraw, font: CaptionFont) -> int:
    if isinstance(font, ImageFont.FreeTypeFont):
        ascent, descent = font.getmetrics()
        return max(ascent + descent, 1)
    return max(_text_box(draw, "Hg", font)[3], 1)


def _fit(
    draw: ImageDraw.ImageDraw,
    text: str,
    sizes: tuple[int, int, int],
    room: int,
    max_h: int,
    font_path: Path | None,
) -> _Fit:
    """The largest font size (from ``sizes = (start, one-line floor, wrap floor)``) at which
    the caption fits: on one line down to the one-line floor, then wrapped down to the wrap
    floor; failing both, wrapped at the wrap floor with the overflow ellipsized."""
    start, line_floor, wrap_floor = sizes
    size = start
    while True:
        font = load_caption_font(size, font_path)
        line_h = _line_height(draw, font)
        if size >= line_floor and _width(draw, text, font) <= room:
            return _Fit(font, size, (text,), line_h)
        if size <= line_floor:
            lines = _wrap(draw, text, font, room)
            wide = any(_width(draw, line, font) > room for line in lines)
            if not wide and len(lines) * line_h <= max_h:
                return _Fit(font, size, tuple(lines), line_h)
        if size <= wrap_floor:
            break
        size = max(wrap_floor, size - (2 if size > line_floor else 1))
    lines = _wrap(draw, text, font, room)
    fits = max(1, max_h // line_h)
    kept = [*lines[: fits - 1], " ".join(lines[fits - 1 :])]
    return _Fit(font, size, tuple(_ellipsize(draw, line, font, room) for line in kept), line_h)


def caption_layout(
    size: tuple[int, int], text: str, *, font_path: Path | None = None
) -> CaptionLayout:
    """The caption's layout (see the module docstring)."""
    width, height = size
    measure = ImageDraw.Draw(Image.new("RGBA", (1, 1)))
    pad_x = min(max(round(0.02 * width), 10), width // 8)
    strip_min = min(max(round(0.04 * height), 18), height)
    pad_y = max(round(0.2 * strip_min), 4) if height >= 100 else max(1, height // 32)
    line_floor = max(_TINY_FONT_SIZE, min(_MIN_FONT_SIZE, height // 6))
    fit = _fit(
        measure,
        text,
        (max(round(0.028 * height), 14), line_floor, _TINY_FONT_SIZE),
        max(1, width - 2 * pad_x),
        max(1, max(height // 2, strip_min) - 2 * pad_y),
        font_path,
    )
    block_h = fit.line_h * len(fit.lines)
    strip_h = min(max(strip_min, block_h + 2 * pad_y), height)
    strip_top = height - strip_h
    y = strip_top + (strip_h - block_h) // 2
    boxes: list[tuple[int, int, int, int]] = []
    origins: list[tuple[int, int]] = []
    for line in fit.lines:
        left, top, right, bottom = _text_box(measure, line, fit.font)
        x = (width - (right - left)) // 2 - left
        origins.append((x, y))
        boxes.append((x + left, y + top, x + right, y + bottom))
        y += fit.line_h
    return CaptionLayout(fit.size, strip_top, fit.lines, tuple(boxes), tuple(origins))


def overlay_caption(image: Image.Image, text: str, *, font_path: Path | None = None) -> Image.Image:
    """A copy of ``image`` (RGB, same size) with ``text`` on a bottom strip
    (:func:`caption_layout`)."""
    width, height = image.size
    base = image.convert("RGBA")
    layout = caption_layout(image.size, text, font_path=font_path)
    font = load_caption_font(layout.font_size, font_path)

    strip = Image.new("RGBA", base.size, (0, 0, 0, 0))
    ImageDraw.Draw(strip).rectangle((0, layout.strip_top, width, height), fill=_STRIP_FILL)
    base = Image.alpha_composite(base, strip)

    layer = Image.new("RGBA", base.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    shadow = layout.shadow
    for line, (x, y) in zip(layout.lines, layout.origins, strict=True):
        draw.text((x + shadow, y + shadow), line, font=font, fill=_SHADOW_FILL)
        draw.text((x, y), line, font=font, fill=_TEXT_FILL)
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
    width, height = decode_checked(data).size
    return width, height


def decode_checked(data: bytes) -> Image.Image:
    """:func:`check_image`, keeping the decoded pixels: the whole image as RGBA, ready for
    :func:`save_captioned_frame` (so the records phase does not decode it again)."""
    try:
        with Image.open(io.BytesIO(data)) as probe:
            probe.verify()  # the container: chunk order and checksums
        with Image.open(io.BytesIO(data)) as image:
            image.load()  # the pixels: a truncated or corrupt stream fails here
            return image.convert("RGBA")
    except Exception as exc:  # Pillow raises many types for bad input (SyntaxError, EOFError...)
        raise ImageProjectError(
            f"not a readable image ({_describe(data)}): {_why_undecodable(exc)}"
        ) from exc


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
    return save_captioned_frame(frame, path, caption, font_path=font_path, quality=quality)


def save_captioned_frame(
    frame: Image.Image,
    path: str | os.PathLike[str],
    caption: str,
    *,
    font_path: Path | None = None,
    quality: int = 95,
) -> tuple[int, int]:
    """:func:`save_captioned_jpeg` for an image already decoded (:func:`decode_checked`)."""
    if not caption.strip():
        raise ValueError("caption must be a non-empty string")
    captioned = overlay_caption(frame, caption, font_path=font_path)
    buffer = io.BytesIO()
    captioned.save(buffer, format="JPEG", quality=quality)
    atomic_write_bytes(path, buffer.getvalue())
    width, height = captioned.size
    return width, height
