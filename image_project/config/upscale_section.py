"""The ``upscale`` section of the configuration (the 4K deliverable): target size or ratio,
the external upscaler and its fallback, every key strict. Read by
:mod:`image_project.artifacts.upscale` and the pre-flight check.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, Self

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    model_validator,
)

from image_project.config.fields import (
    MAX_NAME_CHARS,
    StrictBool,
    _ConfigPath,
    _Float,
    _Int,
    _Invalid,
    _KeyedInvalid,
    _Section,
)

# --------------------------------------------------------------------------- upscale (4K)

UPSCALE_SIDE_MIN, UPSCALE_SIDE_MAX = 16, 8192
"""Pixels per side of the 4K image's target (8192 holds 8K's 7680x4320)."""
_RATIO_MIN, _RATIO_MAX = 0.1, 10.0
_RATIO_MUST = (
    f"a width/height ratio in [{_RATIO_MIN:g}, {_RATIO_MAX:g}]: a number (1.78), "
    "'W:H' or 'W/H' ('16:9', '9/16'), a [W, H] list, or null"
)
_RATIO_TEXT = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*[:/]\s*([0-9]+(?:\.[0-9]+)?)\s*")


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number == number and abs(number) != float("inf") else None


def _parse_ratio(value: object) -> object:
    """``target_aspect_ratio``: a number, ``"16:9"`` / ``"9/16"`` / ``"1.78"`` or
    ``[16, 9]``, as one float (width / height), within the allowed range."""
    if value is None:
        return None
    ratio: float | None = None
    if isinstance(value, str) and (match := _RATIO_TEXT.fullmatch(value)):
        width, height = float(match.group(1)), float(match.group(2))
        ratio = width / height if height > 0 else None
    elif isinstance(value, list | tuple) and len(value) == 2:
        sides = _number(value[0]), _number(value[1])
        if sides[0] is not None and sides[1] is not None and min(sides[0], sides[1]) > 0:
            ratio = sides[0] / sides[1]
    else:
        ratio = _number(value)
    if ratio is None or not _RATIO_MIN <= ratio <= _RATIO_MAX:
        note = ""
        if isinstance(value, int) and not isinstance(value, bool) and 60 <= value < 3600:
            high, low = divmod(value, 60)  # YAML 1.1 reads an unquoted 16:9 as 16*60+9
            note = (
                f"YAML reads an unquoted {high}:{low} as the base-60 number {value}; "
                f"quote it: '{high}:{low}'"
            )
        raise _Invalid(_RATIO_MUST, note=note)
    return ratio


def _check_tile(value: int) -> int:
    if 0 < value < 32:
        raise _Invalid("0 (the binary chooses) or an int in 32..4096")
    return value


_MODEL_FILE = re.compile(r"[A-Za-z0-9_.-]+")


def _check_model_name(value: str) -> str:
    if not _MODEL_FILE.fullmatch(value) or len(value) > MAX_NAME_CHARS or value.startswith("."):
        raise _Invalid(
            f"a model file name of at most {MAX_NAME_CHARS} letters, digits, '_', '.' or '-' "
            "(like 'realesrgan-x4plus'), without .param/.bin"
        )
    return value


class UpscaleConfig(_Section):
    """The 4K image (``upscale``; docs/upscale.md, :mod:`image_project.artifacts.upscale`).

    The target is ``target_width_px`` x ``target_height_px`` (both or neither), else the long
    edge ``target_long_edge_px`` with ``target_aspect_ratio`` or the image's own ratio. The
    upscaler binary is ``realesrgan_binary``, else ``$REALESRGAN_NCNN_VULKAN_PATH``, else
    ``realesrgan-ncnn-vulkan`` on PATH; whether it exists (and its model files) is checked
    when a run starts, before any model call, only when ``enabled`` (:func:`image_project
    .preflight.check_upscale`), since finding it depends on the environment. ``output_path``
    None = beside the images (``image.generation_path``)."""

    enabled: StrictBool = False
    """Make the 4K image: a copy of the captioned image brought to the target size, saved as
    ``<output_path>/<generation_id>_image_4k.jpg``."""
    target_long_edge_px: _Int = Field(default=3840, ge=UPSCALE_SIDE_MIN, le=UPSCALE_SIDE_MAX)
    """The target's long edge, keeping the image's aspect ratio (or ``target_aspect_ratio``)."""
    target_width_px: _Int | None = Field(default=None, ge=UPSCALE_SIDE_MIN, le=UPSCALE_SIDE_MAX)
    """An exact target width (with ``target_height_px``, both or neither; not with a ratio)."""
    target_height_px: _Int | None = Field(default=None, ge=UPSCALE_SIDE_MIN, le=UPSCALE_SIDE_MAX)
    """An exact target height (with ``target_width_px``)."""
    target_aspect_ratio: Annotated[float | None, BeforeValidator(_parse_ratio)] = None
    """Width/height of the target, centre-cropped; quote ``'16:9'`` (YAML reads a bare ``16:9``
    as a number)."""
    engine: Literal["realesrgan-ncnn-vulkan"] = "realesrgan-ncnn-vulkan"
    """The upscaler (the only one)."""
    realesrgan_binary: _ConfigPath | None = None
    """The upscaler binary; null = ``$REALESRGAN_NCNN_VULKAN_PATH``, else ``realesrgan-ncnn-
    vulkan`` on PATH. Checked when a run starts."""
    model_path: _ConfigPath | None = None
    """The directory holding ``<model_name>.param`` and ``.bin``; null = ``models/`` beside the
    binary."""
    model_name: Annotated[str, AfterValidator(_check_model_name)] = "realesrgan-x4plus"
    """The upscaler's model files."""
    tile_size: Annotated[_Int, AfterValidator(_check_tile)] = Field(default=0, ge=0, le=4096)
    """The binary's ``-t`` tile size (0 = it chooses; smaller uses less GPU memory)."""
    tta: StrictBool = False
    """The binary's ``-x`` (test-time augmentation: slower, slightly better)."""
    allow_fallback_resize: StrictBool = False
    """Without a binary, a plain Lanczos resize instead of stopping (larger, but no new detail)."""
    timeout_s: _Float = Field(default=600.0, gt=0.0, le=7200.0)
    """Seconds the binary may take before the run fails."""
    output_path: _ConfigPath | None = None
    """Where the 4K JPEG goes; null = ``image.generation_path``."""

    @model_validator(mode="after")
    def _check_target(self) -> Self:
        width, height = self.target_width_px, self.target_height_px
        if (width is None) != (height is None):
            given, other = (
                ("target_width_px", "target_height_px")
                if width is not None
                else ("target_height_px", "target_width_px")
            )
            raise _KeyedInvalid(
                other,
                f"missing, must be set with {given} ({width or height}): an explicit target "
                "size needs both sides (or neither, for target_long_edge_px)",
            )
        ratio = self.target_aspect_ratio
        if ratio is not None and width is not None:
            raise _KeyedInvalid(
                "target_aspect_ratio",
                f"got {ratio:g}, cannot be combined with target_width_px x target_height_px "
                f"({width}x{height}); set one or the other",
            )
        if ratio is not None:
            short = round(self.target_long_edge_px / max(ratio, 1 / ratio))
            if short < UPSCALE_SIDE_MIN:
                raise _KeyedInvalid(
                    "target_aspect_ratio",
                    f"got {ratio:g}, which makes the short edge {short} px with "
                    f"target_long_edge_px {self.target_long_edge_px}; it must be at least "
                    f"{UPSCALE_SIDE_MIN}",
                )
        return self
