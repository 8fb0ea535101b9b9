"""Image replies: palette, layout and size from the request, and :class:`OfflineImageBackend`."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from functools import partial

from image_project.backends.base import ImageReply, ImageRequest
from image_project.backends.offline.seed import _derive_seed
from image_project.backends.offline.vocabulary import _COLOUR_ALIASES, COLOURS, LAYOUTS
from image_project.errors import RequestRejectedError

_COLOUR_RE = re.compile(
    r"\b(" + "|".join(sorted([*COLOURS, *_COLOUR_ALIASES], key=len, reverse=True)) + r")\b"
)

_LAYOUT_RE = re.compile(
    r"(?<![a-z])("
    + "|".join(
        re.escape(w)
        for w in sorted((w for ws in LAYOUTS.values() for w in ws), key=len, reverse=True)
    )
    + r")(?![a-z])"
)
_LAYOUT_OF = {w: name for name, ws in LAYOUTS.items() for w in ws}
_SEEDED_PALETTES = (
    ("navy", "coral", "gold", "cream"),
    ("teal", "ochre", "ivory", "charcoal"),
    ("plum", "peach", "sage", "cream"),
    ("emerald", "gold", "navy", "ivory"),
    ("terracotta", "sand", "olive", "slate"),
    ("indigo", "lavender", "amber", "white"),
    ("crimson", "charcoal", "beige", "gold"),
    ("cobalt", "mint", "coral", "ivory"),
)
_AUTO_SIZE = (1536, 1024)
_SIZE_RE = re.compile(r"^\s*(\d{1,5})\s*[xX\u00d7]\s*(\d{1,5})\s*$")


def parse_size(size: str) -> tuple[int, int]:
    if size.strip().lower() == "auto":
        return _AUTO_SIZE
    match = _SIZE_RE.match(size)
    if match:
        w, h = int(match.group(1)), int(match.group(2))
        if 16 <= w <= 4096 and 16 <= h <= 4096:
            return w, h
    raise RequestRejectedError(
        f"offline image backend: size: got {size!r}, expected 'WxH' with 16..4096 pixels per "
        "side (for example '1536x1024') or 'auto'"
    )


def _palette(prompt: str, rng: random.Random) -> tuple[list[str], str]:
    names = [_COLOUR_ALIASES.get(m, m) for m in _COLOUR_RE.findall(prompt)]
    found = list(dict.fromkeys(names))[:5]
    if found:
        return found, "prompt"
    return list(rng.choice(_SEEDED_PALETTES)), "seeded"


def _layout(prompt: str, rng: random.Random) -> tuple[str, str]:
    match = _LAYOUT_RE.search(prompt)
    if match:
        return _LAYOUT_OF[match.group(1)], "prompt"
    return rng.choice(sorted(LAYOUTS)), "seeded"


def _draw(
    size: tuple[int, int],
    names: list[str],
    layout: str,
    rng: random.Random,
    check: Callable[[], None],
) -> bytes:
    """:func:`drawing.render <image_project.backends.offline.drawing.render>`, in the worker
    thread: Pillow is imported with it, on the first offline image of the process."""
    from image_project.backends.offline import drawing

    return drawing.render(size, names, layout, rng, check)


class OfflineImageBackend:
    """A deterministic, network-free :class:`~image_project.backends.base.ImageBackend`.

    Draws a PNG from the prompt's colour and composition words (see the package docstring).
    The reply's ``model`` is always its own name (``offline-image-1``): whatever model the
    request named, no such model drew the picture. Raises :class:`~image_project.errors.RequestRejectedError` for a malformed ``size``.
    """

    __slots__ = ()

    @property
    def label(self) -> str:
        return "offline"

    @property
    def default_model(self) -> str:
        return "offline-image-1"

    async def generate(self, request: ImageRequest) -> ImageReply:
        model = request.model or self.default_model
        size = parse_size(request.size)
        seed = _derive_seed(
            "image",
            {
                "prompt": request.prompt,
                "model": model,
                "size": request.size,
                "quality": request.quality,
                "seed": request.seed,
            },
        )
        rng = random.Random(seed)
        lowered = request.prompt.lower().replace("\u2019", "'")
        names, palette_source = _palette(lowered, rng)
        layout, layout_source = _layout(lowered, rng)
        import anyio.from_thread  # only drawing needs threads: not imported at start-up
        import anyio.to_thread

        # Cancelling this call releases the caller at once (the thread is abandoned) and
        # stops the drawing at its next check.
        data = await anyio.to_thread.run_sync(
            partial(_draw, size, names, layout, rng, anyio.from_thread.check_cancelled),
            abandon_on_cancel=True,
        )
        return ImageReply(
            data=data,
            model=self.default_model,
            format="png",
            attempts=1,
            metadata={
                "renderer": "offline",
                "palette": list(names),
                "palette_source": palette_source,
                "layout": layout,
                "layout_source": layout_source,
                "size": f"{size[0]}x{size[1]}",
            },
        )
