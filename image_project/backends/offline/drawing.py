"""The offline image backend's drawing: a PNG of a palette in a layout, made with Pillow.

:class:`~image_project.backends.offline.OfflineImageBackend` (:mod:`.image`) reads the palette
and the layout from the prompt and calls :func:`render` in a worker thread. The drawing is a
module of its own so that it is imported, with Pillow, only when an offline image is drawn: a
prompt-only run imports neither (``tests/test_startup.py``), and a run of the
OpenAI-compatible backend never imports this module. How the picture is made (gradients,
shapes, grain, vignette, the "offline preview" badge) and when the drawing checks for
cancellation are described in :mod:`image_project.backends.offline`.
"""

from __future__ import annotations

import io
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PIL import Image, ImageChops, ImageDraw, ImageFilter, ImageFont, ImageOps

from image_project.backends.offline.vocabulary import COLOURS, RGB

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


def _mix(a: RGB, b: RGB, t: float) -> RGB:
    return (
        round(a[0] + (b[0] - a[0]) * t),
        round(a[1] + (b[1] - a[1]) * t),
        round(a[2] + (b[2] - a[2]) * t),
    )


def _shade(c: RGB, t: float) -> RGB:
    """Darker for ``t < 0``, lighter for ``t > 0`` (``t`` in -1..1)."""
    return _mix(c, (0, 0, 0), -t) if t < 0 else _mix(c, (255, 255, 255), t)


def _jitter(c: RGB, rng: random.Random, amount: float = 0.18) -> RGB:
    return _shade(c, rng.uniform(-amount, amount))


def _rgba(c: RGB, alpha: int) -> tuple[int, int, int, int]:
    return (c[0], c[1], c[2], alpha)


def _no_check() -> None:
    return None


class _Canvas:
    """One render: the base image, a translucent shape layer and the seeded rng. ``check``
    is called before each expensive step and raises to stop the drawing (a cancellation)."""

    def __init__(
        self,
        size: tuple[int, int],
        colours: list[RGB],
        rng: random.Random,
        check: Callable[[], None] = _no_check,
    ) -> None:
        self.w, self.h = size
        self.colours = colours
        self.rng = rng
        self.check = check
        self.base = Image.new("RGB", size, colours[0])
        self.layer = Image.new("RGBA", size, (0, 0, 0, 0))
        self.draw = ImageDraw.Draw(self.layer)

    def colour(self, i: int) -> RGB:
        return self.colours[i % len(self.colours)]

    def gradient(self, a: RGB, b: RGB, kind: str = "vertical") -> Image.Image:
        self.check()
        size = (self.w, self.h)
        if kind == "radial":
            mask = Image.radial_gradient("L").resize(size, Image.Resampling.BILINEAR)
        else:
            mask = Image.linear_gradient("L").resize(size, Image.Resampling.BILINEAR)
            if kind == "diagonal":
                across = mask.transpose(Image.Transpose.ROTATE_90).resize(size)
                mask = ImageChops.add(mask, ImageOps.mirror(across), scale=2.0)
        return Image.composite(Image.new("RGB", size, b), Image.new("RGB", size, a), mask)

    def glow(self, xy: tuple[float, float], radius: float, colour: RGB, alpha: int) -> None:
        self.check()
        scale = 8
        small = Image.new("RGBA", (self.w // scale + 1, self.h // scale + 1), (0, 0, 0, 0))
        x, y, r = xy[0] / scale, xy[1] / scale, radius / scale
        ImageDraw.Draw(small).ellipse((x - r, y - r, x + r, y + r), fill=_rgba(colour, alpha))
        small = small.filter(ImageFilter.GaussianBlur(max(1.0, r / 2)))
        big = small.resize((self.w, self.h), Image.Resampling.BILINEAR)
        self.layer = Image.alpha_composite(self.layer, big)
        self.draw = ImageDraw.Draw(self.layer)

    def circle(self, xy: tuple[float, float], r: float, fill: tuple[int, int, int, int]) -> None:
        x, y = xy
        self.draw.ellipse((x - r, y - r, x + r, y + r), fill=fill)


def _horizon(c: _Canvas) -> None:
    rng, w, h = c.rng, c.w, c.h
    line = round(h * rng.uniform(0.55, 0.7))
    sky = c.gradient(_shade(c.colour(0), 0.35), c.colour(0))
    ground = c.gradient(c.colour(1), _shade(c.colour(1), -0.45))
    c.base = sky
    c.base.paste(ground.resize((w, h - line)), (0, line))
    sun = (rng.uniform(0.2, 0.8) * w, line - rng.uniform(0.12, 0.3) * h)
    accent = _shade(c.colour(2), 0.25)
    c.glow(sun, h * 0.22, accent, 150)
    c.circle(sun, h * rng.uniform(0.06, 0.1), _rgba(accent, 235))
    for _ in range(rng.randint(6, 12)):
        y = rng.uniform(line + 4, h)
        x0 = rng.uniform(0, w * 0.8)
        length = rng.uniform(0.05, 0.3) * w
        c.draw.line((x0, y, x0 + length, y), fill=_rgba(accent, 70), width=rng.randint(2, 5))
    for _ in range(rng.randint(2, 4)):
        peak = rng.uniform(0, w)
        span = rng.uniform(0.15, 0.4) * w
        top = line - rng.uniform(0.04, 0.12) * h
        c.draw.polygon(
            [(peak - span, line), (peak, top), (peak + span, line)],
            fill=_rgba(_shade(c.colour(1), -0.25), 200),
        )


def _diagonal(c: _Canvas) -> None:
    rng, w, h = c.rng, c.w, c.h
    c.base = c.gradient(c.colour(0), c.colour(1), "diagonal")
    offset = float(-h)
    while offset < w:
        band = rng.uniform(0.03, 0.12) * w
        colour = _jitter(c.colour(rng.randint(1, len(c.colours) + 1)), rng)
        c.draw.polygon(
            [(offset, h), (offset + band, h), (offset + band + h, 0), (offset + h, 0)],
            fill=_rgba(colour, rng.randint(60, 150)),
        )
        offset += band + rng.uniform(0.02, 0.15) * w


def _centered(c: _Canvas) -> None:
    rng, w, h = c.rng, c.w, c.h
    c.base = c.gradient(_shade(c.colour(0), 0.2), _shade(c.colour(1), -0.3), "radial")
    centre = (w / 2, h / 2)
    c.glow(centre, h * 0.45, _shade(c.colour(2), 0.3), 120)
    radius = h * rng.uniform(0.32, 0.4)
    i = 0
    while radius > h * 0.03:
        c.circle(centre, radius, _rgba(_jitter(c.colour(i + 2), rng), rng.randint(90, 170)))
        radius *= rng.uniform(0.62, 0.8)
        i += 1


def _symmetry(c: _Canvas) -> None:
    rng, w, h = c.rng, c.w, c.h
    c.base = c.gradient(c.colour(0), _shade(c.colour(1), -0.2))
    half = w // 2
    for _ in range(rng.randint(10, 18)):
        x, y = rng.uniform(0, half), rng.uniform(0, h)
        size = rng.uniform(0.03, 0.14) * h
        fill = _rgba(_jitter(c.colour(rng.randint(1, 6)), rng), rng.randint(90, 200))
        if rng.random() < 0.5:
            c.circle((x, y), size, fill)
        else:
            c.draw.rectangle((x - size, y - size * 0.6, x + size, y + size * 0.6), fill=fill)
    left = c.layer.crop((0, 0, half, h))
    c.layer.paste(ImageOps.mirror(left), (w - half, 0))
    c.draw = ImageDraw.Draw(c.layer)
    c.draw.line((w / 2, 0, w / 2, h), fill=_rgba(_shade(c.colour(2), 0.4), 90), width=3)


def _spiral(c: _Canvas) -> None:
    rng, w, h = c.rng, c.w, c.h
    c.base = c.gradient(_shade(c.colour(0), 0.15), _shade(c.colour(1), -0.35), "radial")
    cx, cy = w * rng.uniform(0.4, 0.6), h * rng.uniform(0.4, 0.6)
    turn = rng.choice((-1, 1))
    growth = 0.18
    steps = 140
    for i in range(steps):
        theta = i * 0.22
        r = h * 0.012 * math.exp(growth * theta)
        if r > max(w, h):
            break
        x = cx + turn * r * math.cos(theta)
        y = cy + r * math.sin(theta)
        dot = 2 + r * 0.07
        c.circle((x, y), dot, _rgba(c.colour(2 + i // 12), 190))


def _grid(c: _Canvas) -> None:
    rng, w, h = c.rng, c.w, c.h
    cols = rng.randint(4, 8)
    rows = max(2, round(cols * h / w))
    cw, ch = w / cols, h / rows
    draw = ImageDraw.Draw(c.base)
    for row in range(rows):
        for col in range(cols):
            box = (col * cw, row * ch, (col + 1) * cw, (row + 1) * ch)
            draw.rectangle(box, fill=_jitter(c.colour(rng.randrange(len(c.colours))), rng, 0.25))
            motif = rng.random()
            x0, y0, x1, y1 = box
            inner = _rgba(_jitter(c.colour(rng.randrange(len(c.colours))), rng), 170)
            if motif < 0.35:
                c.circle(((x0 + x1) / 2, (y0 + y1) / 2), min(cw, ch) * 0.32, inner)
            elif motif < 0.6:
                c.draw.pieslice((x0 - cw, y0 - ch, x0 + cw, y0 + ch), 0, 90, fill=inner)
    for i in range(1, cols):
        c.draw.line((i * cw, 0, i * cw, h), fill=(255, 255, 255, 60), width=2)
    for j in range(1, rows):
        c.draw.line((0, j * ch, w, j * ch), fill=(255, 255, 255, 60), width=2)


def _birds_eye(c: _Canvas) -> None:
    rng, w, h = c.rng, c.w, c.h
    draw = ImageDraw.Draw(c.base)
    fields: list[tuple[float, float, float, float]] = [(0.0, 0.0, float(w), float(h))]
    while len(fields) < 14:
        fields.sort(key=lambda f: (f[2] - f[0]) * (f[3] - f[1]))
        x0, y0, x1, y1 = fields.pop()
        if x1 - x0 > y1 - y0:
            cut = rng.uniform(x0 + (x1 - x0) * 0.3, x1 - (x1 - x0) * 0.3)
            fields += [(x0, y0, cut, y1), (cut, y0, x1, y1)]
        else:
            cut = rng.uniform(y0 + (y1 - y0) * 0.3, y1 - (y1 - y0) * 0.3)
            fields += [(x0, y0, x1, cut), (x0, cut, x1, y1)]
    for x0, y0, x1, y1 in fields:
        base = _jitter(c.colour(rng.randrange(len(c.colours))), rng, 0.22)
        draw.rectangle((x0, y0, x1, y1), fill=base)
        if rng.random() < 0.5:
            stripe = _rgba(_shade(base, -0.18), 110)
            y = y0 + 6
            while y < y1:
                c.draw.line((x0, y, x1, y), fill=stripe, width=2)
                y += rng.uniform(8, 16)
        draw.rectangle((x0, y0, x1, y1), outline=_shade(c.colour(0), 0.6), width=3)
    base_y, amplitude = rng.uniform(0.3, 0.7) * h, rng.uniform(0.06, 0.14) * h
    wavelength, phase = rng.uniform(0.5, 1.0) * w, rng.uniform(0, 2 * math.pi)
    river = [
        (x, base_y + amplitude * math.sin(2 * math.pi * x / wavelength + phase))
        for x in (i * w / 48 for i in range(49))
    ]
    water = _rgba(_shade(c.colour(1), 0.5), 215)
    c.draw.line(river, fill=water, width=max(8, h // 28), joint="curve")


def _close_up(c: _Canvas) -> None:
    rng, w, h = c.rng, c.w, c.h
    c.base = c.gradient(c.colour(0), _shade(c.colour(1), -0.3), "diagonal")
    for i in range(rng.randint(5, 9)):
        xy = (rng.uniform(-0.1, 1.1) * w, rng.uniform(-0.1, 1.1) * h)
        c.glow(xy, rng.uniform(0.05, 0.15) * h, _shade(c.colour(i + 2), 0.3), 140)
    for i in range(rng.randint(2, 3)):
        xy = (rng.uniform(0, 1) * w, rng.uniform(0, 1) * h)
        radius = rng.uniform(0.35, 0.6) * h
        c.circle(xy, radius, _rgba(_jitter(c.colour(i + 1), rng), rng.randint(120, 190)))
        c.circle(xy, radius * 0.55, _rgba(_shade(c.colour(i + 2), 0.2), 110))


_RENDERERS: Mapping[str, Callable[[_Canvas], None]] = {
    "horizon": _horizon,
    "diagonal": _diagonal,
    "centered": _centered,
    "symmetry": _symmetry,
    "spiral": _spiral,
    "grid": _grid,
    "birds_eye": _birds_eye,
    "close_up": _close_up,
}


_BADGE_TEXTS = ("offline preview", "offline")


@dataclass(frozen=True)
class _Badge:
    """The offline badge: its text and font, the text's box, padding and margin (px)."""

    text: str
    font: ImageFont.FreeTypeFont | ImageFont.ImageFont
    box: tuple[int, int, int, int]
    pad: int
    margin: int


def _badge(draw: ImageDraw.ImageDraw, w: int, h: int) -> _Badge | None:
    """The badge at ``h // 64`` px (at least 10), shrunk down to 6 px and then to the shorter
    text until it fits in the top third of the image with its margins; None when not even
    that fits (a tiny image gets no badge). The caption strip never reaches into the top
    third (it takes at most half the height, or 18 px on an image under 36 px)."""
    for text in _BADGE_TEXTS:
        for font_size in range(max(10, h // 64), 5, -1):
            font = ImageFont.load_default(size=font_size)
            left, top, right, bottom = (int(v) for v in draw.textbbox((0, 0), text, font=font))
            pad, margin = max(3, font_size // 3), max(4, font_size // 2)
            fits_w = (right - left) + 2 * pad + 2 * margin <= w
            if fits_w and (bottom - top) + 2 * pad + margin <= h // 3:
                return _Badge(text, font, (left, top, right, bottom), pad, margin)
    return None


def _badge_box(badge: _Badge, w: int) -> tuple[int, int, int, int]:
    """The badge's rounded rectangle ``(x0, y0, x1, y1)`` on an image ``w`` px wide."""
    left, top, right, bottom = badge.box
    x1, y0 = w - badge.margin, badge.margin
    return x1 - (right - left) - 2 * badge.pad, y0, x1, y0 + (bottom - top) + 2 * badge.pad


def _finish(c: _Canvas) -> Image.Image:
    """Composite the shape layer, add grain and a vignette, and the "offline preview" badge.

    The badge sits in the top-right corner, within the top third, so it never meets the
    caption strip that the records phase draws along the bottom edge; it shrinks on small
    images and is left out when the image is too small to hold it."""
    w, h = c.w, c.h
    c.check()
    img = Image.alpha_composite(c.base.convert("RGBA"), c.layer).convert("RGB")
    grain_size = (w // 2 + 1, h // 2 + 1)
    grain = Image.frombytes("L", grain_size, c.rng.randbytes(grain_size[0] * grain_size[1]))
    c.check()
    grain = grain.resize((w, h), Image.Resampling.BILINEAR).convert("RGB")
    c.check()
    img = Image.blend(img, ImageChops.soft_light(img, grain), 0.3)
    c.check()
    vignette = Image.radial_gradient("L").resize((w, h), Image.Resampling.BILINEAR)
    vignette = vignette.point(lambda v: 255 - min(v, 255) * 60 // 255).convert("RGB")
    c.check()
    img = ImageChops.multiply(img, vignette)

    label = Image.new("RGBA", (w, h), (0, 0, 0, 0))
    draw = ImageDraw.Draw(label)
    badge = _badge(draw, w, h)
    if badge is None:
        return img
    left, top, _, _ = badge.box
    pad = badge.pad
    x0, y0, x1, y1 = _badge_box(badge, w)
    draw.rounded_rectangle((x0, y0, x1, y1), radius=pad, fill=(0, 0, 0, 110))
    draw.text(
        (x0 + pad - left, y0 + pad - top), badge.text, font=badge.font, fill=(255, 255, 255, 190)
    )
    return Image.alpha_composite(img.convert("RGBA"), label).convert("RGB")


class _CheckedBuffer(io.BytesIO):
    """A ``BytesIO`` that calls ``check`` before each write: Pillow writes a PNG chunk by
    chunk as it encodes, so the encoding (the longest single pass) can be stopped too."""

    def __init__(self, check: Callable[[], None]) -> None:
        super().__init__()
        self._check = check

    def write(self, data: ReadableBuffer, /) -> int:
        self._check()
        return super().write(data)


def render(
    size: tuple[int, int],
    names: list[str],
    layout: str,
    rng: random.Random,
    check: Callable[[], None] = _no_check,
) -> bytes:
    """The PNG. ``check`` is called between the drawing's steps; whatever it raises (a
    cancellation) stops the drawing. It never changes the picture."""
    colours = [COLOURS[n] for n in names]
    if len(colours) == 1:
        colours += [_shade(colours[0], -0.45), _shade(colours[0], 0.5)]
    elif len(colours) == 2:
        colours.append(_shade(_mix(colours[0], colours[1], 0.5), 0.4))
    canvas = _Canvas(size, colours, rng, check)
    _RENDERERS[layout](canvas)
    out = _CheckedBuffer(check)
    _finish(canvas).save(out, format="PNG", compress_level=1)
    return out.getvalue()
