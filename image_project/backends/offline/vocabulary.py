"""The image renderer's vocabulary: the colour words and the composition words it knows.

A module of its own because three others read it: :mod:`.image` (a prompt's palette and
layout), :mod:`.drawing` (the colours themselves) and :mod:`.rubric` (a card's colour and
layout words count towards renderability).
"""

from __future__ import annotations

from collections.abc import Mapping

RGB = tuple[int, int, int]

COLOURS: Mapping[str, RGB] = {
    "black": (18, 18, 22),
    "charcoal": (54, 69, 79),
    "slate": (92, 108, 125),
    "grey": (128, 128, 132),
    "silver": (192, 192, 198),
    "white": (245, 245, 242),
    "ivory": (255, 250, 232),
    "cream": (250, 240, 205),
    "beige": (222, 205, 170),
    "sand": (214, 190, 140),
    "tan": (200, 160, 110),
    "ochre": (204, 119, 34),
    "amber": (255, 180, 30),
    "gold": (222, 175, 40),
    "mustard": (205, 170, 50),
    "yellow": (250, 215, 50),
    "lemon": (250, 240, 100),
    "orange": (240, 130, 30),
    "rust": (183, 65, 14),
    "terracotta": (204, 98, 70),
    "sienna": (160, 82, 45),
    "umber": (99, 81, 71),
    "brown": (120, 75, 45),
    "sepia": (112, 66, 20),
    "coral": (255, 127, 80),
    "salmon": (250, 128, 114),
    "peach": (255, 200, 160),
    "red": (200, 35, 40),
    "scarlet": (240, 36, 10),
    "crimson": (220, 20, 60),
    "vermilion": (227, 66, 52),
    "burgundy": (128, 0, 32),
    "pink": (240, 150, 180),
    "rose": (225, 90, 120),
    "magenta": (200, 30, 150),
    "plum": (142, 69, 133),
    "purple": (110, 50, 150),
    "violet": (138, 80, 200),
    "lavender": (181, 160, 220),
    "indigo": (75, 20, 130),
    "navy": (20, 32, 90),
    "cobalt": (0, 71, 171),
    "blue": (40, 90, 210),
    "azure": (0, 127, 255),
    "cyan": (20, 200, 220),
    "turquoise": (64, 224, 208),
    "teal": (0, 128, 128),
    "aqua": (90, 220, 210),
    "mint": (170, 240, 200),
    "jade": (0, 168, 107),
    "emerald": (20, 160, 90),
    "green": (40, 150, 60),
    "sage": (160, 180, 140),
    "olive": (110, 120, 40),
    "lime": (170, 220, 50),
}
"""Colour words the image renderer understands (also ``gray`` → grey, ``golden`` → gold)."""

_COLOUR_ALIASES = {"gray": "grey", "golden": "gold", "silvery": "silver", "violets": "violet"}

LAYOUTS: Mapping[str, tuple[str, ...]] = {
    "horizon": ("horizon", "landscape", "seascape", "sunset", "sunrise", "skyline", "panorama"),
    "diagonal": ("diagonal", "diagonals", "dynamic", "oblique", "slanted"),
    "centered": ("centered", "centred", "central", "center", "centre", "focal point"),
    "symmetry": ("symmetry", "symmetric", "symmetrical", "mirrored", "reflection"),
    "spiral": ("spiral", "swirl", "swirling", "vortex", "golden ratio"),
    "grid": ("grid", "tiles", "tiled", "mosaic", "checkerboard", "modular"),
    "birds_eye": ("bird's-eye", "bird's eye", "birds-eye", "aerial", "overhead", "top-down"),
    "close_up": ("close-up", "closeup", "close up", "macro", "extreme detail"),
}
"""Layout name → the composition words (lower case) that select it; the earliest match wins."""
