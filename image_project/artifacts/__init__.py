"""Every file a run writes: captioned image, titles manifest, generations CSV, transcript,
the 4K image (:mod:`.upscale`, imported with Pillow only by a run that makes one), and the
pending transcript that the records phase writes first (:mod:`.pending`: what a process
killed in that phase leaves, and its repair).

This layer knows files and formats, not models or prompts. Functions are plain and
synchronous (the app runs them through ``anyio.to_thread.run_sync``). Nothing is left
half-written: whole files are replaced atomically, CSV rows are appended with one write and
fsynced, and cross-process sections (allocating a manifest ``seq``) run under a
:class:`FileLock`.

Internal: import the public names from ``image_project`` (docs/api.md); this package's
modules may change without notice.
"""

from typing import TYPE_CHECKING, Any

from image_project.artifacts.atomic import (
    append_bytes,
    atomic_write_bytes,
    atomic_write_text,
    file_size,
    truncate_back,
)
from image_project.artifacts.generations import (
    GENERATIONS_FIELDS,
    append_generation_row,
    parse_selected_concepts,
    read_generations,
    read_recent_prompts,
)
from image_project.artifacts.locking import FileLock
from image_project.artifacts.manifest import (
    MANIFEST_FIELDS,
    MANIFEST_HEADERS,
    ManifestMark,
    append_manifest_row,
    existing_titles,
    manifest_lock,
    mark_manifest,
    next_seq,
    read_manifest,
    restore_manifest,
)
from image_project.artifacts.transcript import read_transcript, transcript_path, write_transcript

if TYPE_CHECKING:
    from image_project.artifacts.image import (
        caption_text,
        check_image,
        decode_checked,
        load_caption_font,
        overlay_caption,
        save_captioned_frame,
        save_captioned_jpeg,
    )

_IMAGE_NAMES = frozenset(
    {
        "caption_text",
        "check_image",
        "decode_checked",
        "load_caption_font",
        "overlay_caption",
        "save_captioned_frame",
        "save_captioned_jpeg",
    }
)
"""Names of :mod:`.image`, imported (with Pillow) when first asked for: a run that saves no
image (``--prompt-only``) never imports Pillow (``tests/test_startup.py``)."""

__all__ = [
    "GENERATIONS_FIELDS",
    "MANIFEST_FIELDS",
    "MANIFEST_HEADERS",
    "FileLock",
    "ManifestMark",
    "append_bytes",
    "append_generation_row",
    "append_manifest_row",
    "atomic_write_bytes",
    "atomic_write_text",
    "caption_text",
    "check_image",
    "decode_checked",
    "existing_titles",
    "file_size",
    "load_caption_font",
    "manifest_lock",
    "mark_manifest",
    "next_seq",
    "overlay_caption",
    "parse_selected_concepts",
    "read_generations",
    "read_manifest",
    "read_recent_prompts",
    "read_transcript",
    "restore_manifest",
    "save_captioned_frame",
    "save_captioned_jpeg",
    "transcript_path",
    "truncate_back",
    "write_transcript",
]


def __getattr__(name: str) -> Any:
    if name in _IMAGE_NAMES:
        from image_project.artifacts import image

        return getattr(image, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
