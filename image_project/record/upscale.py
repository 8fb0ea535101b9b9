"""The record of the 4K image (``upscale.enabled``): where it is, how large, how it was made."""

from __future__ import annotations

from typing import Literal

from image_project.record.base import RecordModel

UpscaleMethodName = Literal["copy", "lanczos_fit", "realesrgan", "lanczos_resize"]


class UpscaleRecord(RecordModel):
    """The 4K JPEG the records phase wrote beside the captioned image.

    ``path`` and ``bytes`` are the file and its size on disk, ``size`` its ``WxH`` and
    ``source_size`` the size of the image it was made from. ``method``: ``copy`` (the image
    was already at the target: the captioned image copied), ``lanczos_fit`` (larger in both
    dimensions: centre-cropped and resized down), ``realesrgan`` (one x4 pass of the upscaler
    binary, then fitted to the target), ``lanczos_resize`` (no binary, and
    ``allow_fallback_resize``: resized up with Lanczos). ``upscaler`` and ``model`` name the
    binary and its model when it ran (None otherwise)."""

    path: str
    bytes: int
    size: str
    source_size: str
    method: UpscaleMethodName
    upscaler: str | None = None
    model: str | None = None
