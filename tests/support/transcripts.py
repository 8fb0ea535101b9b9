"""Comparing the transcripts of the same runs made in different ways (one after another, in
a batch, by campaign workers): what may differ is dropped by key, at any depth."""

from __future__ import annotations

from collections.abc import Set
from typing import Any

__all__ = ["RUN_VOLATILE", "without_keys"]

RUN_VOLATILE = frozenset(
    {
        "generation_id",
        "created_at",
        "timing",
        "latency_ms",
        "pacing_wait_ms",
        "image_path",
        "seq",
        "caption",
        "image_bytes",
    }
)
"""What may differ between the same runs made one after another and together: ids, clocks,
where the files went, and seq with the caption that shows it (so the captioned image's size),
allocated in completion order."""


def without_keys(value: Any, keys: Set[str]) -> Any:
    """``value`` (parsed JSON) with every mapping entry whose key is in ``keys`` removed."""
    if isinstance(value, dict):
        return {k: without_keys(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [without_keys(v, keys) for v in value]
    return value
